// bench_threads: the churn workload of bench_timers (re-arm a random armed timer; its
// aborted handler runs) done inside io_context::run() on threads, the way a server does
// it, for boost::asio::steady_timer and twheel::steady_timer, interleaved, medians.
//
// N timers in total are shared out among 16 shards (a shard: its timers and its own
// random re-arms, worked through in chunks of 64 re-arms posted one after another to the
// shard's executor); M = 200,000 re-arms in total (50,000 with --quick). Three ways to run them:
//
//   1ctx-1thr  one io_context (concurrency hint 1), run() on one thread;
//   1ctx-2thr  one io_context, run() on two threads; each shard is a strand (as a
//              server gives each connection one), its chunks run on that strand and its
//              handlers are bound to it. Both threads share one wheel (twheel) or one
//              timer heap (asio), and their locks;
//   2ctx-2thr  two io_contexts (concurrency hint 1), one thread each, 8 shards each: the
//              io_context-per-thread pattern, one wheel (or heap) per context, nothing
//              shared between the threads.
//
// Reported: ns per re-arm (wall time from starting the threads to the last aborted
// handler, divided by M), and the speed-up of each 2-thread layout over 1ctx-1thr for
// each library. Deadlines are random in 10..70 s, so no timer expires during a run; an
// expiry would be counted and reported.
//
// Usage: bench_threads [--quick] [--reps R] [--sizes n1,n2,...]
#include "bench_report.hpp"

#include <twheel/steady_timer.hpp>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

namespace asio = boost::asio;
using clock_type = std::chrono::steady_clock;
using asio_timer = asio::steady_timer;
using wheel_timer = twheel::steady_timer;

constexpr std::size_t shard_count = 16;
constexpr std::size_t chunk = 64;  // re-arms per posted step: other shards get their turn
std::size_t total_ops = 200'000;  // 50,000 with --quick
constexpr std::int64_t min_expiry_ns = 10'000'000'000;
constexpr std::int64_t max_expiry_ns = 70'000'000'000;

int g_failures = 0;

void fail(const std::string& what) {
  ++g_failures;
  std::fprintf(stderr, "ERROR: %s\n", what.c_str());
  std::fflush(stderr);
}

template <class Timer>
constexpr const char* lib_name() {
  return std::is_same_v<Timer, wheel_timer> ? "twheel" : "asio";
}

enum class layout { one_ctx_one_thread, one_ctx_two_threads, two_ctx_two_threads };

const char* layout_name(layout l) {
  switch (l) {
    case layout::one_ctx_one_thread: return "1ctx-1thr";
    case layout::one_ctx_two_threads: return "1ctx-2thr";
    case layout::two_ctx_two_threads: return "2ctx-2thr";
  }
  return "?";
}

// One shard's share of the inputs, the same for both libraries.
struct shard_inputs {
  std::vector<std::int64_t> arm_ns;
  std::vector<std::uint32_t> pick;
  std::vector<std::int64_t> rearm_ns;
};

std::vector<shard_inputs> make_inputs(std::size_t n) {
  std::mt19937_64 rng(0x74687264 + n);
  std::uniform_int_distribution<std::int64_t> expiry(min_expiry_ns, max_expiry_ns);
  std::vector<shard_inputs> in(shard_count);
  for (std::size_t s = 0; s < shard_count; ++s) {
    const std::size_t timers = n / shard_count + (s < n % shard_count ? 1 : 0);
    const std::size_t ops = total_ops / shard_count + (s < total_ops % shard_count ? 1 : 0);
    std::uniform_int_distribution<std::uint32_t> index(0, static_cast<std::uint32_t>(timers - 1));
    in[s].arm_ns.resize(timers);
    for (auto& v : in[s].arm_ns) v = expiry(rng);
    in[s].pick.resize(ops);
    in[s].rearm_ns.resize(ops);
    for (std::size_t j = 0; j < ops; ++j) {
      in[s].pick[j] = index(rng);
      in[s].rearm_ns[j] = expiry(rng);
    }
  }
  return in;
}

