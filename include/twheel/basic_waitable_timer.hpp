// twheel/basic_waitable_timer.hpp: a drop-in for boost::asio::basic_waitable_timer whose
// waits live in the context's timing wheel instead of Asio's timer heap.
#ifndef TWHEEL_BASIC_WAITABLE_TIMER_HPP
#define TWHEEL_BASIC_WAITABLE_TIMER_HPP

#include <twheel/detail/timer_state.hpp>
#include <twheel/wheel_service.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/wait_traits.hpp>
#include <boost/system/system_error.hpp>

#include <chrono>
#include <cstddef>
#include <thread>
#include <type_traits>
#include <utility>

namespace twheel {

/// Provides waitable timer functionality, as boost::asio::basic_waitable_timer does, with
/// the same template parameters, members and semantics. Differences, all documented:
/// deadlines are rounded up to the wheel's tick (1 ms by default), so a wait completes up
/// to one tick late (never early) and waits whose deadlines fall in the same tick
/// complete in the order they were started; only steady clocks are accepted.
///
/// Thread safety: distinct objects safe; shared objects unsafe (as Asio's).
template <class Clock, class WaitTraits = boost::asio::wait_traits<Clock>,
          class Executor = boost::asio::any_io_executor>
class basic_waitable_timer {
  static_assert(std::is_same_v<Clock, std::chrono::steady_clock>,
                "twheel timers follow std::chrono::steady_clock only: the wheel keeps "
                "steady time and cannot follow a clock that jumps");

 public:
  using executor_type = Executor;

  /// Rebinds the timer type to another executor.
  template <class Executor1>
  struct rebind_executor {
    using other = basic_waitable_timer<Clock, WaitTraits, Executor1>;
  };

  using clock_type = Clock;
  using duration = typename clock_type::duration;
  using time_point = typename clock_type::time_point;
  using traits_type = WaitTraits;

  /// A timer with no expiry set, using `ex` to run handlers by default.
  explicit basic_waitable_timer(const executor_type& ex)
      : service_(&service_for(ex)), executor_(ex) {
    service_->attach(executor_);
  }

  /// A timer with no expiry set, using the executor of `context`.
  template <class ExecutionContext,
            std::enable_if_t<std::is_convertible_v<ExecutionContext&,
                                                   boost::asio::execution_context&>,
                             int> = 0>
  explicit basic_waitable_timer(ExecutionContext& context)
      : basic_waitable_timer(executor_type(context.get_executor())) {}

  /// A timer expiring at `expiry_time`.
  basic_waitable_timer(const executor_type& ex, const time_point& expiry_time)
      : basic_waitable_timer(ex) {
    expiry_ = expiry_time;
  }

  template <class ExecutionContext,
            std::enable_if_t<std::is_convertible_v<ExecutionContext&,
                                                   boost::asio::execution_context&>,
                             int> = 0>
  basic_waitable_timer(ExecutionContext& context, const time_point& expiry_time)
      : basic_waitable_timer(executor_type(context.get_executor()), expiry_time) {}

  /// A timer expiring `expiry_time` from now.
  basic_waitable_timer(const executor_type& ex, const duration& expiry_time)
      : basic_waitable_timer(ex) {
    expiry_ = after_now(expiry_time);
  }

  template <class ExecutionContext,
            std::enable_if_t<std::is_convertible_v<ExecutionContext&,
                                                   boost::asio::execution_context&>,
                             int> = 0>
  basic_waitable_timer(ExecutionContext& context, const duration& expiry_time)
      : basic_waitable_timer(executor_type(context.get_executor()), expiry_time) {}

  /// Moves a timer; its pending waits move along. The moved-from timer is as if newly
  /// constructed from its executor.
  basic_waitable_timer(basic_waitable_timer&& other)
      : service_(other.service_), expiry_(other.expiry_), executor_(other.executor_) {
    service_->move(state_, other.state_);
    state_.might_have_waits = std::exchange(other.state_.might_have_waits, false);
    other.expiry_ = time_point();
  }

  /// Move-assigns; cancels the outstanding waits of this timer first.
  basic_waitable_timer& operator=(basic_waitable_timer&& other) {
    if (this != &other) {
      service_->destroy(state_);
      other.service_->move(state_, other.state_);
      state_.might_have_waits = std::exchange(other.state_.might_have_waits, false);
      service_ = other.service_;
      executor_ = other.executor_;
      expiry_ = other.expiry_;
      other.expiry_ = time_point();
    }
    return *this;
  }

  template <class C, class W, class E>
  friend class basic_waitable_timer;

