// twheel/wheel_service: the wheel, its driver timer and the completion of waits.
#include <twheel/wheel_service.hpp>

#include <twheel/detail/asio_scheduler.hpp>

#include <utility>

#include <boost/asio/bind_allocator.hpp>
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

}  // namespace

void wheel_service::validate(const wheel_options& options) {
  timing_wheel::validate(to_config(options));
  if (options.slack.count() < 0) {
    throw std::invalid_argument("twheel: wheel_options.slack must not be negative, got " +
                                std::to_string(options.slack.count()) + " ns");
  }
  if (options.max_per_pass == 0) {
    throw std::invalid_argument("twheel: wheel_options.max_per_pass must be positive, got 0");
  }
}

// For a context without Asio's scheduler (not an io_context or a thread_pool): one posted
// operation per settled wait, which runs its record or, destroyed unrun, destroys it.
class wheel_service::record_runner {
 public:
  explicit record_runner(detail::completion* c) noexcept : record_(c) {}
  record_runner(record_runner&& other) noexcept : record_(std::exchange(other.record_, nullptr)) {}
  record_runner& operator=(record_runner&&) = delete;
  ~record_runner() {
    if (record_) record_->destroy();
  }
  void operator()() { std::exchange(record_, nullptr)->run(); }

 private:
  detail::completion* record_;
};

class wheel_service::driver_handler {
 public:
  using allocator_type = detail::pool_allocator<void>;
  driver_handler(wheel_service* s, std::uint64_t generation) noexcept
      : service_(s), generation_(generation) {}
  allocator_type get_allocator() const noexcept { return allocator_type(service_->posted_); }
  void operator()(const boost::system::error_code& ec) {
    service_->on_driver(generation_, true, ec);
  }

 private:
  wheel_service* service_;
  std::uint64_t generation_;
};

wheel_service::wheel_service(execution_context& ctx)
    : wheel_service(ctx, wheel_options{}) {}

wheel_service::wheel_service(execution_context& ctx, const wheel_options& options)
    : execution_context::service(ctx),
      options_((validate(options), options)),
      origin_(clock_type::now()),
      mutex_(!options.single_threaded && !detail::asio_runs_unlocked(ctx)),
      wheel_(to_config(options)) {}

void wheel_service::attach_executor(boost::asio::any_io_executor ex) {
  lock_type lock(mutex_);
  if (driver_) return;
  executor_ = std::move(ex);
  scheduler_ = detail::scheduler_of(context());
  driver_.emplace(executor_);
  attached_.store(true, std::memory_order_release);
}

