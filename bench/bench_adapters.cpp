// bench_adapters: twheel's timeouts against what an Asio program does without twheel, in
// the same process, interleaved, medians, ratios (> 1: twheel cheaper).
//
//  touch        idle_timer::touch() on a random connection, against re-arming that
//               connection's boost::asio::steady_timer (expires_after + async_wait; the
//               aborted handler is run and counted). An idle wait touched meanwhile is
//               re-filed when its deadline comes (once per period, 60 s here): untimed.
//               Beside it, two floors of touch()'s memory pattern, the same picks over
//               objects of idle_timer's size with no library: touch-floor-clock stores a
//               steady_clock reading into the object (what touch() does), touch-floor-word
//               stores a word loaded from one shared place (what a stamp published by the
//               wheel, with no clock read, would cost). Each is printed in both columns.
//  cancel_after N concurrent operations each started with twheel::cancel_after(10 s),
//               all completing before their timeout; against Asio's own construction
//               (what boost::asio::cancel_after does in later Boost versions): a fresh
//               steady_timer per operation racing it through a cancellation_signal.
//               Beside it, cancel_after-floor: the same operations with no timeout at
//               all (started, completed, run), printed in both columns: what any timeout
//               construction costs on top of it is the rest of each library's row.
//
// Prints the table as it goes, then every row again as a "csv," line (bench_report.hpp).
//
// Usage: bench_adapters [--quick] [--workloads cancel_after,touch] [--sizes N,...] [--reps R]
//   --quick: 3 repetitions at 10,000 and 100,000 (default: 5 at 10,000 to 1,000,000).
#include "bench_report.hpp"

#include <twheel/cancel_after.hpp>
#include <twheel/idle_timer.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace {

namespace asio = boost::asio;
using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

double since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::nano>(clock_type::now() - t0).count();
}

// An operation that supports per-operation cancellation and completes when told to: the
// stand-in for a socket read, so that only the timeout machinery is measured. Like a real
// I/O object's initiation it has get_executor(), which is how cancel_after finds the wheel.
struct pending_handler {
  virtual ~pending_handler() = default;
  virtual void call(boost::system::error_code ec) = 0;
};

template <class Handler>
struct pending_holder : pending_handler {
  explicit pending_holder(Handler&& h) : handler(std::move(h)) {}
  void call(boost::system::error_code ec) override { std::move(handler)(ec); }
  Handler handler;
};

using pending_list = std::vector<std::unique_ptr<pending_handler>>;

struct op {
  asio::io_context& ctx;
  pending_list* pending;
  asio::io_context::executor_type get_executor() const { return ctx.get_executor(); }
  template <class Handler>
  void operator()(Handler handler) const {
    auto slot = asio::get_associated_cancellation_slot(handler);
    const std::size_t id = pending->size();
    pending->push_back(std::make_unique<pending_holder<Handler>>(std::move(handler)));
    if (slot.is_connected()) {
      auto* p = pending;
      auto* c = &ctx;
      slot.assign([p, c, id](asio::cancellation_type) {
        if (!(*p)[id]) return;
        asio::post(*c, [h = std::move((*p)[id])]() mutable { h->call(asio::error::operation_aborted); });
        (*p)[id] = nullptr;
      });
    }
  }
};

template <class Token>
auto start_op(asio::io_context& ctx,
              pending_list& pending,
              Token&& token) {
  return asio::async_initiate<Token, void(boost::system::error_code)>(op{ctx, &pending}, token);
}

void complete_ops(asio::io_context& ctx,
                  pending_list& pending) {
  for (auto& h : pending) {
    if (h) asio::post(ctx, [h = std::move(h)]() mutable { h->call({}); });
  }
  pending.clear();
}

// ns per operation: start n operations, each with the handler make_handler(ctx) returns,
// complete them all, run. Timed on a context that has done the same once already (not
// timed), as a server's context has: what each construction keeps for reuse is reused.
template <class MakeHandler>
double time_ops(std::size_t n, MakeHandler make_handler) {
  asio::io_context ctx;
  pending_list pending;
  pending.reserve(n);
  const auto round = [&] {
    for (std::size_t i = 0; i < n; ++i) start_op(ctx, pending, make_handler(ctx));
    complete_ops(ctx, pending);
    ctx.restart();
    ctx.run();
  };
  round();
  const auto t0 = clock_type::now();
  round();
  return since(t0) / static_cast<double>(n);
}

