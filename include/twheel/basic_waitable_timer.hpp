// twheel/basic_waitable_timer.hpp: a drop-in for boost::asio::basic_waitable_timer whose
// waits live in the context's timing wheel instead of Asio's timer heap.
#ifndef TWHEEL_BASIC_WAITABLE_TIMER_HPP
#define TWHEEL_BASIC_WAITABLE_TIMER_HPP

#include <twheel/detail/executor_traits.hpp>
#include <twheel/detail/timer_executor.hpp>
#include <twheel/detail/timer_state.hpp>
#include <twheel/wheel_service.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/version.hpp>
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
/// deadlines are rounded up to the wheel's tick (8 us by default), so a wait completes up
/// to one tick (plus the wheel's slack, 0 by default) late, never early, and waits whose
/// deadlines fall in the same tick complete in the order they were started; only
/// std::chrono::steady_clock is accepted.
///
/// The waits live in the timing wheel of the executor's execution context (its
/// wheel_service, created by the first timer; configure() sets its options first).
///
/// @tparam Clock std::chrono::steady_clock (checked at compile time).
/// @tparam WaitTraits Accepted for compatibility with Asio; not used.
/// @tparam Executor The I/O executor type.
///
/// @par Thread Safety
/// @e Distinct @e objects: Safe.
/// @e Shared @e objects: Unsafe (as Asio's). The wheel shared by the timers of a context
/// is locked internally, so timers used from different threads need no common lock.
template <class Clock, class WaitTraits = boost::asio::wait_traits<Clock>,
          class Executor = boost::asio::any_io_executor>
class basic_waitable_timer {
  static_assert(std::is_same_v<Clock, std::chrono::steady_clock>,
                "twheel timers follow std::chrono::steady_clock only: the wheel keeps "
                "steady time and cannot follow a clock that jumps");

 public:
  /// The type of the executor associated with the object.
  using executor_type = Executor;

  /// Rebinds the timer type to another executor.
  template <class Executor1>
  struct rebind_executor {
    /// The timer type when rebound to the specified executor.
    using other = basic_waitable_timer<Clock, WaitTraits, Executor1>;
  };

  /// The clock type.
  using clock_type = Clock;
  /// The duration type of the clock.
  using duration = typename clock_type::duration;
  /// The time point type of the clock.
  using time_point = typename clock_type::time_point;
  /// The wait traits type (not used by the wheel).
  using traits_type = WaitTraits;

  /// Constructs a timer without setting an expiry time. expiry() is then the clock's
  /// epoch: a wait started before expires_at() or expires_after() completes at once.
  ///
  /// @param ex The I/O executor that the timer will use, by default, to dispatch handlers
  /// for any asynchronous operations performed on the timer. The wheel of its execution
  /// context is created if it does not exist yet.
  explicit basic_waitable_timer(const executor_type& ex)
      : service_(&service_for(ex)),
        executor_(detail::attach_timer_executor(*service_, ex)) {
    state_.boxable = executor_.is_wheels(*service_);
  }

  /// Constructs a timer without setting an expiry time.
  ///
  /// @param context An execution context which provides the I/O executor that the timer
  /// will use, by default, to dispatch handlers for any asynchronous operations performed
  /// on the timer.
  template <class ExecutionContext,
            std::enable_if_t<std::is_convertible_v<ExecutionContext&,
                                                   boost::asio::execution_context&>,
                             int> = 0>
  explicit basic_waitable_timer(ExecutionContext& context)
      : basic_waitable_timer(executor_type(context.get_executor())) {}

  /// Constructs a timer and sets its expiry time as an absolute time.
  ///
  /// @param ex The I/O executor that the timer will use, by default, to dispatch handlers
  /// for any asynchronous operations performed on the timer.
  /// @param expiry_time The expiry time, as an absolute time.
  basic_waitable_timer(const executor_type& ex, const time_point& expiry_time)
      : basic_waitable_timer(ex) {
    expiry_ = expiry_time;
  }

  /// Constructs a timer and sets its expiry time as an absolute time.
  ///
  /// @param context An execution context which provides the I/O executor that the timer
  /// will use, by default, to dispatch handlers for any asynchronous operations performed
  /// on the timer.
  /// @param expiry_time The expiry time, as an absolute time.
  template <class ExecutionContext,
            std::enable_if_t<std::is_convertible_v<ExecutionContext&,
                                                   boost::asio::execution_context&>,
                             int> = 0>
  basic_waitable_timer(ExecutionContext& context, const time_point& expiry_time)
      : basic_waitable_timer(executor_type(context.get_executor()), expiry_time) {}

