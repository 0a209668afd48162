// twheel/detail/completion_queue.hpp: the records of settled waits, each one operation of
// the context's scheduler, carved out of contiguous blocks with room reserved ahead for
// every pending wait.
//
// Why records are the scheduler's operations: each completed wait must be one operation of
// the context (run_one() runs one handler, and the handlers of a batch spread over the
// threads, as in Asio), and every ready one must be in the scheduler's queue (a handler
// that waits for a turn of its own starves behind a busy context). Asio's timers queue
// their operations, allocated at async_wait; twheel queues these records, handed over in
// one batch per call (one lock and one atomic add for the batch), with no allocation.
//
// Why contiguous: at a million timers, completing a batch long after it was queued costs a
// cache miss per handler when the operations are scattered over the heap; consecutive
// records share cache lines and the prefetcher sees them coming.
//
// Why reserved: a wait is settled by cancel(), expires_at(), the timer's destructor, a
// cancellation slot or the driver, and none of those may fail or allocate (Asio's do not).
// So async_wait() reserves the record its wait will need (and may throw bad_alloc, as
// Asio's async_wait may); settling only uses up the reservation.
//
// A record is released by whichever thread completes it; a block goes back to the spares
// when all its records were released (an atomic count per block, and a lock-free list
// that the owner takes over whole).
//
// Why blocks from plain operator new, made resident in one call, with records made only
// when a wait settles: blocks used to be aligned to their size (glibc's memalign, which
// also writes into the gap it leaves before each block) and filled with records at
// reservation, and at 1,000,000 timers half of arm's time went to memalign and to the page
// faults of that first touch (perf record, 2026-11-27). A record now finds its block by
// its index, kept in the operation's result field beside the result, and a new block's
// pages are mapped by one system call and written once (prefault.hpp) instead of a page
// fault each. They are still mapped at reservation, as Asio's operations are at
// async_wait: left to fault in when waits settle, cancel and expiry paid for them instead
// (cancel of 1,000,000 waits 75 to 80 against 43 to 58 ns; bench_timers, 2026-11-27). A
// queue's blocks grow from one page to 64 KiB (see first_block_bytes).
#ifndef TWHEEL_DETAIL_COMPLETION_QUEUE_HPP
#define TWHEEL_DETAIL_COMPLETION_QUEUE_HPP

#include <twheel/detail/handler_box.hpp>
#include <twheel/detail/prefault.hpp>
#include <twheel/detail/process_threads.hpp>

#include <boost/asio/detail/op_queue.hpp>
#include <boost/asio/detail/scheduler_operation.hpp>
#include <boost/system/error_code.hpp>

#include <atomic>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <new>

namespace twheel::detail {

using scheduler_op = boost::asio::detail::scheduler_operation;
using scheduler_op_queue = boost::asio::detail::op_queue<scheduler_op>;

class completion_queue;

// A settled wait: its handler and how the wait ended. Completing it (a non-null owner)
// invokes the handler; destroying it (null owner: the context shut down) does not.
class completion final : public scheduler_op {
 public:
  completion() noexcept : scheduler_op(&completion::do_complete) {}

  handler_box box;

  // How the wait ended, and the record's index in its block, kept in the operation's own
  // result field (which the scheduler passes back to do_complete untouched for operations
  // that are not its reactor's).
  wait_result result() const noexcept {
    return static_cast<wait_result>(task_result_ & result_mask);
  }

  // Runs the record outside any queue (the driver's first handler): as the scheduler would.
  void run() { do_complete(this, this, boost::system::error_code(), 0); }

  // Moves the handler into `to` (empty) and gives the record back to its queue; returns
  // how the wait ended. The record is gone after this.
  inline wait_result release_into(handler_box& to) noexcept;

 private:
  static void do_complete(void* owner, scheduler_op* base, const boost::system::error_code&,
                          std::size_t);

