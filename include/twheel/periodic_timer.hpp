// twheel/periodic_timer.hpp: heartbeats, lease renewal and retries: one wait per tick.
#ifndef TWHEEL_PERIODIC_TIMER_HPP
#define TWHEEL_PERIODIC_TIMER_HPP

#include <twheel/basic_waitable_timer.hpp>
#include <twheel/detail/forwarding_handler.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>

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

/// How ticks are spaced.
enum class tick_mode {
  fixed_rate,   ///< ticks on a grid: start + k * period
  fixed_delay,  ///< each tick one period after the wait for it started
};

/// What a fixed-rate timer does when a tick completes a whole period or more late.
enum class missed_tick_policy {
  burst,  ///< keep the grid: the missed ticks complete back to back until caught up
  delay,  ///< move the grid: the next tick is one period after the late one completed
  skip,   ///< keep the grid but drop the missed ticks (counted in skipped())
};

namespace detail {

// The grid, the counters and the bookkeeping of a periodic timer's waits, shared by the
// timer and its waits' handlers. Typed by nothing, so that a timer with a wait pending can
// move into a timer of another executor type: the wait's handler keeps this state, and the
// state follows the timer.
struct periodic_state {
  using clock_type = std::chrono::steady_clock;

  periodic_state(clock_type::duration p, tick_mode m, missed_tick_policy mt) noexcept
      : period(p), mode(m), policy(mt) {}

  // t + period, saturated at the clock's end: a period too long for the clock never ends.
  clock_type::time_point after(clock_type::time_point t) const noexcept {
    return t > clock_type::time_point::max() - period ? clock_type::time_point::max()
                                                      : t + period;
  }

  // The deadline of the tick a wait started now waits for.
  clock_type::time_point deadline_for_wait(clock_type::time_point now) {
    if (mode == tick_mode::fixed_delay || !started) {
      if (!started) stale = unrun;
      started = true;
      next = after(now);
    }
    return next;
  }

  // Called as a wait that has not run yet runs, or is destroyed unrun: whether it was
  // started before the grid last (re)started. The waits of a timer run in the order they
  // started: each new wait aborts the pending one or finds it settled, both queued before
  // the new wait can complete, and their handlers run on the executor the members are
  // called on (the thread-safety note), in order.
  bool take_stale() noexcept { return stale != 0 && (--stale, true); }

  // Called as a tick completes at `now`. A tick of the grid in use is the one due at
  // `next`: the grid moves to the following one. A stale tick, of a grid that reset() has
  // restarted since (its handler was queued when the new grid's first wait started), is
  // counted and leaves the new grid alone (a review found it moved the new grid a period
  // on, so that one of its ticks never came).
  void on_tick(clock_type::time_point now, bool is_stale) {
    ++ticks;
    if (mode == tick_mode::fixed_delay || is_stale) return;
    const clock_type::time_point due = next;
    if (now - due < period || policy == missed_tick_policy::burst) {
      next = after(due);
    } else if (policy == missed_tick_policy::delay) {
      next = after(now);
    } else {
      // Here now - due >= period, so due + (missed + 1) * period <= now + period: no
      // overflow unless after(now) saturates, and then now - due < period held.
      const auto missed = static_cast<std::uint64_t>((now - due) / period);
      skipped += missed;
      next = due + period * static_cast<clock_type::rep>(missed + 1);
    }
  }

  // The grid moves when a tick's handler runs. A wait started after the tick it would
  // wait for came due, while the wait last started for that tick has not run (settled,
  // which a new wait does not abort, or aborted), would complete at once for that tick,
  // and then stand for the following one, up to a period early (a review found it). It is
  // parked instead until the waits started before it have run, or been destroyed unrun,
  // and the grid has moved (or not, if they were aborted or destroyed): then it is filed
  // for the grid's next tick (periodic_wait_op::unpark()). A later wait started meanwhile
  // parks as well, and aborts it. A parked wait is filed at time_point::max(), where
  // nothing but the unpark moves it: parked at the tick after, it completed there before
  // the grid had moved when the tick's handler ran a period late, ahead of the grid's
  // tick under missed_tick_policy::delay and skip (a review found it).
  bool parks(clock_type::time_point now) const noexcept {
    return mode == tick_mode::fixed_rate && started && unrun != 0 && filed == next && next <= now;
  }

