// twheel/steady_timer.hpp: the drop-in for boost::asio::steady_timer.
#ifndef TWHEEL_STEADY_TIMER_HPP
#define TWHEEL_STEADY_TIMER_HPP

#include <twheel/basic_waitable_timer.hpp>

#include <chrono>

namespace twheel {

/// A drop-in for boost::asio::steady_timer whose waits live in the context's timing
/// wheel (see basic_waitable_timer for the differences).
///
/// Switch `#include <boost/asio/steady_timer.hpp>` to `#include <twheel/steady_timer.hpp>`
/// and `boost::asio::steady_timer` to `twheel::steady_timer`.
using steady_timer = basic_waitable_timer<std::chrono::steady_clock>;

}  // namespace twheel

#endif  // TWHEEL_STEADY_TIMER_HPP
