// A consumer of twheel, compiled as C++17 (the library's floor; our own tests are C++20): the
// drop-in timer, a cancel_after timeout, an idle_timer and a periodic_timer. Exits 0 only if
// all four behaved, so a consumer that links but misbehaves fails the packaging test.
#include <twheel/twheel.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstdio>

int main() {
  using namespace std::chrono_literals;
  using boost::system::error_code;
  boost::asio::io_context io;
  const auto start = std::chrono::steady_clock::now();

  twheel::steady_timer timer(io, 20ms);
  bool fired = false;
  timer.async_wait([&](error_code ec) { fired = !ec; });

  // A wait that never completes by itself, timed out through the wheel.
  boost::asio::steady_timer never(io, std::chrono::hours(1));
  error_code timeout_ec;
  never.async_wait(twheel::cancel_after(10ms, [&](error_code ec) { timeout_ec = ec; }));

  // Nobody touches it: it completes one period after the wait started.
  twheel::idle_timer idle(io, 5ms);
  bool idled = false;
  idle.async_wait([&](error_code ec) { idled = !ec; });

  twheel::periodic_timer ticker(io, 2ms);
  int ticks = 0;
  struct on_tick {
    twheel::periodic_timer& t;
    int& n;
    void operator()(error_code ec) {
      if (!ec && ++n < 3) t.async_wait(*this);
    }
  };
  ticker.async_wait(on_tick{ticker, ticks});

  io.run();
  const bool on_time = std::chrono::steady_clock::now() - start >= 20ms;
  const bool timed_out = timeout_ec == boost::asio::error::operation_aborted;
  std::printf("twheel consumer: fired=%d on_time=%d timed_out=%d idled=%d ticks=%d pending=%zu\n",
              fired, on_time, timed_out, idled, ticks, twheel::stats(io).pending);
  return fired && on_time && timed_out && idled && ticks == 3 ? 0 : 1;
}
