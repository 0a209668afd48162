// twheel/detail/completion_queue.hpp: the FIFO of settled waits awaiting their handlers,
// in contiguous blocks, with room reserved ahead for every pending wait.
//
// Why contiguous: at a million timers the completions of a batch are run long after they
// were queued; walking a linked list of operations scattered over the heap costs a cache
// miss per handler, walking blocks of records costs one per 127 handlers' worth of lines
// that the prefetcher already saw coming.
//
// Why reserved: a wait is settled by cancel(), expires_at(), the timer's destructor, a
// cancellation slot or the driver, and none of those may fail or allocate (Asio's do not).
// So async_wait() reserves the record its wait will need (and may throw bad_alloc, as
// Asio's async_wait may); settling only uses up the reservation.
#ifndef TWHEEL_DETAIL_COMPLETION_QUEUE_HPP
#define TWHEEL_DETAIL_COMPLETION_QUEUE_HPP

#include <twheel/detail/handler_box.hpp>

#include <cassert>
#include <cstddef>

namespace twheel::detail {

class completion_queue {
 public:
  static constexpr std::size_t per_block = 127;  // a block is just under 4 KiB

  completion_queue() noexcept = default;
  completion_queue(const completion_queue&) = delete;
  completion_queue& operator=(const completion_queue&) = delete;
  ~completion_queue() {
    // The owner destroys what is left (clear()) before the queue goes.
    assert(empty());
    free_chain(head_);
    free_chain(spare_);
  }

  bool empty() const noexcept { return size_ == 0; }
  std::size_t size() const noexcept { return size_; }
  std::size_t reserved() const noexcept { return reserved_; }

  // Makes room for one more settled wait later. Throws std::bad_alloc (nothing changed).
  void reserve() {
    if (available() < reserved_ + 1) add_spare();
    ++reserved_;
  }
  // Gives back a reservation that will not be used (a wait taken back unsettled).
  void unreserve() noexcept {
    assert(reserved_ > 0);
    --reserved_;
    trim();
  }
  // Drops every reservation (shutdown: no wait will be settled any more).
  void unreserve_all() noexcept { reserved_ = 0; }

  // Appends a settled wait, using up a reservation. Never allocates.
  completion& push() noexcept {
    assert(reserved_ > 0);
    --reserved_;
    if (tail_ == nullptr) {
      head_ = tail_ = take_spare();
      head_index_ = tail_index_ = 0;
    } else if (tail_index_ == per_block) {
      block* b = take_spare();
      tail_->next = b;
      tail_ = b;
      tail_index_ = 0;
    }
    ++size_;
    return tail_->items[tail_index_++];
  }

  // Moves the oldest settled wait into `out` (an empty completion). Precondition: !empty().
  void pop(completion& out) noexcept {
    assert(!empty());
    out.take(head_->items[head_index_++]);
    --size_;
    if (size_ == 0) {
      // Start over at the front of the block: it is warm and no record is live in it.
      free_chain_to_spare(head_->next);
      head_->next = nullptr;
      tail_ = head_;
      head_index_ = tail_index_ = 0;
    } else if (head_index_ == per_block) {
      block* done = head_;
      head_ = head_->next;
      head_index_ = 0;
      done->next = spare_;
      spare_ = done;
      ++spares_;
    }
    trim();
  }

 private:
  struct block {
    block* next = nullptr;
    completion items[per_block];
  };

  // Records that can be pushed without allocating.
  std::size_t available() const noexcept {
    return (tail_ ? per_block - tail_index_ : 0) + spares_ * per_block;
  }

  void add_spare() {
    block* b = new block;
    b->next = spare_;
    spare_ = b;
    ++spares_;
  }

  block* take_spare() noexcept {
    assert(spare_ != nullptr);  // guaranteed by the reservations
    block* b = spare_;
    spare_ = b->next;
    b->next = nullptr;
    --spares_;
    return b;
  }

  // Frees spare blocks no reservation needs, keeping a couple so that a steady flow of
  // waits does not allocate and free a block at every turn.
  void trim() noexcept {
    while (spares_ > 2 && available() - per_block >= reserved_ + 2 * per_block) {
      block* b = take_spare();
      delete b;
    }
  }

  void free_chain_to_spare(block* b) noexcept {
    while (b) {
      block* next = b->next;
      b->next = spare_;
      spare_ = b;
      ++spares_;
      b = next;
    }
  }

  static void free_chain(block* b) noexcept {
    while (b) {
      block* next = b->next;
      delete b;
      b = next;
    }
  }

  block* head_ = nullptr;
  block* tail_ = nullptr;
  std::size_t head_index_ = 0;
  std::size_t tail_index_ = 0;
  std::size_t size_ = 0;
  std::size_t reserved_ = 0;
  block* spare_ = nullptr;
  std::size_t spares_ = 0;
};

}  // namespace twheel::detail

#endif  // TWHEEL_DETAIL_COMPLETION_QUEUE_HPP
