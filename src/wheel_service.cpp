// twheel/wheel_service: the wheel's options, creation, statistics and shutdown.
#include <twheel/wheel_service.hpp>

#include <twheel/detail/asio_scheduler.hpp>

#include <boost/asio/execution/context.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/system/system_error.hpp>

#include <stdexcept>
#include <string>
#include <utility>

namespace twheel {

namespace {

using clock_type = wheel_service::clock_type;
using boost::asio::execution_context;

wheel_config to_config(const wheel_options& options) {
  return wheel_config{options.tick, options.levels};
}

// The scheduler service of `ctx`, if it has one: an io_context's or a thread_pool's, which
// runs its handlers, or on a context of the user's own the one its reactor made (an Asio
// I/O object on it), which runs on a thread of Asio's own. attach_executor() tells them
// apart.
boost::asio::detail::scheduler* scheduler_service_of(execution_context& ctx) {
#if defined(BOOST_ASIO_HAS_IOCP)
  // io_context runs on win_iocp_io_context there; a thread_pool still has a scheduler,
  // but telling the two apart needs more than the registry says.
  (void)ctx;
  return nullptr;
#else
  using scheduler = boost::asio::detail::scheduler;
  return boost::asio::has_service<scheduler>(ctx) ? &boost::asio::use_service<scheduler>(ctx)
                                                  : nullptr;
#endif
}

}  // namespace

void wheel_service::validate(const wheel_options& options) {
  detail::validate_wheel_config(to_config(options), "wheel_options");
  if (options.slack.count() < 0) {
    throw std::invalid_argument("twheel: wheel_options.slack must not be negative, got " +
                                std::to_string(options.slack.count()) + " ns");
  }
  if (options.max_per_pass == 0) {
    throw std::invalid_argument("twheel: wheel_options.max_per_pass must be positive, got 0");
  }
}

wheel_service::wheel_service(execution_context& ctx)
    : wheel_service(ctx, wheel_options{}) {}

wheel_service::wheel_service(execution_context& ctx, const wheel_options& options)
    : wheel_service(ctx, options, scheduler_service_of(ctx)) {}

wheel_service::wheel_service(execution_context& ctx, const wheel_options& options,
                             boost::asio::detail::scheduler* scheduler)
    : execution_context::service(ctx),
      options_((validate(options), options)),
      origin_(clock_type::now()),
      mutex_(!options.single_threaded && !detail::asio_runs_unlocked(ctx, scheduler)),
      wheel_(to_config(options)),
      scheduler_(scheduler) {
  // The driver's timers are Asio steady_timers: their service must outlive the wheel,
  // which destroys them. Acquired here, it is older, so destroyed later.
  boost::asio::use_service<detail::steady_timer_service>(ctx);
}

void wheel_service::attach_executor(boost::asio::any_io_executor ex) {
  using io_executor = boost::asio::io_context::executor_type;
  using pool_executor = boost::asio::thread_pool::executor_type;
  lock_type lock(mutex_);
  if (driver_) return;
  executor_ = std::move(ex);
  // Records and passes reach Asio's scheduler directly only if it runs this context: an
  // io_context's or a thread_pool's, whose plain executor driver_executor() then found.
  // Otherwise they are posted to executor_: on a context of the user's own (whose
  // scheduler service, if any, is a reactor's, run on a thread of Asio's own: a review
  // found passes and records run there, and its queue holding the wheel's memory past the
  // wheel), and behind a wrapper driver_executor() could not see through. Either way,
  // running a record runs its handler on executor_ and on nothing else. (The context's
  // type cannot be asked: execution_context is not polymorphic.)
  const bool runs_on_scheduler =
      &boost::asio::query(executor_, boost::asio::execution::context) == &context() &&
      (executor_.target<io_executor>() != nullptr || executor_.target<pool_executor>() != nullptr);
  auto* const scheduler = runs_on_scheduler ? scheduler_ : nullptr;
  driver_.emplace(executor_, origin_, options_.slack, &wheel_service::wake, this, scheduler);
  scheduler_ = scheduler;  // once nothing can throw: a failed attach leaves it for the next
  attached_.store(true, std::memory_order_release);
}

wheel_service::~wheel_service() {
  // A wheel first used while its context was shutting down (a handler destroyed by that
  // shutdown made the context's first twheel timer) was created after the context began
  // shutting its services down, so it was never shut down itself. Whatever of it the
  // scheduler holds now (a pass, a record, the driver's cancelled wait) the scheduler
  // would destroy only in its own destructor, after this wheel's memory is gone: shut down
  // here, and have the scheduler destroy what it holds again (idempotent) while the wheel
  // still exists.
  if (!shut_down_ && driver_) {
    shutdown();
    // Any scheduler: on a context of the user's own, its reactor's holds the driver's wait.
    if (auto* scheduler = scheduler_service_of(context())) scheduler->shutdown();
  }
  detail::wheels_destroyed.fetch_add(1, std::memory_order_release);
}

void wheel_service::use_touch_epoch() {
  if (epoch_kept_.load(std::memory_order_relaxed)) return;
  epoch().enable();  // the epoch's own lock; once per process it allocates
  lock_type lock(mutex_);
  if (epoch_in_use_) return;
  // Seen by every ensure_driver() and pass from now on (the service's lock orders them).
  epoch_in_use_ = true;
  // A driver armed before this wheel kept the epoch was armed without its tick: the
  // generation in progress (stamped, if other wheels' touches made it so) would otherwise
  // end only at this wheel's next expiry, however far, and bound this wheel's touches.
  // Throws as ensure_driver() may: then the constructor fails and no idle timer of this
  // wheel exists, so the flag is taken back (kept, it would wake the driver each tick
  // while waits are pending). Those waits keep their wake-up (wheel_driver::accept()).
  // Under the lock throughout, so no other idle timer saw it set meanwhile: they read
  // epoch_kept_, set only once the epoch is kept for good.
  if (driver_ && !shut_down_ && stats_.pending != 0) {
    try {
      ensure_driver();
    } catch (...) {
      epoch_in_use_ = false;
      throw;
    }
  }
  epoch_kept_.store(true, std::memory_order_relaxed);
}

std::chrono::nanoseconds wheel_service::wheel_time(clock_type::time_point t) const noexcept {
  using std::chrono::nanoseconds;
  if (t <= origin_) return nanoseconds::zero();
  // t - origin_ cannot overflow when origin_ >= epoch (steady_clock counts from boot).
  const auto since_epoch = origin_.time_since_epoch();
  if (since_epoch.count() < 0 && t > clock_type::time_point::max() + since_epoch) {
    return nanoseconds::max();
  }
  return std::chrono::ceil<nanoseconds>(t - origin_);
}

wheel_stats wheel_service::stats() const {
  lock_type lock(mutex_);
  wheel_stats s = stats_;
  s.timers = wheel_.size();
  s.cascaded = wheel_.counters().cascaded;
  return s;
}

void wheel_service::shutdown() {
  settled doomed;
  {
    lock_type lock(mutex_);
    shut_down_ = true;
    wheel_entry_list all;
    wheel_.detach_all(all);
    while (!all.empty()) {
      auto& timer = static_cast<detail::timer_state&>(all.pop_front());
      settle_waits(timer, static_cast<std::size_t>(-1), detail::wait_result::aborted, doomed);
    }
    records_.unreserve_all();
    stats_.pending = 0;
    if (driver_) driver_->release();
    // The scheduler shuts down after us and destroys what it holds, ours included (and
    // flush_, which then finds its batch gone).
    doomed.ops.push(deferred_);
    doomed.count += std::exchange(deferred_count_, 0);
    if (scheduler_) hand_over_now(doomed);
    doomed.ops.push(stranded_);
  }
  // Destroying handlers may destroy timers, which call back into destroy(): unlocked.
  while (auto* op = doomed.ops.front()) {
    doomed.ops.pop();
    op->destroy();
  }
}

void configure(execution_context& ctx, const wheel_options& options) {
  wheel_service::validate(options);
  if (boost::asio::has_service<wheel_service>(ctx)) {
    throw std::logic_error(
        "twheel::configure: this context's wheel is already in use or configured; "
        "configure it once, before its first timer");
  }
  try {
    boost::asio::make_service<wheel_service>(ctx, options);
  } catch (const boost::asio::service_already_exists&) {
    throw std::logic_error("twheel::configure: this context's wheel was configured concurrently");
  }
}

void configure(execution_context& ctx, const wheel_options& options,
               boost::system::error_code& ec) noexcept {
  ec.clear();
  try {
    configure(ctx, options);
  } catch (const std::invalid_argument&) {
    ec = boost::asio::error::invalid_argument;
  } catch (const std::logic_error&) {
    ec = boost::asio::error::already_started;
  } catch (const std::bad_alloc&) {
    ec = boost::asio::error::no_memory;
  } catch (const boost::system::system_error& e) {
    ec = e.code();  // Asio's timer service could not be made (its reactor's descriptors)
  }
}

wheel_stats stats(execution_context& ctx) {
  // Asking must not create the wheel: configure() would then be refused.
  if (!boost::asio::has_service<wheel_service>(ctx)) return wheel_stats{};
  return boost::asio::use_service<wheel_service>(ctx).stats();
}

}  // namespace twheel
