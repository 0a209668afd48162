// twheel/beast/detail/timeout_allocator.hpp: exact-size blocks for the stream's timeout
// waits, cached per thread.
#ifndef TWHEEL_BEAST_DETAIL_TIMEOUT_ALLOCATOR_HPP
#define TWHEEL_BEAST_DETAIL_TIMEOUT_ALLOCATOR_HPP

#include <cstddef>
#include <new>
#include <utility>

namespace twheel::beast {
namespace detail {

// Blocks for the timeout waits, cached per thread by their exact size. Asio's recycling
// allocator (what a handler without an allocator gets) hands a new operation any cached
// block big enough, often a freed socket operation several times the wait's size, which
// an idle connection then holds for as long as it waits: measured in example/http_server,
// about 300 B more per idle connection than exact-size blocks. Steady state allocates
// nothing either way (the aborted wait of one operation frees the block the next reuses).
class timeout_block_cache {
 public:
  static void* allocate(std::size_t size) {
    if (!dead()) {
      for (slot& s : local().slots_) {
        if (s.block != nullptr && s.size == size) return std::exchange(s.block, nullptr);
      }
    }
    return ::operator new(size);
  }

  static void deallocate(void* block, std::size_t size) noexcept {
    if (!dead()) {
      for (slot& s : local().slots_) {
        if (s.block == nullptr) {
          s.block = block;
          s.size = size;
          return;
        }
      }
    }
    ::operator delete(block);
  }

  timeout_block_cache() = default;
  timeout_block_cache(const timeout_block_cache&) = delete;
  timeout_block_cache& operator=(const timeout_block_cache&) = delete;
  ~timeout_block_cache() {
    dead() = true;  // blocks freed later on this thread (static destructors) go to delete
    for (slot& s : slots_) ::operator delete(s.block);
  }

 private:
  struct slot {
    void* block = nullptr;
    std::size_t size = 0;
  };

  static timeout_block_cache& local() {
    thread_local timeout_block_cache cache;
    return cache;
  }
  static bool& dead() {
    thread_local bool flag = false;  // trivially destructible: readable after the cache
    return flag;
  }

  slot slots_[4];  // a read and a write wait, each with its aborted predecessor
};

template <class T>
struct timeout_allocator {
  using value_type = T;

  timeout_allocator() noexcept = default;
  template <class U>
  timeout_allocator(const timeout_allocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__, "operator new's alignment");
    return static_cast<T*>(timeout_block_cache::allocate(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    timeout_block_cache::deallocate(p, n * sizeof(T));
  }
  template <class U>
  bool operator==(const timeout_allocator<U>&) const noexcept {
    return true;
  }
  template <class U>
  bool operator!=(const timeout_allocator<U>&) const noexcept {
    return false;
  }
};

}  // namespace detail

}  // namespace twheel::beast

#endif  // TWHEEL_BEAST_DETAIL_TIMEOUT_ALLOCATOR_HPP
