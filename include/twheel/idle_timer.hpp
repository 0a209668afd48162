// twheel/idle_timer.hpp: idle-connection reaping where recording activity is one store.
#ifndef TWHEEL_IDLE_TIMER_HPP
#define TWHEEL_IDLE_TIMER_HPP

#include <twheel/detail/forwarding_handler.hpp>
#include <twheel/detail/executor_traits.hpp>
#include <twheel/detail/timer_executor.hpp>
#include <twheel/detail/timer_state.hpp>
#include <twheel/detail/wait_ops.hpp>
#include <twheel/wheel_service.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/recycling_allocator.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace twheel {

namespace detail {

// The one thing an idle wait shares with its timer once it may have been settled:
// whether cancel(), destruction or move assignment came before its handler ran (the
// driver settles a wait under the wheel's lock, but its handler runs later). Two owners:
// the timer (until its next wait, destruction or move) and the wait. The timer's share
// outlives the handler, so the flag is not the handler's memory: Asio lets a handler end
// its allocator's memory resource once the operation has called it. It comes from Asio's
// recycling allocator instead, as a handler's operation does when it has no allocator.
struct idle_wait_flag {
  using allocator_type = boost::asio::recycling_allocator<idle_wait_flag>;

  std::atomic<bool> aborted{false};
  std::atomic<bool> cancelled{false};  // the caller's slot emitted (idle_slot_listener)
  std::atomic<unsigned char> owners{2};

  // Both shares; throws std::bad_alloc.
  static idle_wait_flag* make() {
    allocator_type alloc;
    return ::new (static_cast<void*>(alloc.allocate(1))) idle_wait_flag;
  }

  // A third owner: the wait's listener in the caller's slot.
  void acquire() noexcept { owners.fetch_add(1, std::memory_order_relaxed); }
  void release() noexcept {
    if (owners.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      this->~idle_wait_flag();
      allocator_type().deallocate(this, 1);
    }
  }
};

// One owner's share of a flag, let go of by its destructor: an operation whose
// construction or move throws part-way lets go of the share it took.
class idle_wait_share {
 public:
  explicit idle_wait_share(idle_wait_flag* flag) noexcept : flag_(flag) {}
  idle_wait_share(idle_wait_share&& other) noexcept : flag_(std::exchange(other.flag_, nullptr)) {}
  idle_wait_share& operator=(idle_wait_share&&) = delete;
  ~idle_wait_share() { reset(); }

  idle_wait_flag* get() const noexcept { return flag_; }
  // The share goes to whoever keeps the pointer.
  idle_wait_flag* hand_over() noexcept { return std::exchange(flag_, nullptr); }
  void reset() noexcept {
    if (flag_) std::exchange(flag_, nullptr)->release();
  }

 private:
  idle_wait_flag* flag_;
};

// What an idle wait puts in the caller's cancellation slot: an emission marks the wait's
// flag (seen by the handler when the wait settled first) and goes on to the wheel through
// a signal of its own (aborting the wait while it is filed). It lives in the caller's
// slot and goes with it: when the caller's signal is destroyed or the slot cleared or
// reused, even with the wait pending. The wait reads only the flag, of which this holds
// a share; an Asio cancellation_state here was read by the handler after the caller's
// signal had freed it (a review found it).
class idle_slot_listener {
 public:
  explicit idle_slot_listener(idle_wait_flag* flag) noexcept : flag_(flag) { flag_->acquire(); }
  idle_slot_listener(const idle_slot_listener&) = delete;
  idle_slot_listener& operator=(const idle_slot_listener&) = delete;
  ~idle_slot_listener() { flag_->release(); }

  void operator()(boost::asio::cancellation_type_t type) {
    type &= boost::asio::cancellation_type::terminal | boost::asio::cancellation_type::partial |
            boost::asio::cancellation_type::total;
    if (type == boost::asio::cancellation_type::none) return;
    flag_->cancelled.store(true, std::memory_order_release);
    to_wheel_.emit(type);
  }
  boost::asio::cancellation_slot slot() noexcept { return to_wheel_.slot(); }

 private:
  idle_wait_flag* flag_;
  boost::asio::cancellation_signal to_wheel_;
};

// The handler given to the wheel: the caller's, completed with operation_aborted when the
// timer was cancelled, or the caller's slot emitted, after the wait settled. (Two
// parameters, as TWHEEL_FORWARD_ASSOCIATORS wants them.)
template <class Handler, class Flag = idle_wait_flag>
class idle_wait_op {
  static_assert(std::is_same_v<Flag, idle_wait_flag>);

 public:
  using cancellation_slot_type = boost::asio::cancellation_slot;

