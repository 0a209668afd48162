// twheel/detail/timer_state.hpp: what the service keeps inside every timer object.
#ifndef TWHEEL_DETAIL_TIMER_STATE_HPP
#define TWHEEL_DETAIL_TIMER_STATE_HPP

#include <twheel/detail/handler_box.hpp>
#include <twheel/detail/op_queue.hpp>
#include <twheel/detail/touch_epoch.hpp>
#include <twheel/timing_wheel.hpp>

#include <boost/asio/cancellation_type.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace twheel {
class wheel_service;
}  // namespace twheel

namespace twheel::detail {

struct timer_access;

// The timer object is itself the wheel entry, with its pending waits: the oldest in a
// handler box inside the timer when its handler fits (no allocation), the others as
// allocated operations in FIFO order behind it. Guarded by the service's lock, except
// the two flags, which the timer object owns.
struct timer_state : wheel_entry {
  timer_state() noexcept = default;
  timer_state(const timer_state&) = delete;
  timer_state& operator=(const timer_state&) = delete;

  // Owned by the timer object, not the service (Asio's might_have_pending_waits): false
  // means no wait can be pending, so re-arming or cancelling need not take the lock.
  // Declared first so it sits in wheel_entry's tail padding.
  bool might_have_waits = false;
  // The timer's handlers may run directly on the thread of the wheel's drain (its executor
  // is the one the wheel runs on): only then can a handler live in `box`.
  bool boxable = false;
  // An idle_entry: when it comes due, the driver checks its last touch first.
  bool idle = false;
  // Its waits are timeouts of operations (beast::basic_stream's): like cancel_after's, they
  // count as pending but wheel_options::max_pending never refuses them.
  bool never_refused = false;
  // Whether its waits were filed before the last pass, for a timer due by that pass's
  // tick: then that pass saw them (wheel_service::seen_due() and filed_stamp()).
  std::uint16_t filed_pass = 0;
  // The oldest wait, if its handler fits in a box; used only while `waits` is empty, so
  // that it stays the oldest.
  handler_box box;
  op_queue waits;

  bool has_waits() const noexcept { return !box.empty() || !waits.empty(); }
};

// An idle_timer's entry. The touch stamp lives in the entry itself, so that touch() is
// one store to the timer object (no lock, no wheel operation) and the wheel reads it only
// when the entry comes due: then the wait completes if a whole period has passed since
// the stamp's time, or the entry is re-filed at that time + period (lazily, as a later
// reschedule).
struct idle_entry : timer_state {
  idle_entry() noexcept { idle = true; }

  using clock_type = std::chrono::steady_clock;

  clock_type::duration period{};
  // The last touch's (or the wait's start's) stamp, from process_touch_epoch() (an exact
  // clock reading or a generation). Written by touch() from any thread, read by the
  // driver under the wheel's lock. touch() writes it without reading the object first.
  std::atomic<std::int64_t> touched{0};

  // A period after `t`, saturating at the clock's end.
  clock_type::time_point period_after(clock_type::time_point t) const noexcept {
    if (t > clock_type::time_point::max() - period) return clock_type::time_point::max();
    return t + period;
  }
};

// When an idle entry's wait is due, in wheel time: (an upper bound of) its last touch +
// period. `epoch` turns the stamp into a time, `to_wheel` a clock time point into wheel
// time (rounding up). Templates, this and the next, so that the test can drive them with
// its own clock.
template <class Epoch, class ToWheelTime>
std::chrono::nanoseconds idle_due(const idle_entry& entry, const Epoch& epoch,
                                  ToWheelTime to_wheel) noexcept {
  const auto touched_at = epoch.upper_bound(entry.touched.load(std::memory_order_relaxed));
  return to_wheel(entry.period_after(idle_entry::clock_type::time_point(
      std::chrono::duration_cast<idle_entry::clock_type::duration>(
          touched_at.time_since_epoch()))));
}

// What the driver does with an idle entry that came due at wheel time `now` (its waits
// not yet settled): re-files it at idle_due() when that is still ahead and returns true;
// false means the wait is complete.
template <class Epoch, class ToWheelTime>
bool refile_if_touched(timing_wheel& wheel, idle_entry& entry, std::chrono::nanoseconds now,
                       const Epoch& epoch, ToWheelTime to_wheel) noexcept {
  const std::chrono::nanoseconds due = idle_due(entry, epoch, to_wheel);
  if (due <= now) return false;
  wheel.insert(entry, due);
  return true;
}

// Lives in a handler's cancellation slot while its wait is pending. The wait and the
// canceller point at each other; whichever goes first (the wait settling, or the slot's
// handler being replaced or its signal destroyed) cuts the link under the service's lock,
// so neither ever touches the other after it is gone.
class wait_canceller : public wait_link {
 public:
  wait_canceller(wheel_service* service, timer_state* timer, wait_op* op) noexcept
      : wait_link{service}, timer_(timer), op_(op) {}
  wait_canceller(const wait_canceller&) = delete;
  wait_canceller& operator=(const wait_canceller&) = delete;

  // Both defined in impl/wheel_service.hpp.
  ~wait_canceller();
  void operator()(boost::asio::cancellation_type_t type);

  // Guarded by the service's lock, and meaningful only while service_ is set.
  timer_state* timer_;
  wait_op* op_;
};

}  // namespace twheel::detail

#endif  // TWHEEL_DETAIL_TIMER_STATE_HPP
