// twheel/twheel.hpp: everything but the Beast stream (twheel/beast/tcp_stream.hpp).
#ifndef TWHEEL_TWHEEL_HPP
#define TWHEEL_TWHEEL_HPP

#include <twheel/basic_waitable_timer.hpp>
#include <twheel/cancel_after.hpp>
#include <twheel/idle_timer.hpp>
#include <twheel/periodic_timer.hpp>
#include <twheel/steady_timer.hpp>
#include <twheel/timing_wheel.hpp>
#include <twheel/wheel_service.hpp>

#endif  // TWHEEL_TWHEEL_HPP