// Each operation with a twheel timeout.
double cancel_after_twheel(std::size_t n, long& done) {
  return time_ops(n, [&done](asio::io_context&) {
    return twheel::cancel_after(10s, [&done](boost::system::error_code ec) {
      if (!ec) ++done;
    });
  });
}

// The same with a steady_timer per operation racing it (Asio's cancel_after construction).
double cancel_after_asio(std::size_t n, long& done) {
  struct race {
    explicit race(asio::io_context& c) : timer(c) {}
    asio::steady_timer timer;
    asio::cancellation_signal signal;
  };
  return time_ops(n, [&done](asio::io_context& ctx) {
    auto r = std::make_shared<race>(ctx);
    r->timer.expires_after(10s);
    r->timer.async_wait([r](boost::system::error_code ec) {
      if (!ec) r->signal.emit(asio::cancellation_type::terminal);
    });
    return asio::bind_cancellation_slot(r->signal.slot(),
                                        [r, &done](boost::system::error_code ec) {
                                          r->timer.cancel();
                                          if (!ec) ++done;
                                        });
  });
}

// cancel_after-floor: the operations alone, no timeout.
double cancel_after_floor(std::size_t n, long& done) {
  return time_ops(n, [&done](asio::io_context&) {
    return [&done](boost::system::error_code ec) {
      if (!ec) ++done;
    };
  });
}

// Runs `op(i)` for i in [0, ops) on `ctx`'s thread, in posted chunks of 1,024, as a
// server's handlers would: what the context does meanwhile (the wheel's passes, aborted
// handlers) runs between them and is counted. Returns ns per op.
template <class Op>
double run_in_chunks(asio::io_context& ctx, std::size_t ops, Op op) {
  std::size_t next = 0;
  std::function<void()> chunk = [&] {
    const std::size_t end = std::min(next + 1024, ops);
    for (; next < end; ++next) op(next);
    if (next < ops) asio::post(ctx, chunk);
  };
  const auto t0 = clock_type::now();
  asio::post(ctx, chunk);
  while (next < ops) ctx.run_one();
  ctx.poll();  // what the last chunk left (aborted handlers)
  return since(t0) / static_cast<double>(ops);
}

// ns per touch() of a random connection among n, each with a pending idle wait, in the
// steady state of a busy server: touched for 100 ms first, so that the wheel stamps
// touches with its generations (detail/touch_epoch.hpp) rather than clock readings.
double touch_twheel(std::size_t n, std::size_t ops, std::uint64_t seed) {
  asio::io_context ctx;
  std::vector<std::optional<twheel::idle_timer>> conns(n);
  for (auto& c : conns) {
    c.emplace(ctx, 60s);
    c->async_wait([](boost::system::error_code) {});
  }
  std::mt19937_64 rng(seed);
  std::vector<std::size_t> picks(ops);
  for (auto& p : picks) p = rng() % n;
  const auto warm_until = clock_type::now() + 100ms;
  while (clock_type::now() < warm_until) {
    run_in_chunks(ctx, std::min<std::size_t>(ops, 4096),
                  [&](std::size_t i) { conns[picks[i]]->touch(); });
  }
  const double ns = run_in_chunks(ctx, ops, [&](std::size_t i) { conns[picks[i]]->touch(); });
  conns.clear();
  ctx.run();
  return ns;
}

// ns per store of a stamp into a random object among n of idle_timer's size: a clock
// reading (`read_clock`) or a word loaded from one shared place.
double touch_floor(std::size_t n, std::size_t ops, std::uint64_t seed, bool read_clock) {
  struct alignas(twheel::idle_timer) object {
    std::atomic<std::int64_t> stamp{0};
    unsigned char rest[sizeof(twheel::idle_timer) - sizeof(std::atomic<std::int64_t>)];
  };
  static_assert(sizeof(object) == sizeof(twheel::idle_timer));
  static std::atomic<std::int64_t> shared_word{1};
  std::vector<object> objects(n);
  std::mt19937_64 rng(seed);
  std::vector<std::size_t> picks(ops);
  for (auto& p : picks) p = rng() % n;
  const auto t0 = clock_type::now();
  if (read_clock) {
    for (std::size_t p : picks) {
      objects[p].stamp.store(clock_type::now().time_since_epoch().count(),
                             std::memory_order_relaxed);
    }
  } else {
    for (std::size_t p : picks) {
      objects[p].stamp.store(shared_word.load(std::memory_order_relaxed),
                             std::memory_order_relaxed);
    }
  }
  return since(t0) / static_cast<double>(ops);
}

