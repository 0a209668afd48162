// twheel/detail/timer_state.hpp: what the service keeps inside every timer object.
#ifndef TWHEEL_DETAIL_TIMER_STATE_HPP
#define TWHEEL_DETAIL_TIMER_STATE_HPP

#include <twheel/detail/op_queue.hpp>
#include <twheel/timing_wheel.hpp>

#include <boost/asio/cancellation_type.hpp>

namespace twheel {
class wheel_service;
}  // namespace twheel

namespace twheel::detail {

// The timer object is itself the wheel entry (no per-wait allocation beyond the
// operation), with the FIFO of its pending waits. Guarded by the service's lock.
struct timer_state : wheel_entry {
  timer_state() noexcept = default;
  timer_state(const timer_state&) = delete;
  timer_state& operator=(const timer_state&) = delete;

  op_queue waits;
};

// Lives in a handler's cancellation slot while its wait is pending. The service clears
// `timer` (under its lock) when the wait leaves the timer, so a late emit does nothing.
class wait_canceller {
 public:
  wait_canceller(wheel_service* service, timer_state* timer, wait_op* op) noexcept
      : service_(service), timer_(timer), op_(op) {}

  // Defined in impl/wheel_service.hpp.
  void operator()(boost::asio::cancellation_type_t type);

  wheel_service* service_;
  timer_state* timer_;
  wait_op* op_;
};

}  // namespace twheel::detail

#endif  // TWHEEL_DETAIL_TIMER_STATE_HPP
