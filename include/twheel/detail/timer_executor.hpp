// twheel/detail/timer_executor.hpp: where a timer keeps its I/O executor.
//
// Why: at a million timers every byte of the timer object is paid a million times, and
// any_io_executor is 56 bytes. Nearly every timer's executor is the one its wheel runs on
// (the context's own, the only one whose handlers can be boxed); such a timer keeps no
// copy and refers to the wheel's, which compares equal to it and outlives the timer. Any
// other executor behind any_io_executor (a strand, a foreign executor) is kept in a block
// made once, at construction, and shared, not copied, by moves: the moved-from timer
// keeps its executor, as Asio's does, and no move allocates. A concrete executor type
// (io_context::executor_type, strand<...>) is small and kept inline, as before.
#ifndef TWHEEL_DETAIL_TIMER_EXECUTOR_HPP
#define TWHEEL_DETAIL_TIMER_EXECUTOR_HPP

#include <boost/asio/any_io_executor.hpp>

#include <atomic>
#include <cstddef>
#include <utility>

namespace twheel::detail {

// Generic: the executor itself, compared with the wheel's only when asked.
template <class Executor>
class timer_executor {
 public:
  template <class Service>
  timer_executor(const Service& /*service*/, const Executor& ex) : ex_(ex) {}

  const Executor& get(const boost::asio::any_io_executor& /*wheels*/) const noexcept {
    return ex_;
  }
  // Whether the executor is the wheel's: its handlers may then be boxed.
  template <class Service>
  bool is_wheels(const Service& service) const noexcept {
    return service.runs_inline(ex_);
  }

 private:
  Executor ex_;
};

template <>
class timer_executor<boost::asio::any_io_executor> {
  struct shared_block {
    explicit shared_block(const boost::asio::any_io_executor& e) : ex(e) {}
    std::atomic<std::size_t> refs{1};  // timers moved on other threads may let go of it
    const boost::asio::any_io_executor ex;
  };

 public:
  // Compares `ex` with the wheel's once, here. Throws std::bad_alloc when `ex` is not the
  // wheel's (nothing is then kept).
  template <class Service>
  timer_executor(const Service& service, const boost::asio::any_io_executor& ex)
      : own_(service.runs_inline(ex) ? nullptr : new shared_block(ex)) {}
  timer_executor(const timer_executor& other) noexcept : own_(other.own_) {
    if (own_) own_->refs.fetch_add(1, std::memory_order_relaxed);
  }
  timer_executor& operator=(const timer_executor& other) noexcept {
    timer_executor copy(other);
    std::swap(own_, copy.own_);
    return *this;
  }
  ~timer_executor() {
    if (own_ && own_->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete own_;
  }

  // `wheels` is the executor of the timer's wheel (set once, alive as long as the wheel).
  const boost::asio::any_io_executor& get(
      const boost::asio::any_io_executor& wheels) const noexcept {
    return own_ ? own_->ex : wheels;
  }
  template <class Service>
  bool is_wheels(const Service& /*service*/) const noexcept {
    return own_ == nullptr;
  }

 private:
  shared_block* own_;  // null: the executor is the wheel's
};

// What a new timer on `service`'s wheel keeps of `ex`. The first timer of a context
// attaches the wheel (which takes its executor from `ex`); then `ex` is compared with it,
// here for any_io_executor, by is_wheels() for a concrete executor type.
template <class Service, class Executor>
timer_executor<Executor> attach_timer_executor(Service& service, const Executor& ex) {
  service.attach(ex);
  return timer_executor<Executor>(service, ex);
}

}  // namespace twheel::detail

#endif  // TWHEEL_DETAIL_TIMER_EXECUTOR_HPP
