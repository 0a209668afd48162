// twheel/wheel_driver: arming, disarming and refusing stale wake-ups of a wheel.
#include <twheel/detail/wheel_driver.hpp>

#include <boost/asio/post.hpp>
#include <boost/system/error_code.hpp>

#include <new>
#include <utility>

namespace twheel::detail {

class wheel_driver::timer_handler {
 public:
  using allocator_type = pool_allocator<void>;
  timer_handler(wheel_driver* d, std::uint64_t generation) noexcept
      : driver_(d), generation_(generation) {}
  allocator_type get_allocator() const noexcept { return allocator_type(driver_->pool_); }
  // Cancelled or not: accept() decides by the generation alone.
  void operator()(const boost::system::error_code&) {
    driver_->pass_(driver_->owner_, generation_, true);
  }

 private:
  wheel_driver* driver_;
  std::uint64_t generation_;
};

// A pass already due, queued on the context's scheduler as an operation of its own: its
// memory is a block of the driver's pool, so a pass that re-arms the driver this way (a
// bounded pass that left work, an early walk's next step, the touch epoch's tick) does not
// allocate. A function posted through the context's any_io_executor did: the executor
// drops the allocator it is given, and Asio's per-thread cache, empty at each run(), took
// the first one from the heap. Out of memory, run() threw and the waits still pending
// never completed (a review found it).
class wheel_driver::pass_op final : public boost::asio::detail::scheduler_operation {
 public:
  pass_op(wheel_driver* d, std::uint64_t generation) noexcept
      : scheduler_operation(&pass_op::do_complete), driver_(d), generation_(generation) {}

 private:
  // Run (owner set), or destroyed unrun by the scheduler's shutdown, which comes before
  // the driver goes. The block goes back before the pass, as an Asio handler's memory does.
  static void do_complete(void* owner, scheduler_operation* base,
                          const boost::system::error_code&, std::size_t) {
    auto* op = static_cast<pass_op*>(base);
    wheel_driver* driver = op->driver_;
    const std::uint64_t generation = op->generation_;
    op->~pass_op();
    driver->posted_.give_back(op);
    if (owner != nullptr) driver->pass_(driver->owner_, generation, false);
  }

