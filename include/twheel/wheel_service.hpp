// twheel/wheel_service.hpp: the timing wheel living inside an execution context.
#ifndef TWHEEL_WHEEL_SERVICE_HPP
#define TWHEEL_WHEEL_SERVICE_HPP

#include <twheel/detail/completion_queue.hpp>
#include <twheel/detail/asio_scheduler.hpp>
#include <twheel/detail/block_pool.hpp>
#include <twheel/detail/op_queue.hpp>
#include <twheel/detail/service_lock.hpp>
#include <twheel/detail/timer_state.hpp>
#include <twheel/detail/wheel_driver.hpp>
#include <twheel/timing_wheel.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/system/error_code.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <new>
#include <optional>

namespace twheel {

/// Options of a context's wheel; set with configure() before the first timer is used.
/// configure() throws std::invalid_argument naming the first value out of range.
struct wheel_options {
  /// Resolution: deadlines are rounded up to a tick, so waits complete up to one tick
  /// (plus slack and scheduling delay) late and never early. Must be positive. 8 us keeps
  /// the rounding well below the wake-up latency of the context itself (Asio's own timers
  /// fire 30-50 us late), while a coarse slot stays small enough to cascade quickly.
  /// Taken literally however long: with a tick of an hour, a 1 ms wait completes an hour
  /// later, and with nanoseconds::max() never.
  std::chrono::nanoseconds tick{std::chrono::microseconds(8)};
  /// Levels of 64 slots (1..10); 6 levels of 8 us reach ~6.4 days, 7 ~1.1 years. Later
  /// deadlines are still exact: they are parked and re-filed, once per turn of the top
  /// level (its reach). Keep the reach (tick x 64^levels) above the usual timeout: each
  /// parked wait costs a re-file per turn, so with a tiny reach (2 levels of 100 ns reach
  /// 410 us) many long waits make more re-files than the passes can do, and the wheel
  /// falls behind the clock (waits then complete late, never early).
  unsigned levels = 6;
  /// Pending waits allowed at once; a wait beyond it completes with
  /// boost::asio::error::no_buffer_space. 0 means no limit. cancel_after() timeouts and
  /// beast::tcp_stream's timeouts count as pending waits but are never refused.
  std::size_t max_pending = 0;
  /// Wheel entries examined per driver pass; bounds the time one pass keeps the thread
  /// from other work. Must be positive.
  std::size_t max_per_pass = 4096;
  /// How much later than the earliest due slot the driver may wake, so that waits due
  /// close together share one wake-up (as Linux's timer slack does): a wait completes at
  /// most tick + slack (plus scheduling delay) after its deadline, and the driver wakes at
  /// most once per slack. 0: wake at the slot. Must not be negative. Taken literally, as
  /// tick is: nanoseconds::max() means the driver may never wake.
  std::chrono::nanoseconds slack{0};
  /// Declares that the context runs on one thread at a time and that its timers are used
  /// only from that thread (or from its handlers): the wheel then takes no lock. An
  /// io_context created with BOOST_ASIO_CONCURRENCY_HINT_UNSAFE gets the same without
  /// asking. Using the wheel from two threads at once is then undefined behaviour.
  bool single_threaded = false;
};

/// Counters of one context's wheel. All are exact at the moment of the call.
///
/// A cancel_after() timeout counts as a wait: pending until it fires (counted in `fired`)
/// or leaves because its operation completed first (counted in neither `fired` nor
/// `cancelled`).
struct wheel_stats {
  std::size_t pending = 0;       ///< waits started and not yet completed
  std::size_t timers = 0;        ///< timers filed in the wheel (some may have no wait)
  std::uint64_t fired = 0;       ///< waits completed because their timer expired
  std::uint64_t cancelled = 0;   ///< waits completed with operation_aborted
  std::uint64_t rejected = 0;    ///< waits refused with no_buffer_space (max_pending)
  std::uint64_t cascaded = 0;    ///< wheel entries re-filed to a finer level one by one
                                 ///< (a crowded slot of one deadline tick moves whole, uncounted)
  std::uint64_t wakeups = 0;     ///< driver passes (expired internal timer or posted pass)
};

/// Sets the options of `ctx`'s wheel.
///
/// Creates the wheel with `options`. Must be called at most once per context, before
/// anything uses its wheel: before the first twheel timer (steady_timer, idle_timer,
/// periodic_timer, ...) is constructed on it and before the first cancel_after() or
/// cancel_at() operation or token uses it. stats() does not create the wheel.
///
/// @param ctx The execution context (an io_context, a thread_pool, ...).
/// @param options The options; see wheel_options for the valid values.
///
/// @throws std::invalid_argument naming the first bad value of `options` (checked
/// first). It derives from std::logic_error: catch it first to tell the two apart.
/// @throws std::logic_error if the wheel of `ctx` already exists (in use or configured).
/// @throws boost::system::system_error if the service behind Asio's steady_timer, which
/// the wheel acquires when it is created, cannot be (on Linux, its reactor opens three
/// descriptors on an io_context that has no I/O object yet): the first timer would
/// fail the same way.
/// Nothing is changed when it throws.
///
/// @par Thread Safety
/// May be called from any thread. Of concurrent calls for one context (or a call racing
/// the context's first timer), one creates the wheel and the others throw
/// std::logic_error.
void configure(boost::asio::execution_context& ctx, const wheel_options& options);

/// Sets the options of `ctx`'s wheel, reporting errors through an error_code instead of
/// throwing; as the overload above otherwise.
///
/// @param ctx The execution context.
/// @param options The options; see wheel_options for the valid values.
/// @param ec Cleared on success; set to boost::asio::error::invalid_argument for a bad
/// option, boost::asio::error::already_started if the wheel already exists,
/// boost::asio::error::no_memory, or the error of making Asio's timer service (such as
/// boost::asio::error::no_descriptors). Nothing is changed on error.
void configure(boost::asio::execution_context& ctx, const wheel_options& options,
               boost::system::error_code& ec) noexcept;

/// The statistics of `ctx`'s wheel; all zero if it has none yet (does not create one,
/// so configure() may still follow). Safe from any thread (it takes the wheel's lock),
/// unless the wheel takes none (wheel_options::single_threaded, or an io_context made
/// with BOOST_ASIO_CONCURRENCY_HINT_UNSAFE): then from the context's thread only.
wheel_stats stats(boost::asio::execution_context& ctx);

/// One timing wheel per execution context (an io_context or a thread_pool), driven by an
/// internal boost::asio::steady_timer that is armed only while waits are pending, at the
/// earliest non-empty slot (and a second one standing by at the slot after it). Timers
/// (basic_waitable_timer, ...) are thin shells over it. Created by the first use of the
/// context's wheel (use_service) or by configure().
///
/// Handlers complete on their associated executors, outside the lock. If one throws, the
/// exception propagates out of the context's run() (as with Asio), and the other
/// handlers of the same driver pass, already queued on the context, run at its next
/// run() or poll(). When the context shuts down, pending handlers are destroyed without
/// being invoked, as are waits started after that.
///
/// @par Thread Safety
/// All members may be called concurrently; one mutex guards the wheel (unless it takes
/// no lock: see wheel_options::single_threaded). Handlers are never invoked and user
/// handlers never allocated under that mutex.
class wheel_service : public boost::asio::execution_context::service {
 public:
  /// The key of the service in its context's registry.
  using key_type = wheel_service;
  /// The identifier of the service in its context's registry.
  static inline boost::asio::execution_context::id id;
  /// The clock of every deadline the service is given.
  using clock_type = std::chrono::steady_clock;