  // The periodic timer's twheel timer (a basic_waitable_timer of its executor type), or
  // null once the periodic timer is destroyed: the timer goes with it, while a tick's
  // handler may keep the rest of the state (a context may destroy its queue after its
  // services, and the timer must not outlive the wheel). `unpark_on`, the timer type's
  // own, files the parked wait on it again.
  void* timer = nullptr;
  void (*unpark_on)(void* timer, clock_type::time_point next) noexcept = nullptr;
  clock_type::duration period;
  tick_mode mode;
  missed_tick_policy policy;
  bool started = false;
  clock_type::time_point next{};
  std::uint64_t ticks = 0;
  std::uint64_t skipped = 0;
  // The tick the last wait started waits for; how many started waits have not run yet;
  // whether the pending wait is parked (see parks()).
  clock_type::time_point filed{};
  std::size_t unrun = 0;
  std::size_t stale = 0;  // the first of them, started before the grid last (re)started
  bool parked = false;
  // Converting moves so far: a deferred wait started under another count was made on a
  // timer of another type, and is refused. (Not the address of unpark_on: each shared
  // library may have its own copy of it, and identical code folding may merge the
  // copies of two types.)
  std::uint64_t retyped = 0;
  bool initiating = false;  // inside async_wait(): a wait destroyed now was never started
  std::atomic<std::size_t> refs{1};  // the timer, and the wait's handler while it lives
};

// An owning pointer to the state, one word wide: a tick's handler wrapper (this plus a
// handler of one pointer, a [this] lambda) then fits the timer's in-object handler box,
// so a tick allocates nothing. (A shared_ptr, two words, made every tick an allocated
// operation.) The state outlives the timer while a completed tick's handler is queued.
template <class State>
class state_ref {
 public:
  explicit state_ref(State* p) noexcept : p_(p) {}
  state_ref(const state_ref& other) noexcept : p_(other.p_) {
    if (p_) p_->refs.fetch_add(1, std::memory_order_relaxed);
  }
  state_ref(state_ref&& other) noexcept : p_(std::exchange(other.p_, nullptr)) {}
  state_ref& operator=(state_ref other) noexcept {
    std::swap(p_, other.p_);
    return *this;
  }
  ~state_ref() { reset(); }

  void reset() noexcept {
    State* p = std::exchange(p_, nullptr);
    if (p && p->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete p;
  }
  State* operator->() const noexcept { return p_; }
  State& operator*() const noexcept { return *p_; }
  explicit operator bool() const noexcept { return p_ != nullptr; }

 private:
  State* p_;
};

template <class Handler, class State>
class periodic_wait_op {
 public:
  template <class H>
  periodic_wait_op(state_ref<State> state, H&& handler)
      : state_(std::move(state)), handler_(std::forward<H>(handler)) {
    ++state_->unrun;
  }
  periodic_wait_op(periodic_wait_op&&) noexcept(std::is_nothrow_move_constructible_v<Handler>) =
      default;
  periodic_wait_op& operator=(periodic_wait_op&&) = delete;
  // Never run: a failed start, the context's shutdown, or a handler whose dispatch failed.
  // A parked wait behind it is not left parked for good.
  ~periodic_wait_op() {
    if (!state_) return;
    State& state = *state_;
    --state.unrun;
    if (state.initiating) return;  // this wait itself, never started
    state.take_stale();
    if (state.parked && state.unrun == 1) unpark(state);
  }

  void operator()(boost::system::error_code ec) {
    State& state = *state_;
    --state.unrun;
    const bool stale = state.take_stale();
    if (!ec) state.on_tick(std::chrono::steady_clock::now(), stale);
    // The parked wait's turn once every wait started before it has run.
    if (state.parked && state.unrun == 1) unpark(state);
    state_.reset();
    std::move(handler_)(ec);
  }

  state_ref<State> state_;
  Handler handler_;

 private:
  // The parked wait goes to the grid's next tick (basic_periodic_timer::unpark_on).
  static void unpark(State& state) noexcept {
    state.parked = false;
    if (!state.timer) return;  // gone with the timer
    state.filed = state.next;
    state.unpark_on(state.timer, state.next);
  }
};

}  // namespace detail

/// A timer that ticks every period. Call async_wait() once per tick (typically from the
/// previous tick's handler). Ticks never complete early; with tick_mode::fixed_rate they
/// stay on the grid start + k * period, and missed_tick_policy says what happens when
/// the program falls a whole period or more behind.
///
/// @par Thread Safety
/// @e Distinct @e objects: Safe.
/// @e Shared @e objects: Unsafe. A tick's completion updates the grid and the counters
/// on its handler's associated executor, so call the members on that executor (the
/// context's thread, or the handler's strand when the context runs on several threads).
template <class Executor = boost::asio::any_io_executor>
class basic_periodic_timer {
  using state_type = detail::periodic_state;

