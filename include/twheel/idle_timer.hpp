// twheel/idle_timer.hpp: idle-connection reaping where recording activity is one store.
#ifndef TWHEEL_IDLE_TIMER_HPP
#define TWHEEL_IDLE_TIMER_HPP

#include <twheel/basic_waitable_timer.hpp>
#include <twheel/detail/forwarding_handler.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/error.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace twheel {

namespace detail {

template <class Executor>
struct idle_state {
  idle_state(const Executor& ex, std::chrono::steady_clock::duration p)
      : timer(ex), period(p) {}

  basic_waitable_timer<std::chrono::steady_clock, boost::asio::wait_traits<std::chrono::steady_clock>,
                       Executor>
      timer;
  std::chrono::steady_clock::duration period;
  std::atomic<bool> touched{false};
  std::atomic<bool> cancelled{false};  // cancel() since the wait started
  std::atomic<bool> closed{false};     // destroyed or moved over
};

// Waits one period at a time; a period in which touch() was called starts another. The
// caller's cancellation slot feeds a cancellation_state, so a cancellation emitted between
// two periods (when no inner wait is there to receive it) is not lost.
template <class Handler, class State>
class idle_wait_op {
 public:
  using cancellation_slot_type = boost::asio::cancellation_slot;

  template <class H>
  idle_wait_op(std::shared_ptr<State> state, H&& handler)
      : state_(std::move(state)),
        handler_(std::forward<H>(handler)),
        cancel_state_(boost::asio::get_associated_cancellation_slot(handler_),
                      boost::asio::enable_total_cancellation()) {}

  cancellation_slot_type get_cancellation_slot() const noexcept { return cancel_state_.slot(); }

  void operator()(boost::system::error_code ec) {
    // A cancel() or an emit that came after the period fired but before this ran must
    // still win.
    if (!ec && (state_->closed.load(std::memory_order_acquire) ||
                state_->cancelled.load(std::memory_order_acquire) ||
                cancel_state_.cancelled() != boost::asio::cancellation_type::none)) {
      ec = boost::asio::error::operation_aborted;
    }
    if (!ec && state_->touched.exchange(false, std::memory_order_acq_rel)) {
      State& s = *state_;
      s.timer.expires_after(s.period);
      s.timer.async_wait(std::move(*this));
      return;
    }
    state_.reset();
    std::move(handler_)(ec);
  }

  std::shared_ptr<State> state_;
  Handler handler_;

 private:
  boost::asio::cancellation_state cancel_state_;
};

}  // namespace detail

/// Completes a wait once a connection has been idle for a period. touch() records
/// activity with one relaxed atomic store (no lock, no clock read, no wheel operation),
/// from any thread. The wait checks for activity once per period, so it completes when
/// no touch() happened during one whole period: at least `period` and at most
/// 2 x `period` (plus one wheel tick) after the last touch, never earlier.
///
/// @par Thread Safety
/// touch() is safe from any thread, concurrently with every member but the destructor
/// and the move operations. The other members: distinct objects safe, shared objects
/// unsafe, as for a timer. A pending wait re-arms its internal timer from its handler's
/// associated executor, so call them on that executor (the context's thread, or the
/// handler's strand when the context runs on several threads).
template <class Executor = boost::asio::any_io_executor>
class basic_idle_timer {
  using state_type = detail::idle_state<Executor>;

 public:
  /// The type of the executor associated with the object.
  using executor_type = Executor;
  /// The clock type.
  using clock_type = std::chrono::steady_clock;
  /// The duration type of the clock.
  using duration = clock_type::duration;

  /// Constructs an idle timer with no wait pending.
  ///
  /// @param ex The I/O executor that the timer will use, by default, to dispatch handlers
  /// for its waits. The wheel of its execution context is created if it does not exist.
  /// @param period The idle period; must be positive.
  ///
  /// @throws std::invalid_argument if `period` is not positive.
  basic_idle_timer(const executor_type& ex, duration period)
      : state_(std::make_shared<state_type>(ex, checked(period))) {}

  /// Constructs an idle timer with no wait pending.
  ///
  /// @param ctx An execution context which provides the I/O executor that the timer will
  /// use, by default, to dispatch handlers for its waits.
  /// @param period The idle period; must be positive.
  ///
  /// @throws std::invalid_argument if `period` is not positive.
  template <class ExecutionContext,
            std::enable_if_t<std::is_convertible_v<ExecutionContext&,
                                                   boost::asio::execution_context&>,
                             int> = 0>
  basic_idle_timer(ExecutionContext& ctx, duration period)
      : basic_idle_timer(executor_type(ctx.get_executor()), period) {}

