// twheel/wheel_service: the wheel, its driver timer and the completion of waits.
#include <twheel/wheel_service.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <stdexcept>
#include <string>

namespace twheel {

namespace {

using clock_type = wheel_service::clock_type;
using boost::asio::execution_context;

wheel_config to_config(const wheel_options& options) {
  return wheel_config{options.tick, options.levels};
}

// Records how a wait ended and cuts its cancellation slot loose: a later emit is a no-op.
void settle(detail::wait_op* op, detail::wait_result result) noexcept {
  op->set_result(result);
  if (detail::wait_canceller* c = op->canceller()) {
    c->timer_ = nullptr;
    c->service_.store(nullptr, std::memory_order_release);
    op->set_canceller(nullptr);
  }
}

// Runs the rest of a batch later if a handler throws out of it.
struct batch_guard {
  wheel_service* service;
  detail::op_queue& ops;
  void (wheel_service::*requeue)(detail::op_queue&) noexcept;
  ~batch_guard() {
    if (!ops.empty()) (service->*requeue)(ops);
  }
};

}  // namespace

void wheel_service::validate(const wheel_options& options) {
  timing_wheel::validate(to_config(options));
  if (options.max_per_pass == 0) {
    throw std::invalid_argument("twheel: wheel_options.max_per_pass must be positive, got 0");
  }
}

wheel_service::wheel_service(execution_context& ctx)
    : wheel_service(ctx, wheel_options{}) {}

wheel_service::wheel_service(execution_context& ctx, const wheel_options& options)
    : execution_context::service(ctx),
      options_((validate(options), options)),
      origin_(clock_type::now()),
      wheel_(to_config(options)) {}

void wheel_service::attach_executor(boost::asio::any_io_executor ex) {
  lock_type lock(mutex_);
  if (driver_) return;
  executor_ = std::move(ex);
  driver_.emplace(executor_);
  attached_.store(true, std::memory_order_release);
}

wheel_service::~wheel_service() = default;

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

void wheel_service::start_wait(detail::timer_state& timer, std::chrono::nanoseconds deadline,
                               detail::wait_op* op, detail::wait_canceller* canceller) {
  lock_type lock(mutex_);
  op->set_canceller(canceller);
  if (shut_down_) {
    // Asio destroys operations started after shutdown without invoking them.
    settle(op, detail::wait_result::aborted);
    lock.unlock();
    op->destroy();
    return;
  }
  if (options_.max_pending != 0 && stats_.pending >= options_.max_pending) {
    retire(op, detail::wait_result::no_buffer_space);
    ++stats_.rejected;
    ensure_drain();
    return;
  }
  timer.waits.push(op);
  ++stats_.pending;
  if (timer.is_pending()) {
    wheel_.reschedule(timer, deadline);
  } else {
    wheel_.insert(timer, deadline);
  }
  ensure_driver();
}

void wheel_service::schedule(detail::timer_state& timer, std::chrono::nanoseconds deadline,
                             detail::wait_op* op) {
  lock_type lock(mutex_);
  if (shut_down_) {
    lock.unlock();
    op->destroy();
    return;
  }
  timer.waits.push(op);
  ++stats_.pending;
  wheel_.reschedule(timer, deadline);
  ensure_driver();
}

bool wheel_service::unschedule(detail::timer_state& timer, detail::wait_op* op) noexcept {
  lock_type lock(mutex_);
  if (!timer.waits.erase(op)) return false;
  --stats_.pending;
  if (timer.waits.empty()) wheel_.remove(timer);
  // Let the driver be disarmed if that was the last wait (drain decides, see drain()).
  if (stats_.pending == 0) ensure_drain();
  return true;
}

void wheel_service::retire(detail::wait_op* op, detail::wait_result result) noexcept {
  settle(op, result);
  ready_.push(op);
}

std::size_t wheel_service::abort_waits(detail::timer_state& timer, std::size_t max) noexcept {
  std::size_t count = 0;
  while (count < max && !timer.waits.empty()) {
    retire(timer.waits.pop(), detail::wait_result::aborted);
    ++count;
  }
  if (count != 0) {
    stats_.pending -= count;
    stats_.cancelled += count;
    ensure_drain();
  }
  return count;
}

std::size_t wheel_service::cancel(detail::timer_state& timer) {
  lock_type lock(mutex_);
  const std::size_t count = abort_waits(timer, static_cast<std::size_t>(-1));
  // A timer with no waits leaves the wheel, so it cannot keep the driver busy.
  wheel_.remove(timer);
  return count;
}

std::size_t wheel_service::cancel_one(detail::timer_state& timer) {
  lock_type lock(mutex_);
  const std::size_t count = abort_waits(timer, 1);
  if (timer.waits.empty()) wheel_.remove(timer);
  return count;
}

std::size_t wheel_service::expires_at(detail::timer_state& timer,
                                      clock_type::time_point deadline) {
  lock_type lock(mutex_);
  const std::size_t count = abort_waits(timer, static_cast<std::size_t>(-1));
  // Later: only the deadline is stored and the entry is re-filed when its old slot comes
  // due (the cheap path of re-arming timeouts). Earlier: re-filed now.
  if (timer.is_pending()) wheel_.reschedule(timer, wheel_time(deadline));
  return count;
}

void wheel_service::destroy(detail::timer_state& timer) noexcept {
  lock_type lock(mutex_);
  abort_waits(timer, static_cast<std::size_t>(-1));
  wheel_.remove(timer);
}

void wheel_service::move(detail::timer_state& to, detail::timer_state& from) noexcept {
  lock_type lock(mutex_);
  wheel_.replace(from, to);
  to.waits.splice_back(from.waits);
  to.waits.for_each([&to](detail::wait_op* op) {
    if (detail::wait_canceller* c = op->canceller()) c->timer_ = &to;
  });
}

void wheel_service::cancel_wait(detail::wait_canceller& canceller) noexcept {
  lock_type lock(mutex_);
  detail::timer_state* timer = canceller.timer_;
  if (timer == nullptr || !timer->waits.erase(canceller.op_)) return;
  retire(canceller.op_, detail::wait_result::aborted);
  --stats_.pending;
  ++stats_.cancelled;
  if (timer->waits.empty()) wheel_.remove(*timer);
  ensure_drain();
}

void wheel_service::detach_canceller(detail::wait_canceller& canceller) noexcept {
  lock_type lock(mutex_);
  if (canceller.timer_ == nullptr) return;  // settled meanwhile
  canceller.op_->set_canceller(nullptr);
  canceller.timer_ = nullptr;
  canceller.service_.store(nullptr, std::memory_order_release);
}

void wheel_service::ensure_drain() noexcept {
  if (drain_posted_) return;
  drain_posted_ = true;
  boost::asio::post(executor_, [this] { drain(); });
}

void wheel_service::ensure_driver() noexcept {
  const auto next = wheel_.next_expiry();
  if (!next || (armed_at_ && *armed_at_ <= *next)) return;
  arm_driver(*next);
}

void wheel_service::arm_driver(std::chrono::nanoseconds at) noexcept {
  const std::uint64_t generation = ++generation_;
  armed_at_ = at;
  if (at <= wheel_.now()) {
    // Already due (or a bounded pass left work): run a pass after what is queued. A wait
    // still pending on the internal timer would keep run() from returning: cancel it.
    if (timer_armed_) {
      timer_armed_ = false;
      driver_->cancel();
    }
    boost::asio::post(executor_, [this, generation] { on_driver(generation, false, {}); });
    return;
  }
  const auto headroom = clock_type::time_point::max() - origin_;
  driver_->expires_at(at >= headroom ? clock_type::time_point::max() : origin_ + at);
  timer_armed_ = true;
  driver_->async_wait([this, generation](const boost::system::error_code& ec) {
    on_driver(generation, true, ec);
  });
}

void wheel_service::disarm_driver() noexcept {
  ++generation_;
  armed_at_.reset();
  if (timer_armed_) {
    timer_armed_ = false;
    driver_->cancel();
  }
}

void wheel_service::on_driver(std::uint64_t generation, bool from_timer,
                              const boost::system::error_code& ec) {
  detail::op_queue fired;
  {
    lock_type lock(mutex_);
    // A superseded arm, a disarm or shutdown: a newer arm (if any) is still pending.
    if (generation != generation_ || shut_down_) return;
    armed_at_.reset();
    if (from_timer) timer_armed_ = false;
    if (ec) return;
    ++stats_.wakeups;
    wheel_entry_list due;
    wheel_.advance(wheel_time(clock_type::now()), due, options_.max_per_pass);
    while (!due.empty()) {
      auto& timer = static_cast<detail::timer_state&>(due.pop_front());
      while (!timer.waits.empty()) {
        detail::wait_op* op = timer.waits.pop();
        settle(op, detail::wait_result::success);
        fired.push(op);
        --stats_.pending;
        ++stats_.fired;
      }
    }
    if (stats_.pending != 0) ensure_driver();
  }
  complete(fired);
}

void wheel_service::drain() {
  detail::op_queue ops;
  {
    lock_type lock(mutex_);
    drain_posted_ = false;
    ops.splice_back(ready_);
    // The last wait went away: nothing may keep run() from returning.
    if (stats_.pending == 0) disarm_driver();
  }
  complete(ops);
}

void wheel_service::complete(detail::op_queue& ops) {
  batch_guard guard{this, ops, &wheel_service::requeue};
  while (!ops.empty()) ops.pop()->complete();
}

void wheel_service::requeue(detail::op_queue& ops) noexcept {
  lock_type lock(mutex_);
  if (shut_down_) {
    lock.unlock();
    while (!ops.empty()) ops.pop()->destroy();
    return;
  }
  ready_.splice_front(ops);
  ensure_drain();
}

void wheel_service::shutdown() {
  detail::op_queue doomed;
  {
    lock_type lock(mutex_);
    shut_down_ = true;
    wheel_entry_list all;
    wheel_.detach_all(all);
    while (!all.empty()) {
      auto& timer = static_cast<detail::timer_state&>(all.pop_front());
      while (!timer.waits.empty()) {
        detail::wait_op* op = timer.waits.pop();
        settle(op, detail::wait_result::aborted);
        doomed.push(op);
      }
    }
    doomed.splice_back(ready_);
    stats_.pending = 0;
    ++generation_;
    armed_at_.reset();
  }
  // Destroying handlers may destroy timers, which call back into destroy(): unlocked.
  while (!doomed.empty()) doomed.pop()->destroy();
  // The driver's service was registered after us, so it is destroyed before us: let go
  // of the driver while that service is still there.
  driver_.reset();
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
  }
}

wheel_stats stats(execution_context& ctx) {
  // Asking must not create the wheel: configure() would then be refused.
  if (!boost::asio::has_service<wheel_service>(ctx)) return wheel_stats{};
  return boost::asio::use_service<wheel_service>(ctx).stats();
}

}  // namespace twheel