  friend class completion_queue;
  static constexpr unsigned result_bits = 8;
  static constexpr unsigned result_mask = (1u << result_bits) - 1;
  completion(unsigned index, wait_result r) noexcept : completion() {
    task_result_ = (index << result_bits) | static_cast<unsigned>(r);
  }
  std::size_t index() const noexcept { return task_result_ >> result_bits; }
};

class completion_queue {
  // A queue's first block is one page (84 records); each new block doubles, up to 64 KiB
  // (one allocation, one madvise and one atomic count per 1,364 records). A context that
  // only ever has a few waits (one per request, a test's) then makes and frees 4 KiB, not
  // 64 KiB mapped by a system call: that block was about a fifth of the cost of a fresh
  // context's first wait (bench_context, perf, 2026-11-27).
  static constexpr std::size_t first_block_bytes = 4096;
  static constexpr std::size_t block_bytes = 65536;

  struct block_header {
    block_header* next = nullptr;
    completion_queue* queue = nullptr;
    std::atomic<std::size_t> released{0};
    std::size_t capacity = 0;  // records
  };

  static constexpr std::size_t records_in(std::size_t bytes) noexcept {
    return (bytes - sizeof(block_header)) / sizeof(completion);
  }

 public:
  // The records of the largest block.
  static constexpr std::size_t per_block =
      (block_bytes - sizeof(block_header)) / sizeof(completion);
  // The records of the n-th block a queue makes (0: its first).
  static constexpr std::size_t records_in_block(unsigned n) noexcept {
    std::size_t bytes = first_block_bytes;
    for (; n != 0 && bytes < block_bytes; --n) bytes *= 2;
    return records_in(bytes);
  }
  static_assert(per_block < (std::size_t{1} << (32 - completion::result_bits)));
  static_assert(alignof(completion) <= alignof(block_header));

  completion_queue() noexcept = default;
  completion_queue(const completion_queue&) = delete;
  completion_queue& operator=(const completion_queue&) = delete;
  ~completion_queue() {
    // Every record handed out was completed or destroyed by the scheduler by now (the
    // context destroys its services after shutting all of them down).
    free_chain(tail_);
    free_chain(spare_);
    free_chain(recycled_.exchange(nullptr, std::memory_order_acquire));
  }

  std::size_t reserved() const noexcept { return reserved_; }

  // Makes room for one more settled wait later. Throws std::bad_alloc (nothing changed).
  void reserve() {
    if (available() < reserved_ + 1) {
      reclaim();
      if (available() < reserved_ + 1) add_spare();
    }
    ++reserved_;
  }
  // Gives back a reservation that will not be used (a wait taken back unsettled).
  void unreserve() noexcept {
    assert(reserved_ > 0);
    --reserved_;
  }
  // Drops every reservation (shutdown: no wait will be settled any more).
  void unreserve_all() noexcept { reserved_ = 0; }

  // A fresh record for a wait settled with `result`, using up a reservation. Never
  // allocates.
  completion& emplace(wait_result result) noexcept {
    assert(reserved_ > 0);
    --reserved_;
    if (tail_ == nullptr) {
      tail_ = take_spare();
      tail_index_ = 0;
      tail_capacity_ = tail_->capacity;
    }
    // The record's life begins here and ends in do_complete: a reserved record that is
    // never used is never written.
    completion& c = *::new (record_at(tail_, tail_index_))
        completion(static_cast<unsigned>(tail_index_), result);
    ++tail_index_;
    // A full block leaves our hands at once: the last of its records to be released
    // recycles it, possibly before any later emplace(), so tail_ must not keep it (the
    // destructor would free it twice, once as the tail and once as recycled).
    if (tail_index_ == tail_capacity_) tail_ = nullptr;
    return c;
  }

  // The block a record was made in; pass it to release() once the record is destroyed.
  static void* block_of(completion& c) noexcept {
    return reinterpret_cast<block_header*>(reinterpret_cast<unsigned char*>(&c) -
                                           c.index() * sizeof(completion)) -
           1;
  }