  /// Move-constructs an idle timer; a pending wait moves along. The moved-from object
  /// may be destroyed or assigned to; its touch() does nothing, its cancel() returns 0
  /// and its other members throw std::logic_error.
  basic_idle_timer(basic_idle_timer&&) noexcept = default;
  /// Aborts this timer's pending wait (operation_aborted) and takes over `other`, with its
  /// pending wait. The moved-from object is as after the move constructor.
  basic_idle_timer& operator=(basic_idle_timer&& other) noexcept {
    if (this != &other) {
      close();
      state_ = std::move(other.state_);
    }
    return *this;
  }

  /// Aborts a pending wait (operation_aborted, later, from the context), also one whose
  /// period has just ended but whose handler has not run yet.
  ~basic_idle_timer() { close(); }

  /// Gets the executor associated with the object.
  executor_type get_executor() const { return state().timer.get_executor(); }
  /// The idle period.
  duration period() const { return state().period; }

  /// Records activity. O(1): one relaxed store. Safe from any thread. A touch() counts
  /// for the wait pending when it happens; async_wait() forgets earlier ones.
  void touch() noexcept {
    if (state_) state_->touched.store(true, std::memory_order_relaxed);
  }

  /// Waits until the connection has been idle for a period, measured from this call or
  /// the last touch().
  ///
  /// This function is an initiating function for an asynchronous operation, and always
  /// returns immediately; the handler is never invoked from inside it. The wait is one
  /// internal timer wait per period, re-armed while touch() is called: it completes at
  /// least `period` after this call and after the last touch(), and at most 2 x `period`
  /// (plus one wheel tick and scheduling delay) after the later of the two.
  ///
  /// One wait at a time: a new wait aborts the pending one. Start it once the previous
  /// one has completed, though: a wait started after the previous one's period ended but
  /// before its handler ran does not abort that one (and may be aborted by it).
  ///
  /// @param token The completion token that will be used to produce a completion handler
  /// (a function object, use_awaitable, deferred, ...).
  ///
  /// @par Completion Signature
  /// @code void(boost::system::error_code) @endcode
  /// Success when idle; boost::asio::error::operation_aborted on cancel(), destruction,
  /// move assignment over the timer, a new async_wait() or per-operation cancellation;
  /// boost::asio::error::no_buffer_space when the wheel's wheel_options::max_pending is
  /// reached (at the start or at a re-arm).
  ///
  /// @par Per-Operation Cancellation
  /// This asynchronous operation supports cancellation for the following
  /// boost::asio::cancellation_type values:
  /// @li @c cancellation_type::terminal
  /// @li @c cancellation_type::partial
  /// @li @c cancellation_type::total
  ///
  /// It is honoured also when emitted after the period ended but before the handler ran.
  template <class WaitToken = boost::asio::default_completion_token_t<executor_type>>
  auto async_wait(WaitToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
    state();  // a moved-from timer throws here, not inside a deferred launch
    return boost::asio::async_initiate<WaitToken, void(boost::system::error_code)>(
        initiate_wait{state_}, token);
  }

  /// Aborts the pending wait (also one whose period has just ended but whose handler has
  /// not run yet); returns how many waits the underlying timer aborted (0 or 1). The
  /// handler completes with operation_aborted, later, from the context.
  std::size_t cancel() {
    if (!state_) return 0;
    state_->cancelled.store(true, std::memory_order_release);
    return state_->timer.cancel();
  }

 private:
  struct initiate_wait {
    std::shared_ptr<state_type> state;
    executor_type get_executor() const { return state->timer.get_executor(); }

    template <class Handler>
    void operator()(Handler&& handler) const {
      // async_wait() checked already; saying it again lets GCC see that no path stores
      // through a null state (it warned, with -Werror, under Boost 1.83's inlining).
      if (!state) throw std::logic_error("twheel::idle_timer: used after being moved from");
      state->touched.store(false, std::memory_order_relaxed);
      state->cancelled.store(false, std::memory_order_relaxed);
      state->timer.expires_after(state->period);
      state->timer.async_wait(detail::idle_wait_op<std::decay_t<Handler>, state_type>(
          state, std::forward<Handler>(handler)));
    }
  };

  static duration checked(duration period) {
    if (period <= duration::zero()) {
      throw std::invalid_argument("twheel::idle_timer: period must be positive, got " +
                                  std::to_string(period.count()) + " ticks of the clock");
    }
    return period;
  }

  state_type& state() const {
    if (!state_) throw std::logic_error("twheel::idle_timer: used after being moved from");
    return *state_;
  }

  void close() {
    if (!state_) return;
    state_->closed.store(true, std::memory_order_release);
    state_->timer.cancel();
  }

  std::shared_ptr<state_type> state_;
};

/// An idle timer whose handlers run, by default, on an any_io_executor.
using idle_timer = basic_idle_timer<>;

}  // namespace twheel

TWHEEL_FORWARD_ASSOCIATORS(twheel::detail::idle_wait_op)

#endif  // TWHEEL_IDLE_TIMER_HPP
