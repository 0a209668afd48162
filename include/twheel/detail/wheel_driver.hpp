// twheel/detail/wheel_driver: the internal timer that wakes a wheel, and its standby.
#ifndef TWHEEL_DETAIL_WHEEL_DRIVER_HPP
#define TWHEEL_DETAIL_WHEEL_DRIVER_HPP

#include <twheel/detail/block_pool.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/detail/scheduler.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstdint>
#include <optional>

namespace twheel::detail {

// Wakes its owner at one wheel time at a time: an Asio steady_timer for a future time, a
// posted pass for one already due (no timer, no system call). Each arm gets a generation:
// a wake-up of an older one (superseded, disarmed, or cancelled in flight) is refused by
// accept(), so the owner runs exactly one pass per arm it still wants.
//
// A second timer stands by at the wake-up the owner expects after the armed one's pass
// (ensure's `following`: the next one, or a later one that pass will not have taken).
// Why: when the armed timer expires, Asio's reactor sets its timerfd to its next timer
// (five minutes when it has none), and arming the driver again for the next wake-up sets
// it once more; each timerfd_settime took 3.2 us on this project's VM. With the standby
// waiting there, the reactor's setting is already the right one, the standby
// becomes the wake-up with no system call, and the next standby, later than it, sets
// nothing either. A standby whose time the owner no longer wants fires for nothing (its
// wake-up is refused).
//
// Not thread-safe: its owner's lock guards every call, accept() included.
class wheel_driver {
 public:
  using clock_type = std::chrono::steady_clock;
  // Called for every wake-up, outside any lock; the owner takes its lock and asks accept().
  using pass_fn = void (*)(void* owner, std::uint64_t generation, bool from_timer);

  // `origin`: the clock time of wheel time 0. `slack`: how late a future wake-up may be
  // put so that it takes more with it (wheel_options::slack). `scheduler`: the context's
  // Asio scheduler (an io_context or a thread_pool), or null. With one, the wake-ups'
  // memory comes from the driver's own pool, because that context destroys what it holds
  // of them before the driver goes, and a pass already due is queued on it as an operation
  // of the driver's: a pass re-arms the driver without allocating. Another context may
  // destroy its queue after its services: there, Asio's allocator and a posted function.
  wheel_driver(const boost::asio::any_io_executor& ex, clock_type::time_point origin,
               std::chrono::nanoseconds slack, pass_fn pass, void* owner,
               boost::asio::detail::scheduler* scheduler);

  // Makes sure a pass runs at `next` (+ slack if it is after `now`) or earlier, and, with
  // no slack, puts the standby at `following` (> next), the wake-up expected after it.
  // Throws only if the wake-up cannot be set up: its memory (then nothing changed), or
  // async_wait() after expires_at() cancelled the armed wait (unpooled, or Asio's timer
  // queue growing). With a scheduler, a pass already due is queued instead, and the
  // exception still leaves the caller (out of run(), as Asio's own failures do): the
  // driver stays armed. Without one, the driver is unarmed and says so, and the cancelled
  // wait still comes as the wanted wake-up, whose pass arms it again. Either way the next
  // ensure() arms it.
  void ensure(std::chrono::nanoseconds next, std::chrono::nanoseconds now,
              std::optional<std::chrono::nanoseconds> following = std::nullopt);
  // True if a pass is already wanted at `t` or earlier: ensure(next) with next >= t would
  // change nothing.
  bool wanted_by(std::chrono::nanoseconds t) const noexcept { return armed_at_ && *armed_at_ <= t; }
  // Whether ensure() uses `following`: with a slack the wake-ups are not at slot times,
  // so a standby would not match them.
  bool stands_by() const noexcept { return slack_.count() == 0; }
  // The wake-up wanted by `now` (wanted_by(now)) runs its pass behind what is queued now
  // instead: the one armed may already wait in the context's queue, ahead of handlers
  // queued since. Throws std::bad_alloc before changing anything.
  void requeue(std::chrono::nanoseconds now);
  // No pass wanted: nothing may keep run() from returning.
  void disarm() noexcept;
  // Whether a wake-up of `generation` is the one still wanted, cancelled or not; either
  // way the wake-up is spent. A refused one changes nothing.
  bool accept(std::uint64_t generation, bool from_timer) noexcept;
  // The pass of the wake-up accepted last runs at `now`: how late its timer fired is
  // kept as the expected lateness of the next (see expected_lateness()).
  void note_pass(std::chrono::nanoseconds now) noexcept {
    if (woke_for_) lateness_ = now > *woke_for_ ? now - *woke_for_ : std::chrono::nanoseconds(0);
    woke_for_.reset();
  }
  // How late the last wake-up from the timer was: a pass then takes what comes due by
  // then, so a standby before that would be spent already.
  std::chrono::nanoseconds expected_lateness() const noexcept { return lateness_; }
  // Shutdown: no wake-up is wanted any more and the internal timer goes, while the
  // context's timer service still exists. The pool stays for handlers still queued.
  void release() noexcept;

 private:
  class timer_handler;
  class pass_op;
  void arm_pass(std::chrono::nanoseconds at);
  void arm(std::chrono::nanoseconds at, std::chrono::nanoseconds now);
  void stand_by(std::chrono::nanoseconds at) noexcept;
  void cancel_standby() noexcept;
  clock_type::time_point clock_time(std::chrono::nanoseconds at) const noexcept;
  // A wake-up is started with next_generation() and issue()d once started: a start that
  // throws spends no generation.
  std::uint64_t next_generation() const noexcept { return issued_ + 1; }
  std::uint64_t issue() noexcept { return ++issued_; }
  boost::asio::steady_timer& timer() noexcept { return *timers_[wake_]; }
  boost::asio::steady_timer& standby() noexcept { return *timers_[1 - wake_]; }

  boost::asio::any_io_executor executor_;
  clock_type::time_point origin_;
  std::chrono::nanoseconds slack_;
  pass_fn pass_;
  void* owner_;
  boost::asio::detail::scheduler* scheduler_;         // see the constructor
  block_pool posted_;                                 // the memory of the wake-ups
  block_pool* pool_;                                  // &posted_ with a scheduler, or none
  // The wake-up's timer is timers_[wake_], the standby's the other: they swap roles
  // without moving a timer. timers_[wake_] always exists (until release()); the other is
  // made by stand_by(), so it exists whenever standby_at_ is set, and roles swap only
  // then.
  std::optional<boost::asio::steady_timer> timers_[2];
  unsigned wake_ = 0;
  std::optional<std::chrono::nanoseconds> armed_at_;    // the wanted wake-up's time
  std::optional<std::chrono::nanoseconds> standby_at_;  // the standby's wait, while pending
  bool timer_armed_ = false;  // the wake-up's timer has a wait we still want
  std::uint64_t generation_ = 0;  // the wanted wake-up's; a fresh one on every disarm
  std::uint64_t standby_generation_ = 0;
  std::uint64_t issued_ = 0;  // the last generation given to a wake-up or a disarm
  std::optional<std::chrono::nanoseconds> woke_for_;  // the accepted timer wake-up's time
  std::chrono::nanoseconds lateness_{0};  // how late the last one's pass ran
};

}  // namespace twheel::detail

#endif  // TWHEEL_DETAIL_WHEEL_DRIVER_HPP
