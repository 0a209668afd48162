// twheel/detail/block_pool.hpp: a fixed pool of small blocks for the operations the
// service posts to its context, and an allocator that draws from it.
//
// Why: the service posts its drains from cancel(), expires_at() and the timer's
// destructor, which must not allocate (Asio's do not), and once per completed handler,
// where a malloc and a free per handler would cost more than the rest of the drain. At
// most `count` drains are in flight and Asio frees an operation's memory before invoking
// it, so the first drain posted finds a block free. Beyond `count` in flight (a large
// batch), or should Asio's operation not fit, it falls back to Asio's recycling
// allocator, as Asio's own operations do.
#ifndef TWHEEL_DETAIL_BLOCK_POOL_HPP
#define TWHEEL_DETAIL_BLOCK_POOL_HPP

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>

#include <boost/asio/recycling_allocator.hpp>

namespace twheel::detail {

class block_pool {
 public:
  static constexpr unsigned count = 64;  // one bit each in free_
  static constexpr std::size_t block_size = 128;

  // A free block, or null.
  void* take() noexcept {
    std::uint64_t bits = free_.load(std::memory_order_relaxed);
    while (bits != 0) {
      const unsigned i = static_cast<unsigned>(__builtin_ctzll(bits));
      if (free_.compare_exchange_weak(bits, bits & ~(std::uint64_t{1} << i),
                                      std::memory_order_acquire, std::memory_order_relaxed)) {
        return blocks_[i].bytes;
      }
    }
    return nullptr;
  }

  // Gives `p` back if it is one of ours; false otherwise.
  bool give_back(void* p) noexcept {
    auto* b = static_cast<unsigned char*>(p);
    auto* first = blocks_[0].bytes;
    if (b < first || b >= first + sizeof blocks_) return false;
    const auto i = static_cast<unsigned>((b - first) / sizeof(block));
    free_.fetch_or(std::uint64_t{1} << i, std::memory_order_release);
    return true;
  }

 private:
  struct alignas(64) block {
    unsigned char bytes[block_size];
  };
  block blocks_[count];
  std::atomic<std::uint64_t> free_{~std::uint64_t{0}};
};

template <class T>
class pool_allocator {
 public:
  using value_type = T;

  explicit pool_allocator(block_pool& pool) noexcept : pool_(&pool) {}
  template <class U>
  pool_allocator(const pool_allocator<U>& other) noexcept : pool_(other.pool_) {}

  T* allocate(std::size_t n) {
    if (n * sizeof(T) <= block_pool::block_size && alignof(T) <= 64) {
      if (void* p = pool_->take()) return static_cast<T*>(p);
    }
    return boost::asio::recycling_allocator<T>().allocate(n);
  }

  void deallocate(T* p, std::size_t n) noexcept {
    if (!pool_->give_back(p)) boost::asio::recycling_allocator<T>().deallocate(p, n);
  }

  template <class U>
  bool operator==(const pool_allocator<U>& other) const noexcept {
    return pool_ == other.pool_;
  }
  template <class U>
  bool operator!=(const pool_allocator<U>& other) const noexcept {
    return pool_ != other.pool_;
  }

 private:
  template <class U>
  friend class pool_allocator;
  block_pool* pool_;
};

}  // namespace twheel::detail

#endif  // TWHEEL_DETAIL_BLOCK_POOL_HPP
