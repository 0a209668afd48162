// twheel/wheel_service: how waits end. Settling them into records, handing the records to
// the context, and the driver's pass over the due timers.
#include <twheel/wheel_service.hpp>

#include <twheel/detail/asio_scheduler.hpp>

#include <boost/asio/post.hpp>

#include <algorithm>
#include <cassert>
#include <new>
#include <utility>

namespace twheel {

// Records how a wait ended and cuts its link: a later emit into its cancellation slot is a
// no-op, and a cancel_after state sees its timeout out of the wheel.
void wheel_service::settle(detail::wait_op* op, detail::wait_result result) noexcept {
  op->set_result(result);
  if (detail::wait_link* link = op->link()) {
    link->service_.store(nullptr, std::memory_order_release);
    op->set_link(nullptr);
  }
}

// For a context without Asio's scheduler: each settled wait is posted to the context as an
// operation that owns the wait's handler, moved out of its record. Not the record itself:
// such a context may destroy its queue after its services (Asio's priority_scheduler
// example does), when the records' blocks are gone with the wheel.
struct wheel_service::foreign_record {
  detail::handler_box box;
  detail::wait_result result;
};

namespace {
// The record hand_over_now() is posting on this thread: if post() throws, the runner it
// made is destroyed while unwinding, and must leave the handler to the record it came
// from (it stays stranded until the next hand-over).
thread_local const void* record_being_posted = nullptr;
}  // namespace

class wheel_service::record_runner {
 public:
  explicit record_runner(foreign_record* r) noexcept : record_(r) {}
  record_runner(record_runner&& other) noexcept : record_(std::exchange(other.record_, nullptr)) {}
  record_runner& operator=(record_runner&&) = delete;
  ~record_runner() {
    if (record_ == nullptr || record_ == record_being_posted) return;
    // Destroyed unrun (the context shut down): the handler is destroyed, not invoked.
    record_->box.complete(record_->result, false);
    delete record_;
  }
  void operator()() {
    // The memory goes before the upcall, as a record's does.
    detail::handler_box handler;
    handler.take(record_->box);
    const detail::wait_result result = record_->result;
    delete std::exchange(record_, nullptr);
    handler.complete(result, true);
  }