  /// Creates the wheel of `ctx` with default options (what use_service does).
  explicit wheel_service(boost::asio::execution_context& ctx);
  /// Creates the wheel of `ctx` with `options` (what configure() does).
  ///
  /// @throws std::invalid_argument naming the first bad value of `options`.
  wheel_service(boost::asio::execution_context& ctx, const wheel_options& options);
  /// Destroyed by the context, after shutdown() destroyed the pending handlers (itself
  /// first, for a wheel made while the context was shutting down, which it never shut down).
  ~wheel_service() override;

  /// The options the wheel was created with.
  const wheel_options& options() const noexcept { return options_; }
  /// The wheel's counters, read under its lock.
  wheel_stats stats() const;

  /// The wheel of `ctx` (created if it does not exist yet): use_service, without its
  /// registry lock and type comparison when this thread asked for the same context last
  /// (cancel_after asks once per operation). Any wheel's destruction empties every
  /// thread's answer, so a context made at the address of a destroyed one is not confused
  /// with it.
  static wheel_service& of(boost::asio::execution_context& ctx);

  /// Checks `options` as the constructor does, without creating a wheel.
  ///
  /// @throws std::invalid_argument naming the first bad value.
  static void validate(const wheel_options& options);

  // ---- used by the timer types (not for direct use) ---------------------------------