  // Takes one share of `flag` (the first member, so that a throw from the handler's
  // construction or the listener's memory lets go of it), and the listener another.
  template <class H>
  idle_wait_op(Flag* flag, H&& handler) : flag_(flag), handler_(std::forward<H>(handler)) {
    auto outer = boost::asio::get_associated_cancellation_slot(handler_);
    if (outer.is_connected()) to_wheel_ = outer.template emplace<idle_slot_listener>(flag).slot();
  }

  idle_wait_op(idle_wait_op&& other) noexcept(std::is_nothrow_move_constructible_v<Handler>)
      : flag_(std::move(other.flag_)),
        handler_(std::move(other.handler_)),
        to_wheel_(other.to_wheel_) {}
  idle_wait_op& operator=(idle_wait_op&&) = delete;

  cancellation_slot_type get_cancellation_slot() const noexcept { return to_wheel_; }

  void operator()(boost::system::error_code ec) {
    const idle_wait_flag& flag = *flag_.get();
    if (!ec && (flag.aborted.load(std::memory_order_acquire) ||
                flag.cancelled.load(std::memory_order_acquire))) {
      ec = boost::asio::error::operation_aborted;
    }
    flag_.reset();
    std::move(handler_)(ec);
  }

 private:
  idle_wait_share flag_;

 public:
  Handler handler_;

 private:
  boost::asio::cancellation_slot to_wheel_;  // the listener's signal's, if there is one
};

}  // namespace detail

/// Completes a wait once a connection has been idle for a period. touch() records
/// activity: one store of a stamp into the timer object itself (no lock, no allocation,
/// no wheel operation), from any thread.
///
/// The timer is itself the wheel entry. Its entry stays filed at the deadline it had; when
/// that comes due, the wheel turns the last touch's stamp into a time and either
/// completes the wait or re-files the entry at that time + period.
///
/// @par The stamp
/// While idle timers are touched at least once a millisecond, the stamp is the current
/// generation, read from one word of the process, shared by every wheel (no clock read:
/// at a million connections the ordered clock read was most of touch()'s cost, and no
/// read of the timer object before the store: the object is usually cold). The wheels
/// with idle timers start a generation every millisecond at most (whichever passes
/// first) and read a stamp as the end of its generation, an upper bound of the touch's
/// time. After a millisecond with no touch, the stamp is a steady_clock reading taken
/// inside touch() until that exact generation ends (64 ms after it began) and a wheel's
/// pass sees touches again. Either way it is an upper bound of the time touch() was
/// called.
///
/// @par The guarantee
/// A wait never completes before `period` has passed since the later of its start and its
/// last touch(). It completes at most one wheel tick (wheel_options::tick), plus the
/// stamp's resolution, plus scheduling delay after that. The resolution is 0 for a clock
/// reading; for a generation it is its length, 1 ms while a driver keeps up, and for a
/// touch more than 2,048 generations old when its entry comes due (a period longer than
/// about 2 s), less than the larger of 33.6 ms and 1/64 of its age (so under 33.6 ms
/// for periods up to a minute, under 1.1 s up to half an hour). With a slack
/// (wheel_options::slack), the wheel's wake-ups, the one that ends a generation among
/// them, may each come up to the slack later. A coarse
/// clock would be cheaper than the exact one, but it lags the true time by up to its
/// resolution plus the delay of the kernel's tick (bench/bench_clocks measured at least
/// 4.9 ms for a 4 ms resolution on a VM), so it is no upper bound and would let a wait
/// complete early.
///
/// @par What it costs the wheel
/// While touches are stamped with generations, the driver of every wheel that has had an
/// idle timer wakes every millisecond (while any wait of its context is pending);
/// otherwise every 64 ms, to notice touches. The mode is the process's: touches on one
/// context keep the others' wheels waking every millisecond too. Wheels that never had
/// an idle timer do not wake for it.
///
/// Two caveats. The wheel decides when the entry comes due, and the handler runs later,
/// behind what is already queued: a touch() after the decision does not count, however
/// soon after it comes (the wait completes with success, as a steady_timer's handler does
/// after an expires_after() that came once it had expired); touches before it always
/// count. When several threads touch one timer at the same moment, the last store wins,
/// and it may carry the slightly older clock reading (older by as long as that thread
/// took from its clock read to its store, longer if it was preempted in between). The
/// same holds for a touch() on another thread overlapping async_wait(): its older stamp
/// may replace the wait's start, which changes nothing, as the wait is filed a period
/// after its start and never completes before that.
///
/// @par Thread Safety
/// touch() is safe from any thread, concurrently with every member but the destructor
/// and the move operations. The other members: distinct objects safe, shared objects
/// unsafe, as for a timer.
template <class Executor = boost::asio::any_io_executor>
class basic_idle_timer {
 public:
  /// The type of the executor associated with the object.
  using executor_type = Executor;

