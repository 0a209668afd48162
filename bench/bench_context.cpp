// bench_context: what a context's first timer costs, twheel against
// boost::asio::steady_timer, in the same process, interleaved, medians, ratios (> 1:
// twheel cheaper).
//
//  first-wait     N times: an io_context constructed, one timer on it, expires_after(10 s)
//                 + async_wait, cancel(), run() (the aborted handler runs), the timer and
//                 the context destroyed. us per context. For twheel this includes making
//                 and destroying the wheel (its levels, its first block of records, its
//                 internal timer): what a program that makes a context per request or per
//                 test pays.
//  context-floor  the same with no timer: the handler posted instead. What Asio's
//                 context itself costs, printed in both columns.
//
// Prints the table as it goes, then every row again as a "csv," line (bench_report.hpp).
//
// Usage: bench_context [--quick]
#include "bench_report.hpp"

#include <twheel/steady_timer.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

namespace asio = boost::asio;
using clock_type = std::chrono::steady_clock;

double us_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
}

struct counts {
  long calls = 0;
  long aborted = 0;
};

// us per context.
template <class Timer>
double first_wait(std::size_t n, counts& c) {
  const auto t0 = clock_type::now();
  for (std::size_t i = 0; i < n; ++i) {
    asio::io_context ctx;
    Timer t(ctx);
    t.expires_after(std::chrono::seconds(10));
    t.async_wait([&c](const boost::system::error_code& ec) {
      ++c.calls;
      if (ec == asio::error::operation_aborted) ++c.aborted;
    });
    t.cancel();
    ctx.run();
  }
  return us_since(t0) / static_cast<double>(n);
}

double context_floor(std::size_t n, counts& c) {
  const auto t0 = clock_type::now();
  for (std::size_t i = 0; i < n; ++i) {
    asio::io_context ctx;
    asio::post(ctx, [&c] { ++c.calls; });
    ctx.run();
  }
  return us_since(t0) / static_cast<double>(n);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const int reps = quick ? 3 : 5;
  const std::size_t n = quick ? 1000 : 10000;  // the summary's 10,000 column
  std::printf("bench_context: asio = boost::asio::steady_timer; ratio = asio/twheel; %d "
              "repetitions, interleaved, medians\n",
              reps);
  std::printf("load average at start: %s\n", bench::loadavg().c_str());
  bench::print_header();
  bench::report report;

  std::vector<double> a, t, f;
  counts ca, ct, cf;
  for (int r = 0; r < reps; ++r) {
    a.push_back(first_wait<asio::steady_timer>(n, ca));
    t.push_back(first_wait<twheel::steady_timer>(n, ct));
    f.push_back(context_floor(n, cf));
  }
  const long expected = static_cast<long>(n) * reps;
  // Every timer's handler ran once, aborted; every post's handler ran once.
  for (const counts* c : {&ca, &ct, &cf}) {
    const long aborted_expected = c == &cf ? 0 : expected;
    if (c->calls != expected || c->aborted != aborted_expected) {
      std::printf("bench_context: handlers asio %ld/%ld twheel %ld/%ld floor %ld/%ld "
                  "(run/aborted), expected %ld run, all aborted but the floor's\n",
                  ca.calls, ca.aborted, ct.calls, ct.aborted, cf.calls, cf.aborted, expected);
      return 1;
    }
  }
  report.add("first-wait", n, a, t, "us/context",
             "(fresh io_context, one timer armed and cancelled, run, destroyed)",
             bench::better::lower);
  report.add("context-floor", n, f, f, "us/context", "(the same with no timer: a post)",
             bench::better::none);
  std::printf("\n");
  report.print_csv();
  std::printf("\nload average at end: %s\n", bench::loadavg().c_str());
  return 0;
}