  /// The wheel's time for a clock time point (saturating, never rounding down).
  std::chrono::nanoseconds wheel_time(clock_type::time_point t) const noexcept;

  /// Starts a wait on `timer` until `deadline`. Handler is any wait handler; IoExecutor is
  /// the timer's executor. With `replace`, the wait takes the place of the waits `timer`
  /// has, which are aborted only once it is filed: if it throws, they stay pending
  /// (periodic_timer's re-wait). Defined in impl/wheel_service.hpp.
  template <class Handler, class IoExecutor>
  void async_wait(detail::timer_state& timer, clock_type::time_point deadline,
                  Handler& handler, const IoExecutor& io_ex, bool replace = false);

  /// As async_wait() with `replace`, always allocated (idle_timer's re-wait).
  template <class Handler, class IoExecutor>
  void replace_waits(detail::timer_state& timer, clock_type::time_point deadline,
                     Handler& handler, const IoExecutor& io_ex);

  /// Moves the waits of `timer` to `deadline`, as a wait filed there would be
  /// (periodic_timer's parked wait); nothing if it has none. Throws std::bad_alloc if the
  /// driver cannot be armed for the new deadline; the waits then stay where they were.
  void refile(detail::timer_state& timer, clock_type::time_point deadline);

  /// Aborts all / the first wait(s) of `timer`; returns how many. Also a timer's
  /// expires_*(): the entry keeps its place and the next wait files the new expiry.
  std::size_t cancel(detail::timer_state& timer);
  /// Aborts the oldest wait of `timer`; returns 0 or 1.
  std::size_t cancel_one(detail::timer_state& timer);
  /// Aborts the waits of `timer` and takes it out of the wheel (timer destruction).
  void destroy(detail::timer_state& timer) noexcept;
  /// `to` (idle, no waits) takes over the place and the waits of `from`.
  void move(detail::timer_state& to, detail::timer_state& from) noexcept;

  /// For adapters that own their operation (cancel_after): files `op` as the only wait of
  /// `timer` until `deadline`, never refused by max_pending (though counted as pending);
  /// the op is completed (success) when due, or destroyed at shutdown. unschedule() takes
  /// it back before it fires: true if it did (the op will then never be completed by the
  /// service).
  void schedule(detail::timer_state& timer, std::chrono::nanoseconds deadline,
                detail::wait_op* op);
  /// Takes back an op filed by schedule(); see there.
  bool unschedule(detail::timer_state& timer, detail::wait_op* op) noexcept;

  /// The room for a state in the blocks schedule_new() makes states in: cancel_after's
  /// state for a handler on an io_context's executor, any_io_executor or a strand of
  /// either (136 to 200 bytes with Boost 1.81). Each block is 16 bytes longer: its
  /// state_block_signal() lives there.
  static constexpr std::size_t state_block_size = 208;
  /// schedule() of a State (a wait_op with an `entry()`, the timer_state it is filed
  /// under) that `make(block)` constructs, without throwing, in the first
  /// state_block_size bytes of a block the service recycles: the block is taken, the
  /// state made and filed under one acquisition of the lock. Defined in
  /// impl/wheel_service.hpp.
  ///
  /// @throws std::bad_alloc with nothing made, or, once made, with the state given to
  /// `discard(state)` unfiled.
  template <class State, class Make, class Discard>
  State* schedule_new(std::chrono::nanoseconds deadline, Make make, Discard discard);
  /// Gives back the block of a state made by schedule_new(), already destroyed. From any
  /// thread, until the service is destroyed: the blocks go with it, so a state may live
  /// in one only if nothing outside the service's context can hold it.
  void free_state_block(void* block) noexcept { state_blocks_.give_back(block); }
  /// Whether the context destroys what its queue holds before its services (Asio's
  /// scheduler: an io_context or a thread_pool). Only then may what the context holds of
  /// ours live in the service's memory: another context may destroy its queue after its
  /// services (Asio's own priority_scheduler example does). Call after attach().
  bool context_queue_goes_first() const noexcept { return scheduler_ != nullptr; }
  /// The cancellation signal of a block of schedule_new(). It outlives the states made in
  /// the block, from the block's making to the service's destruction, so that the
  /// memory of the cancellation handler an operation installs in it is there for the next
  /// state's operation: Asio's slot reuses a handler's memory that is big enough, and
  /// otherwise allocates and frees it per operation.
  static boost::asio::cancellation_signal& state_block_signal(void* block) noexcept {
    return *std::launder(reinterpret_cast<boost::asio::cancellation_signal*>(
        static_cast<unsigned char*>(block) + state_block_size));
  }