// The shards of one io_context; the last one to finish stops the context.
struct group {
  asio::io_context* ctx = nullptr;
  std::atomic<std::size_t> remaining{0};
  clock_type::time_point end{};
};

// A shard is only ever touched from its executor (a strand in 1ctx-2thr), and before and
// after the threads run.
template <class Timer>
struct shard {
  const shard_inputs* in = nullptr;
  group* grp = nullptr;
  std::vector<std::optional<Timer>> timers;
  std::size_t next = 0;        // next re-arm
  std::uint64_t reported = 0;  // waits expires_after() reported aborted
  std::uint64_t aborted = 0;   // handlers run with operation_aborted
  std::uint64_t expired = 0;   // handlers run with success (must stay 0)
  bool issued = false;         // every re-arm done
  bool finished = false;

  void check_done() {
    if (finished || !issued || aborted != reported) return;
    finished = true;
    if (grp->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      grp->end = clock_type::now();
      grp->ctx->stop();
    }
  }
};

template <class Timer>
struct shard_handler {
  shard<Timer>* s;
  void operator()(const boost::system::error_code& ec) const {
    if (ec == asio::error::operation_aborted) {
      ++s->aborted;
    } else {
      ++s->expired;
    }
    s->check_done();
  }
};

template <class Timer, class Executor>
void step(shard<Timer>* s, const Executor& ex) {
  const std::size_t ops = s->in->pick.size();
  const std::size_t end = std::min(s->next + chunk, ops);
  for (; s->next < end; ++s->next) {
    Timer& t = *s->timers[s->in->pick[s->next]];
    s->reported += t.expires_after(std::chrono::nanoseconds(s->in->rearm_ns[s->next]));
    t.async_wait(asio::bind_executor(ex, shard_handler<Timer>{s}));
  }
  if (s->next < ops) {
    asio::post(ex, [s, ex] { step(s, ex); });
  } else {
    s->issued = true;
    s->check_done();
  }
}

// Arms the shard's timers (not timed) and posts its first step.
template <class Timer, class Executor>
void start_shard(shard<Timer>& s, asio::io_context& ctx, const Executor& ex) {
  s.timers.resize(s.in->arm_ns.size());
  for (std::size_t i = 0; i < s.timers.size(); ++i) {
    s.timers[i].emplace(ctx);
    s.timers[i]->expires_after(std::chrono::nanoseconds(s.in->arm_ns[i]));
    s.timers[i]->async_wait(asio::bind_executor(ex, shard_handler<Timer>{&s}));
  }
  asio::post(ex, [sp = &s, ex] { step(sp, ex); });
}

// ns per re-arm for one run of `l`.
template <class Timer>
double run_layout(layout l, std::size_t n, const std::vector<shard_inputs>& in) {
  const std::size_t contexts = l == layout::two_ctx_two_threads ? 2 : 1;
  const int hint = l == layout::one_ctx_two_threads ? 2 : 1;
  std::vector<std::unique_ptr<asio::io_context>> ctxs;
  std::vector<group> groups(contexts);
  for (std::size_t c = 0; c < contexts; ++c) {
    ctxs.push_back(std::make_unique<asio::io_context>(hint));
    groups[c].ctx = ctxs[c].get();
    groups[c].remaining = shard_count / contexts;
  }
  double ns = 0;
  {
    std::vector<shard<Timer>> shards(shard_count);
    std::vector<std::optional<asio::strand<asio::io_context::executor_type>>> strands(shard_count);
    for (std::size_t i = 0; i < shard_count; ++i) {
      const std::size_t c = i % contexts;
      shards[i].in = &in[i];
      shards[i].grp = &groups[c];
      if (l == layout::one_ctx_two_threads) {
        strands[i].emplace(asio::make_strand(*ctxs[c]));
        start_shard(shards[i], *ctxs[c], *strands[i]);
      } else {
        start_shard(shards[i], *ctxs[c], ctxs[c]->get_executor());
      }
    }
    const auto t0 = clock_type::now();
    std::vector<std::thread> threads;
    if (l == layout::one_ctx_two_threads) {
      for (int t = 0; t < 2; ++t) threads.emplace_back([&] { ctxs[0]->run(); });
    } else {
      for (std::size_t c = 0; c < contexts; ++c) threads.emplace_back([&, c] { ctxs[c]->run(); });
    }
    for (auto& t : threads) t.join();
    auto end = groups[0].end;
    for (const auto& g : groups) end = std::max(end, g.end);
    ns = std::chrono::duration<double, std::nano>(end - t0).count() / static_cast<double>(total_ops);

    // Cancel what is still pending (one wait per timer), then check every count.
    for (std::size_t i = 0; i < shard_count; ++i) {
      for (auto& t : shards[i].timers) t->cancel();
    }
    for (auto& c : ctxs) {
      c->restart();
      c->poll();
    }
    const std::string what = std::string(lib_name<Timer>()) + " " + layout_name(l) +
                             " n=" + std::to_string(n) + ": ";
    std::uint64_t expired = 0;
    for (const auto& s : shards) {
      expired += s.expired;
      if (!s.finished || s.next != s.in->pick.size() ||
          s.aborted + s.expired != s.in->pick.size() + s.timers.size()) {
        fail(what + "a shard did not complete every re-arm and handler exactly once");
      }
    }
    if (expired != 0) {
      fail(what + std::to_string(expired) + " timer(s) expired during the run (machine too slow)");
    }
  }
  return ns;
}