  /// Constructs a timer and sets its expiry time relative to now.
  ///
  /// @param ex The I/O executor that the timer will use, by default, to dispatch handlers
  /// for any asynchronous operations performed on the timer.
  /// @param expiry_time The expiry time, relative to now (saturating at the clock's
  /// limits instead of overflowing).
  basic_waitable_timer(const executor_type& ex, const duration& expiry_time)
      : basic_waitable_timer(ex) {
    expiry_ = after_now(expiry_time);
  }

  /// Constructs a timer and sets its expiry time relative to now.
  ///
  /// @param context An execution context which provides the I/O executor that the timer
  /// will use, by default, to dispatch handlers for any asynchronous operations performed
  /// on the timer.
  /// @param expiry_time The expiry time, relative to now (saturating at the clock's
  /// limits instead of overflowing).
  template <class ExecutionContext,
            std::enable_if_t<std::is_convertible_v<ExecutionContext&,
                                                   boost::asio::execution_context&>,
                             int> = 0>
  basic_waitable_timer(ExecutionContext& context, const duration& expiry_time)
      : basic_waitable_timer(executor_type(context.get_executor()), expiry_time) {}

  /// Move-constructs a timer from another. Its pending waits move along, with their
  /// per-operation cancellation.
  ///
  /// @param other The timer to move from.
  ///
  /// @note Following the move, the moved-from object is in the same state as if
  /// constructed using the basic_waitable_timer(const executor_type&) constructor.
  basic_waitable_timer(basic_waitable_timer&& other)
      : service_(other.service_), expiry_(other.expiry_), executor_(other.executor_) {
    service_->move(state_, other.state_);
    state_.might_have_waits = std::exchange(other.state_.might_have_waits, false);
    state_.boxable = other.state_.boxable;
    state_.never_refused = other.state_.never_refused;
    other.expiry_ = time_point();
  }

  /// Move-assigns a timer from another. The pending waits of this timer are cancelled
  /// first (operation_aborted, as Asio documents); those of `other` move to this one.
  ///
  /// @param other The timer to move from.
  ///
  /// @note Following the move, the moved-from object is in the same state as if
  /// constructed using the basic_waitable_timer(const executor_type&) constructor.
  basic_waitable_timer& operator=(basic_waitable_timer&& other) {
    if (this != &other) {
      service_->destroy(state_);
      other.service_->move(state_, other.state_);
      state_.might_have_waits = std::exchange(other.state_.might_have_waits, false);
      state_.boxable = other.state_.boxable;
      state_.never_refused = other.state_.never_refused;
      service_ = other.service_;
      executor_ = other.executor_;
      expiry_ = other.expiry_;
      other.expiry_ = time_point();
    }
    return *this;
  }

  template <class C, class W, class E>
  friend class basic_waitable_timer;
  friend struct detail::timer_access;

  /// Move-constructs a timer from one with another executor type; as the move
  /// constructor.
  ///
  /// @param other The timer to move from; its executor must convert to Executor.
  template <class Executor1,
            std::enable_if_t<std::is_convertible_v<Executor1, Executor>, int> = 0>
  basic_waitable_timer(basic_waitable_timer<Clock, WaitTraits, Executor1>&& other)
      : service_(other.service_),
        expiry_(other.expiry_),
        executor_(
            detail::attach_timer_executor(*service_, executor_type(other.get_executor()))) {
    service_->move(state_, other.state_);
    state_.might_have_waits = std::exchange(other.state_.might_have_waits, false);
    state_.never_refused = other.state_.never_refused;
    // The executor changed type: a handler boxed under the old one still runs where it did.
    state_.boxable = executor_.is_wheels(*service_);
    other.expiry_ = time_point();
  }

  /// Move-assigns a timer from one with another executor type; as the move assignment.
  ///
  /// @param other The timer to move from; its executor must convert to Executor.
  template <class Executor1>
  std::enable_if_t<std::is_convertible_v<Executor1, Executor>, basic_waitable_timer&>
  operator=(basic_waitable_timer<Clock, WaitTraits, Executor1>&& other) {
    basic_waitable_timer tmp(std::move(other));
    return *this = std::move(tmp);
  }

  /// Destroys the timer. Its pending waits are cancelled: their handlers complete with
  /// boost::asio::error::operation_aborted, later, from the context (never from inside
  /// the destructor).
  ~basic_waitable_timer() { service_->destroy(state_); }