  /// Called by a wait's cancellation slot handler when emitted: aborts that wait.
  void cancel_wait(detail::wait_canceller& canceller) noexcept;
  /// Called when a wait's cancellation slot handler is destroyed: cuts its link.
  void detach_canceller(detail::wait_canceller& canceller) noexcept;

  /// Called by every timer's constructor: the first one gives the service the executor its
  /// driver runs on (the context's own executor, never a strand or other wrapper of it:
  /// found through `ex`).
  template <class Executor>
  void attach(const Executor& ex) {
    if (!attached_.load(std::memory_order_acquire)) attach_executor(driver_executor(ex));
  }

  /// True when handlers bound to `ex` may be invoked directly by the wheel's drain: `ex`
  /// is the executor the driver itself runs on, where running a record runs it. Call
  /// after attach().
  template <class Executor>
  bool runs_inline(const Executor& ex) const noexcept;
  /// The executor the driver runs on; set by the first attach(), then never changed.
  const boost::asio::any_io_executor& executor() const noexcept { return executor_; }

  /// The stamps of idle_timer::touch(): the process's, shared by every wheel.
  static detail::touch_epoch& epoch() noexcept { return detail::process_touch_epoch(); }
  /// Called by every idle timer's constructor: from the first one on, the driver's passes
  /// keep the epoch's generations going, and a driver already armed is re-armed for the
  /// epoch's tick. May throw std::bad_alloc (the process's first idle timer makes the
  /// epoch's history; the re-arm); later idle timers only read a flag.
  void use_touch_epoch();
  /// Whether this wheel has had an idle timer: its driver then keeps the epoch going.
  bool keeps_touch_epoch() const noexcept {
    return epoch_kept_.load(std::memory_order_relaxed);
  }

  /// True when the wheel takes its lock (see wheel_options::single_threaded).
  bool locking() const noexcept { return mutex_.enabled(); }

 private:
  using lock_type = detail::service_lock;
  struct foreign_record;
  class record_runner;
  // `scheduler`: ctx's scheduler service, if any, looked up once for the lock's choice and
  // for handing over (each lookup is two locks of Asio's service registry);
  // attach_executor() keeps it only if it runs the context.
  wheel_service(boost::asio::execution_context& ctx, const wheel_options& options,
                boost::asio::detail::scheduler* scheduler);
  // The one operation that carries the aborted waits of many calls to the context
  // (hand_over()); a member, so queueing it allocates nothing.
  class flush_op : public detail::scheduler_op {
   public:
    explicit flush_op(wheel_service* self) noexcept
        : detail::scheduler_op(&flush_op::do_complete), self_(self) {}

   private:
    static void do_complete(void* owner, detail::scheduler_op* base,
                            const boost::system::error_code&, std::size_t);
    wheel_service* self_;
  };

  void shutdown() override;

  // Moves `handler` into a box and files it; should the timer already have a wait, hands
  // it back to `otherwise` (Boxed&), which starts it allocated.
  template <class Boxed, class Otherwise>
  void start_in_box(detail::timer_state& timer, clock_type::time_point deadline,
                    Boxed& handler, Otherwise&& otherwise);
  // `replace`: the new wait takes the place of the timer's waits (see start_wait()).
  template <class Handler, class IoExecutor, class Slot>
  void start_allocated_wait(detail::timer_state& timer, clock_type::time_point deadline,
                            Handler& handler, const IoExecutor& io_ex, Slot& slot,
                            bool replace = false);
  // The operation of a wait whose handler runs on `ex` (its associated executor).
  template <class Handler, class Executor>
  detail::wait_op* make_wait_op(Handler& handler, Executor&& ex);

  // Waits settled under the lock, to be handed to the context in one batch.
  struct settled {
    detail::scheduler_op_queue ops;
    std::size_t count = 0;
  };

