// clock_rejected.cpp: twheel offers no system_timer (a wheel keeps steady time and cannot
// follow a clock that jumps). Built twice by test/CMakeLists.txt: with the default
// steady_clock it must compile (twheel_clock_check); with TWHEEL_TEST_CLOCK set to
// std::chrono::system_clock it must fail with basic_waitable_timer's static_assert
// (CTest test system_clock_rejected).
#include <twheel/basic_waitable_timer.hpp>

#include <boost/asio/io_context.hpp>

#include <chrono>

#ifndef TWHEEL_TEST_CLOCK
#define TWHEEL_TEST_CLOCK std::chrono::steady_clock
#endif

int main() {
  boost::asio::io_context ctx;
  twheel::basic_waitable_timer<TWHEEL_TEST_CLOCK> timer(ctx);
  timer.expires_after(std::chrono::milliseconds(1));
  return timer.cancel() == 0 ? 0 : 1;
}