  wheel_driver* driver_;
  std::uint64_t generation_;
};

wheel_driver::wheel_driver(const boost::asio::any_io_executor& ex, clock_type::time_point origin,
                           std::chrono::nanoseconds slack, pass_fn pass, void* owner,
                           boost::asio::detail::scheduler* scheduler)
    : executor_(ex),
      origin_(origin),
      slack_(slack),
      pass_(pass),
      owner_(owner),
      scheduler_(scheduler),
      pool_(scheduler != nullptr ? &posted_ : nullptr) {
  static_assert(sizeof(pass_op) <= block_pool::block_size &&
                alignof(pass_op) <= alignof(std::max_align_t));
  // The standby's timer is made by the first stand_by(): a context that never has two
  // wake-ups in view (a test's, a short-lived client's) makes one timer, not two.
  timers_[0].emplace(executor_);
}

void wheel_driver::ensure(std::chrono::nanoseconds next, std::chrono::nanoseconds now,
                          std::optional<std::chrono::nanoseconds> following) {
  // A future slot may be served up to `slack` late, so that one wake-up takes whatever
  // comes due meanwhile; a pass already due runs at once.
  if (next > now) {
    const auto room = std::chrono::nanoseconds::max() - next;
    next += slack_ < room ? slack_ : room;
  }
  if (armed_at_ && *armed_at_ <= next) return;
  if (standby_at_ && *standby_at_ == next && !timer_armed_) {
    // The standby already waits there: it becomes the wake-up, with no system call.
    wake_ = 1 - wake_;
    generation_ = standby_generation_;
    armed_at_ = next;
    timer_armed_ = true;
    standby_at_.reset();
  } else {
    arm(next, now);
  }
  if (stands_by() && following && next > now && *following > next) {
    stand_by(*following);
  } else if (standby_at_ && *standby_at_ <= next) {
    cancel_standby();  // it would only wake the reactor for nothing
  }
}

wheel_driver::clock_type::time_point wheel_driver::clock_time(
    std::chrono::nanoseconds at) const noexcept {
  const auto headroom = clock_type::time_point::max() - origin_;
  return at >= headroom ? clock_type::time_point::max() : origin_ + at;
}

// The wanted wake-up becomes a pass after what is queued, for `at` (already due). With
// a scheduler, posted_ holds a block for it (reserve()), so it does not throw.
void wheel_driver::arm_pass(std::chrono::nanoseconds at) {
  const std::uint64_t generation = next_generation();
  if (scheduler_ != nullptr) {
    scheduler_->post_immediate_completion(::new (posted_.take()) pass_op(this, generation),
                                          false);
  } else {
    boost::asio::post(executor_, [this, generation] { pass_(owner_, generation, false); });
  }
  generation_ = issue();
  armed_at_ = at;
}

void wheel_driver::arm(std::chrono::nanoseconds at, std::chrono::nanoseconds now) {
  // The memory of the wait or pass below, made before anything changes: once expires_at()
  // has cancelled the armed wait, a failing allocation would leave the accepted waits
  // with no driver (the fault-injection test found it). Both draw from posted_.
  if (pool_) posted_.reserve(1);
  if (at <= now) {
    // Already due (or a bounded pass left work): run a pass after what is queued. A wait
    // still pending on the internal timer would keep run() from returning: cancel it.
    arm_pass(at);
    if (timer_armed_) {
      timer_armed_ = false;
      timer().cancel();
    }
    return;
  }
  armed_at_.reset();
  timer_armed_ = false;
  try {
    timer().expires_at(clock_time(at));
    timer().async_wait(timer_handler(this, next_generation()));
  } catch (...) {
    // Asio's timer queue could not grow (the wait's own memory is pooled here), or, with
    // no scheduler, the wait's memory. expires_at() cancelled the wait we had, if any,
    // which still comes as a wake-up of the wanted generation (accept()); but a pass
    // re-arming the driver had none. With a scheduler, a pass queued now keeps the waits
    // awake: its block is the failed wait's, given back (should reserve() still throw,
    // the driver is unarmed and says so, as without a scheduler).
    if (scheduler_ != nullptr) {
      posted_.reserve(1);
      arm_pass(now);
    }
    throw;
  }
  generation_ = issue();
  armed_at_ = at;
  timer_armed_ = true;
}

void wheel_driver::stand_by(std::chrono::nanoseconds at) noexcept {
  if (standby_at_ && *standby_at_ == at) return;
  // Later than the armed wake-up, so Asio's timerfd is not set for it. Only a help: if
  // its memory cannot be had, there is no standby.
  try {
    if (pool_) posted_.reserve(1);
    if (!timers_[1 - wake_]) timers_[1 - wake_].emplace(executor_);
    standby_at_.reset();
    standby().expires_at(clock_time(at));
    standby().async_wait(timer_handler(this, next_generation()));
  } catch (...) {
    return;
  }
  standby_generation_ = issue();
  standby_at_ = at;
}

void wheel_driver::cancel_standby() noexcept {
  if (standby_at_) {
    standby_at_.reset();
    standby().cancel();
  }
}

void wheel_driver::requeue(std::chrono::nanoseconds now) {
  // arm() posts a pass with a new generation (the old wake-up is refused when it runs),
  // and cancels the armed timer's wait, if any. The standby keeps its place.
  arm(*armed_at_, now);
}

void wheel_driver::disarm() noexcept {
  generation_ = issue();
  armed_at_.reset();
  if (timer_armed_) {
    timer_armed_ = false;
    timer().cancel();
  }
  cancel_standby();  // nothing may keep run() from returning
}

bool wheel_driver::accept(std::uint64_t generation, bool from_timer) noexcept {
  // The standby expiring while it is not the wake-up: its time is no longer wanted.
  if (standby_at_ && generation == standby_generation_) {
    standby_at_.reset();
    return false;
  }
  // A superseded arm or a disarm: a newer arm (if any) is still pending.
  if (generation != generation_) return false;
  woke_for_ = from_timer ? armed_at_ : std::nullopt;
  armed_at_.reset();
  if (from_timer) timer_armed_ = false;
  // Also when cancelled (operation_aborted): only an arm() whose async_wait() threw after
  // expires_at() cancels the wanted wait without a newer generation. Its pass arms the
  // driver again; refused, it left the pending waits with no wake-up (a review found it).
  return true;
}

void wheel_driver::release() noexcept {
  generation_ = issue();
  armed_at_.reset();
  standby_at_.reset();
  timer_armed_ = false;
  timers_[0].reset();
  timers_[1].reset();
}

}  // namespace twheel::detail