 public:
  /// The type of the executor associated with the object.
  using executor_type = Executor;

  /// Rebinds the timer type to another executor (for `as_default_on_t`, as Asio's I/O
  /// objects do).
  template <class Executor1>
  struct rebind_executor {
    /// The timer type when rebound to the specified executor.
    using other = basic_periodic_timer<Executor1>;
  };

  /// The clock type.
  using clock_type = std::chrono::steady_clock;
  /// The duration type of the clock.
  using duration = clock_type::duration;
  /// The time point type of the clock.
  using time_point = clock_type::time_point;

  /// Constructs a periodic timer with no wait pending. `period` must be positive
  /// (std::invalid_argument otherwise). The grid starts at the first async_wait(). A tick
  /// too far away for the clock (duration::max(), say) is at time_point::max(): never.
  ///
  /// @param ex The I/O executor that the timer will use, by default, to dispatch handlers
  /// for its waits. The wheel of its execution context is created if it does not exist.
  /// @param period The period between ticks.
  /// @param mode How ticks are spaced.
  /// @param policy What a fixed-rate timer does when it falls a period or more behind.
  ///
  /// @throws std::invalid_argument if `period` is not positive.
  basic_periodic_timer(const executor_type& ex, duration period,
                       tick_mode mode = tick_mode::fixed_rate,
                       missed_tick_policy policy = missed_tick_policy::burst)
      : state_(new state_type(checked(period), mode, policy)),
        timer_(std::make_unique<timer_type>(ex)) {
    attach();
  }

  /// As the constructor above, with the executor of `ctx`.
  ///
  /// @param ctx An execution context which provides the I/O executor that the timer will
  /// use, by default, to dispatch handlers for its waits.
  /// @param period The period between ticks.
  /// @param mode How ticks are spaced.
  /// @param policy What a fixed-rate timer does when it falls a period or more behind.
  ///
  /// @throws std::invalid_argument if `period` is not positive.
  template <class ExecutionContext,
            std::enable_if_t<std::is_convertible_v<ExecutionContext&,
                                                   boost::asio::execution_context&>,
                             int> = 0>
  basic_periodic_timer(ExecutionContext& ctx, duration period,
                       tick_mode mode = tick_mode::fixed_rate,
                       missed_tick_policy policy = missed_tick_policy::burst)
      : basic_periodic_timer(executor_type(ctx.get_executor()), period, mode, policy) {}

  /// Move-constructs a periodic timer; a pending wait, the grid and the counters move
  /// along. The moved-from object may be destroyed or assigned to; its cancel() returns 0
  /// and its other members throw std::logic_error.
  basic_periodic_timer(basic_periodic_timer&&) noexcept = default;
  /// Aborts this timer's pending wait (operation_aborted) and takes over `other`, with its
  /// pending wait, grid and counters. The moved-from object is as after the move
  /// constructor.
  basic_periodic_timer& operator=(basic_periodic_timer&& other) noexcept {
    if (this != &other) {
      release();
      state_ = std::move(other.state_);
      timer_ = std::move(other.timer_);
    }
    return *this;
  }

  /// Move-constructs a periodic timer from one of another executor type (as Asio's I/O
  /// objects convert, e.g. `boost::asio::use_awaitable.as_default_on(std::move(t))`); as
  /// the move constructor otherwise. A wait already started keeps the executor it was
  /// started with. A deferred wait made before the move and launched after it throws
  /// std::logic_error where it is launched (for use_awaitable, out of run(), as any
  /// initiation that throws there), even once the timer is moved back to its old type.
  ///
  /// @param other The timer to move from; its executor must convert to Executor.
  ///
  /// @throws std::logic_error if `other` was moved from; std::bad_alloc if the converted
  /// timer's memory cannot be had; what converting the executor throws. Either way
  /// `other` is unchanged.
  template <class Executor1,
            std::enable_if_t<std::is_convertible_v<Executor1, Executor>, int> = 0>
  basic_periodic_timer(basic_periodic_timer<Executor1>&& other)
      : state_(nullptr), timer_(std::make_unique<timer_type>(std::move(other.timer()))) {
    // The state is taken only now: other.timer() checks it, and if the timer cannot be
    // converted, `other` must keep it.
    state_ = std::move(other.state_);
    other.timer_.reset();  // moved from: it has no waits left to abort
    ++state_->retyped;
    attach();
  }