// ns per re-arm (expires_after + async_wait, aborted handler run) of a random connection.
double touch_asio(std::size_t n, std::size_t ops, std::uint64_t seed) {
  asio::io_context ctx;
  std::vector<std::optional<asio::steady_timer>> conns(n);
  for (auto& c : conns) {
    c.emplace(ctx, 60s);
    c->async_wait([](boost::system::error_code) {});
  }
  std::mt19937_64 rng(seed);
  std::vector<std::size_t> picks(ops);
  for (auto& p : picks) p = rng() % n;
  const double ns = run_in_chunks(ctx, ops, [&](std::size_t i) {
    conns[picks[i]]->expires_after(60s);
    conns[picks[i]]->async_wait([](boost::system::error_code) {});
  });
  conns.clear();
  ctx.run();
  return ns;
}

int usage() {
  std::fprintf(stderr, "usage: bench_adapters [--quick] [--workloads cancel_after,touch] "
                       "[--sizes N,...] [--reps R]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::vector<std::string> workloads{"cancel_after", "touch"};
  std::vector<std::size_t> sizes;
  int reps = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "--workloads" && i + 1 < argc) {
      workloads = bench::split(argv[++i]);
      if (workloads.empty()) return usage();
      for (const auto& w : workloads) {
        if (w != "cancel_after" && w != "touch") return usage();
      }
    } else if (arg == "--sizes" && i + 1 < argc) {
      sizes = bench::parse_sizes(argv[++i]);
      if (sizes.empty()) return usage();
      for (std::size_t n : sizes) {
        if (n == 0) return usage();
      }
    } else if (arg == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
      if (reps <= 0) return usage();
    } else {
      return usage();
    }
  }
  bench::default_run_shape(quick, sizes, reps);
  const auto wants = [&](const char* w) { return bench::wants(workloads, w); };
  std::printf("bench_adapters: asio = what a program does without twheel; ratio = asio/twheel; "
              "%d repetitions, interleaved, medians\n", reps);
  std::printf("load average at start: %s\n", bench::loadavg().c_str());
  bench::print_header();
  bench::report report;

  for (std::size_t n : sizes) {
    if (!wants("cancel_after")) break;
    std::vector<double> a, t, f;
    long done_a = 0, done_t = 0, done_f = 0;
    for (int r = 0; r < reps; ++r) {
      a.push_back(cancel_after_asio(n, done_a));
      t.push_back(cancel_after_twheel(n, done_t));
      f.push_back(cancel_after_floor(n, done_f));
    }
    // Two rounds of n per repetition (time_ops: the first warms the context).
    const long expected = 2 * static_cast<long>(n) * reps;
    if (done_a != done_t || done_f != done_t || done_t != expected) {
      std::printf("cancel_after: operations completed: asio %ld twheel %ld floor %ld, "
                  "expected %ld\n",
                  done_a, done_t, done_f, expected);
      return 1;
    }
    report.add("cancel_after", n, a, t, "ns/op",
               "(operation with a timeout vs a steady_timer per operation)",
               bench::better::lower);
    report.add("cancel_after-floor", n, f, f, "ns/op", "(the operations alone, no timeout)",
               bench::better::none);
  }

  for (std::size_t n : sizes) {
    if (!wants("touch")) break;
    const std::size_t ops = std::min<std::size_t>(n, 200000);
    std::vector<double> a, t, fc, fw;
    for (int r = 0; r < reps; ++r) {
      a.push_back(touch_asio(n, ops, 7 + r));
      t.push_back(touch_twheel(n, ops, 7 + r));
      fc.push_back(touch_floor(n, ops, 7 + r, true));
      fw.push_back(touch_floor(n, ops, 7 + r, false));
    }
    report.add("touch", n, a, t, "ns/op", "(idle_timer::touch() vs steady_timer re-arm)",
               bench::better::lower);
    report.add("touch-floor-clock", n, fc, fc, "ns/op",
               "(a clock reading stored into a random object, no library)", bench::better::none);
    report.add("touch-floor-word", n, fw, fw, "ns/op",
               "(a shared word stored into a random object, no library)", bench::better::none);
  }
  std::printf("\n");
  report.print_csv();
  std::printf("\nload average at end: %s\n", bench::loadavg().c_str());
  return 0;
}