wheel_service::~wheel_service() {
  detail::wheels_destroyed.fetch_add(1, std::memory_order_release);
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

// Files the timer of a wait just accepted and makes sure the driver will wake for it.
// Throws only if the driver cannot be armed (then the caller takes the wait back).
void wheel_service::file_wait(detail::timer_state& timer, std::chrono::nanoseconds deadline) {
  ++stats_.pending;
  if (timer.is_pending()) {
    wheel_.reschedule(timer, deadline);
  } else {
    wheel_.insert(timer, deadline);
  }
  ensure_driver();
}

// Undoes file_wait() for a wait that was not accepted after all.
void wheel_service::unfile_wait(detail::timer_state& timer) noexcept {
  --stats_.pending;
  if (!timer.has_waits()) wheel_.remove(timer);
  records_.unreserve();
}

// Queues `op` on its timer and files the timer; if that throws, takes the op back (and
// cuts its cancellation slot loose) before rethrowing, so the caller still owns it.
void wheel_service::file_op(detail::timer_state& timer, std::chrono::nanoseconds deadline,
                            detail::wait_op* op) {
  timer.waits.push(op);
  try {
    file_wait(timer, deadline);
  } catch (...) {
    timer.waits.erase(op);
    op->set_canceller(nullptr);
    unfile_wait(timer);
    throw;
  }
}

bool wheel_service::start_boxed_wait(detail::timer_state& timer,
                                     std::chrono::nanoseconds deadline,
                                     detail::handler_box& handler) {
  lock_type lock(mutex_);
  if (shut_down_) {
    // Asio destroys operations started after shutdown without invoking them.
    lock.unlock();
    handler.complete(detail::wait_result::aborted, false);
    return true;
  }
  if (timer.has_waits()) return false;
  records_.reserve();
  if (options_.max_pending != 0 && stats_.pending >= options_.max_pending) {
    settled rejected;
    settle_box(handler, detail::wait_result::no_buffer_space, rejected);
    ++stats_.rejected;
    hand_over(rejected);
    return true;
  }
  timer.box.take(handler);
  try {
    file_wait(timer, deadline);
  } catch (...) {
    handler.take(timer.box);
    unfile_wait(timer);
    throw;
  }
  return true;
}

void wheel_service::start_wait(detail::timer_state& timer, std::chrono::nanoseconds deadline,
                               detail::wait_op* op, detail::wait_canceller* canceller) {
  lock_type lock(mutex_);
  if (shut_down_) {
    // Asio destroys operations started after shutdown without invoking them.
    op->set_canceller(canceller);
    settle(op, detail::wait_result::aborted);
    lock.unlock();
    op->destroy();
    return;
  }
  records_.reserve();
  op->set_canceller(canceller);
  if (options_.max_pending != 0 && stats_.pending >= options_.max_pending) {
    settled rejected;
    settle_op(op, detail::wait_result::no_buffer_space, rejected);
    ++stats_.rejected;
    hand_over(rejected);
    return;
  }
  file_op(timer, deadline, op);
}

void wheel_service::schedule(detail::timer_state& timer, std::chrono::nanoseconds deadline,
                             detail::wait_op* op) {
  lock_type lock(mutex_);
  if (shut_down_) {
    lock.unlock();
    op->destroy();
    return;
  }
  records_.reserve();
  file_op(timer, deadline, op);
}

bool wheel_service::unschedule(detail::timer_state& timer, detail::wait_op* op) noexcept {
  lock_type lock(mutex_);
  if (!timer.waits.erase(op)) return false;
  --stats_.pending;
  records_.unreserve();
  if (timer.waits.empty()) wheel_.remove(timer);
  if (stats_.pending == 0) disarm_driver();
  return true;
}

void wheel_service::settle_box(detail::handler_box& box, detail::wait_result result,
                               settled& out) noexcept {
  detail::completion& c = records_.emplace();
  c.box.take(box);
  c.set_result(result);
  out.ops.push(&c);
  ++out.count;
}

void wheel_service::settle_op(detail::wait_op* op, detail::wait_result result,
                              settled& out) noexcept {
  settle(op, result);
  detail::completion& c = records_.emplace();
  c.box.emplace_op(op);
  c.set_result(result);
  out.ops.push(&c);
  ++out.count;
}

// Moves up to `max` waits of `timer`, oldest first, into records. Uses up their
// reservations; never allocates.
std::size_t wheel_service::settle_waits(detail::timer_state& timer, std::size_t max,
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

std::size_t wheel_service::abort_waits(detail::timer_state& timer, std::size_t max) noexcept {
  settled aborted;
  const std::size_t count = settle_waits(timer, max, detail::wait_result::aborted, aborted);
  if (count != 0) {
    stats_.pending -= count;
    stats_.cancelled += count;
    hand_over(aborted);
    // No wait left: nothing may keep run() from returning.
    if (stats_.pending == 0) disarm_driver();
  }
  return count;
}

// Gives settled waits to the context, each one operation. Called under the lock, so that
// run() cannot see the context out of work between settling and handing over. Asio's
// scheduler counts the batch's work with one atomic add and queues it under one lock.
void wheel_service::hand_over(settled& batch) noexcept {
  if (batch.count == 0) return;
  if (scheduler_) {
    scheduler_->post_immediate_completions(batch.count, batch.ops, false);
    batch.count = 0;
    return;
  }
  stranded_.push(batch.ops);
  batch.count = 0;
  while (auto* op = stranded_.front()) {
    try {
      boost::asio::post(executor_, record_runner(static_cast<detail::completion*>(op)));
    } catch (...) {
      // Out of memory: the rest stay here until the next hand-over.
      return;
    }
    stranded_.pop();
  }
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
  if (!timer.has_waits()) wheel_.remove(timer);
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
  to.box.take(from.box);
  to.waits.splice_back(from.waits);
  to.waits.for_each([&to](detail::wait_op* op) {
    if (detail::wait_canceller* c = op->canceller()) c->timer_ = &to;
  });
}

void wheel_service::cancel_wait(detail::wait_canceller& canceller) noexcept {
  lock_type lock(mutex_);
  detail::timer_state* timer = canceller.timer_;
  if (timer == nullptr || !timer->waits.erase(canceller.op_)) return;
  settled aborted;
  settle_op(canceller.op_, detail::wait_result::aborted, aborted);
  --stats_.pending;
  ++stats_.cancelled;
  if (!timer->has_waits()) wheel_.remove(*timer);
  hand_over(aborted);
  if (stats_.pending == 0) disarm_driver();
}

void wheel_service::detach_canceller(detail::wait_canceller& canceller) noexcept {
  lock_type lock(mutex_);
  if (canceller.timer_ == nullptr) return;  // settled meanwhile
  canceller.op_->set_canceller(nullptr);
  canceller.timer_ = nullptr;
  canceller.service_.store(nullptr, std::memory_order_release);
}

void wheel_service::ensure_driver() {
  auto next = wheel_.next_expiry();
  if (!next) return;
  // A future slot may be served up to `slack` late, so that one wake-up takes whatever
  // comes due meanwhile; a pass already due runs at once.
  if (*next > wheel_.now()) {
    const auto room = std::chrono::nanoseconds::max() - *next;
    *next += options_.slack < room ? options_.slack : room;
  }
  if (armed_at_ && *armed_at_ <= *next) return;
  arm_driver(*next);
}

void wheel_service::arm_driver(std::chrono::nanoseconds at) {
  // The memory of the wait or pass below, made before anything changes: once expires_at()
  // has cancelled the armed wait, a failing allocation would leave the accepted waits
  // with no driver (the fault-injection test found it). Both draw from posted_.
  posted_.reserve(1);
  if (at <= wheel_.now()) {
    // Already due (or a bounded pass left work): run a pass after what is queued. A wait
    // still pending on the internal timer would keep run() from returning: cancel it.
    const std::uint64_t generation = generation_ + 1;
    boost::asio::post(executor_,
                      boost::asio::bind_allocator(
                          detail::pool_allocator<void>(posted_),
                          [this, generation] { on_driver(generation, false, {}); }));
    generation_ = generation;
    armed_at_ = at;
    if (timer_armed_) {
      timer_armed_ = false;
      driver_->cancel();
    }
    return;
  }
  const auto headroom = clock_type::time_point::max() - origin_;
  // expires_at() cancels the wait we had; should async_wait() then throw, the driver is
  // unarmed and says so, and the next ensure_driver() arms it.
  armed_at_.reset();
  timer_armed_ = false;
  driver_->expires_at(at >= headroom ? clock_type::time_point::max() : origin_ + at);
  driver_->async_wait(driver_handler(this, generation_ + 1));
  ++generation_;
  armed_at_ = at;
  timer_armed_ = true;
}

void wheel_service::disarm_driver() noexcept {
  ++generation_;
  armed_at_.reset();
  if (timer_armed_) {
    timer_armed_ = false;
    driver_->cancel();
  }
}

// A driver pass: detaches the due timers and settles their waits; the first handler runs
// as this operation's own (so that a pass is one operation of the context with one
// handler, as an expiring Asio timer is), the others go to the context.
void wheel_service::on_driver(std::uint64_t generation, bool from_timer,
                              const boost::system::error_code& ec) {
  detail::completion* first = nullptr;
  {
    lock_type lock(mutex_);
    // A superseded arm, a disarm or shutdown: a newer arm (if any) is still pending.
    if (generation != generation_ || shut_down_) return;
    armed_at_.reset();
    if (from_timer) timer_armed_ = false;
    if (ec) return;
    ++stats_.wakeups;
    wheel_entry_list due;
    const std::chrono::nanoseconds now = wheel_time(clock_type::now());
    wheel_.advance(now, due, options_.max_per_pass);
    settled fired;
    while (!due.empty()) {
      auto& timer = static_cast<detail::timer_state&>(due.pop_front());
      // An idle timer touched since it was filed: re-filed at its last touch + period.
      if (timer.idle && refile_idle(timer, now)) continue;
      const std::size_t count =
          settle_waits(timer, static_cast<std::size_t>(-1), detail::wait_result::success, fired);
      stats_.pending -= count;
      stats_.fired += count;
    }
    if (fired.count != 0) {
      first = static_cast<detail::completion*>(fired.ops.front());
      fired.ops.pop();
      --fired.count;
      hand_over(fired);
    }
    // Its own block went back to posted_ before this ran: arm_driver() finds it there.
    if (stats_.pending != 0) ensure_driver();
  }
  if (first) first->run();
}

bool wheel_service::refile_idle(detail::timer_state& timer, std::chrono::nanoseconds now) noexcept {
  return detail::refile_if_touched(wheel_, static_cast<detail::idle_entry&>(timer), now,
                                   [this](clock_type::time_point t) { return wheel_time(t); });
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
    ++generation_;
    armed_at_.reset();
    // The scheduler shuts down after us and destroys what it holds, ours included.
    if (scheduler_) hand_over(doomed);
    doomed.ops.push(stranded_);
  }
  // Destroying handlers may destroy timers, which call back into destroy(): unlocked.
  while (auto* op = doomed.ops.front()) {
    doomed.ops.pop();
    op->destroy();
  }
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