  /// Not copyable.
  basic_waitable_timer(const basic_waitable_timer&) = delete;
  basic_waitable_timer& operator=(const basic_waitable_timer&) = delete;

  /// Gets the executor associated with the object.
  ///
  /// @note The reference is valid until the timer is destroyed or assigned to (Asio's
  /// stays valid across a move assignment, and then shows the new executor): a timer on
  /// its wheel's executor returns the wheel's, and one on another executor returns its
  /// kept copy, which an assignment replaces.
  const executor_type& get_executor() noexcept {
    return executor_.get(service_->executor());
  }

  /// Cancels any asynchronous operations that are waiting on the timer.
  ///
  /// Forces the completion of every pending wait: its handler completes with
  /// boost::asio::error::operation_aborted, later, from the context (never from inside
  /// this call). The expiry time is unchanged. Takes no lock if async_wait() was not
  /// called since construction or the last cancel(), expires_at() or expires_after().
  ///
  /// @returns The number of waits that were cancelled.
  ///
  /// @note If the timer has already expired when cancel() is called, the handlers of
  /// its waits have already been invoked or are queued for invocation: they can no longer
  /// be cancelled and complete with success.
  std::size_t cancel() {
    if (!state_.might_have_waits) return 0;
    state_.might_have_waits = false;
    return service_->cancel(state_);
  }

  /// Cancels one asynchronous operation that is waiting on the timer: the oldest (waits
  /// are cancelled in FIFO order). Its handler completes with
  /// boost::asio::error::operation_aborted, later, from the context (never from inside
  /// this call). The expiry time is unchanged.
  ///
  /// @returns The number of waits that were cancelled: 0 or 1.
  ///
  /// @note If the timer has already expired when cancel_one() is called, the handlers of
  /// its waits have already been invoked or are queued for invocation: they can no longer
  /// be cancelled and complete with success.
  std::size_t cancel_one() {
    return state_.might_have_waits ? service_->cancel_one(state_) : 0;
  }

  /// Gets the timer's expiry time as an absolute time, as set (not rounded to the tick).
  time_point expiry() const { return expiry_; }

  /// Sets the timer's expiry time as an absolute time.
  ///
  /// Cancels any pending waits: their handlers complete with
  /// boost::asio::error::operation_aborted, later, from the context (never from inside
  /// this call). Re-arming is cheap: it takes no lock if async_wait() was not called
  /// since construction or the last cancel(), expires_at() or expires_after(), and a
  /// later expiry is only stored (the timer is re-filed when its old slot comes due).
  ///
  /// @param expiry_time The expiry time to be used for the timer.
  ///
  /// @returns The number of waits that were cancelled.
  ///
  /// @note If the timer has already expired when expires_at() is called, the handlers of
  /// its waits have already been invoked or are queued for invocation: they can no longer
  /// be cancelled and complete with success.
  std::size_t expires_at(const time_point& expiry_time) {
    expiry_ = expiry_time;
    if (!state_.might_have_waits) return 0;  // the next async_wait files the new expiry
    state_.might_have_waits = false;
    // Aborting the waits is all: the entry keeps its place, waitless, and the next
    // async_wait files the new expiry (a later one only stored, an earlier one re-filed).
    return service_->cancel(state_);
  }

  /// Sets the timer's expiry time relative to now (saturating at the clock's limits
  /// instead of overflowing). As expires_at() otherwise.
  ///
  /// @param expiry_time The expiry time to be used for the timer, relative to now.
  ///
  /// @returns The number of waits that were cancelled.
  ///
  /// @note If the timer has already expired when expires_after() is called, the handlers of
  /// its waits have already been invoked or are queued for invocation: they can no longer
  /// be cancelled and complete with success.
  std::size_t expires_after(const duration& expiry_time) {
    // Start the timer's cache misses before the clock read: the read fences later loads
    // (the vDSO orders rdtsc with lfence) but not prefetches, so at a million timers the
    // miss overlaps the read instead of following it.
    prefetch_hot_fields();
    return expires_at(after_now(expiry_time));
  }

  /// Performs a blocking wait on the timer: blocks the calling thread until the clock
  /// reaches expiry(). Does not use the wheel (as Asio's does not use its timer queue),
  /// so it is not rounded to the tick and does not affect pending asynchronous waits.
  ///
  /// @throws boost::system::system_error Declared as in Asio; this wait cannot fail.
  void wait() {
    boost::system::error_code ec;
    wait(ec);
    if (ec) throw boost::system::system_error(ec, "wait");
  }