  /// Rebinds the timer type to another executor (for `as_default_on_t`, as Asio's I/O
  /// objects do).
  template <class Executor1>
  struct rebind_executor {
    /// The timer type when rebound to the specified executor.
    using other = basic_idle_timer<Executor1>;
  };

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
      : service_(&wheel_service::of(detail::context_of(ex))),
        executor_(detail::attach_timer_executor(*service_, ex)) {
    state_.period = checked(period);
    service_->use_touch_epoch();
    state_.boxable = executor_.is_wheels(*service_);
  }

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
  /// may be destroyed or assigned to; its touch() affects no wait (it counts as activity
  /// for the process's stamping mode only), its cancel() returns 0 and its other members
  /// throw std::logic_error.
  basic_idle_timer(basic_idle_timer&& other) noexcept
      : service_(std::exchange(other.service_, nullptr)),
        executor_(other.executor_),
        flag_(std::exchange(other.flag_, nullptr)) {
    take(other);
  }

  /// Aborts this timer's pending wait (operation_aborted) and takes over `other`, with its
  /// pending wait. The moved-from object is as after the move constructor.
  basic_idle_timer& operator=(basic_idle_timer&& other) noexcept {
    if (this != &other) {
      close();
      service_ = std::exchange(other.service_, nullptr);
      executor_ = other.executor_;
      flag_ = std::exchange(other.flag_, nullptr);
      take(other);
    }
    return *this;
  }

  /// Move-constructs an idle timer from one with another executor type (what
  /// `as_default_on(std::move(timer))` calls); as the move constructor.
  ///
  /// @param other The timer to move from; its executor must convert to Executor.
  ///
  /// @throws std::logic_error if `other` was moved from; std::bad_alloc if the converted
  /// executor cannot be kept. Either way `other` is unchanged.
  template <class Executor1,
            std::enable_if_t<std::is_convertible_v<Executor1, Executor>, int> = 0>
  basic_idle_timer(basic_idle_timer<Executor1>&& other)
      : service_(&other.service()),
        executor_(detail::attach_timer_executor(*service_, executor_type(other.get_executor()))),
        flag_(std::exchange(other.flag_, nullptr)) {
    other.service_ = nullptr;
    take(other);
    // The executor changed type: a handler boxed under the old one still runs where it did.
    state_.boxable = executor_.is_wheels(*service_);
  }

  /// Move-assigns an idle timer from one with another executor type; as the move
  /// assignment.
  ///
  /// @param other The timer to move from; its executor must convert to Executor.
  ///
  /// @throws std::logic_error if `other` was moved from; std::bad_alloc if the converted
  /// executor cannot be kept. Either way both timers are unchanged.
  template <class Executor1>
  std::enable_if_t<std::is_convertible_v<Executor1, Executor>, basic_idle_timer&> operator=(
      basic_idle_timer<Executor1>&& other) {
    basic_idle_timer converted(std::move(other));
    return *this = std::move(converted);
  }

  /// Aborts a pending wait (operation_aborted, later, from the context), also one whose
  /// period has just ended but whose handler has not run yet.
  ~basic_idle_timer() { close(); }

  basic_idle_timer(const basic_idle_timer&) = delete;
  basic_idle_timer& operator=(const basic_idle_timer&) = delete;

  /// Gets the executor associated with the object.
  executor_type get_executor() const {
    check();
    return executor_.get(service_->executor());
  }
  /// The idle period.
  duration period() const {
    check();
    return state_.period;
  }

  /// Records activity. O(1), lock-free, allocates nothing: a relaxed load of the
  /// process's generation (or, while touches are rare, a read of steady_clock) and one
  /// relaxed store into this object, its only access to it; the first touch of each
  /// generation in the process also marks the generation touched (an atomic OR on that
  /// word). Safe from any thread. A touch() counts for the wait pending when it happens;
  /// async_wait() forgets earlier ones.
  void touch() noexcept {
    // No read of this object first: the store's cache miss does not hold up the caller.
    // A moved-from timer's stamp is never read (a move into it overwrites it).
    state_.touched.store(detail::process_touch_epoch().stamp(), std::memory_order_relaxed);
  }

