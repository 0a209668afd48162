// bench_flood.cpp: a flood of expiries under socket load, on one io_context, one thread.
//
//   bench_flood [--timer asio|twheel] [--max-per-pass N] [--timers N] [--connections N]
//
// N timers (1,000,000 by default) are armed for the same instant D, a second or so after
// the start; meanwhile C loopback connections (1,000) echo 16-byte messages in a closed
// loop (each client writes, reads the echo back, writes again) on the same context. The
// echo round trip (client write start to echo received) is measured before the flood (round
// trips that ended before the first expiry handler ran) and during it (round trips that
// overlap [first expiry handler, last expiry handler]). --max-per-pass sets twheel's
// wheel_options::max_per_pass (4096 by default); Asio's timer has no such bound (its
// scheduler runs the expired waits as they come out of the timer queue).
//
// Checks: every timer's handler ran exactly once with success; every echo came back (each
// client stops after its last echo, and the bytes each server side echoed equal the bytes
// its client sent). Exits 1 on a violation, 2 on bad usage.
#include <twheel/steady_timer.hpp>
#include <twheel/wheel_service.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using clock_type = std::chrono::steady_clock;
using boost::system::error_code;

struct options {
  std::string timer = "twheel";
  std::size_t max_per_pass = twheel::wheel_options{}.max_per_pass;
  std::size_t timers = 1'000'000;
  std::size_t connections = 1'000;
};

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--timer asio|twheel] [--max-per-pass N] [--timers N] "
               "[--connections N]\n",
               argv0);
  std::exit(2);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage(argv[0]);
    const std::string v = argv[i + 1];
    if (a == "--timer" && (v == "asio" || v == "twheel")) {
      o.timer = v;
      continue;
    }
    char* end = nullptr;
    const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
    if (end == v.c_str() || *end != '\0' || n == 0) usage(argv[0]);
    if (a == "--max-per-pass") {
      o.max_per_pass = n;
    } else if (a == "--timers") {
      o.timers = n;
    } else if (a == "--connections") {
      o.connections = n;
    } else {
      usage(argv[0]);
    }
  }
  return o;
}

struct round_trip {
  clock_type::time_point start, end;
};

// One connection: the client side writes a message and reads its echo back; the server
// side echoes whatever it reads.
struct connection {
  explicit connection(asio::io_context& ctx) : client(ctx), server(ctx) {}
  tcp::socket client, server;
  std::array<char, 16> out{}, in{}, echo_buf{};
  clock_type::time_point sent_at;
  std::uint64_t sent_bytes = 0, echoed_bytes = 0, received_bytes = 0;
  std::uint64_t round_trips = 0;
  bool done = false;
};

struct flood_state {
  std::vector<std::uint8_t> calls;  // per timer: handler runs
  std::uint64_t failed = 0;         // handlers run with an error
  std::size_t ran = 0;
  clock_type::time_point first{}, last{};
  void on_expiry(std::size_t i, const error_code& ec) {
    const auto now = clock_type::now();
    if (ran++ == 0) first = now;
    last = now;
    if (ec) ++failed;
    if (calls[i] < 255) ++calls[i];
  }
};

// 16 bytes: twheel keeps it in the timer, as a server's small completion lambdas are.
struct expiry_handler {
  flood_state* s;
  std::size_t i;
  void operator()(const error_code& ec) const { s->on_expiry(i, ec); }
};

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto k = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(k, v.size() - 1)];
}