 private:
  foreign_record* record_;
};

void wheel_service::settle_op(detail::wait_op* op, detail::wait_result result,
                              settled& out) noexcept {
  settle(op, result);
  detail::completion& c = records_.emplace(result);
  c.box.emplace_op(op);
  out.ops.push(&c);
  ++out.count;
}

std::size_t wheel_service::abort_settled(detail::timer_state& timer, std::size_t max) noexcept {
  settled aborted;
  const std::size_t count = settle_waits(timer, max, detail::wait_result::aborted, aborted);
  hand_over(aborted);
  return count == 0 ? 0 : after_abort(count);
}

// Gives settled waits to the context, each one operation. Called under the lock, so that
// run() cannot see the context out of work between settling and handing over.
//
// With Asio's scheduler, the waits join a batch carried by one posted operation (flush_),
// queued when the batch was empty: a wait settled by cancel(), expires_*() or destroy()
// costs an append, not a lock of the scheduler and an atomic add of its work count. Those
// two, paid per re-arm, serialised the cache misses of consecutive re-arms at a million
// timers (perf: 97% of hand_over()'s samples at its lock add). When flush_ runs, it hands
// the batch over as operations of their own and runs the first itself, so each handler is
// still one operation of the context, as in Asio.
void wheel_service::hand_over(settled& batch) noexcept {
  if (batch.count == 0) return;
  if (!scheduler_ || shut_down_) {
    hand_over_now(batch);
    return;
  }
  deferred_.push(batch.ops);
  deferred_count_ += batch.count;
  batch.count = 0;
  queue_flush();
}

// Gives settled waits to the context at once. Asio's scheduler counts the batch's work with
// one atomic add and queues it under one lock.
void wheel_service::hand_over_now(settled& batch) noexcept {
  if (batch.count == 0) return;
  if (scheduler_) {
    scheduler_->post_immediate_completions(batch.count, batch.ops, false);
    batch.count = 0;
    return;
  }
  stranded_.push(batch.ops);
  batch.count = 0;
  // Out of memory: the rest stay here until the next hand-over.
  while (auto* c = static_cast<detail::completion*>(stranded_.front())) {
    auto* r = new (std::nothrow) foreign_record{{}, c->result()};
    if (r == nullptr) return;
    r->box.take(c->box);
    record_being_posted = r;
    try {
      boost::asio::post(executor_, record_runner(r));
    } catch (...) {
      record_being_posted = nullptr;
      c->box.take(r->box);
      delete r;
      return;
    }
    record_being_posted = nullptr;
    stranded_.pop();
    detail::handler_box none;  // the handler went with r
    c->release_into(none);
  }
}

void wheel_service::flush_op::do_complete(void* owner, detail::scheduler_op* base,
                                          const boost::system::error_code&, std::size_t) {
  static_cast<flush_op*>(base)->self_->flush_aborted(owner != nullptr);
}

// Takes the first record of `batch` out and hands the rest over at once: the caller runs
// the first itself, as the handler of the operation it is running. Null for an empty batch.
detail::completion* wheel_service::keep_first(settled& batch) noexcept {
  if (batch.count == 0) return nullptr;
  auto* first = static_cast<detail::completion*>(batch.ops.front());
  batch.ops.pop();
  --batch.count;
  hand_over_now(batch);
  return first;
}

// flush_ ran (invoke) or was destroyed by the scheduler's shutdown (which comes after ours,
// so the batch is already gone: shutdown() destroyed it).
//
// The batch's waits after the first reach the scheduler's queue only now, behind what was
// queued since the first abort. The driver's wake-up may be among that when its time has
// come: its pass would complete the waits it finds due ahead of waits aborted before it
// ran (4, 3, 5 where Asio, which queues each abort at once, gives 4, 5, 3). So a wake-up
// due by now is moved behind the batch.
void wheel_service::flush_aborted(bool invoke) {
  detail::completion* first = nullptr;
  {
    lock_type lock(mutex_);
    flush_queued_ = false;
    if (!invoke) return;
    settled batch;
    batch.ops.push(deferred_);
    batch.count = std::exchange(deferred_count_, 0);
    const bool behind = batch.count > 1;
    first = keep_first(batch);
    if (behind && driver_) {
      const auto now = wheel_time(clock_type::now());
      if (driver_->wanted_by(now)) {
        try {
          driver_->requeue(now);
        } catch (...) {
          // Out of memory: the wake-up keeps its place; only the order suffers.
        }
      }
    }
  }
  if (first) first->run();
}

void wheel_service::ensure_driver() {
  auto next = wheel_.next_expiry();
  // Touches stamped with the generation in progress: it must end within its resolution.
  // Every wheel that keeps the epoch wakes by tick_at() (+ its slack) while it has waits
  // pending (use_touch_epoch() re-arms a driver armed before); the first to pass starts
  // the next generation, the others find it started and arm for its tick_at().
  if (epoch_in_use_) {
    const auto tick = wheel_time(epoch().tick_at());
    if (!next || tick < *next) next = tick;
  }
  if (!next || driver_->wanted_by(*next)) return;  // ensure() would change nothing
  std::optional<std::chrono::nanoseconds> following;
  if (driver_->stands_by()) {
    // The wake-up after `next` that its pass will not have taken already: a pass runs
    // about as late as the last one did, and takes what is due by then.
    const auto lateness = driver_->expected_lateness();
    const auto reach = *next < std::chrono::nanoseconds::max() - lateness
                           ? *next + lateness
                           : std::chrono::nanoseconds::max();
    following = wheel_.next_fine_slot_after(*next);
    for (int skip = 0; skip < 4 && following && *following <= reach; ++skip) {
      // A guess the wheel cannot follow further (inside a level-1 slot) is kept.
      const auto after = wheel_.next_fine_slot_after(*following);
      if (!after) break;
      following = after;
    }
  }
  driver_->ensure(*next, wheel_.now(), following);
}

void wheel_service::disarm_driver() noexcept {
  if (driver_) driver_->disarm();
}

void wheel_service::wake(void* self, std::uint64_t generation, bool from_timer) {
  static_cast<wheel_service*>(self)->on_driver(generation, from_timer);
}

// Entries of an early cascade (a crowded coarse slot walked ahead of its start) walked per
// pass. The walk is work for the idle time, but a pass runs it to the end of its budget
// before the waits that come due meanwhile get their turn: 3,300 entries (a level-2 slot
// of 100,000 deadlines spread over a second) took 300 us or more in one pass, and the
// spread's lateness p99 was 140 to 240 us against Asio's 50. In steps of 128 the next
// pass comes after the handlers due meanwhile; p99 50 us (bench_timers --workloads spread).
// With nothing due, a pass takes several steps (see on_driver).
constexpr std::size_t early_walk_per_pass = 128;

// The walk settles each due timer's waits as it reaches the timer, so that the timer is
// touched once (the walk fetches the next while the waits settle), rather than once in
// the walk and once more in a loop over the batch: a burst of 1,000,000 spent 19% of its
// time on the walk's misses alone (perf). An idle timer touched since it was filed is left
// in the batch and re-filed after the walk, which must not change the wheel; one due
// after all is settled in the walk, so that the handlers keep the walk's order (unless a
// touch() racing the walk makes it due only for the check after the walk: then it is
// settled there).
struct wheel_service::due_pass {
  wheel_service* self;
  settled* fired;
  std::chrono::nanoseconds now;
};

bool wheel_service::settle_due(void* pass, wheel_entry& entry) noexcept {
  const due_pass& p = *static_cast<const due_pass*>(pass);
  auto& timer = static_cast<detail::timer_state&>(entry);
  // The usual timer: one wait, boxed. Apart, so that this call saves few registers.
  if (!timer.idle && timer.waits.empty() && !timer.box.empty()) {
    p.self->settle_box(timer.box, detail::wait_result::success, *p.fired);
    return true;
  }
  return settle_due_other(p, timer);
}

[[gnu::noinline]] bool wheel_service::settle_due_other(const due_pass& p,
                                                      detail::timer_state& timer) noexcept {
  wheel_service& self = *p.self;
  // A timer whose waits were all cancelled kept its place until now: it leaves.
  if (!timer.has_waits()) return true;
  if (timer.idle && detail::idle_due(static_cast<const detail::idle_entry&>(timer), epoch(),
                                     [&self](clock_type::time_point t) {
                                       return self.wheel_time(t);
                                     }) > p.now) {
    return false;
  }
  self.settle_waits(timer, static_cast<std::size_t>(-1), detail::wait_result::success,
                    *p.fired);
  return true;
}

// A driver pass: detaches the due timers and settles their waits; the first handler runs
// as this operation's own (so that a pass is one operation of the context with one
// handler, as an expiring Asio timer is), the others go to the context.
void wheel_service::on_driver(std::uint64_t generation, bool from_timer) {
  detail::completion* first = nullptr;
  {
    lock_type lock(mutex_);
    if (shut_down_ || !driver_->accept(generation, from_timer)) return;
    ++stats_.wakeups;
    const clock_type::time_point clock_now = clock_type::now();
    if (epoch_in_use_) epoch().pass(clock_now);  // before any stamp is read
    std::chrono::nanoseconds now = wheel_time(clock_now);
    driver_->note_pass(now);
    const auto seen = [this](std::chrono::nanoseconds t) {
      seen_tick_ = std::max(seen_tick_, wheel_.tick_of(t));
    };
    seen(now);
    // Entries examined so far: each one examined is either detached or re-filed (a slot
    // moved whole counts as one).
    const auto examined = [this] {
      const auto& c = wheel_.counters();
      return c.expired + c.cascaded + c.moved_whole;
    };
    const std::uint64_t examined_before = examined();
    settled fired;
    due_pass pass{this, &fired, now};
    wheel_entry_list due;  // the idle timers to re-file, which the walk cannot do
    std::size_t detached =
        wheel_.advance(now, due, &settle_due, &pass, options_.max_per_pass, early_walk_per_pass);
    // Nothing came due but the wheel has more work now (the early walk stopped at its step,
    // or a crowded slot being re-filed): it goes on in this pass while nothing comes due (a
    // clock read per step), up to max_per_pass entries in all, instead of posting a pass
    // per step through the idle time.
    while (detached == 0) {
      const std::uint64_t used = examined() - examined_before;
      if (used >= options_.max_per_pass) break;
      const auto next = wheel_.next_expiry();
      if (!next || *next > wheel_.now()) break;
      now = wheel_time(clock_type::now());
      seen(now);
      pass.now = now;
      detached = wheel_.advance(now, due, &settle_due, &pass,
                                options_.max_per_pass - static_cast<std::size_t>(used),
                                early_walk_per_pass);
      if (examined() - examined_before == used) break;  // nothing to walk after all
    }
    // What the walk left: idle timers with a wait, touched since they were filed.
    while (!due.empty()) {
      auto& timer = static_cast<detail::timer_state&>(due.pop_front());
      assert(timer.idle && timer.has_waits());
      // Re-filed at its last touch + period (unless a racing touch() made it due after all).
      if (refile_idle(timer, now)) continue;
      settle_waits(timer, static_cast<std::size_t>(-1), detail::wait_result::success, fired);
    }
    // Every wait settled in this pass is in `fired`.
    stats_.pending -= fired.count;
    stats_.fired += fired.count;
    // Its own block went back to the driver's pool before this ran: ensure() finds it.
    // With nothing pending, the driver's standby goes too, or it would keep run() from
    // returning until its time.
    if (stats_.pending != 0) {
      try {
        ensure_driver();
      } catch (...) {
        // No memory for the wake-up: on a context of the user's own, where the driver's
        // memory is not pooled (the driver then says it is unarmed, and the next wait
        // filed arms it), or Asio's timer queue could not grow (with Asio's scheduler a
        // pass is queued instead, which arms it again). What this pass settled goes to
        // the context all the same.
        hand_over_now(fired);
        throw;
      }
    } else {
      disarm_driver();
    }
    first = keep_first(fired);
  }
  if (first) first->run();
}

bool wheel_service::refile_idle(detail::timer_state& timer, std::chrono::nanoseconds now) noexcept {
  return detail::refile_if_touched(wheel_, static_cast<detail::idle_entry&>(timer), now, epoch(),
                                   [this](clock_type::time_point t) { return wheel_time(t); });
}

}  // namespace twheel