  /// Performs a blocking wait on the timer, as wait().
  ///
  /// @param ec Always cleared: this wait cannot fail.
  void wait(boost::system::error_code& ec) {
    ec.clear();
    // expiry_ - now cannot overflow while now < expiry_ (WaitTraits::to_wait_duration
    // can: it adds duration::max() to now).
    for (time_point now = clock_type::now(); now < expiry_; now = clock_type::now()) {
      std::this_thread::sleep_for(expiry_ - now);
    }
  }

  /// Starts an asynchronous wait on the timer.
  ///
  /// This function is an initiating function for an asynchronous operation, and always
  /// returns immediately. For each call the completion handler is called exactly once,
  /// with:
  /// @li success, when the expiry time is reached: never earlier, at most one wheel tick
  ///     plus scheduling delay later;
  /// @li boost::asio::error::operation_aborted, when the wait is cancelled by cancel(),
  ///     cancel_one(), expires_at(), expires_after(), destruction, move assignment over
  ///     the timer or per-operation cancellation;
  /// @li boost::asio::error::no_buffer_space, without waiting, when the wheel already
  ///     holds wheel_options::max_pending waits.
  ///
  /// The handler is never invoked from inside this call. It runs on its associated
  /// executor (the timer's by default): called directly by the wheel when that is the
  /// executor the wheel runs on, through boost::asio::dispatch() otherwise. Waits of one
  /// timer complete in the order they were started. A timer's oldest wait keeps a small
  /// handler (16 bytes, no allocator or cancellation slot of its own) inside the timer
  /// when the handler runs where the wheel does (no executor of its own, or bound to the
  /// context's): nothing is allocated. Other waits are allocated once, through the
  /// handler's associated allocator (Asio's recycling allocator by default).
  /// If the context shuts down first, the handler is destroyed without being invoked.
  ///
  /// @param token The completion token that will be used to produce a completion handler
  /// (a function object, use_awaitable, use_future, deferred, detached, ...). The function
  /// signature of the completion handler must be:
  /// @code void handler(const boost::system::error_code& error); @endcode
  ///
  /// @par Completion Signature
  /// @code void(boost::system::error_code) @endcode
  ///
  /// @par Per-Operation Cancellation
  /// This asynchronous operation supports cancellation for the following
  /// boost::asio::cancellation_type values:
  /// @li @c cancellation_type::terminal
  /// @li @c cancellation_type::partial
  /// @li @c cancellation_type::total
  template <class WaitToken = boost::asio::default_completion_token_t<executor_type>>
  auto async_wait(WaitToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
    return boost::asio::async_initiate<WaitToken, void(boost::system::error_code)>(
        initiate_async_wait(this), token);
  }

  // ---- Deprecated members, as the installed Asio has them --------------------------------
  // boost::asio::basic_waitable_timer has these from Boost 1.81 to 1.86 (Asio 1.26 to 1.32)
  // unless BOOST_ASIO_NO_DEPRECATED is defined; Asio 1.33 (Boost 1.87) removed them. twheel
  // offers exactly the same set under the same conditions, so code written against the
  // installed Asio compiles unchanged. Implemented only through the public members above.
#if !defined(BOOST_ASIO_NO_DEPRECATED) && BOOST_ASIO_VERSION < 103300
  /// (Deprecated: Use non-error_code overload.) Cancels every pending wait; as cancel().
  ///
  /// @param ec Always cleared: cancelling cannot fail.
  ///
  /// @returns The number of waits that were cancelled.
  std::size_t cancel(boost::system::error_code& ec) {
    ec.clear();
    return cancel();
  }

  /// (Deprecated: Use non-error_code overload.) Cancels the oldest pending wait; as
  /// cancel_one().
  ///
  /// @param ec Always cleared: cancelling cannot fail.
  ///
  /// @returns The number of waits that were cancelled: 0 or 1.
  std::size_t cancel_one(boost::system::error_code& ec) {
    ec.clear();
    return cancel_one();
  }

  /// (Deprecated: Use expiry().) Gets the timer's expiry time as an absolute time.
  time_point expires_at() const { return expiry(); }

  /// (Deprecated: Use non-error_code overload.) Sets the expiry time as an absolute time;
  /// as expires_at(const time_point&).
  ///
  /// @param expiry_time The expiry time to be used for the timer.
  /// @param ec Always cleared: setting the expiry cannot fail.
  ///
  /// @returns The number of waits that were cancelled.
  std::size_t expires_at(const time_point& expiry_time, boost::system::error_code& ec) {
    ec.clear();
    return expires_at(expiry_time);
  }