  /// Move-assigns a periodic timer from one of another executor type; as the move
  /// assignment, after the converting move constructor.
  ///
  /// @throws std::logic_error if `other` was moved from; std::bad_alloc if the converted
  /// timer's memory cannot be had. Either way nothing changed.
  template <class Executor1>
  std::enable_if_t<std::is_convertible_v<Executor1, Executor>, basic_periodic_timer&> operator=(
      basic_periodic_timer<Executor1>&& other) {
    basic_periodic_timer converted(std::move(other));
    return *this = std::move(converted);
  }

  /// Aborts a pending wait (operation_aborted, later, from the context). A tick that has
  /// already come due but whose handler has not run yet still completes with success.
  ~basic_periodic_timer() { release(); }

  /// Gets the executor associated with the object.
  executor_type get_executor() const { return timer().get_executor(); }
  /// The period between ticks.
  duration period() const { return state().period; }
  /// How ticks are spaced.
  tick_mode mode() const { return state().mode; }
  /// What a fixed-rate timer does when it falls a period or more behind.
  missed_tick_policy policy() const { return state().policy; }

  /// Ticks completed with success so far.
  std::uint64_t ticks() const { return state().ticks; }
  /// Ticks dropped by missed_tick_policy::skip so far.
  std::uint64_t skipped() const { return state().skipped; }
  /// The deadline of the next tick (after the first async_wait()). While a wait is held
  /// back behind a tick whose handler has not run (see async_wait()), that tick's: the
  /// held-back wait's is known once the handler has run.
  time_point next_tick() const { return state().next; }

  /// Starts the grid again at the next async_wait(). A pending wait and the counters are
  /// not affected. A tick of the old grid that completes after that async_wait() (its
  /// handler was queued) is counted in ticks() and does not move the new grid.
  void reset() { state().started = false; }

  /// Waits for the next tick.
  ///
  /// This function is an initiating function for an asynchronous operation, and always
  /// returns immediately; the handler is never invoked from inside it. The tick waited
  /// for: with tick_mode::fixed_delay, one period after this call; with
  /// tick_mode::fixed_rate, the next point of the grid start + k * period (k >= 1, start
  /// being the time of the first call, or of the first call after reset()), moved as
  /// missed_tick_policy says once a tick completes a period or more late. A tick whose
  /// time has passed completes at once. Never early.
  ///
  /// One wait at a time: start the next wait from the previous one's handler, or once it
  /// has completed. A wait started after the pending tick came due but before its
  /// handler ran does not abort that one (already completed) and waits for the tick after
  /// it: the grid's next tick once that handler has run (or been destroyed unrun), as
  /// missed_tick_policy moved the grid.
  ///
  /// @param token The completion token that will be used to produce a completion handler
  /// (a function object, use_awaitable, deferred, ...).
  ///
  /// @par Completion Signature
  /// @code void(boost::system::error_code) @endcode
  /// Success at the tick (counted in ticks()); boost::asio::error::operation_aborted on
  /// cancel(), destruction, move assignment over the timer, a new async_wait() or
  /// per-operation cancellation; boost::asio::error::no_buffer_space when the wheel's
  /// wheel_options::max_pending is reached.
  ///
  /// @par Per-Operation Cancellation
  /// This asynchronous operation supports cancellation for the following
  /// boost::asio::cancellation_type values:
  /// @li @c cancellation_type::terminal
  /// @li @c cancellation_type::partial
  /// @li @c cancellation_type::total
  template <class WaitToken = boost::asio::default_completion_token_t<executor_type>>
  auto async_wait(WaitToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
    state();  // a moved-from timer throws here, not inside a deferred launch
    return boost::asio::async_initiate<WaitToken, void(boost::system::error_code)>(
        initiate_wait{state_, state_->retyped}, token);
  }

