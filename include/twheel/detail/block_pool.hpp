// twheel/detail/block_pool.hpp: recycled memory for the driver's wake-ups (its internal
// timers' waits and the passes it queues) and for cancel_after's states, and an allocator
// that draws from it.
//
// Why: the driver arms a wake-up per pass and cancel_after makes a state per operation; a
// malloc and a free each would cost more than the rest of either, and a pass must not
// allocate (out of memory, it would throw out of run()). Blocks are kept and reused
// instead: taken under the service's lock (a pop from a private list), given back by Asio
// from whichever thread ran the operation (a push onto a shared list, one
// compare-exchange), and the shared list is taken over whole when the private one runs
// dry, so there is no ABA problem. The pool keeps as many blocks as were ever in flight
// at once, carved from chunks that are freed with it.
//
// A few blocks are made up front, and a wake-up's block is back in the pool before its
// pass runs, so the pass finds one when it arms the driver again.
//
// A give-back is one compare-exchange, or a plain store while the process has one thread
// (process_threads.hpp). A give-back writes the block's first word only: an object the
// Setup makes in each block, past what its users put there, lives from the chunk's
// making to its freeing (cancel_after's cancellation signals, wheel_service.hpp).
#ifndef TWHEEL_DETAIL_BLOCK_POOL_HPP
#define TWHEEL_DETAIL_BLOCK_POOL_HPP

#include <twheel/detail/process_threads.hpp>

#include <boost/asio/recycling_allocator.hpp>

#include <atomic>
#include <cstddef>
#include <new>

namespace twheel::detail {

// What a pool does to each block of a chunk when it makes the chunk and when it frees it:
// nothing, unless the blocks keep an object of their own from one use to the next.
struct no_block_setup {
  static void made(void*) noexcept {}
  static void unmade(void*) noexcept {}
};

template <std::size_t BlockSize, class Setup = no_block_setup>
class basic_block_pool {
 public:
  static constexpr std::size_t block_size = BlockSize;
  // Blocks are aligned for any object up to max_align_t: chunks come from operator new,
  // and the blocks follow a max_align_t-aligned header at multiples of it.
  static_assert(block_size % alignof(std::max_align_t) == 0);
  static_assert(alignof(std::max_align_t) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);

  explicit basic_block_pool(std::size_t initial = 4) { reserve(initial); }
  basic_block_pool(const basic_block_pool&) = delete;
  basic_block_pool& operator=(const basic_block_pool&) = delete;
  ~basic_block_pool() {
    while (chunks_) {
      chunk* next = chunks_->next;
      for (std::size_t i = 0; i != chunks_->blocks; ++i) Setup::unmade(block_of(chunks_, i));
      ::operator delete(chunks_);
      chunks_ = next;
    }
  }

  // A block; under the owner's lock. Throws std::bad_alloc.
  void* take() {
    if (node* n = pop()) return n;
    if (spare_ == spare_end_) grow(0);
    void* p = spare_;
    spare_ += block_size;
    return p;
  }

  // Makes sure the next `n` take()s do not allocate; under the owner's lock. Throws
  // std::bad_alloc with nothing changed but the chunks already made kept.
  void reserve(std::size_t n) {
    if (private_ == nullptr) private_ = take_shared();
    std::size_t have = static_cast<std::size_t>(spare_end_ - spare_) / block_size;
    for (node* p = private_; p != nullptr && have < n; p = p->next) ++have;
    if (have < n) grow(n - have);
  }

  // From any thread.
  void give_back(void* p) noexcept {
    node* n = ::new (p) node;
    n->next = shared_.load(std::memory_order_relaxed);
    if (single_threaded_process()) {
      shared_.store(n, std::memory_order_relaxed);
      return;
    }
    while (!shared_.compare_exchange_weak(n->next, n, std::memory_order_release,
                                          std::memory_order_relaxed)) {
    }
  }

 private:
  struct node {
    node* next;
  };
  // A chunk's header; its blocks follow, max_align_t-aligned.
  struct alignas(std::max_align_t) chunk {
    chunk* next;
    std::size_t blocks;
  };

  static unsigned char* block_of(chunk* c, std::size_t i) noexcept {
    return reinterpret_cast<unsigned char*>(c + 1) + i * block_size;
  }
  // Chunks double from 4 blocks up to this many: a malloc per chunk rather than per
  // block, and a pool that stays small keeps small chunks.
  static constexpr std::size_t max_chunk_blocks = 256;

  node* take_shared() noexcept {
    if (shared_.load(std::memory_order_relaxed) == nullptr) return nullptr;
    return shared_.exchange(nullptr, std::memory_order_acquire);
  }

  node* pop() noexcept {
    if (private_ == nullptr) private_ = take_shared();
    node* n = private_;
    if (n) private_ = n->next;
    return n;
  }

  // A new chunk of at least `at_least` blocks; what is left of the last one goes to the
  // private list first.
  void grow(std::size_t at_least) {
    std::size_t blocks = next_chunk_blocks_ > at_least ? next_chunk_blocks_ : at_least;
    auto* c = static_cast<chunk*>(::operator new(sizeof(chunk) + blocks * block_size));
    c->blocks = blocks;
    for (std::size_t i = 0; i != blocks; ++i) Setup::made(block_of(c, i));
    for (; spare_ != spare_end_; spare_ += block_size) {
      node* n = ::new (static_cast<void*>(spare_)) node;
      n->next = private_;
      private_ = n;
    }
    c->next = chunks_;
    chunks_ = c;
    spare_ = block_of(c, 0);
    spare_end_ = block_of(c, blocks);
    if (next_chunk_blocks_ < max_chunk_blocks) next_chunk_blocks_ *= 2;
  }

  node* private_ = nullptr;
  unsigned char* spare_ = nullptr;      // the last chunk's blocks never taken
  unsigned char* spare_end_ = nullptr;
  chunk* chunks_ = nullptr;
  std::size_t next_chunk_blocks_ = 4;
  std::atomic<node*> shared_{nullptr};
};

using block_pool = basic_block_pool<128>;

template <class T>
class pool_allocator {
 public:
  using value_type = T;

  explicit pool_allocator(block_pool& pool) noexcept : pool_(&pool) {}
  // No pool: Asio's recycling allocator for everything.
  explicit pool_allocator(block_pool* pool) noexcept : pool_(pool) {}
  template <class U>
  pool_allocator(const pool_allocator<U>& other) noexcept : pool_(other.pool_) {}

  T* allocate(std::size_t n) {
    if (pool_ != nullptr && fits(n)) return static_cast<T*>(pool_->take());
    return boost::asio::recycling_allocator<T>().allocate(n);
  }

  void deallocate(T* p, std::size_t n) noexcept {
    if (pool_ != nullptr && fits(n)) {
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
           alignof(T) <= alignof(std::max_align_t);
  }

  block_pool* pool_;
};

}  // namespace twheel::detail

#endif  // TWHEEL_DETAIL_BLOCK_POOL_HPP
