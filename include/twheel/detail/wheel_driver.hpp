// twheel/detail/wheel_driver: the one internal timer that wakes a wheel.
#ifndef TWHEEL_DETAIL_WHEEL_DRIVER_HPP
#define TWHEEL_DETAIL_WHEEL_DRIVER_HPP

#include <twheel/detail/block_pool.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstdint>
#include <optional>

namespace twheel::detail {

// Wakes its owner at one wheel time at a time: an Asio steady_timer for a future time, a
// posted pass for one already due (no timer, no system call). Each arm gets a generation:
// a wake-up of an older one (superseded, disarmed, or cancelled in flight) is refused by
// accept(), so the owner runs exactly one pass per arm it still wants.
//
// Not thread-safe: its owner's lock guards every call, accept() included.
class wheel_driver {
 public:
  using clock_type = std::chrono::steady_clock;
  // Called for every wake-up, outside any lock; the owner takes its lock and asks accept().
  using pass_fn = void (*)(void* owner, std::uint64_t generation, bool from_timer,
                           const boost::system::error_code& ec);

  // `origin`: the clock time of wheel time 0. `slack`: how late a future wake-up may be
  // put so that it takes more with it (wheel_options::slack).
  wheel_driver(const boost::asio::any_io_executor& ex, clock_type::time_point origin,
               std::chrono::nanoseconds slack, pass_fn pass, void* owner);

  // Makes sure a pass runs at `next` (+ slack if it is after `now`) or earlier. Throws
  // only if the wake-up cannot be allocated; then nothing changed.
  void ensure(std::chrono::nanoseconds next, std::chrono::nanoseconds now);
  // True if a pass is already wanted at `t` or earlier: ensure(next) with next >= t would
  // change nothing.
  bool wanted_by(std::chrono::nanoseconds t) const noexcept { return armed_at_ && *armed_at_ <= t; }
  // No pass wanted: nothing may keep run() from returning.
  void disarm() noexcept;
  // Whether a wake-up of `generation` is the one still wanted; either way the wake-up is
  // spent. A refused one changes nothing.
  bool accept(std::uint64_t generation, bool from_timer,
              const boost::system::error_code& ec) noexcept;
  // Shutdown: no wake-up is wanted any more and the internal timer goes, while the
  // context's timer service still exists. The pool stays for handlers still queued.
  void release() noexcept;

 private:
  class timer_handler;
  void arm(std::chrono::nanoseconds at, std::chrono::nanoseconds now);

  boost::asio::any_io_executor executor_;
  clock_type::time_point origin_;
  std::chrono::nanoseconds slack_;
  pass_fn pass_;
  void* owner_;
  block_pool posted_;                                 // the memory of the wake-ups
  std::optional<boost::asio::steady_timer> timer_;
  std::optional<std::chrono::nanoseconds> armed_at_;  // the wanted wake-up's time
  bool timer_armed_ = false;                          // timer_ has a wait we still want
  std::uint64_t generation_ = 0;                      // bumped on every (re)arm and disarm
};

}  // namespace twheel::detail

#endif  // TWHEEL_DETAIL_WHEEL_DRIVER_HPP