  /// Aborts the pending wait (operation_aborted, later, from the context); returns 0 or
  /// 1. The grid is kept: with tick_mode::fixed_rate, the next async_wait() waits for the
  /// same tick.
  std::size_t cancel() { return state_ ? timer_->cancel() : 0; }

 private:
  template <class E>
  friend class basic_periodic_timer;  // the converting moves

  using timer_type =
      basic_waitable_timer<clock_type, boost::asio::wait_traits<clock_type>, Executor>;

  struct initiate_wait {
    using executor_type = basic_periodic_timer::executor_type;  // for Asio's adapters
    detail::state_ref<state_type> state;
    std::uint64_t retyped;  // the state's count when the wait was made
    executor_type get_executor() const { return own_timer().get_executor(); }

    // The timer's, still of this type. A deferred wait launched after its timer was
    // destroyed, or moved into one of another executor type, is refused (with Asio's
    // timers, the first is undefined and the second waits on the moved-from timer).
    timer_type& own_timer() const {
      if (!state->timer) {
        throw std::logic_error(
            "twheel::periodic_timer: wait launched after the timer was destroyed");
      }
      if (state->retyped != retyped) {
        throw std::logic_error(
            "twheel::periodic_timer: wait launched after the timer was moved into one of "
            "another executor type");
      }
      return *static_cast<timer_type*>(state->timer);
    }

    template <class Handler>
    void operator()(Handler&& handler) const {
      timer_type& timer = own_timer();
      // The grid moves only if the wait starts (one refused with no_buffer_space starts
      // and completes: the grid starts at the first call, as documented); the pending
      // wait, if any, is aborted only then (detail::timer_access::replace_wait).
      const clock_type::time_point now = clock_type::now();
      const bool started = state->started;
      const clock_type::time_point next = state->next;
      const clock_type::time_point filed = state->filed;
      const bool parked = state->parked;
      const bool parks = state->parks(now);
      const std::size_t stale = state->stale;
      const clock_type::time_point deadline =
          parks ? clock_type::time_point::max() : state->deadline_for_wait(now);
      // Set before the filing: once filed, the wait may complete on another thread.
      state->filed = parks ? next : deadline;
      state->parked = parks;
      state->initiating = true;
      try {
        detail::timer_access::replace_wait(
            timer, deadline,
            detail::periodic_wait_op<std::decay_t<Handler>, state_type>(
                state, std::forward<Handler>(handler)));
      } catch (...) {
        state->initiating = false;
        state->started = started;
        state->next = next;
        state->stale = stale;
        state->filed = filed;
        state->parked = parked;
        throw;
      }
      state->initiating = false;
    }
  };

  static duration checked(duration period) {
    if (period <= duration::zero()) {
      throw std::invalid_argument("twheel::periodic_timer: period must be positive, got " +
                                  std::to_string(period.count()) + " ticks of the clock");
    }
    return period;
  }

  state_type& state() const {
    if (!state_) throw std::logic_error("twheel::periodic_timer: used after being moved from");
    return *state_;
  }
  timer_type& timer() const {
    state();
    return *timer_;
  }

  // The state follows the timer: a parked wait is filed on this one.
  void attach() noexcept {
    state_->timer = timer_.get();
    state_->unpark_on = &basic_periodic_timer::unpark_on;
  }
  // The timer goes (aborting its pending wait); the state may live on in a handler.
  void release() noexcept {
    if (state_) state_->timer = nullptr;
    timer_.reset();
  }

  // If the driver cannot be armed for the parked wait (a context of the user's own, out
  // of memory), it is aborted rather than left at the tick it was parked at, which the
  // grid may have moved past (missed_tick_policy).
  static void unpark_on(void* timer, time_point next) noexcept {
    timer_type& t = *static_cast<timer_type*>(timer);
    try {
      detail::timer_access::refile(t, next);
    } catch (...) {
      t.cancel();
    }
  }

  // Both null once moved from. The timer is apart from the state so that a converting
  // move can replace it while a wait's handler holds the state.
  detail::state_ref<state_type> state_;
  std::unique_ptr<timer_type> timer_;
};

/// A periodic timer whose handlers run, by default, on an any_io_executor.
using periodic_timer = basic_periodic_timer<>;

}  // namespace twheel

TWHEEL_FORWARD_ASSOCIATORS(twheel::detail::periodic_wait_op)

#endif  // TWHEEL_PERIODIC_TIMER_HPP