  /// Converting move from a timer with another executor type.
  template <class Executor1,
            std::enable_if_t<std::is_convertible_v<Executor1, Executor>, int> = 0>
  basic_waitable_timer(basic_waitable_timer<Clock, WaitTraits, Executor1>&& other)
      : service_(other.service_), expiry_(other.expiry_), executor_(other.executor_) {
    service_->move(state_, other.state_);
    state_.might_have_waits = std::exchange(other.state_.might_have_waits, false);
    other.expiry_ = time_point();
  }

  template <class Executor1>
  std::enable_if_t<std::is_convertible_v<Executor1, Executor>, basic_waitable_timer&>
  operator=(basic_waitable_timer<Clock, WaitTraits, Executor1>&& other) {
    basic_waitable_timer tmp(std::move(other));
    return *this = std::move(tmp);
  }

  /// Cancels outstanding waits (they complete with operation_aborted).
  ~basic_waitable_timer() { service_->destroy(state_); }

  basic_waitable_timer(const basic_waitable_timer&) = delete;
  basic_waitable_timer& operator=(const basic_waitable_timer&) = delete;

  const executor_type& get_executor() noexcept { return executor_; }

  /// Cancels all waits; returns how many. They complete with operation_aborted.
  std::size_t cancel() {
    if (!state_.might_have_waits) return 0;
    state_.might_have_waits = false;
    return service_->cancel(state_);
  }

  /// Cancels the oldest wait; returns 0 or 1.
  std::size_t cancel_one() {
    return state_.might_have_waits ? service_->cancel_one(state_) : 0;
  }

  /// The expiry time, as set (not rounded to the tick).
  time_point expiry() const { return expiry_; }

  /// Sets the expiry time; cancels pending waits and returns how many.
  std::size_t expires_at(const time_point& expiry_time) {
    expiry_ = expiry_time;
    if (!state_.might_have_waits) return 0;  // the next async_wait files the new expiry
    state_.might_have_waits = false;
    return service_->expires_at(state_, expiry_time);
  }

  /// Sets the expiry relative to now (saturating at time_point::max()); cancels pending
  /// waits and returns how many.
  std::size_t expires_after(const duration& expiry_time) {
    return expires_at(after_now(expiry_time));
  }

  /// Blocks until the timer has expired. Does not use the wheel (as Asio's).
  void wait() {
    boost::system::error_code ec;
    wait(ec);
    if (ec) throw boost::system::system_error(ec, "wait");
  }

  void wait(boost::system::error_code& ec) {
    ec.clear();
    // expiry_ - now cannot overflow while now < expiry_ (WaitTraits::to_wait_duration
    // can: it adds duration::max() to now).
    for (time_point now = clock_type::now(); now < expiry_; now = clock_type::now()) {
      std::this_thread::sleep_for(expiry_ - now);
    }
  }

  /// Starts an asynchronous wait. Completion signature: void(boost::system::error_code):
  /// success when the expiry is reached (never earlier), operation_aborted when
  /// cancelled, no_buffer_space when the wheel's max_pending is reached. The handler is
  /// never invoked from inside this call. Supports terminal, partial and total
  /// per-operation cancellation. At most one allocation, through the handler's
  /// associated allocator.
  template <class WaitToken = boost::asio::default_completion_token_t<executor_type>>
  auto async_wait(WaitToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
    return boost::asio::async_initiate<WaitToken, void(boost::system::error_code)>(
        initiate_async_wait(this), token);
  }

 private:
  class initiate_async_wait {
   public:
    using executor_type = Executor;
    explicit initiate_async_wait(basic_waitable_timer* self) noexcept : self_(self) {}
    const executor_type& get_executor() const noexcept { return self_->get_executor(); }

    template <class WaitHandler>
    void operator()(WaitHandler&& handler) const {
      std::decay_t<WaitHandler> h(std::forward<WaitHandler>(handler));
      self_->state_.might_have_waits = true;
      self_->service_->async_wait(self_->state_, self_->expiry_, h, self_->executor_);
    }

   private:
    basic_waitable_timer* self_;
  };

  template <class Ex>
  static wheel_service& service_for(const Ex& ex) {
    return boost::asio::use_service<wheel_service>(
        boost::asio::query(ex, boost::asio::execution::context));
  }

  static time_point after_now(const duration& d) {
    const time_point now = clock_type::now();
    if (d > duration::zero() && now > time_point::max() - d) return time_point::max();
    if (d < duration::zero() && now < time_point::min() - d) return time_point::min();
    return now + d;
  }

  wheel_service* service_;
  detail::timer_state state_;
  time_point expiry_{};
  executor_type executor_;
};

}  // namespace twheel

#endif  // TWHEEL_BASIC_WAITABLE_TIMER_HPP
