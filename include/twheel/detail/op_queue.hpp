// twheel/detail/op_queue.hpp: the type-erased wait operation and its FIFO queue.
#ifndef TWHEEL_DETAIL_OP_QUEUE_HPP
#define TWHEEL_DETAIL_OP_QUEUE_HPP

#include <boost/asio/error.hpp>
#include <boost/system/error_code.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace twheel {
class wheel_service;
}  // namespace twheel

namespace twheel::detail {

// What a pending wait points at, outside the wheel, and the wheel cuts when the wait
// settles (wheel_service::settle(), under the wheel's lock): from then on `service_` is
// null, and whoever holds the link knows, without the lock, that the wait is out of the
// wheel. A wait_canceller (timer_state.hpp) is one; a cancel_after state keeps one too.
struct wait_link {
  std::atomic<wheel_service*> service_;
};

enum class wait_result : std::uint8_t { success, aborted, no_buffer_space };

// One pending async_wait. The concrete operation (wait_ops.hpp) holds the handler; the
// service only links, moves and completes these. Kept small: at a million timers every
// byte of it is paid a million times, so the result shares a word with the canceller.
class wait_op {
 public:
  // invoke = false destroys the handler without calling it (shutdown).
  using func_type = void (*)(wait_op*, bool invoke);

  explicit wait_op(func_type func) noexcept : func_(func) {}

  void complete() { func_(this, true); }
  void destroy() noexcept { func_(this, false); }

  // The link that refers to this wait while it is pending, if any: the handler's
  // cancellation slot handler (a wait_canceller), or a cancel_after state's own.
  wait_link* link() const noexcept { return reinterpret_cast<wait_link*>(tag_ & ~result_mask); }
  void set_link(wait_link* link) noexcept {
    tag_ = reinterpret_cast<std::uintptr_t>(link) | (tag_ & result_mask);
  }

  wait_result result() const noexcept { return static_cast<wait_result>(tag_ & result_mask); }
  void set_result(wait_result r) noexcept {
    tag_ = (tag_ & ~result_mask) | static_cast<std::uintptr_t>(r);
  }

  boost::system::error_code error() const noexcept {
    switch (result()) {
      case wait_result::success: return {};
      case wait_result::aborted: return boost::asio::error::operation_aborted;
      case wait_result::no_buffer_space: return boost::asio::error::no_buffer_space;
    }
    return {};
  }

  wait_op* next_ = nullptr;

 private:
  static constexpr std::uintptr_t result_mask = 3;  // wait_link is 8-byte aligned
  std::uintptr_t tag_ = 0;
  func_type func_;
};

// FIFO of operations as a circular singly-linked list reached through its tail: one
// pointer per queue, O(1) push, pop and splice.
class op_queue {
 public:
  op_queue() noexcept = default;
  op_queue(const op_queue&) = delete;
  op_queue& operator=(const op_queue&) = delete;
  op_queue(op_queue&& other) noexcept : tail_(other.tail_) { other.tail_ = nullptr; }

  bool empty() const noexcept { return tail_ == nullptr; }
  wait_op* front() const noexcept { return tail_ ? tail_->next_ : nullptr; }

  void push(wait_op* op) noexcept {
    if (tail_) {
      op->next_ = tail_->next_;
      tail_->next_ = op;
    } else {
      op->next_ = op;
    }
    tail_ = op;
  }

  wait_op* pop() noexcept {
    wait_op* head = tail_->next_;
    if (head == tail_) {
      tail_ = nullptr;
    } else {
      tail_->next_ = head->next_;
    }
    head->next_ = nullptr;
    return head;
  }

  // Removes `op` if queued here. O(n); n is the number of waits on one timer.
  bool erase(wait_op* op) noexcept {
    if (!tail_) return false;
    wait_op* prev = tail_;
    do {
      wait_op* cur = prev->next_;
      if (cur == op) {
        if (cur == prev) {
          tail_ = nullptr;
        } else {
          prev->next_ = cur->next_;
          if (cur == tail_) tail_ = prev;
        }
        cur->next_ = nullptr;
        return true;
      }
      prev = cur;
    } while (prev != tail_);
    return false;
  }

  // Appends all of `other` (which ends up empty).
  void splice_back(op_queue& other) noexcept {
    if (!other.tail_) return;
    if (tail_) {
      wait_op* head = tail_->next_;
      tail_->next_ = other.tail_->next_;
      other.tail_->next_ = head;
    }
    tail_ = other.tail_;
    other.tail_ = nullptr;
  }

  // Prepends all of `other` (which ends up empty).
  void splice_front(op_queue& other) noexcept {
    if (!other.tail_) return;
    if (tail_) {
      wait_op* head = tail_->next_;
      tail_->next_ = other.tail_->next_;
      other.tail_->next_ = head;
    } else {
      tail_ = other.tail_;
    }
    other.tail_ = nullptr;
  }

  template <class F>
  void for_each(F f) const {
    if (!tail_) return;
    wait_op* op = tail_->next_;
    for (;;) {
      wait_op* next = op->next_;
      f(op);
      if (op == tail_) break;
      op = next;
    }
  }

 private:
  wait_op* tail_ = nullptr;
};

}  // namespace twheel::detail

#endif  // TWHEEL_DETAIL_OP_QUEUE_HPP