  // Called by a record's completion, on any thread, once the record is destroyed.
  static void release(void* block) noexcept {
    auto* b = static_cast<block_header*>(block);
    if (fetch_add_if_threaded(b->released, std::size_t{1}, std::memory_order_acq_rel) + 1 ==
        b->capacity) {
      b->queue->recycle(b);
    }
  }

 private:
  static void* record_at(block_header* b, std::size_t index) noexcept {
    return reinterpret_cast<unsigned char*>(b + 1) + index * sizeof(completion);
  }

  std::size_t available() const noexcept {
    return (tail_ ? tail_capacity_ - tail_index_ : 0) + spare_records_;
  }

  void add_spare() {
    const std::size_t bytes = next_block_bytes_;
    auto* b = ::new (::operator new(bytes)) block_header;
    b->queue = this;
    b->capacity = records_in(bytes);
    prefault(b, bytes);
    push_spare(b);
    if (next_block_bytes_ < block_bytes) next_block_bytes_ *= 2;
  }

  void push_spare(block_header* b) noexcept {
    b->next = spare_;
    spare_ = b;
    ++spares_;
    spare_records_ += b->capacity;
  }

  block_header* take_spare() noexcept {
    assert(spare_ != nullptr);  // guaranteed by the reservations
    block_header* b = spare_;
    spare_ = b->next;
    b->next = nullptr;
    b->released.store(0, std::memory_order_relaxed);
    --spares_;
    spare_records_ -= b->capacity;
    return b;
  }

  // From any thread: a block all of whose records were released.
  void recycle(block_header* b) noexcept {
    b->next = recycled_.load(std::memory_order_relaxed);
    while (!recycled_.compare_exchange_weak(b->next, b, std::memory_order_release,
                                            std::memory_order_relaxed)) {
    }
  }

  // Takes the recycled blocks back, and frees the spares no reservation needs (keeping a
  // couple, so that a steady flow of waits does not allocate a block at every turn).
  void reclaim() noexcept {
    block_header* b = recycled_.exchange(nullptr, std::memory_order_acquire);
    while (b) {
      block_header* next = b->next;
      push_spare(b);
      b = next;
    }
    while (spares_ > 2 && available() - spare_->capacity >= reserved_ + 2 * per_block) {
      destroy_block(take_spare());
    }
  }

  // Its records were all destroyed (or never made): each one completed or was destroyed
  // by the scheduler before the service is destroyed.
  static void destroy_block(block_header* b) noexcept {
    b->~block_header();
    ::operator delete(static_cast<void*>(b));
  }

  static void free_chain(block_header* b) noexcept {
    while (b) {
      block_header* next = b->next;
      destroy_block(b);
      b = next;
    }
  }

  block_header* tail_ = nullptr;  // the block records are taken from
  std::size_t tail_index_ = 0;
  std::size_t tail_capacity_ = 0;  // tail_->capacity, kept here: emplace() loads no block
  std::size_t reserved_ = 0;
  block_header* spare_ = nullptr;
  std::size_t spares_ = 0;
  std::size_t spare_records_ = 0;  // the capacity of the spares
  std::size_t next_block_bytes_ = first_block_bytes;
  std::atomic<block_header*> recycled_{nullptr};
};

inline void completion::do_complete(void* owner, scheduler_op* base,
                                    const boost::system::error_code&, std::size_t) {
  // The record is released before the upcall (Asio's rule for operation memory).
  handler_box handler;
  const wait_result result = static_cast<completion*>(base)->release_into(handler);
  handler.complete(result, owner != nullptr);
}

inline wait_result completion::release_into(handler_box& to) noexcept {
  to.take(box);
  const wait_result r = result();
  void* block = completion_queue::block_of(*this);
  this->~completion();
  completion_queue::release(block);
  return r;
}

}  // namespace twheel::detail

#endif  // TWHEEL_DETAIL_COMPLETION_QUEUE_HPP
