// twheel/wheel_service: the fast path. Starting, re-arming and cancelling waits, each under
// one acquisition of the wheel's lock.
#include <twheel/wheel_service.hpp>

namespace twheel {

// Files the timer of a wait just accepted and makes sure the driver will wake for it.
// Throws only if the driver cannot be armed (then the caller takes the wait back).
void wheel_service::file_wait(detail::timer_state& timer, std::chrono::nanoseconds deadline) {
  ++stats_.pending;
  const std::chrono::nanoseconds floor = timer.is_pending() ? wheel_.reschedule(timer, deadline)
                                                            : wheel_.insert(timer, deadline);
  timer.filed_pass = filed_stamp(timer);
  // The wheel's next expiry is no earlier than `floor` unless it was already: a driver
  // wanted by then needs nothing, and next_expiry() (a scan of the levels) is skipped.
  if (!driver_->wanted_by(floor)) ensure_driver();
}

// Undoes file_wait() for a wait that was not accepted after all. `was_filed`: the timer
// had a place in the wheel before (kept after cancel()), which it keeps, as cancel() does.
void wheel_service::unfile_wait(detail::timer_state& timer, bool was_filed) noexcept {
  --stats_.pending;
  if (!was_filed && !timer.has_waits()) wheel_.remove(timer);
  records_.unreserve();
}

// Queues `op` on its timer and files the timer; if that throws, takes the op back (and
// cuts its cancellation slot loose) before rethrowing, so the caller still owns it.
void wheel_service::file_op(detail::timer_state& timer, std::chrono::nanoseconds deadline,
                            detail::wait_op* op) {
  const bool was_filed = timer.is_pending();
  const std::uint64_t filed_tick = timer.deadline_tick();
  timer.waits.push(op);
  try {
    file_wait(timer, deadline);
  } catch (...) {
    timer.waits.erase(op);
    op->set_link(nullptr);
    unfile_wait(timer, was_filed);
    // The waits it has (a replacement's) stay at their deadline, not the refused one's.
    if (was_filed) wheel_.undo_reschedule(timer, filed_tick);
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
  if (refuses(timer)) {
    settled rejected;
    settle_box(handler, detail::wait_result::no_buffer_space, rejected);
    ++stats_.rejected;
    hand_over(rejected);
    return true;
  }
  const bool was_filed = timer.is_pending();  // a kept place: no wait to keep on time
  timer.box.take(handler);
  try {
    file_wait(timer, deadline);
  } catch (...) {
    handler.take(timer.box);
    unfile_wait(timer, was_filed);
    throw;
  }
  return true;
}

void wheel_service::start_wait(detail::timer_state& timer, std::chrono::nanoseconds deadline,
                               detail::wait_op* op, detail::wait_canceller* canceller,
                               bool replace) {
  lock_type lock(mutex_);
  if (shut_down_) {
    // Asio destroys operations started after shutdown without invoking them.
    op->set_link(canceller);
    settle(op, detail::wait_result::aborted);
    lock.unlock();
    op->destroy();
    return;
  }
  records_.reserve();
  op->set_link(canceller);
  // Waits the last pass saw due are completed, not aborted by a replacement, nor left to
  // share the timer with the new wait, which that pass did not see (seen_due() is the
  // timer's, for all its waits). Done before the filing changes what seen_due() says;
  // abort_waits() below then finds no seen waits left.
  if (seen_due(timer)) complete_seen_due(timer);
  // The waits a replacement aborts, oldest first (the box's, then the queue's). They are
  // aborted only once the new wait is filed: filing may re-arm the driver, which may
  // throw, and then they stay pending (aborted first, they were lost with the re-arm).
  // The driver, armed for them, may then wake once for nothing: early, never late.
  std::size_t replaced = 0;
  if (replace) {
    replaced = timer.box.empty() ? 0 : 1;
    timer.waits.for_each([&replaced](detail::wait_op*) { ++replaced; });
  }
  if (refuses(timer, replaced)) {
    if (replaced != 0) abort_waits(timer, replaced);
    settled rejected;
    settle_op(op, detail::wait_result::no_buffer_space, rejected);
    ++stats_.rejected;
    hand_over(rejected);
    return;
  }
  file_op(timer, deadline, op);
  if (replaced != 0) abort_waits(timer, replaced);
}

void wheel_service::refile(detail::timer_state& timer, clock_type::time_point deadline) {
  const std::chrono::nanoseconds at = wheel_time(deadline);
  lock_type lock(mutex_);
  if (shut_down_ || !timer.has_waits()) return;
  const std::uint64_t filed_tick = timer.deadline_tick();
  const std::uint16_t filed_pass = timer.filed_pass;
  const std::chrono::nanoseconds floor = wheel_.reschedule(timer, at);
  timer.filed_pass = filed_stamp(timer);  // no pass saw it there
  try {
    if (!driver_->wanted_by(floor)) ensure_driver();
  } catch (...) {
    wheel_.undo_reschedule(timer, filed_tick);
    timer.filed_pass = filed_pass;
    throw;
  }
}

void wheel_service::schedule(detail::timer_state& timer, std::chrono::nanoseconds deadline,
                             detail::wait_op* op) {
  lock_type lock(mutex_);
  schedule_locked(lock, timer, deadline, op);
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

// A timer's expires_*() calls this too. A timer left without waits keeps its place in the
// wheel: taking it out would write its two neighbours in the slot's list, random other timers at scale
// (two cache misses the unlock then waits for). The next async_wait reuses the place (a
// later expiry is only stored); if none comes, the driver drops the entry when its slot
// comes due, and is not armed for it once no wait is pending (abort_waits()). Only the
// timer's destruction unlinks it.
std::size_t wheel_service::cancel(detail::timer_state& timer) {
  lock_type lock(mutex_);
  return abort_waits(timer, static_cast<std::size_t>(-1));
}

std::size_t wheel_service::cancel_one(detail::timer_state& timer) {
  lock_type lock(mutex_);
  return abort_waits(timer, 1);
}

void wheel_service::destroy(detail::timer_state& timer) noexcept {
  lock_type lock(mutex_);
  abort_waits(timer, static_cast<std::size_t>(-1));
  wheel_.remove(timer);
}

void wheel_service::complete_seen_due(detail::timer_state& timer) noexcept {
  settled fired;
  const std::size_t count =
      settle_waits(timer, static_cast<std::size_t>(-1), detail::wait_result::success, fired);
  stats_.pending -= count;
  stats_.fired += count;
  hand_over(fired);
  if (stats_.pending == 0) disarm_driver();
}

void wheel_service::move(detail::timer_state& to, detail::timer_state& from) noexcept {
  lock_type lock(mutex_);
  wheel_.replace(from, to);
  to.filed_pass = from.filed_pass;
  to.box.take(from.box);
  to.waits.splice_back(from.waits);
  to.waits.for_each([&to](detail::wait_op* op) {
    // A timer's waits link to cancellers only: a cancel_after state's entry never moves.
    if (detail::wait_link* link = op->link()) {
      static_cast<detail::wait_canceller*>(link)->timer_ = &to;
    }
  });
}

void wheel_service::cancel_wait(detail::wait_canceller& canceller) noexcept {
  lock_type lock(mutex_);
  if (canceller.service_.load(std::memory_order_relaxed) == nullptr) return;  // settled
  if (!canceller.timer_->waits.erase(canceller.op_)) return;
  settled ended;
  --stats_.pending;
  if (seen_due(*canceller.timer_)) {
    settle_op(canceller.op_, detail::wait_result::success, ended);
    ++stats_.fired;
  } else {
    settle_op(canceller.op_, detail::wait_result::aborted, ended);
    ++stats_.cancelled;
  }
  hand_over(ended);  // the timer keeps its place, as in cancel()
  if (stats_.pending == 0) disarm_driver();
}

void wheel_service::detach_canceller(detail::wait_canceller& canceller) noexcept {
  lock_type lock(mutex_);
  if (canceller.service_.load(std::memory_order_relaxed) == nullptr) return;  // settled
  canceller.op_->set_link(nullptr);
  canceller.service_.store(nullptr, std::memory_order_release);
}

}  // namespace twheel