  // Files a wait whose handler is in `handler` (moved into the timer) unless the timer
  // already has a wait: then returns false and leaves `handler` as it was.
  bool start_boxed_wait(detail::timer_state& timer, std::chrono::nanoseconds deadline,
                        detail::handler_box& handler);
  void start_wait(detail::timer_state& timer, std::chrono::nanoseconds deadline,
                  detail::wait_op* op, detail::wait_canceller* canceller, bool replace);
  void file_wait(detail::timer_state& timer, std::chrono::nanoseconds deadline);
  void file_op(detail::timer_state& timer, std::chrono::nanoseconds deadline,
               detail::wait_op* op);
  // schedule() under `lock`: after shutdown, unlocks and destroys `op` unrun. Throws
  // (bad_alloc) with nothing filed and the lock still held.
  void schedule_locked(lock_type& lock, detail::timer_state& timer,
                       std::chrono::nanoseconds deadline, detail::wait_op* op);
  void unfile_wait(detail::timer_state& timer, bool was_filed) noexcept;
  // Whether a new wait of `timer` is refused with no_buffer_space: max_pending is reached
  // and the timer's waits are not timeouts (never_refused).
  // `leaving`: how many of the pending waits the new one replaces.
  bool refuses(const detail::timer_state& timer, std::size_t leaving = 0) const noexcept {
    return options_.max_pending != 0 && stats_.pending - leaving >= options_.max_pending &&
           !timer.never_refused;
  }
  // Records how a wait ended and cuts its cancellation slot loose: a later emit is a no-op.
  static void settle(detail::wait_op* op, detail::wait_result result) noexcept;
  // The record of a boxed wait settled with `result`: the box's handler moves into it.
  detail::completion& record_of(detail::handler_box& box, detail::wait_result result) noexcept {
    detail::completion& c = records_.emplace(result);
    c.box.take(box);
    return c;
  }
  void settle_box(detail::handler_box& box, detail::wait_result result, settled& out) noexcept {
    out.ops.push(&record_of(box, result));
    ++out.count;
  }
  void settle_op(detail::wait_op* op, detail::wait_result result, settled& out) noexcept;
  // Moves up to `max` waits of `timer`, oldest first, into records. Uses up their
  // reservations; never allocates. Inline: the usual timer has one wait, boxed, and the
  // driver's pass settles it here (the calls to this and to settle_box() were 89
  // instructions per handler of a burst, callgrind).
  std::size_t settle_waits(detail::timer_state& timer, std::size_t max,
                           detail::wait_result result, settled& out) noexcept {
    std::size_t count = 0;
    if (max != 0 && !timer.box.empty()) {
      settle_box(timer.box, result, out);
      ++count;
    }
    for (; count < max && !timer.waits.empty(); ++count) {
      settle_op(timer.waits.pop(), result, out);
    }
    return count;
  }
  // Aborts up to `max` waits of `timer`, oldest first; returns how many. Waits the last
  // pass saw due are not aborted: all of them complete, and none counts (seen_due()), as
  // Asio's cancel() and cancel_one() find them all queued. A re-arm's usual case, one
  // boxed wait, is deferred at once without a batch: a cancel took 190 instructions
  // through settle_waits() and hand_over(), 91 this way (callgrind).
  std::size_t abort_waits(detail::timer_state& timer, std::size_t max) noexcept {
    if (seen_due(timer)) {
      complete_seen_due(timer);
      return 0;
    }
    if (max != 0 && timer.waits.empty() && !timer.box.empty() && scheduler_ && !shut_down_) {
      defer(record_of(timer.box, detail::wait_result::aborted));
      return after_abort(1);
    }
    return abort_settled(timer, max);
  }
  std::size_t abort_settled(detail::timer_state& timer, std::size_t max) noexcept;
  // Whether the waits of `timer` were due at the last pass, which saw them but left them
  // to the next (it settles at most max_per_pass entries, cascades included). Asio's
  // reactor queues every expired timer it sees at once, and from then on cancel(),
  // expires_*(), destruction and a cancellation slot find them completed: so do ours.
  // Not an idle timer's waits (a touch may have put them off), nor those filed since
  // that pass (Asio's reactor has not seen them either): a new wait completes the seen
  // ones first (start_wait()). Cheap on purpose: cancel() asks it on every re-arm.
  bool seen_due(const detail::timer_state& timer) const noexcept {
    return timer.deadline_tick() <= seen_tick_ && timer.filed_pass != due_stamp() &&
           timer.is_pending() && !timer.idle;
  }
  // What file_wait() and refile() store in timer_state::filed_pass for a timer filed at
  // its deadline_tick(). 0 when that tick is after the last pass's: only a later pass can
  // bring seen_tick_ to it, and that pass saw it. Else due_stamp(): the timer was due
  // when filed, and the last pass did not see it; it is seen once the pass count moves
  // on. The count is kept in 15 bits, so a wait filed already due and left unsettled by
  // 32,768 passes in a row (a backlog of 32,768 times max_per_pass due waits) may be
  // taken for one filed since, and aborted as before.
  std::uint16_t filed_stamp(const detail::timer_state& timer) const noexcept {
    return timer.deadline_tick() > seen_tick_ ? std::uint16_t{0} : due_stamp();
  }
  std::uint16_t due_stamp() const noexcept {
    return static_cast<std::uint16_t>(0x8000u | (stats_.wakeups & 0x7fffu));
  }
  // Completes the waits of a seen_due() timer, oldest first, as the next pass would have;
  // the timer keeps its place, which that pass drops.
  void complete_seen_due(detail::timer_state& timer) noexcept;
  std::size_t after_abort(std::size_t count) noexcept {
    stats_.pending -= count;
    stats_.cancelled += count;
    // No wait left: nothing may keep run() from returning.
    if (stats_.pending == 0) disarm_driver();
    return count;
  }
  void hand_over(settled& batch) noexcept;
  // hand_over() of one record, for a context with Asio's scheduler that is not shut down.
  void defer(detail::completion& record) noexcept {
    deferred_.push(&record);
    ++deferred_count_;
    queue_flush();
  }
  void queue_flush() noexcept {
    if (!flush_queued_) {
      flush_queued_ = true;
      scheduler_->post_immediate_completion(&flush_, false);
    }
  }
  void hand_over_now(settled& batch) noexcept;
  detail::completion* keep_first(settled& batch) noexcept;
  void flush_aborted(bool invoke);
  void ensure_driver();
  static void wake(void* self, std::uint64_t generation, bool from_timer);
  void on_driver(std::uint64_t generation, bool from_timer);
  bool refile_idle(detail::timer_state& timer, std::chrono::nanoseconds now) noexcept;
  // A pass's walk of the due timers (timing_wheel::due_visitor, `pass` a due_pass).
  struct due_pass;
  static bool settle_due(void* pass, wheel_entry& entry) noexcept;
  static bool settle_due_other(const due_pass& pass, detail::timer_state& timer) noexcept;
  void disarm_driver() noexcept;
  void attach_executor(boost::asio::any_io_executor ex);
  template <class Executor>
  static boost::asio::any_io_executor driver_executor(const Executor& ex);