template <class Timer>
int run(const options& o) {
  asio::io_context ctx(1);
  if constexpr (std::is_same_v<Timer, twheel::steady_timer>) {
    twheel::wheel_options wo;
    wo.max_per_pass = o.max_per_pass;
    twheel::configure(ctx, wo);
  }

  // Connections, made synchronously before anything runs.
  tcp::acceptor acceptor(ctx, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  std::vector<std::unique_ptr<connection>> conns;
  conns.reserve(o.connections);
  for (std::size_t i = 0; i < o.connections; ++i) {
    auto c = std::make_unique<connection>(ctx);
    c->client.connect(acceptor.local_endpoint());
    acceptor.accept(c->server);
    c->client.set_option(tcp::no_delay(true));
    c->server.set_option(tcp::no_delay(true));
    conns.push_back(std::move(c));
  }

  // The flood: every timer due at the same instant, armed before the echo traffic starts.
  flood_state flood;
  flood.calls.assign(o.timers, 0);
  std::vector<Timer> timers;
  timers.reserve(o.timers);
  const auto arm_start = clock_type::now();
  const auto due = arm_start + std::chrono::milliseconds(1500);
  for (std::size_t i = 0; i < o.timers; ++i) {
    timers.emplace_back(ctx, due);
    timers.back().async_wait(expiry_handler{&flood, i});
  }
  if (clock_type::now() + std::chrono::milliseconds(300) > due) {
    std::printf("VIOLATION: arming took too long to leave a baseline before the flood\n");
    return 1;
  }

  std::vector<round_trip> trips;
  trips.reserve(8'000'000);
  bool stopping = false;

  // Server side: echo.
  struct echo {
    connection* c;
    void operator()(const error_code& ec, std::size_t n) const {
      if (ec) return;
      c->echoed_bytes += n;
      asio::async_write(c->server, asio::buffer(c->echo_buf.data(), n),
                        [c = c](const error_code& wec, std::size_t) {
                          if (!wec) c->server.async_read_some(asio::buffer(c->echo_buf), echo{c});
                        });
    }
  };
  // Client side: write, read the echo, record, again until stopping.
  struct client {
    connection* c;
    std::vector<round_trip>* trips;
    bool* stopping;
    void send() const {
      c->sent_at = clock_type::now();
      asio::async_write(c->client, asio::buffer(c->out), [self = *this](const error_code& ec, std::size_t n) {
        if (ec) return;
        self.c->sent_bytes += n;
        asio::async_read(self.c->client, asio::buffer(self.c->in),
                         [self](const error_code& rec, std::size_t rn) { self.on_echo(rec, rn); });
      });
    }
    void on_echo(const error_code& ec, std::size_t n) const {
      if (ec) return;
      c->received_bytes += n;
      ++c->round_trips;
      if (trips->size() < trips->capacity()) trips->push_back({c->sent_at, clock_type::now()});
      if (*stopping) {
        c->done = true;
        return;
      }
      send();
    }
  };
  for (auto& c : conns) {
    std::memset(c->out.data(), 'x', c->out.size());
    c->server.async_read_some(asio::buffer(c->echo_buf), echo{c.get()});
    client{c.get(), &trips, &stopping}.send();
  }

  // Polls every 10 ms from D: 300 ms after the last expiry (or 6 s after D, if the flood
  // never ends: the expiry check below then fails) the clients stop after their echo in
  // flight; once all have, everything is closed and run() returns. A client still waiting
  // 10 s later lost an echo.
  asio::steady_timer stopper(ctx);
  bool stop_failed = false;
  std::size_t polls = 0;
  std::function<void()> poll = [&] {
    ++polls;
    if (!stopping) {
      const bool over = flood.ran == o.timers &&
                        clock_type::now() > flood.last + std::chrono::milliseconds(300);
      if (over || polls > 600) {
        stopping = true;
        polls = 0;
      }
    } else {
      std::size_t done = 0;
      for (auto& c : conns) done += c->done ? 1 : 0;
      if (done == conns.size() || polls > 1000) {
        stop_failed = done != conns.size();
        for (auto& c : conns) {
          c->client.close();
          c->server.close();
        }
        acceptor.close();
        return;
      }
    }
    stopper.expires_after(std::chrono::milliseconds(10));
    stopper.async_wait([&](const error_code&) { poll(); });
  };
  stopper.expires_at(due);
  stopper.async_wait([&](const error_code&) { poll(); });

  const auto run_start = clock_type::now();
  ctx.run();
  const auto run_end = clock_type::now();

  // ---- results ------------------------------------------------------------------------
  int violations = 0;
  std::size_t not_once = 0;
  for (auto n : flood.calls) not_once += n != 1 ? 1 : 0;
  if (not_once != 0 || flood.failed != 0 || flood.ran != o.timers) {
    std::printf("VIOLATION: %zu timers not run exactly once, %llu with an error, %zu runs for %zu timers\n",
                not_once, static_cast<unsigned long long>(flood.failed), flood.ran, o.timers);
    ++violations;
  }
  std::uint64_t round_trips = 0, lost = 0;
  for (auto& c : conns) {
    round_trips += c->round_trips;
    if (!c->done || c->sent_bytes != c->received_bytes || c->echoed_bytes != c->sent_bytes) ++lost;
  }
  if (lost != 0 || stop_failed) {
    std::printf("VIOLATION: %llu connections lost an echo\n", static_cast<unsigned long long>(lost));
    ++violations;
  }

  std::vector<double> before, during;
  for (const auto& t : trips) {
    const double us = std::chrono::duration<double, std::micro>(t.end - t.start).count();
    if (t.end < flood.first && t.start >= run_start) {
      before.push_back(us);
    } else if (t.start <= flood.last && t.end >= flood.first) {
      during.push_back(us);
    }
  }
  const double flood_ms = std::chrono::duration<double, std::milli>(flood.last - flood.first).count();
  const double first_late_ms = std::chrono::duration<double, std::milli>(flood.first - due).count();
  const double arm_ms = std::chrono::duration<double, std::milli>(run_start - arm_start).count();
  std::printf("bench_flood: timer %s, max_per_pass %s, %zu timers due at one instant, %zu connections, 1 thread\n",
              o.timer.c_str(),
              o.timer == "twheel" ? std::to_string(o.max_per_pass).c_str() : "-", o.timers,
              o.connections);
  std::printf("  arming %.1f ms; run %.1f s; first expiry %.2f ms after the deadline; "
              "flood (first to last expiry handler) %.1f ms\n",
              arm_ms, std::chrono::duration<double>(run_end - run_start).count(), first_late_ms,
              flood_ms);
  const double b50 = percentile(before, 0.50), b99 = percentile(before, 0.99);
  const double d50 = percentile(during, 0.50), d99 = percentile(during, 0.99);
  const double dmax = during.empty() ? 0 : *std::max_element(during.begin(), during.end());
  std::printf("  echo round trip before the flood: %zu samples, p50 %.0f us, p99 %.0f us\n",
              before.size(), b50, b99);
  std::printf("  echo round trip during the flood: %zu samples, p50 %.0f us, p99 %.0f us, max %.0f us\n",
              during.size(), d50, d99, dmax);
  std::printf("  expiries %zu (each exactly once: %s), round trips %llu, echoes lost %llu\n",
              flood.ran, not_once == 0 ? "yes" : "NO", static_cast<unsigned long long>(round_trips),
              static_cast<unsigned long long>(lost));
  std::printf("csv,flood,%s,%s,%zu,%zu,%.1f,%.0f,%.0f,%zu,%.0f,%.0f,%.0f,%zu\n", o.timer.c_str(),
              o.timer == "twheel" ? std::to_string(o.max_per_pass).c_str() : "-", o.timers,
              o.connections, flood_ms, b50, b99, during.size(), d50, d99, dmax, lost);
  std::printf("result: %s\n", violations == 0 ? "OK" : "FAILED");
  return violations == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  // Two descriptors per connection, plus the acceptor and a few.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 2 * o.connections + 64) {
    rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, 2 * o.connections + 64);
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (o.timer == "asio") return run<asio::steady_timer>(o);
  return run<twheel::steady_timer>(o);
}