  /// Waits until the connection has been idle for a period, measured from this call or
  /// the last touch().
  ///
  /// This function is an initiating function for an asynchronous operation, and always
  /// returns immediately; the handler is never invoked from inside it. The wait completes
  /// no earlier than `period` after this call and after the last touch(), and at most one
  /// wheel tick (wheel_options::tick) plus the touch stamp's resolution (see the class)
  /// plus scheduling delay after the later of the two.
  ///
  /// One wait at a time: a new wait aborts the pending one. Start it once the previous
  /// one has completed, though: a wait started after the previous one's period ended but
  /// before its handler ran does not abort that one.
  ///
  /// @param token The completion token that will be used to produce a completion handler
  /// (a function object, use_awaitable, deferred, ...).
  ///
  /// @par Completion Signature
  /// @code void(boost::system::error_code) @endcode
  /// Success when idle; boost::asio::error::operation_aborted on cancel(), destruction,
  /// move assignment over the timer, a new async_wait() or per-operation cancellation;
  /// boost::asio::error::no_buffer_space when the wheel's wheel_options::max_pending is
  /// reached.
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
    check();  // a moved-from timer throws here, not inside a deferred launch
    return boost::asio::async_initiate<WaitToken, void(boost::system::error_code)>(
        initiate_wait{this}, token);
  }

  /// Aborts the pending wait (also one whose period has just ended but whose handler has
  /// not run yet); returns how many waits the wheel still held (0 or 1). The handler
  /// completes with operation_aborted, later, from the context.
  std::size_t cancel() {
    if (!service_) return 0;
    if (flag_) flag_->aborted.store(true, std::memory_order_release);
    return service_->cancel(state_);
  }

 private:
  friend struct detail::timer_access;  // the tests read the touch stamp
  template <class E>
  friend class basic_idle_timer;  // the converting moves

  struct initiate_wait {
    using executor_type = basic_idle_timer::executor_type;  // for Asio's adapters
    basic_idle_timer* self;
    // A moved-from timer throws std::logic_error here, as its async_wait() does.
    executor_type get_executor() const { return self->get_executor(); }

    template <class Handler>
    void operator()(Handler&& handler) const {
      self->start(std::forward<Handler>(handler));
    }
  };

  template <class Handler>
  void start(Handler&& handler) {
    check();
    using op_type = detail::idle_wait_op<std::decay_t<Handler>>;
    // The new wait's memory first: if any of it cannot be had, the pending wait stays as
    // it was (the wheel aborts it only once the new wait's operation is made).
    detail::idle_wait_share ours(detail::idle_wait_flag::make());  // the timer's share
    op_type op(ours.get(), std::forward<Handler>(handler));        // and the wait's
    const clock_type::time_point now = clock_type::now();
    const clock_type::time_point deadline = state_.period_after(now);
    // The start counts as a touch; earlier touches do not. Written before the entry is
    // filed, so the driver (under the lock) sees it. If the wait is refused (it throws),
    // the pending wait gets its stamp back, unless a touch() came meanwhile.
    const std::int64_t untouched = state_.touched.load(std::memory_order_relaxed);
    std::int64_t started = detail::touch_epoch::exact_stamp(now);
    state_.touched.store(started, std::memory_order_relaxed);
    // Ours before the wait is filed: once it is, it may complete on another thread, whose
    // handler may start the next wait here, and nothing of *this may be written after.
    detail::idle_wait_flag* previous = std::exchange(flag_, ours.get());
    try {
      // The previous wait is aborted if still in the wheel, left to complete if settled.
      service_->replace_waits(state_, deadline, op, executor_.get(service_->executor()));
    } catch (...) {
      flag_ = previous;
      state_.touched.compare_exchange_strong(started, untouched, std::memory_order_relaxed);
      throw;  // `ours` lets go of the timer's share, the operation of its own
    }
    ours.hand_over();
    if (previous) previous->release();
  }

  static duration checked(duration period) {
    if (period <= duration::zero()) {
      throw std::invalid_argument("twheel::idle_timer: period must be positive, got " +
                                  std::to_string(period.count()) + " ticks of the clock");
    }
    return period;
  }

  void check() const {
    if (!service_) throw std::logic_error("twheel::idle_timer: used after being moved from");
  }
  wheel_service& service() const {
    check();
    return *service_;
  }

  // The entry, its waits and its stamp move from `other` (its service_ already taken).
  template <class Executor1>
  void take(basic_idle_timer<Executor1>& other) noexcept {
    state_.period = other.state_.period;
    state_.touched.store(other.state_.touched.load(std::memory_order_relaxed),
                         std::memory_order_relaxed);
    state_.boxable = other.state_.boxable;
    if (service_) service_->move(state_, other.state_);
  }

  void close() noexcept {
    if (!service_) return;
    if (flag_) {
      flag_->aborted.store(true, std::memory_order_release);
      std::exchange(flag_, nullptr)->release();
    }
    service_->destroy(state_);
  }

  wheel_service* service_;
  detail::timer_executor<executor_type> executor_;
  detail::idle_wait_flag* flag_ = nullptr;  // the last wait's, until it is replaced
  detail::idle_entry state_;
};

/// An idle timer whose handlers run, by default, on an any_io_executor.
using idle_timer = basic_idle_timer<>;

}  // namespace twheel

TWHEEL_FORWARD_ASSOCIATORS(twheel::detail::idle_wait_op)

#endif  // TWHEEL_IDLE_TIMER_HPP