  // cancel_after's states: as many blocks as were ever in flight at once, kept until the
  // service is destroyed. Declared first, so destroyed last.
  struct state_block_setup {
    static void made(void* block) noexcept {
      ::new (static_cast<unsigned char*>(block) + state_block_size)
          boost::asio::cancellation_signal;
    }
    static void unmade(void* block) noexcept {
      state_block_signal(block).~cancellation_signal();
    }
  };
  static_assert(sizeof(boost::asio::cancellation_signal) <= alignof(std::max_align_t) &&
                alignof(boost::asio::cancellation_signal) <= alignof(std::max_align_t));
  detail::basic_block_pool<state_block_size + alignof(std::max_align_t), state_block_setup>
      state_blocks_{0};
  wheel_options options_;
  std::atomic<bool> attached_{false};
  boost::asio::any_io_executor executor_;      // what the driver runs on; set once
  clock_type::time_point origin_;
  mutable detail::service_mutex mutex_;
  timing_wheel wheel_;
  detail::completion_queue records_;           // settled waits, reserved per pending wait
  detail::scheduler_op_queue stranded_;        // records no executor took (out of memory)
  detail::scheduler_op_queue deferred_;        // settled waits waiting for flush_ to run
  std::size_t deferred_count_ = 0;
  bool flush_queued_ = false;                  // flush_ is in the scheduler's queue
  flush_op flush_{this};
  // The scheduler that runs the context (an io_context's or a thread_pool's), if any;
  // from attach() on (until then, the context's scheduler service, whatever it runs).
  boost::asio::detail::scheduler* scheduler_ = nullptr;
  bool shut_down_ = false;
  std::optional<detail::wheel_driver> driver_;  // made by the first attach
  wheel_stats stats_;  // stats_.wakeups also counts the passes for seen_due()
  std::uint64_t seen_tick_ = 0;  // the last pass's tick: what was due by it (seen_due())
  // An idle timer was made: set once. epoch_in_use_ is read under the lock (by
  // ensure_driver() and the passes); epoch_kept_, set once the first idle timer's
  // construction can no longer fail there, by the later ones' constructors without it.
  bool epoch_in_use_ = false;
  std::atomic<bool> epoch_kept_{false};
};

}  // namespace twheel

#include <twheel/impl/wheel_service.hpp>

#endif  // TWHEEL_WHEEL_SERVICE_HPP
