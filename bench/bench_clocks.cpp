// bench_clocks: what idle_timer::touch() could stamp, and why it reads steady_clock.
//
// Prints, for this machine: the cost of a steady_clock read and of a
// CLOCK_MONOTONIC_COARSE read (ns per call, medians of 5 runs), the coarse clock's
// resolution (clock_getres), and how far the coarse clock lags the exact one: the largest
// CLOCK_MONOTONIC (read first) - CLOCK_MONOTONIC_COARSE (read right after) seen over
// --seconds, default 2, each a lower bound of the lag at that moment. A
// lag above the resolution means "coarse + resolution" is no upper bound of the time of a
// touch: a stamp from it could close an idle connection early.
//
// Usage: bench_clocks [--seconds S]   (Linux only: elsewhere it says so and exits 0)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

#if defined(__linux__) && defined(CLOCK_MONOTONIC_COARSE)
std::int64_t read_ns(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// ns per call of `read`, median of 5 runs of `n` calls; the sum keeps the reads alive.
template <class Read>
double per_call(Read read, std::int64_t& sink) {
  constexpr int n = 2'000'000;
  std::vector<double> runs;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = clock_type::now();
    for (int i = 0; i < n; ++i) sink += read();
    runs.push_back(std::chrono::duration<double, std::nano>(clock_type::now() - t0).count() / n);
  }
  std::sort(runs.begin(), runs.end());
  return runs[2];
}
#endif

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2;
  if (argc == 3 && std::strcmp(argv[1], "--seconds") == 0) seconds = std::atof(argv[2]);
#if defined(__linux__) && defined(CLOCK_MONOTONIC_COARSE)
  std::int64_t sink = 0;
  const double exact = per_call([] { return clock_type::now().time_since_epoch().count(); }, sink);
  const double coarse = per_call([] { return read_ns(CLOCK_MONOTONIC_COARSE); }, sink);
  timespec res;
  clock_getres(CLOCK_MONOTONIC_COARSE, &res);
  const std::int64_t resolution = static_cast<std::int64_t>(res.tv_sec) * 1'000'000'000 + res.tv_nsec;

  std::int64_t max_lag = 0;
  std::int64_t samples = 0;
  const auto until = clock_type::now() + std::chrono::duration<double>(seconds);
  while (clock_type::now() < until) {
    for (int i = 0; i < 10'000; ++i) {
      // The exact clock first: a coarse reading taken after it is at least this far
      // behind its own moment, so the figure is a lower bound of the lag, and a
      // preemption between the two reads can only shrink it.
      const std::int64_t e = read_ns(CLOCK_MONOTONIC);
      const std::int64_t lag = e - read_ns(CLOCK_MONOTONIC_COARSE);
      max_lag = std::max(max_lag, lag);
    }
    samples += 10'000;
  }
  std::printf("steady_clock::now(): %.1f ns per call\n", exact);
  std::printf("clock_gettime(CLOCK_MONOTONIC_COARSE): %.1f ns per call\n", coarse);
  std::printf("CLOCK_MONOTONIC_COARSE resolution: %.3f ms\n", resolution / 1e6);
  std::printf("coarse clock lag over %.0f s (%lld samples): at least %.3f ms%s\n", seconds,
              static_cast<long long>(samples), max_lag / 1e6,
              max_lag > resolution ? " (above the resolution: coarse + resolution is no upper bound)"
                                   : "");
  std::printf("(sink %lld)\n", static_cast<long long>(sink & 1));
#else
  (void)seconds;
  std::printf("bench_clocks: CLOCK_MONOTONIC_COARSE is Linux only\n");
#endif
  return 0;
}
