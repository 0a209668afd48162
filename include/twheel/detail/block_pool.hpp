// twheel/detail/block_pool.hpp: recycled memory for the operations the service posts to
// its context (drains and driver waits), and an allocator that draws from it.
//
// Why: the service posts one drain per completed handler; a malloc and a free each would
// cost more than the rest of the drain. Blocks are kept and reused instead: taken under
// the service's lock (a pop from a private list), given back by Asio from whichever thread
// ran the operation (a push onto a shared list, one compare-exchange), and the shared list
// is taken over whole when the private one runs dry, so there is no ABA problem. The pool
// keeps as many blocks as were ever in flight at once.
//
// The cancel and destroy paths must not allocate: the blocks of drains are all back in the
// pool whenever no drain is in flight, and a few are made up front, so posting the first
// drain never allocates.
#ifndef TWHEEL_DETAIL_BLOCK_POOL_HPP
#define TWHEEL_DETAIL_BLOCK_POOL_HPP

#include <boost/asio/recycling_allocator.hpp>

#include <atomic>
#include <cstddef>
#include <new>

namespace twheel::detail {

class block_pool {
 public:
  static constexpr std::size_t block_size = 128;

  explicit block_pool(std::size_t initial = 4) {
    try {
      for (std::size_t i = 0; i < initial; ++i) give_back(::operator new(block_size));
    } catch (...) {
      // No destructor runs for a constructor that throws: free the blocks made so far
      // (LeakSanitizer found them under the fault-injection test).
      release(shared_.exchange(nullptr, std::memory_order_acquire));
      throw;
    }
  }
  block_pool(const block_pool&) = delete;
  block_pool& operator=(const block_pool&) = delete;
  ~block_pool() {
    release(private_);
    release(shared_.exchange(nullptr, std::memory_order_acquire));
  }

  // A block; under the owner's lock. Throws std::bad_alloc.
  void* take() {
    if (private_ == nullptr) private_ = shared_.exchange(nullptr, std::memory_order_acquire);
    if (node* n = private_) {
      private_ = n->next;
      return n;
    }
    return ::operator new(block_size);
  }

  // Makes sure the next `n` take()s do not allocate; under the owner's lock. Throws
  // std::bad_alloc with nothing changed but the blocks already made kept.
  void reserve(std::size_t n) {
    if (private_ == nullptr) private_ = shared_.exchange(nullptr, std::memory_order_acquire);
    std::size_t have = 0;
    for (node* p = private_; p != nullptr && have < n; p = p->next) ++have;
    for (; have < n; ++have) {
      node* fresh = ::new (::operator new(block_size)) node;
      fresh->next = private_;
      private_ = fresh;
    }
  }

  // From any thread.
  void give_back(void* p) noexcept {
    node* n = ::new (p) node;
    n->next = shared_.load(std::memory_order_relaxed);
    while (!shared_.compare_exchange_weak(n->next, n, std::memory_order_release,
                                          std::memory_order_relaxed)) {
    }
  }

 private:
  struct node {
    node* next;
  };

  static void release(node* n) noexcept {
    while (n) {
      node* next = n->next;
      ::operator delete(n);
      n = next;
    }
  }

  node* private_ = nullptr;
  std::atomic<node*> shared_{nullptr};
};

template <class T>
class pool_allocator {
 public:
  using value_type = T;

  explicit pool_allocator(block_pool& pool) noexcept : pool_(&pool) {}
  template <class U>
  pool_allocator(const pool_allocator<U>& other) noexcept : pool_(other.pool_) {}

  T* allocate(std::size_t n) {
    if (fits(n)) return static_cast<T*>(pool_->take());
    return boost::asio::recycling_allocator<T>().allocate(n);
  }

  void deallocate(T* p, std::size_t n) noexcept {
    if (fits(n)) {
      pool_->give_back(p);
    } else {
      boost::asio::recycling_allocator<T>().deallocate(p, n);
    }
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

  static constexpr bool fits(std::size_t n) noexcept {
    return n == 1 && sizeof(T) <= block_pool::block_size &&
           alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__;
  }

  block_pool* pool_;
};

}  // namespace twheel::detail

#endif  // TWHEEL_DETAIL_BLOCK_POOL_HPP