int usage() {
  std::fprintf(stderr, "usage: bench_threads [--quick] [--reps R] [--sizes n1,n2,...]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  int reps = 0;
  std::vector<std::size_t> sizes;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (a == "--sizes" && i + 1 < argc) {
      sizes = bench::parse_sizes(argv[++i]);
    } else {
      return usage();
    }
  }
  bench::default_run_shape(quick, sizes, reps);
  if (quick) total_ops = 50'000;
  for (std::size_t n : sizes) {
    if (n < shard_count || n > 0xFFFFFFFFu) return usage();
  }

  const auto started = clock_type::now();
  std::printf("bench_threads: the churn workload inside run() on threads; %zu shards, "
              "%zu re-arms per run, %d repetitions, interleaved asio/twheel, medians\n",
              shard_count, total_ops, reps);
  std::printf("load average at start: %s (this machine: %ld CPUs)\n", bench::loadavg().c_str(),
              sysconf(_SC_NPROCESSORS_ONLN));
  bench::print_header();
  bench::report report;
  const layout layouts[] = {layout::one_ctx_one_thread, layout::one_ctx_two_threads,
                            layout::two_ctx_two_threads};
  for (std::size_t n : sizes) {
    const auto in = make_inputs(n);
    std::vector<double> a[3], t[3];
    for (int rep = 0; rep < reps; ++rep) {
      for (int k = 0; k < 3; ++k) {
        alarm(300);  // a hang ends the run (SIGALRM) instead of blocking bench.sh
        a[k].push_back(run_layout<asio_timer>(layouts[k], n, in));
        t[k].push_back(run_layout<wheel_timer>(layouts[k], n, in));
        alarm(0);
      }
    }
    double a_med[3], t_med[3];
    for (int k = 0; k < 3; ++k) {
      const auto& r = report.add(std::string("churn-") + layout_name(layouts[k]), n, a[k], t[k],
                                 "ns/op", k == 1 ? "(re-arm, aborted handler included; strands)"
                                                 : "(re-arm, aborted handler included)",
                                 bench::better::lower);
      a_med[k] = r.asio;
      t_med[k] = r.twheel;
    }
    for (int k = 1; k < 3; ++k) {
      report.add(bench::row{std::string("speedup-") + layout_name(layouts[k]), n,
                            a_med[0] / a_med[k], t_med[0] / t_med[k], bench::na, "x",
                            "(1ctx-1thr time / this layout's time, per library)"},
                 bench::better::higher);
    }
  }
  std::printf("\n");
  report.print_csv();
  const double secs = std::chrono::duration<double>(clock_type::now() - started).count();
  std::printf("\ntotal time %.1f s; load average at end: %s; %d check failure(s)\n", secs,
              bench::loadavg().c_str(), g_failures);
  return g_failures == 0 ? 0 : 1;
}