  /// (Deprecated: Use expiry().) Gets the timer's expiry time relative to now: expiry()
  /// minus the clock's now(), saturating at the duration's limits as Asio's does.
  duration expires_from_now() const {
    const time_point t1 = expiry();
    const time_point t2 = clock_type::now();
    // Asio's chrono_time_traits::subtract: t1 - t2 without overflow.
    const time_point epoch{};
    if (t1 >= epoch) {
      if (t2 >= epoch) return t1 - t2;
      if (t2 == (time_point::min)() || (time_point::max)() - t1 < epoch - t2) {
        return (duration::max)();
      }
      return t1 - t2;
    }
    if (t2 < epoch) return t1 - t2;
    if (t1 == (time_point::min)() || (time_point::max)() - t2 < epoch - t1) {
      return (duration::min)();
    }
    return -(t2 - t1);
  }

  /// (Deprecated: Use expires_after().) Sets the expiry time relative to now; as
  /// expires_after().
  ///
  /// @param expiry_time The expiry time to be used for the timer, relative to now.
  ///
  /// @returns The number of waits that were cancelled.
  std::size_t expires_from_now(const duration& expiry_time) {
    return expires_after(expiry_time);
  }

  /// (Deprecated: Use expires_after().) Sets the expiry time relative to now; as
  /// expires_after().
  ///
  /// @param expiry_time The expiry time to be used for the timer, relative to now.
  /// @param ec Always cleared: setting the expiry cannot fail.
  ///
  /// @returns The number of waits that were cancelled.
  std::size_t expires_from_now(const duration& expiry_time, boost::system::error_code& ec) {
    ec.clear();
    return expires_after(expiry_time);
  }
#endif  // !defined(BOOST_ASIO_NO_DEPRECATED) && BOOST_ASIO_VERSION < 103300
  // ---- End of the deprecated members ------------------------------------------------------

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
      self_->service_->async_wait(self_->state_, self_->expiry_, h, self_->get_executor());
    }

   private:
    basic_waitable_timer* self_;
  };

  template <class Ex>
  static wheel_service& service_for(const Ex& ex) {
    return wheel_service::of(detail::context_of(ex));
  }

  // Every line of service_ .. expiry_ (the bytes a re-arm touches, 80 of them, so up
  // to three lines): one address in each. Prefetching state_ and expiry_ alone missed the
  // middle line of one timer in four in a vector of timers.
  void prefetch_hot_fields() const noexcept {
#if defined(__GNUC__)
    const char* first = reinterpret_cast<const char*>(&service_);
    const char* last = reinterpret_cast<const char*>(&expiry_ + 1) - 1;
    __builtin_prefetch(first, 1);
    __builtin_prefetch(first + 64, 1);
    __builtin_prefetch(last, 1);
#endif
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
  detail::timer_executor<executor_type> executor_;
};

namespace detail {

// What twheel's own adapters set on the timers they own (beast::basic_stream's timeouts).
struct timer_access {
  template <class Timer>
  static timer_state& state(Timer& timer) noexcept {
    return timer.state_;
  }
  // expires_at(expiry) then async_wait(handler), except that the waits the timer has are
  // aborted only once the new one is filed: if that throws, they and the expiry stay as
  // they were (periodic_timer's re-wait).
  template <class Timer, class Handler>
  static void replace_wait(Timer& timer, const typename Timer::time_point& expiry,
                           Handler&& handler) {
    std::decay_t<Handler> h(std::forward<Handler>(handler));
    // Written before the filing: once filed, the wait may complete on another thread,
    // whose handler may re-arm the timer.
    const typename Timer::time_point previous = std::exchange(timer.expiry_, expiry);
    const bool had_waits = std::exchange(timer.state_.might_have_waits, true);
    try {
      timer.service_->async_wait(timer.state_, expiry, h, timer.get_executor(), had_waits);
    } catch (...) {
      timer.expiry_ = previous;
      timer.state_.might_have_waits = had_waits;
      throw;
    }
  }
  // Moves the timer's pending waits to `expiry` (periodic_timer's parked wait). If that
  // throws, they and the expiry stay as they were.
  template <class Timer>
  static void refile(Timer& timer, const typename Timer::time_point& expiry) {
    const typename Timer::time_point previous = std::exchange(timer.expiry_, expiry);
    try {
      timer.service_->refile(timer.state_, expiry);
    } catch (...) {
      timer.expiry_ = previous;
      throw;
    }
  }
};

}  // namespace detail

}  // namespace twheel

#endif  // TWHEEL_BASIC_WAITABLE_TIMER_HPP
