// wheel_service_test.cpp: twheel-specific behaviour of the wheel service (configure(),
// stats(), driver arming, max_pending, bounded passes, shutdown, exceptions, executors,
// moves with per-operation cancellation, a multi-threaded stress).
//
// Asio conformance of twheel::steady_timer lives in steady_timer_test.cpp; everything
// here is about what only twheel has (options, counters, the single driver timer), or
// about situations where the service's own bookkeeping could go wrong.
//
// Timing rules: lower bounds are exact (a wait never completes before its deadline);
// upper bounds are generous (hundreds of ms) so that loaded machines and sanitizer builds
// pass. Every run() goes through a watchdog that stops the context, so a broken service
// fails a test instead of hanging the suite.
#define BOOST_TEST_MODULE wheel_service
#include <boost/test/unit_test.hpp>

#include <twheel/cancel_after.hpp>
#include <twheel/steady_timer.hpp>
#include <twheel/wheel_service.hpp>
#include <twheel/detail/completion_queue.hpp>
#include <twheel/detail/prefault.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/system/system_error.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>
#endif

#include "support.hpp"

namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using strand_type = asio::strand<asio::io_context::executor_type>;

const error_code success{};
const error_code aborted = asio::error::operation_aborted;
const error_code no_space = asio::error::no_buffer_space;
const error_code never = asio::error::would_block;  // "did not complete" marker

using twheel_test::ms;
using twheel_test::run_ctx;
using twheel_test::run_until;
using twheel_test::wait_log;
using twheel_test::watchdog;

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

twheel::wheel_stats wstats(asio::io_context& ctx) { return twheel::stats(ctx); }

const twheel::wheel_options& options_of(asio::io_context& ctx) {
  return asio::use_service<twheel::wheel_service>(ctx).options();
}

// Runs `f` and aborts the whole test program if it has not returned after `limit`: for
// code that cannot be interrupted (a deadlock in a destructor would hang the suite).
template <class F>
void within(std::chrono::nanoseconds limit, const char* what, F f) {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lk(m);
    if (!cv.wait_for(lk, limit, [&] { return done; })) {
      std::fprintf(stderr, "FATAL: '%s' did not finish within %lld ms (deadlock?)\n", what,
                   ms(limit));
      std::abort();
    }
  });
  f();
  {
    std::lock_guard<std::mutex> lk(m);
    done = true;
  }
  cv.notify_one();
  watchdog.join();
}

// Calls a function when the last copy of the hook goes away: put one in a handler's
// captures to observe the handler's final destruction (moves do not trigger it).
struct on_destroy {
  std::function<void()> f;
  ~on_destroy() {
    if (f) f();
  }
};
using destroy_hook = std::shared_ptr<on_destroy>;

destroy_hook hook(std::function<void()> f) {
  auto h = std::make_shared<on_destroy>();
  h->f = std::move(f);
  return h;
}

// Which exception `f` throws, by most derived standard type (std::invalid_argument
// derives from std::logic_error, so BOOST_CHECK_THROW cannot tell them apart).
struct thrown {
  std::string kind = "none";
  std::string what;
};

template <class F>
thrown what_throws(F f) {
  thrown t;
  try {
    f();
  } catch (const std::invalid_argument& e) {
    t.kind = "invalid_argument";
    t.what = e.what();
  } catch (const std::logic_error& e) {
    t.kind = "logic_error";
    t.what = e.what();
  } catch (const boost::system::system_error& e) {
    t.kind = "system_error";
    t.what = e.what();
  } catch (const std::exception& e) {
    t.kind = "other";
    t.what = e.what();
  }
  return t;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

bool same_options(const twheel::wheel_options& a, const twheel::wheel_options& b) {
  return a.tick == b.tick && a.levels == b.levels && a.max_pending == b.max_pending &&
         a.max_per_pass == b.max_per_pass && a.single_threaded == b.single_threaded &&
         a.slack == b.slack;
}

twheel::wheel_options options_with_tick(std::chrono::nanoseconds tick) {
  twheel::wheel_options o;
  o.tick = tick;
  return o;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// 1. configure()
// ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(configure_applies_options_before_first_timer) {
  asio::io_context ctx;
  twheel::wheel_options o;
  o.tick = 10ms;
  o.levels = 4;
  o.max_pending = 1000;
  o.max_per_pass = 123;
  o.slack = 2ms;

  const auto before = clock_type::now();  // the wheel's origin is taken in configure()
  twheel::configure(ctx, o);

  const auto& applied = options_of(ctx);
  BOOST_TEST(ms(applied.tick) == 10);
  BOOST_TEST(applied.levels == 4u);
  BOOST_TEST(applied.max_pending == 1000u);
  BOOST_TEST(applied.max_per_pass == 123u);
  BOOST_TEST((applied.slack == 2ms));

  // A 1 ms wait is rounded up to the 10 ms tick: its deadline tick is >= 1, so it cannot
  // complete before origin + 10 ms (with a 1 ms tick it would complete ~2 ms in).
  twheel::steady_timer t(ctx);
  const auto deadline = clock_type::now() + 1ms;
  t.expires_at(deadline);
  error_code got = never;
  clock_type::time_point done{};
  t.async_wait([&](error_code ec) {
    got = ec;
    done = clock_type::now();
  });
  auto r = run_ctx(ctx);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(got == success);
  BOOST_TEST((done >= deadline));
  BOOST_TEST(ms(done - before) >= 10);
  auto s = wstats(ctx);
  BOOST_TEST(s.fired == 1u);
  BOOST_TEST(s.wakeups >= 1u);
  BOOST_TEST(s.pending == 0u);

  // Five waits with deadlines 1..5 ms apart span at most two 10 ms ticks, so the driver
  // needs at most two passes for them (one per deadline with a 1 ms tick).
  std::vector<std::unique_ptr<twheel::steady_timer>> timers;
  wait_log log;
  const auto base = clock_type::now();
  std::vector<clock_type::time_point> deadlines;
  for (int i = 0; i < 5; ++i) {
    deadlines.push_back(base + std::chrono::milliseconds(2 * i + 1));
    timers.push_back(std::make_unique<twheel::steady_timer>(ctx, deadlines.back()));
    timers.back()->async_wait([&log, &deadlines, i](error_code ec) {
      log.handler(i)(ec);
      BOOST_TEST((clock_type::now() >= deadlines[static_cast<std::size_t>(i)]),
                 "wait " << i << " completed early");
    });
  }
  const auto wakeups_before = wstats(ctx).wakeups;
  r = run_ctx(ctx);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(log.total() == 5u);
  for (int i = 0; i < 5; ++i) BOOST_TEST(log.ec(i) == success, "wait " << i);
  BOOST_TEST(wstats(ctx).wakeups - wakeups_before <= 2u);
  BOOST_TEST(wstats(ctx).fired == 6u);
}

BOOST_AUTO_TEST_CASE(configure_after_first_timer_throws_logic_error) {
  asio::io_context ctx;
  twheel::steady_timer t(ctx);  // creates the service with default options

  const auto x = what_throws([&] { twheel::configure(ctx, options_with_tick(10ms)); });
  BOOST_TEST(x.kind == "logic_error");  // and not invalid_argument: the options are fine
  BOOST_TEST(!x.what.empty());

  // Nothing changed: the defaults are still in force.
  BOOST_TEST(same_options(options_of(ctx), twheel::wheel_options{}));

  // ... and the wheel still works with them (a 1 ms tick: a 1 ms wait is not held back
  // to a 10 ms boundary; checked loosely, the point is that it completes normally).
  error_code got = never;
  t.expires_after(1ms);
  t.async_wait([&](error_code ec) { got = ec; });
  auto r = run_ctx(ctx);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(got == success);

  // Still refused later, with any options.
  twheel::wheel_options o;
  o.max_pending = 5;
  BOOST_TEST(what_throws([&] { twheel::configure(ctx, o); }).kind == "logic_error");
  BOOST_TEST(options_of(ctx).max_pending == 0u);
}

// Reading the stats of a context with no wheel yet must not create one, or configure()
// would be refused although no timer exists.
BOOST_AUTO_TEST_CASE(stats_before_configure_does_not_create_the_wheel) {
  asio::io_context ctx;
  const auto s = twheel::stats(ctx);
  BOOST_TEST(s.pending == 0u);
  BOOST_TEST(s.wakeups == 0u);
  BOOST_TEST(!asio::has_service<twheel::wheel_service>(ctx));
  twheel::wheel_options o;
  o.max_pending = 7;
  BOOST_CHECK_NO_THROW(twheel::configure(ctx, o));
  BOOST_TEST(asio::use_service<twheel::wheel_service>(ctx).options().max_pending == 7u);
}

BOOST_AUTO_TEST_CASE(configure_twice_throws) {
  asio::io_context ctx;
  twheel::wheel_options first;
  first.tick = 2ms;
  first.levels = 3;
  first.max_pending = 10;
  first.max_per_pass = 7;
  twheel::configure(ctx, first);

  twheel::wheel_options second;
  second.tick = 5ms;
  second.levels = 8;
  second.max_pending = 0;
  second.max_per_pass = 99;
  const auto x = what_throws([&] { twheel::configure(ctx, second); });
  BOOST_TEST(x.kind == "logic_error");
  BOOST_TEST(same_options(options_of(ctx), first));

  // Identical options are refused as well: configure() is once only.
  BOOST_TEST(what_throws([&] { twheel::configure(ctx, first); }).kind == "logic_error");
  BOOST_TEST(same_options(options_of(ctx), first));
}

BOOST_AUTO_TEST_CASE(configure_rejects_bad_values) {
  struct bad_case {
    const char* name;
    twheel::wheel_options options;
    std::vector<std::string> mentions;  // what() must name the field, as the caller
                                        // spelled it, and the bad value
  };
  std::vector<bad_case> cases;
  {
    twheel::wheel_options o;
    o.tick = std::chrono::nanoseconds(0);
    cases.push_back({"tick 0", o, {"wheel_options.tick", "0"}});
  }
  {
    twheel::wheel_options o;
    o.tick = std::chrono::nanoseconds(-5);
    cases.push_back({"tick -5 ns", o, {"wheel_options.tick", "-5"}});
  }
  {
    twheel::wheel_options o;
    o.tick = -1ms;
    cases.push_back({"tick -1 ms", o, {"wheel_options.tick", "-1000000"}});
  }
  {
    twheel::wheel_options o;
    o.levels = 0;
    cases.push_back({"levels 0", o, {"wheel_options.levels", "got 0"}});
  }
  {
    twheel::wheel_options o;
    o.levels = 11;
    cases.push_back({"levels 11", o, {"wheel_options.levels", "11"}});
  }
  {
    twheel::wheel_options o;
    o.max_per_pass = 0;
    cases.push_back({"max_per_pass 0", o, {"wheel_options.max_per_pass", "0"}});
  }
  {
    twheel::wheel_options o;
    o.slack = std::chrono::nanoseconds(-7);
    cases.push_back({"slack -7 ns", o, {"wheel_options.slack", "-7"}});
  }

  for (const auto& c : cases) {
    BOOST_TEST_CONTEXT(c.name) {
      asio::io_context ctx;
      const auto x = what_throws([&] { twheel::configure(ctx, c.options); });
      BOOST_TEST(x.kind == "invalid_argument");
      for (const auto& m : c.mentions) {
        BOOST_TEST(contains(x.what, m), "what() = '" << x.what << "' lacks '" << m << "'");
      }
      // Nothing changed: no service was created, so a valid configure() still works.
      BOOST_TEST(!asio::has_service<twheel::wheel_service>(ctx));
      twheel::wheel_options good;
      good.tick = 3ms;
      BOOST_TEST(what_throws([&] { twheel::configure(ctx, good); }).kind == "none");
      BOOST_TEST(ms(options_of(ctx).tick) == 3);
    }
  }

  // The boundaries themselves are valid.
  for (unsigned levels : {1u, 10u}) {
    asio::io_context ctx;
    twheel::wheel_options o;
    o.levels = levels;
    o.tick = std::chrono::nanoseconds(1);
    o.max_per_pass = 1;
    BOOST_TEST(what_throws([&] { twheel::configure(ctx, o); }).kind == "none",
               "levels " << levels);
    BOOST_TEST(options_of(ctx).levels == levels);
  }
}

BOOST_AUTO_TEST_CASE(configure_error_code_overload) {
  static_assert(noexcept(twheel::configure(std::declval<asio::io_context&>(),
                                           std::declval<const twheel::wheel_options&>(),
                                           std::declval<error_code&>())));
  {  // bad value
    asio::io_context ctx;
    twheel::wheel_options o;
    o.levels = 0;
    error_code ec;
    BOOST_TEST(what_throws([&] { twheel::configure(ctx, o, ec); }).kind == "none");
    BOOST_TEST(ec == error_code(asio::error::invalid_argument));
    BOOST_TEST(!asio::has_service<twheel::wheel_service>(ctx));

    o.levels = 6;
    o.max_per_pass = 0;
    ec = never;
    twheel::configure(ctx, o, ec);
    BOOST_TEST(ec == error_code(asio::error::invalid_argument));

    // success clears a stale error code
    o.max_per_pass = 17;
    ec = never;
    twheel::configure(ctx, o, ec);
    BOOST_TEST(!ec);
    BOOST_TEST(options_of(ctx).max_per_pass == 17u);

    // twice
    twheel::wheel_options other;
    other.max_per_pass = 5;
    twheel::configure(ctx, other, ec);
    BOOST_TEST(ec == error_code(asio::error::already_started));
    BOOST_TEST(options_of(ctx).max_per_pass == 17u);
  }
  {  // after the first timer
    asio::io_context ctx;
    twheel::steady_timer t(ctx);
    error_code ec;
    BOOST_TEST(what_throws([&] {
                 twheel::configure(ctx, options_with_tick(10ms), ec);
               }).kind == "none");
    BOOST_TEST(ec == error_code(asio::error::already_started));
    BOOST_TEST(same_options(options_of(ctx), twheel::wheel_options{}));
  }
}

// Not in the ASan+UBSan build: UBSan's check of a dynamic type opens a pipe, and reports
// every object as of the wrong type while no descriptor is left.
#if defined(__linux__) && !defined(__SANITIZE_ADDRESS__)
// The wheel acquires the service behind Asio's steady_timer when it is created (so that
// service outlives it), and on an io_context with no I/O object yet that opens Asio's
// reactor: three descriptors. Out of descriptors, configure() reports it, and the
// error_code overload, which is noexcept, terminated the process (a review found it).
BOOST_AUTO_TEST_CASE(configure_reports_a_timer_service_that_cannot_be_made) {
  asio::io_context ctx;  // opens nothing yet
  rlimit saved{};
  BOOST_TEST_REQUIRE(getrlimit(RLIMIT_NOFILE, &saved) == 0);
  {
    // Every descriptor below the lowest free one is open: a limit there refuses any new
    // one.
    const int lowest_free = ::open("/dev/null", O_RDONLY);
    BOOST_TEST_REQUIRE(lowest_free >= 0);
    ::close(lowest_free);
    rlimit none = saved;
    none.rlim_cur = static_cast<rlim_t>(lowest_free);
    BOOST_TEST_REQUIRE(setrlimit(RLIMIT_NOFILE, &none) == 0);
  }
  error_code ec;
  twheel::configure(ctx, twheel::wheel_options{}, ec);
  const thrown by_throwing = what_throws([&] { twheel::configure(ctx, twheel::wheel_options{}); });
  BOOST_TEST_REQUIRE(setrlimit(RLIMIT_NOFILE, &saved) == 0);
  BOOST_TEST(ec == error_code(asio::error::no_descriptors));
  BOOST_TEST(by_throwing.kind == "system_error");
  BOOST_TEST(!asio::has_service<twheel::wheel_service>(ctx));  // nothing changed
  twheel::configure(ctx, twheel::wheel_options{}, ec);
  BOOST_TEST(!ec);
}
#endif

// With a slack the driver wakes that much after the first due slot, and one wake-up takes
// every wait due by then: each wait still completes no earlier than its deadline, and no
// earlier than the first slot plus the slack.
BOOST_AUTO_TEST_CASE(slack_coalesces_wakeups_and_is_never_early) {
  asio::io_context ctx;
  twheel::wheel_options o;
  o.tick = 1ms;
  o.slack = 100ms;
  twheel::configure(ctx, o);
  BOOST_TEST((options_of(ctx).slack == 100ms));

  const auto base = clock_type::now();
  std::vector<std::unique_ptr<twheel::steady_timer>> timers;
  std::vector<clock_type::time_point> deadlines, done(5);
  wait_log log;
  for (int i = 0; i < 5; ++i) {
    deadlines.push_back(base + std::chrono::milliseconds(10 * (i + 1)));
    timers.push_back(std::make_unique<twheel::steady_timer>(ctx, deadlines.back()));
    timers.back()->async_wait([&, i](error_code ec) {
      log.handler(i)(ec);
      done[static_cast<std::size_t>(i)] = clock_type::now();
    });
  }
  auto r = run_ctx(ctx);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(log.total() == 5u);
  for (std::size_t i = 0; i < 5; ++i) {
    BOOST_TEST_CONTEXT("wait " << i) {
      BOOST_TEST(log.ec(static_cast<int>(i)) == success);
      BOOST_TEST((done[i] >= deadlines[i]));
      BOOST_TEST((done[i] >= deadlines[0] + o.slack));  // the slack was applied
    }
  }
  // One wake-up for all five (without the slack: five, one per deadline).
  BOOST_TEST(wstats(ctx).wakeups == 1u);
}

// Deadlines a few ticks either side of each level's boundary (64, 64^2 and 64^3 ticks of
// 1 us from the wheel's origin), with the default slack of 0: none completes early, and
// each completes exactly once.
BOOST_AUTO_TEST_CASE(level_boundaries_never_early) {
  asio::io_context ctx;
  twheel::wheel_options o;
  o.tick = 1us;
  const auto origin = clock_type::now();  // at or just before the wheel's own origin
  twheel::configure(ctx, o);

  std::vector<std::unique_ptr<twheel::steady_timer>> timers;
  std::vector<clock_type::time_point> deadlines;
  std::vector<int> calls;
  std::vector<char> early;
  for (long boundary : {64L, 64L * 64, 64L * 64 * 64}) {
    for (long delta = -3; delta <= 3; ++delta) {
      deadlines.push_back(origin + std::chrono::microseconds(boundary + delta));
      calls.push_back(0);
      early.push_back(0);
    }
  }
  for (std::size_t i = 0; i < deadlines.size(); ++i) {
    timers.push_back(std::make_unique<twheel::steady_timer>(ctx, deadlines[i]));
    timers.back()->async_wait([&, i](error_code ec) {
      ++calls[i];
      if (ec || clock_type::now() < deadlines[i]) early[i] = 1;
    });
  }
  auto r = run_ctx(ctx);
  BOOST_TEST(!r.timed_out);
  for (std::size_t i = 0; i < deadlines.size(); ++i) {
    BOOST_TEST_CONTEXT("deadline " << i) {
      BOOST_TEST(calls[i] == 1);
      BOOST_TEST(!early[i]);
    }
  }
}

// Deadlines a few ticks apart, mostly inside one rotation of the finest level, so that
// the driver's standby timer waits at the next one while the current one is armed; every
// fourth handler cancels the next timer (30 us later: aborted if the handler ran within
// that, else already fired). Every wait completes once, the fired ones in deadline order
// and none early, the cancelled ones aborted, and run() returns once nothing is pending.
BOOST_AUTO_TEST_CASE(deadlines_ticks_apart_fire_in_order_with_neighbours_cancelled) {
  asio::io_context ctx;
  twheel::wheel_options o;
  o.tick = 10us;  // rotations of the finest level: 640 us
  twheel::configure(ctx, o);
  constexpr std::size_t n = 200;
  const auto start = clock_type::now() + 20ms;
  std::vector<std::unique_ptr<twheel::steady_timer>> timers;
  std::vector<clock_type::time_point> deadlines;
  std::vector<int> calls(n, 0);
  std::vector<error_code> ecs(n);
  std::vector<char> early(n, 0), cancelled(n, 0);
  std::vector<std::size_t> fired;
  for (std::size_t i = 0; i < n; ++i) {
    deadlines.push_back(start + std::chrono::microseconds(30 * static_cast<long>(i)));
    timers.push_back(std::make_unique<twheel::steady_timer>(ctx, deadlines[i]));
  }
  for (std::size_t i = 0; i < n; ++i) {
    timers[i]->async_wait([&, i](error_code ec) {
      ++calls[i];
      ecs[i] = ec;
      if (!ec) {
        if (clock_type::now() < deadlines[i]) early[i] = 1;
        fired.push_back(i);
      }
      if (i % 4 == 0 && i + 1 < n) cancelled[i + 1] = timers[i + 1]->cancel() == 1 ? 1 : 0;
    });
  }
  auto r = run_ctx(ctx);
  BOOST_TEST(!r.timed_out);
  std::size_t aborted_count = 0;
  for (std::size_t i = 0; i < n; ++i) {
    BOOST_TEST_CONTEXT("timer " << i) {
      BOOST_TEST(calls[i] == 1);
      BOOST_TEST(!early[i]);
      BOOST_TEST(ecs[i] == (cancelled[i] ? aborted : success));
      aborted_count += cancelled[i] ? 1 : 0;
    }
  }
  BOOST_TEST(std::is_sorted(fired.begin(), fired.end()));
  BOOST_TEST(fired.size() + aborted_count == n);
  BOOST_TEST(wstats(ctx).pending == 0u);
}

// The driver's standby waits at the next non-empty slot, also one whose timer was
// cancelled (it keeps its place until its slot comes due). When the last pending wait
// fires before it, the standby goes too: run() returns then, not at the standby's time.
BOOST_AUTO_TEST_CASE(run_returns_when_the_last_wait_fires_before_the_standby) {
  asio::io_context ctx;
  twheel::wheel_options o;
  o.tick = 100ms;  // the finest level's rotation: 6.4 s
  twheel::configure(ctx, o);
  wait_log log;
  twheel::steady_timer later(ctx, 3s);
  later.async_wait(log.handler(1));
  twheel::steady_timer earlier(ctx, 300ms);
  earlier.async_wait(log.handler(2));  // the driver wakes at 300 ms, the standby at 3 s
  BOOST_TEST(later.cancel() == 1u);
  auto r = run_ctx(ctx);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(log.ec(1) == aborted);
  BOOST_TEST(log.ec(2) == success);
  BOOST_TEST(ms(r.elapsed) < 2000);  // about 400 ms; 3 s if the standby were left waiting
  BOOST_TEST(wstats(ctx).pending == 0u);
}

// The README's difference from Asio: waits aborted by separate calls reach the
// scheduler's queue when the operation queued at the first abort runs, so a handler
// posted after the aborts runs between the first aborted handler and the rest (Asio:
// 1, 2, 3, 0).
BOOST_AUTO_TEST_CASE(aborted_waits_join_the_queue_when_their_batch_runs) {
  asio::io_context ctx;
  std::vector<int> order;
  twheel::steady_timer a(ctx, 10s), b(ctx, 10s), c(ctx, 10s);
  a.async_wait([&](error_code ec) { order.push_back(ec == aborted ? 1 : -1); });
  b.async_wait([&](error_code ec) { order.push_back(ec == aborted ? 2 : -2); });
  c.async_wait([&](error_code ec) { order.push_back(ec == aborted ? 3 : -3); });
  BOOST_TEST(a.cancel() == 1u);
  BOOST_TEST(b.cancel() == 1u);
  BOOST_TEST(c.cancel() == 1u);
  asio::post(ctx, [&] { order.push_back(0); });
  auto r = run_ctx(ctx);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(order == (std::vector<int>{1, 0, 2, 3}), boost::test_tools::per_element());
}

// A timer whose waits were all cancelled keeps its place in the wheel (taking it out would
// write two other timers), is reused by its next wait, and is dropped, unfired and
// without a wake-up of its own, when its slot comes due while other waits are pending.
BOOST_AUTO_TEST_CASE(a_cancelled_timer_keeps_its_place_until_its_slot_comes_due) {
  asio::io_context ctx;
  wait_log log;
  twheel::steady_timer early(ctx, 5ms);
  twheel::steady_timer later(ctx, 40ms);
  twheel::steady_timer reused(ctx, 1h);
  early.async_wait(log.handler(1));
  later.async_wait(log.handler(2));
  reused.async_wait(log.handler(3));
  BOOST_TEST(early.cancel() == 1u);
  BOOST_TEST(reused.cancel() == 1u);
  auto s = wstats(ctx);
  BOOST_TEST(s.pending == 1u);
  BOOST_TEST(s.timers == 3u);
  reused.expires_after(20ms);
  reused.async_wait(log.handler(4));  // files the new expiry in the same entry
  s = wstats(ctx);
  BOOST_TEST(s.pending == 2u);
  BOOST_TEST(s.timers == 3u);

  BOOST_TEST(run_until(ctx, [&] { return log.count(2) == 1 && log.count(4) == 1; }));
  BOOST_TEST(log.ec(1) == aborted);
  BOOST_TEST(log.ec(3) == aborted);
  BOOST_TEST(log.ec(2) == success);
  BOOST_TEST(log.ec(4) == success);
  for (int id : {1, 2, 3, 4}) BOOST_TEST(log.count(id) == 1u, "wait " << id);
  s = wstats(ctx);
  BOOST_TEST(s.pending == 0u);
  BOOST_TEST(s.timers == 0u);  // `early` left when its slot came due
  BOOST_TEST(s.fired == 2u);
  BOOST_TEST(s.cancelled == 2u);

  // With nothing pending, a cancelled timer keeps nothing armed: run() returns at once.
  early.expires_after(1h);
  early.async_wait(log.handler(5));
  BOOST_TEST(early.cancel() == 1u);
  BOOST_TEST(wstats(ctx).timers == 1u);
  ctx.restart();
  auto r = run_ctx(ctx);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(ms(r.elapsed) < 500);
  BOOST_TEST(log.ec(5) == aborted);
}

// ---------------------------------------------------------------------------------------
// 2. stats()
// ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(stats_counts_are_exact) {
  asio::io_context ctx;
  {
    const auto s = wstats(ctx);
    BOOST_TEST(s.pending == 0u);
    BOOST_TEST(s.timers == 0u);
    BOOST_TEST(s.fired == 0u);
    BOOST_TEST(s.cancelled == 0u);
    BOOST_TEST(s.rejected == 0u);
    BOOST_TEST(s.wakeups == 0u);
  }

  wait_log log;
  twheel::steady_timer fires(ctx, 5ms);   // 1: fires
  twheel::steady_timer all(ctx, 1h);      // 2, 3: cancel()
  twheel::steady_timer one(ctx, 1h);      // 4, 5: cancel_one(), later cancel()
  twheel::steady_timer rearmed(ctx, 1h);  // 6: aborted by expires_after(); 9 then fires
  twheel::steady_timer perop(ctx, 1h);    // 7: per-operation cancellation
  auto doomed = std::make_unique<twheel::steady_timer>(ctx, 1h);  // 8: timer destroyed
  asio::cancellation_signal sig;

  fires.async_wait(log.handler(1));
  all.async_wait(log.handler(2));
  all.async_wait(log.handler(3));
  one.async_wait(log.handler(4));
  one.async_wait(log.handler(5));
  rearmed.async_wait(log.handler(6));
  perop.async_wait(asio::bind_cancellation_slot(sig.slot(), log.handler(7)));
  doomed->async_wait(log.handler(8));

  auto s = wstats(ctx);
  BOOST_TEST(s.pending == 8u);
  BOOST_TEST(s.timers == 6u);
  BOOST_TEST(s.fired == 0u);
  BOOST_TEST(s.cancelled == 0u);
  BOOST_TEST(s.wakeups == 0u);  // nothing has run

  BOOST_TEST(all.cancel() == 2u);
  s = wstats(ctx);
  BOOST_TEST(s.pending == 6u);
  BOOST_TEST(s.cancelled == 2u);
  BOOST_TEST(s.timers == 6u);  // a timer left without waits keeps its place

  BOOST_TEST(one.cancel_one() == 1u);
  s = wstats(ctx);
  BOOST_TEST(s.pending == 5u);
  BOOST_TEST(s.cancelled == 3u);
  BOOST_TEST(s.timers == 6u);  // still has wait 5

  BOOST_TEST(rearmed.expires_after(10ms) == 1u);
  s = wstats(ctx);
  BOOST_TEST(s.pending == 4u);
  BOOST_TEST(s.cancelled == 4u);
  rearmed.async_wait(log.handler(9));
  s = wstats(ctx);
  BOOST_TEST(s.pending == 5u);
  BOOST_TEST(s.timers == 6u);

  sig.emit(asio::cancellation_type::terminal);
  s = wstats(ctx);
  BOOST_TEST(s.pending == 4u);
  BOOST_TEST(s.cancelled == 5u);
  BOOST_TEST(s.timers == 6u);

  doomed.reset();
  s = wstats(ctx);
  BOOST_TEST(s.pending == 3u);
  BOOST_TEST(s.cancelled == 6u);
  BOOST_TEST(s.timers == 5u);  // a destroyed timer leaves
  BOOST_TEST(s.fired == 0u);
  BOOST_TEST(log.total() == 0u);  // counters move at once; no handler ran yet

  // Run until both remaining deadlines (5 ms and 10 ms) fired.
  BOOST_TEST(run_until(ctx, [&] { return log.count(1) == 1 && log.count(9) == 1; }));
  s = wstats(ctx);
  BOOST_TEST(s.fired == 2u);
  BOOST_TEST(s.pending == 1u);  // wait 5
  BOOST_TEST(s.cancelled == 6u);
  BOOST_TEST(s.timers == 3u);  // one, and all and perop without waits (1 h)
  BOOST_TEST(s.wakeups >= 1u);
  BOOST_TEST(s.rejected == 0u);

  BOOST_TEST(one.cancel() == 1u);
  s = wstats(ctx);
  BOOST_TEST(s.pending == 0u);
  BOOST_TEST(s.cancelled == 7u);
  BOOST_TEST(s.timers == 3u);

  auto r = run_ctx(ctx);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(ms(r.elapsed) < 1000);

  s = wstats(ctx);
  BOOST_TEST(s.pending == 0u);
  BOOST_TEST(s.fired == 2u);
  BOOST_TEST(s.cancelled == 7u);
  BOOST_TEST(s.rejected == 0u);
  BOOST_TEST(s.fired + s.cancelled == 9u);  // every wait started
  BOOST_TEST(log.total() == 9u);
  for (int id = 1; id <= 9; ++id) {
    BOOST_TEST(log.count(id) == 1u, "wait " << id);
    const bool should_fire = id == 1 || id == 9;
    BOOST_TEST(log.ec(id) == (should_fire ? success : aborted), "wait " << id);
  }

  // wakeups grows when the driver fires, and pending is 0 after run() returned by itself.
  const auto w0 = s.wakeups;
  fires.expires_after(2ms);
  fires.async_wait(log.handler(10));
  BOOST_TEST(wstats(ctx).pending == 1u);
  r = run_ctx(ctx);
  BOOST_TEST(!r.timed_out);
  s = wstats(ctx);
  BOOST_TEST(log.ec(10) == success);
  BOOST_TEST(s.wakeups > w0);
  BOOST_TEST(s.pending == 0u);
  BOOST_TEST(s.fired == 3u);
}

// ---------------------------------------------------------------------------------------
// 3. No pending waits: no outstanding work, no wake-ups
// ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(no_pending_waits_means_no_work_and_no_wakeups) {
  {  // the only wait cancelled: run() returns although the deadline is an hour away
    asio::io_context ctx;
    twheel::steady_timer t(ctx, 1h);
    wait_log log;
    t.async_wait(log.handler(1));
    BOOST_TEST(t.cancel() == 1u);
    auto r = run_ctx(ctx);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(ms(r.elapsed) < 500);
    BOOST_TEST(log.ec(1) == aborted);
    BOOST_TEST(wstats(ctx).wakeups == 0u);
  }
  {  // the only wait cancelled per-operation while run() executes
    asio::io_context ctx;
    twheel::steady_timer t(ctx, 1h);
    asio::cancellation_signal sig;
    wait_log log;
    t.async_wait(asio::bind_cancellation_slot(sig.slot(), log.handler(1)));
    asio::post(ctx, [&] { sig.emit(asio::cancellation_type::terminal); });
    auto r = run_ctx(ctx);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(ms(r.elapsed) < 500);
    BOOST_TEST(log.ec(1) == aborted);
  }
  {  // timers without waits (expiry set in every way) do not keep run() busy
    asio::io_context ctx;
    twheel::steady_timer a(ctx, 1h);
    twheel::steady_timer b(ctx, clock_type::now() + 20ms);
    twheel::steady_timer c(ctx);
    c.expires_after(5ms);
    auto r = run_ctx(ctx);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(r.handlers == 0u);
    BOOST_TEST(ms(r.elapsed) < 100);
    const auto s = wstats(ctx);
    BOOST_TEST(s.wakeups == 0u);
    BOOST_TEST(s.pending == 0u);
    BOOST_TEST(s.timers == 0u);
  }
  {  // no wake-ups while nothing is pending, even with wait-less entries due soon
    asio::io_context ctx;
    twheel::steady_timer first(ctx, 2ms);
    wait_log log;
    first.async_wait(log.handler(1));
    auto r = run_ctx(ctx);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(log.ec(1) == success);
    const auto w = wstats(ctx).wakeups;
    BOOST_TEST(w >= 1u);

    // An entry whose wait was aborted by a later expires_after() may stay filed at its
    // old (10 ms) slot; another wait (15 ms) is cancelled. Neither may wake the driver.
    twheel::steady_timer moved_out(ctx, 10ms);
    moved_out.async_wait(log.handler(2));
    BOOST_TEST(moved_out.expires_after(1h) == 1u);
    twheel::steady_timer cancelled(ctx, 15ms);
    cancelled.async_wait(log.handler(3));
    BOOST_TEST(cancelled.cancel() == 1u);

    auto guard = asio::make_work_guard(ctx);
    ctx.restart();
    ctx.run_for(50ms);  // runs the two aborted completions, then just sleeps
    BOOST_TEST(log.ec(2) == aborted);
    BOOST_TEST(log.ec(3) == aborted);
    const auto s = wstats(ctx);
    BOOST_TEST(s.wakeups == w);
    BOOST_TEST(s.pending == 0u);
    guard.reset();
    r = run_ctx(ctx);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(ms(r.elapsed) < 500);
  }
}

// The driver is armed (as an Asio timer) for a far deadline; then an already expired wait
// is started (its pass is posted) and the far wait is cancelled. Once the expired wait
// has completed nothing is pending, so run() must return.
BOOST_AUTO_TEST_CASE(no_work_left_after_expired_wait_and_cancel) {
  {  // set up before run()
    asio::io_context ctx;
    twheel::steady_timer far(ctx, 1h);
    twheel::steady_timer past(ctx, clock_type::now() - 1s);
    wait_log log;
    far.async_wait(log.handler(1));
    past.async_wait(log.handler(2));
    BOOST_TEST(far.cancel() == 1u);
    auto r = run_ctx(ctx, 3s);
    BOOST_TEST(!r.timed_out, "run() kept running with nothing pending");
    BOOST_TEST(ms(r.elapsed) < 1000);
    BOOST_TEST(log.ec(1) == aborted);
    BOOST_TEST(log.ec(2) == success);
    BOOST_TEST(wstats(ctx).pending == 0u);
  }
  {  // the same from inside a handler (a keep-alive due now, the long timeout dropped)
    asio::io_context ctx;
    twheel::steady_timer far(ctx, 1h);
    twheel::steady_timer now_due(ctx);
    wait_log log;
    far.async_wait(log.handler(1));
    asio::post(ctx, [&] {
      now_due.expires_at(clock_type::time_point::min());
      now_due.async_wait(log.handler(2));
      far.cancel();
    });
    auto r = run_ctx(ctx, 3s);
    BOOST_TEST(!r.timed_out, "run() kept running with nothing pending");
    BOOST_TEST(ms(r.elapsed) < 1000);
    BOOST_TEST(log.ec(1) == aborted);
    BOOST_TEST(log.ec(2) == success);
  }
}

// ---------------------------------------------------------------------------------------
// 4. Re-arming from another thread while run() is blocked
// ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(rearm_from_another_thread_while_run_blocks) {
  asio::io_context ctx;
  auto guard = asio::make_work_guard(ctx);
  twheel::steady_timer slow(ctx, 10s);
  std::promise<error_code> slow_done;
  slow.async_wait([&](error_code ec) { slow_done.set_value(ec); });

  std::atomic<bool> a_returned{false};
  std::thread a([&] {
    ctx.run();
    a_returned = true;
  });
  std::this_thread::sleep_for(50ms);  // A is blocked in run(), the driver armed for 10 s

  std::chrono::nanoseconds fast_elapsed{};
  error_code fast_ec = never;
  std::thread::id ran_on;
  std::thread b([&] {
    twheel::steady_timer fast(ctx);  // constructed and armed on B, not posted
    std::promise<void> done;
    auto fut = done.get_future();
    fast.expires_after(20ms);
    const auto t0 = clock_type::now();
    fast.async_wait([&](error_code ec) {
      fast_elapsed = clock_type::now() - t0;
      fast_ec = ec;
      ran_on = std::this_thread::get_id();
      done.set_value();
    });
    if (fut.wait_for(2s) != std::future_status::ready) {
      fast.cancel();  // keep `fast` alive until its handler has run
      fut.wait();
    }
  });
  b.join();
  BOOST_TEST(fast_ec == success);
  BOOST_TEST(ms(fast_elapsed) >= 20);
  BOOST_TEST(ms(fast_elapsed) < 500);
  BOOST_TEST((ran_on == a.get_id()));

  BOOST_TEST(slow.cancel() == 1u);
  guard.reset();
  auto slow_fut = slow_done.get_future();
  const bool slow_completed = slow_fut.wait_for(2s) == std::future_status::ready;
  BOOST_TEST(slow_completed);
  const auto t0 = clock_type::now();
  while (!a_returned && clock_type::now() - t0 < 2s) std::this_thread::sleep_for(1ms);
  BOOST_TEST(a_returned.load(), "run() did not return after the guard was released");
  if (!a_returned) ctx.stop();
  a.join();
  if (slow_completed) BOOST_TEST(slow_fut.get() == aborted);
  const auto s = wstats(ctx);
  BOOST_TEST(s.pending == 0u);
  BOOST_TEST(s.fired == 1u);
  BOOST_TEST(s.cancelled == 1u);
}

// ---------------------------------------------------------------------------------------
// 5. max_pending
// ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(max_pending_rejects_excess_waits) {
  asio::io_context ctx;
  twheel::wheel_options o;
  o.max_pending = 3;
  twheel::configure(ctx, o);

  wait_log log;
  bool inside_async_wait = false;
  std::vector<int> completed_inside;
  auto handler = [&](int id) {
    return [&, id](error_code ec) {
      if (inside_async_wait) completed_inside.push_back(id);
      log.handler(id)(ec);
    };
  };
  auto start = [&](twheel::steady_timer& t, int id) {
    inside_async_wait = true;
    t.async_wait(handler(id));
    inside_async_wait = false;
  };

  const auto deadline = clock_type::now() + 100ms;
  twheel::steady_timer t0(ctx, deadline), t1(ctx, deadline), t2(ctx, deadline),
      t3(ctx, deadline);
  start(t0, 0);
  start(t1, 1);
  start(t2, 2);
  start(t3, 3);  // the 4th concurrent wait
  BOOST_TEST(log.total() == 0u);  // not completed inside async_wait
  auto s = wstats(ctx);
  BOOST_TEST(s.pending == 3u);
  BOOST_TEST(s.rejected == 1u);
  BOOST_TEST(s.timers == 3u);

  // The rejection completes first, long before the deadline; the others are untouched.
  BOOST_TEST(run_until(ctx, [&] { return log.count(3) == 1; }));
  BOOST_TEST(log.ec(3) == no_space);
  BOOST_TEST((clock_type::now() < deadline), "the rejection waited for the deadline");
  BOOST_TEST(log.count(0) + log.count(1) + log.count(2) == 0u);
  s = wstats(ctx);
  BOOST_TEST(s.pending == 3u);
  BOOST_TEST(s.cancelled == 0u);
  BOOST_TEST(t3.cancel() == 0u);  // nothing of the rejected wait is left on its timer

  auto r = run_ctx(ctx);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST((clock_type::now() >= deadline));
  for (int id = 0; id < 3; ++id) {
    BOOST_TEST(log.count(id) == 1u, "wait " << id);
    BOOST_TEST(log.ec(id) == success, "wait " << id);
  }
  BOOST_TEST(log.count(3) == 1u);
  BOOST_TEST(completed_inside.empty());
  s = wstats(ctx);
  BOOST_TEST(s.pending == 0u);
  BOOST_TEST(s.fired == 3u);
  BOOST_TEST(s.rejected == 1u);

  // Capacity is back: three new concurrent waits are accepted (one on the timer whose wait
  // was rejected), a fourth is rejected again.
  for (auto* t : {&t0, &t1, &t3}) t->expires_after(5ms);
  start(t0, 10);
  start(t1, 11);
  start(t3, 13);
  BOOST_TEST(wstats(ctx).rejected == 1u);
  BOOST_TEST(wstats(ctx).pending == 3u);
  // A cancelled wait frees its place at once.
  t2.expires_after(5ms);
  start(t2, 12);
  BOOST_TEST(wstats(ctx).rejected == 2u);
  BOOST_TEST(t1.cancel() == 1u);
  start(t2, 14);
  BOOST_TEST(wstats(ctx).rejected == 2u);
  r = run_ctx(ctx);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(log.ec(10) == success);
  BOOST_TEST(log.ec(11) == aborted);
  BOOST_TEST(log.ec(12) == no_space);
  BOOST_TEST(log.ec(13) == success);
  BOOST_TEST(log.ec(14) == success);
  BOOST_TEST(completed_inside.empty());
  s = wstats(ctx);
  BOOST_TEST(s.pending == 0u);
  BOOST_TEST(s.fired == 6u);
  BOOST_TEST(s.cancelled == 1u);
  BOOST_TEST(s.rejected == 2u);
}

// ---------------------------------------------------------------------------------------
// 6. max_per_pass: bounded driver passes
// ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(bounded_passes_let_other_handlers_run) {
  constexpr std::size_t n = 1000;
  asio::io_context ctx;
  twheel::wheel_options o;
  o.max_per_pass = 10;
  twheel::configure(ctx, o);

  const auto deadline = clock_type::now() + 20ms;
  std::vector<std::unique_ptr<twheel::steady_timer>> timers;
  std::vector<int> calls(n, 0);
  std::vector<error_code> codes(n, never);
  std::size_t completed = 0;
  std::optional<std::size_t> completed_when_other_ran;
  for (std::size_t i = 0; i < n; ++i) {
    timers.push_back(std::make_unique<twheel::steady_timer>(ctx, deadline));
    timers.back()->async_wait([&, i](error_code ec) {
      ++calls[i];
      codes[i] = ec;
      if (completed++ == 0) {
        // Posted when the batch starts: it must get its turn between two passes.
        asio::post(ctx, [&] { completed_when_other_ran = completed; });
      }
    });
  }
  BOOST_TEST(wstats(ctx).pending == n);

  auto r = run_ctx(ctx);  // a single run()
  BOOST_TEST(!r.timed_out);
  BOOST_TEST((clock_type::now() >= deadline));
  BOOST_TEST(completed == n);
  BOOST_TEST(std::count(calls.begin(), calls.end(), 1) == static_cast<long>(n));
  BOOST_TEST(std::count(codes.begin(), codes.end(), success) == static_cast<long>(n));
  BOOST_TEST(completed_when_other_ran.has_value());
  if (completed_when_other_ran) {
    BOOST_TEST(*completed_when_other_ran < n, "the posted handler waited for the whole batch");
    BOOST_TEST(*completed_when_other_ran <= 3 * o.max_per_pass);
  }
  const auto s = wstats(ctx);
  BOOST_TEST(s.fired == n);
  BOOST_TEST(s.pending == 0u);
  BOOST_TEST(s.wakeups > 1u);
  BOOST_TEST(s.wakeups >= n / o.max_per_pass);  // each pass examines at most 10 entries
}

// A pass bounded by max_per_pass sees a wait due and leaves it to the next: from then on
// it completes with success, as a timer Asio's reactor has queued does (seen_due()). The
// wheel tells waits that pass saw from waits filed since by a pass count kept in a few
// bits; a wait filed for a later tick is seen by whichever pass reaches its tick, however
// many ran meanwhile. With exactly 65,536 passes between A's filing and the pass that saw
// it due, B's handler, run from that pass, aborted A (a review found it).
BOOST_AUTO_TEST_CASE(a_wait_seen_due_is_seen_however_many_passes_ran_since_it_was_filed) {
  asio::io_context ctx;
  twheel::wheel_options o;
  o.tick = 250ms;  // A and B stay in level 0: the bounded pass has no cascade to do
  o.max_per_pass = 1;
  twheel::configure(ctx, o);
  twheel::steady_timer a(ctx), b(ctx), spinner(ctx);
  // Runs passes, one expired wait each, until the next pass is number `next`; then waits
  // until `then` (A and B due) in the last handler.
  std::uint64_t next = 0;
  clock_type::time_point then{};
  std::function<void(error_code)> spin = [&](error_code) {
    if (wstats(ctx).wakeups + 1 < next) {
      spinner.expires_at(clock_type::time_point::min());
      spinner.async_wait(spin);
    } else {
      std::this_thread::sleep_until(then);
    }
  };
  // How long 65,536 passes take here (the sanitizer builds are slower).
  const auto t0 = clock_type::now();
  next = 65536;
  spin(error_code());
  BOOST_TEST_REQUIRE(!run_ctx(ctx, 60s).timed_out);
  const auto took = clock_type::now() - t0;

  const std::uint64_t filed = wstats(ctx).wakeups;
  const auto due = clock_type::now() + 3 * took + 500ms;
  std::optional<error_code> a_ec;
  std::size_t cancelled = 99;
  std::uint64_t seen_by = 0;
  a.expires_at(due + o.tick);
  a.async_wait([&](error_code ec) { a_ec = ec; });
  b.expires_at(due);  // an earlier slot: the bounded pass settles B and leaves A
  b.async_wait([&](error_code) {
    seen_by = wstats(ctx).wakeups;
    cancelled = a.cancel();
  });
  next = filed + 65536;
  then = due + 2 * o.tick;
  spin(error_code());
  BOOST_TEST_REQUIRE(!run_ctx(ctx, 60s).timed_out);
  BOOST_TEST_REQUIRE(seen_by - filed == 65536u);  // else the spin outlasted A's deadline
  BOOST_TEST(cancelled == 0u);
  BOOST_TEST_REQUIRE(a_ec.has_value());
  BOOST_TEST(*a_ec == success);
}

// ---------------------------------------------------------------------------------------
// 7. Shutdown: destroying the context with pending waits
// ---------------------------------------------------------------------------------------

// The settled waits' records come in blocks (a context's first ones smaller, growing to
// completion_queue::per_block). A block whose records were all handed out and all
// completed is recycled by its last completion; when that happened to the block records
// were being taken from, the context's destruction freed it twice (seen as heap corruption
// in example_steady_timer_dropin, about one run in 40). Batches that end exactly on, just
// before and just after each of the first blocks' boundaries, then the context destroyed:
// the ASan build reports any block freed twice or leaked.
BOOST_AUTO_TEST_CASE(records_ending_on_a_block_boundary_are_freed_once) {
  using queue = twheel::detail::completion_queue;
  std::vector<std::size_t> batches;
  std::size_t boundary = 0;
  for (unsigned n = 0; n < 6; ++n) {  // the growing blocks, then one of full size
    boundary += queue::records_in_block(n);
    for (std::size_t batch : {boundary - 1, boundary, boundary + 1}) batches.push_back(batch);
  }
  BOOST_TEST(queue::records_in_block(0) < queue::records_in_block(1));
  BOOST_TEST(queue::records_in_block(5) == queue::per_block);
  for (std::size_t batch : batches) {
    for (int rounds : {1, 2, 3}) {  // later rounds reuse the recycled blocks
      std::size_t completed = 0;
      {
        asio::io_context ctx;
        std::vector<std::unique_ptr<twheel::steady_timer>> timers;
        for (std::size_t i = 0; i < batch; ++i) {
          timers.push_back(std::make_unique<twheel::steady_timer>(ctx));
        }
        for (int r = 0; r < rounds; ++r) {
          for (auto& t : timers) {
            t->expires_after(0ms);
            t->async_wait([&](error_code e) { completed += e == success; });
          }
          auto result = run_ctx(ctx);
          BOOST_TEST(!result.timed_out);
          ctx.restart();
        }
      }
      BOOST_TEST(completed == batch * rounds, "batch " << batch << ", rounds " << rounds);
    }
  }
}

// A new block of records is made resident and written before it is used (prefault.hpp):
// every byte keeps its value, and nothing outside the range is touched, whatever its
// alignment. Ranges start and end on the allocation's own ends, so that the ASan build
// reports a write one byte before or after them.
BOOST_AUTO_TEST_CASE(prefault_keeps_the_contents_and_stays_inside_the_range) {
  const std::size_t page = 4096;
  const std::size_t size = 3 * page + 100;
  // Byte i of a buffer holds i * mul + 7: each buffer its own pattern.
  const auto byte = [](std::size_t i, std::size_t mul) {
    return static_cast<unsigned char>(i * mul + 7);
  };
  for (std::size_t lead : {std::size_t{0}, std::size_t{1}, page - 1, page, std::size_t{2000}}) {
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{10}, page, 2 * page + 1,
                          size - lead}) {
      if (lead + n > size) continue;
      std::unique_ptr<unsigned char[]> at_end(new unsigned char[lead + n]);
      std::unique_ptr<unsigned char[]> at_start(new unsigned char[lead + n]);
      for (std::size_t i = 0; i < lead + n; ++i) {
        at_end[i] = byte(i, 31);
        at_start[i] = byte(i, 17);
      }
      twheel::detail::prefault(at_end.get() + lead, n);  // ends on the allocation's end
      twheel::detail::prefault(at_start.get(), n);       // starts on the allocation's start
      std::size_t changed = 0;
      for (std::size_t i = 0; i < lead + n; ++i) {
        changed += at_end[i] != byte(i, 31);
        changed += at_start[i] != byte(i, 17);
      }
      BOOST_TEST(changed == 0u, "lead " << lead << ", n " << n);
    }
  }
}

// cancel_after's states and the driver's posted operations live in blocks carved from
// chunks that grow (detail/block_pool.hpp). Blocks taken across several chunks never
// overlap and are aligned for any object; those given back (from another thread too) are
// what the pool hands out again before it makes a chunk; reserve(n) covers exactly the
// next n takes. The ASan build reports a chunk freed twice or leaked.
BOOST_AUTO_TEST_CASE(block_pool_hands_out_distinct_blocks_and_recycles_them) {
  using pool_type = twheel::detail::basic_block_pool<192>;
  pool_type pool(0);
  std::vector<unsigned char*> taken;
  for (int i = 0; i < 1000; ++i) {  // chunks of 4, 8, ... 256, 256 blocks
    auto* p = static_cast<unsigned char*>(pool.take());
    BOOST_TEST(reinterpret_cast<std::uintptr_t>(p) % alignof(std::max_align_t) == 0);
    std::memset(p, i & 0xff, pool_type::block_size);  // ASan: inside a live chunk
    taken.push_back(p);
  }
  std::vector<unsigned char*> sorted = taken;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 1; i < sorted.size(); ++i) {
    BOOST_TEST(sorted[i] - sorted[i - 1] >= static_cast<std::ptrdiff_t>(pool_type::block_size));
  }
  // Half given back from another thread, half from this one: all come back before any
  // new block does.
  std::thread([&] {
    for (std::size_t i = 0; i < taken.size(); i += 2) pool.give_back(taken[i]);
  }).join();
  for (std::size_t i = 1; i < taken.size(); i += 2) pool.give_back(taken[i]);
  std::vector<unsigned char*> again;
  for (std::size_t i = 0; i < taken.size(); ++i) {
    again.push_back(static_cast<unsigned char*>(pool.take()));
  }
  std::sort(again.begin(), again.end());
  BOOST_TEST((again == sorted));
  // Only the last chunk's untouched blocks are left (1,020 made, 1,000 taken). reserve()
  // for more makes a chunk for the rest; the untouched blocks are taken first, then the
  // new chunk's in address order, none of them one handed out before.
  pool.reserve(300);
  std::vector<unsigned char*> fresh;
  for (int i = 0; i < 300; ++i) fresh.push_back(static_cast<unsigned char*>(pool.take()));
  for (unsigned char* p : fresh) BOOST_TEST(!std::binary_search(sorted.begin(), sorted.end(), p));
  for (int i = 21; i < 300; ++i) {
    BOOST_TEST(fresh[i] == fresh[i - 1] + pool_type::block_size);
  }
  std::sort(fresh.begin(), fresh.end());
  BOOST_TEST((std::adjacent_find(fresh.begin(), fresh.end()) == fresh.end()));
}

// A pool's Setup makes an object in every block of each chunk it makes (the blocks a
// later chunk leaves over included) and destroys each one with the pool; a block's
// give-back and its next use leave that object alone (cancel_after's signals live so,
// past the state, in wheel_service's pool).
namespace {
// Writes each block's own address at `offset` when made; counts, when unmade, the blocks
// whose mark is intact.
struct tail_setup {
  static constexpr std::size_t offset = 176;  // past what a user of the block writes
  static inline int made_count = 0;
  static inline int intact_count = 0;
  static void made(void* b) noexcept {
    ++made_count;
    std::memcpy(static_cast<unsigned char*>(b) + offset, &b, sizeof b);
  }
  static void unmade(void* b) noexcept {
    void* mark = nullptr;
    std::memcpy(&mark, static_cast<unsigned char*>(b) + offset, sizeof mark);
    if (mark == b) ++intact_count;
  }
};
}  // namespace

BOOST_AUTO_TEST_CASE(block_pool_setup_makes_and_unmakes_an_object_in_every_block) {
  tail_setup::made_count = tail_setup::intact_count = 0;
  {
    using pool_type = twheel::detail::basic_block_pool<192, tail_setup>;
    pool_type pool(0);
    std::vector<void*> taken;
    for (int i = 0; i < 10; ++i) taken.push_back(pool.take());  // chunks of 4, 8 blocks
    for (void* p : taken) std::memset(p, 0xab, tail_setup::offset);  // a user's bytes
    for (void* p : taken) pool.give_back(p);
    for (int i = 0; i < 10; ++i) pool.take();
    pool.reserve(20);  // a chunk of 16 or more: the 2 left over go to the free list
    BOOST_TEST(tail_setup::made_count >= 4 + 8 + 16);
    BOOST_TEST(tail_setup::intact_count == 0);
  }
  BOOST_TEST(tail_setup::intact_count == tail_setup::made_count);
}

BOOST_AUTO_TEST_CASE(shutdown_destroys_handlers_without_invoking_them) {
  int invoked = 0;
  int destroyed = 0;
  int late_invoked = 0;
  int late_destroyed = 0;
  int expected_destroyed = 0;
  std::vector<std::weak_ptr<twheel::steady_timer>> handler_owned;
  std::unique_ptr<twheel::steady_timer> victim;  // owned outside any handler
  std::atomic<bool> ctx2_returned{false};
  asio::io_context ctx2;                         // outlives the context under test
  std::thread ctx2_runner;

  {
    std::optional<asio::io_context> ctx(std::in_place);
    auto count_destroy = [&] { return hook([&] { ++destroyed; }); };

    // Use the driver once, so that it is a "used" wheel that gets destroyed.
    {
      twheel::steady_timer t(*ctx, 1ms);
      error_code ec = never;
      t.async_wait([&](error_code e) { ec = e; });
      auto r = run_ctx(*ctx);
      BOOST_TEST(!r.timed_out);
      BOOST_TEST(ec == success);
    }

    // (a) timers owned only by their own handler (a cycle broken by destruction)
    for (int i = 0; i < 10; ++i) {
      auto t = std::make_shared<twheel::steady_timer>(*ctx, std::chrono::minutes(10 + i));
      handler_owned.push_back(t);
      t->async_wait([t, h = count_destroy(), &invoked](error_code) { ++invoked; });
      ++expected_destroyed;
    }
    // ... some bound to a strand (completion through dispatch, with tracked work); only
    // the handlers hold the strand (a strand must not outlive its context)
    for (int i = 0; i < 3; ++i) {
      auto strand = asio::make_strand(*ctx);
      auto t = std::make_shared<twheel::steady_timer>(*ctx, 1h);
      handler_owned.push_back(t);
      t->async_wait(asio::bind_executor(
          strand, [t, h = count_destroy(), &invoked](error_code) { ++invoked; }));
      ++expected_destroyed;
    }
    // ... some already cancelled: completion queued, never run
    for (int i = 0; i < 3; ++i) {
      auto t = std::make_shared<twheel::steady_timer>(*ctx, 1h);
      handler_owned.push_back(t);
      t->async_wait([t, h = count_destroy(), &invoked](error_code) { ++invoked; });
      BOOST_TEST(t->cancel() == 1u);
      ++expected_destroyed;
    }
    // ... one bound to a second context: its tracked work there must be released
    {
      auto t = std::make_shared<twheel::steady_timer>(*ctx, 1h);
      handler_owned.push_back(t);
      t->async_wait(asio::bind_executor(
          ctx2, [t, h = count_destroy(), &invoked](error_code) { ++invoked; }));
      ++expected_destroyed;
      ctx2_runner = std::thread([&] {
        ctx2.run();
        ctx2_returned = true;
      });
    }

    // (b) timers owned outside, destroyed before the context: their waits are aborted
    // but the context never runs again, so the completions are destroyed at shutdown.
    {
      std::vector<std::unique_ptr<twheel::steady_timer>> outside;
      for (int i = 0; i < 5; ++i) {
        outside.push_back(std::make_unique<twheel::steady_timer>(*ctx, 1h));
        outside.back()->async_wait([h = count_destroy(), &invoked](error_code) { ++invoked; });
        ++expected_destroyed;
      }
    }

    // (c) a handler whose destructor destroys an outside-owned timer with a pending wait
    victim = std::make_unique<twheel::steady_timer>(*ctx, 1h);
    victim->async_wait([h = count_destroy(), &invoked](error_code) { ++invoked; });
    ++expected_destroyed;
    {
      auto killer = std::make_shared<twheel::steady_timer>(*ctx, 1h);
      killer->async_wait([killer, &invoked, h = hook([&] {
                            ++destroyed;
                            victim.reset();
                          })](error_code) { ++invoked; });
      ++expected_destroyed;
    }

    // (d) a handler whose destructor starts a new wait on another (live) timer: the new
    // wait's handler must be destroyed, never invoked.
    {
      auto other = std::make_shared<twheel::steady_timer>(*ctx, 1ms);
      handler_owned.push_back(other);
      auto starter = std::make_shared<twheel::steady_timer>(*ctx, 1h);
      handler_owned.push_back(starter);
      starter->async_wait([starter, &invoked, h = hook([&, other] {
                             ++destroyed;
                             other->async_wait([&, h2 = hook([&] { ++late_destroyed; })](
                                                   error_code) { ++late_invoked; });
                           })](error_code) { ++invoked; });
      ++expected_destroyed;
    }

    // (e) a handler whose destructor destroys a timer still waiting (owned by the handler
    // of another wait on the same context), and then constructs and arms a new timer.
    {
      auto held = std::make_shared<twheel::steady_timer>(*ctx, 1h);  // owned by the hook only
      handler_owned.push_back(held);
      held->async_wait([h = count_destroy(), &invoked](error_code) { ++invoked; });
      ++expected_destroyed;
      auto t = std::make_shared<twheel::steady_timer>(*ctx, 1h);
      handler_owned.push_back(t);
      asio::io_context* raw_ctx = &*ctx;
      t->async_wait([t, &invoked, h = hook([&, held = std::move(held), raw_ctx]() mutable {
                       ++destroyed;
                       held.reset();
                       twheel::steady_timer fresh(*raw_ctx, 1ms);
                       fresh.async_wait([&, h3 = hook([&] { ++late_destroyed; })](
                                            error_code) { ++late_invoked; });
                     })](error_code) { ++invoked; });
      ++expected_destroyed;
    }

    BOOST_TEST(wstats(*ctx).pending > 0u);
    within(10s, "io_context destruction", [&] { ctx.reset(); });
  }

  BOOST_TEST(invoked == 0);
  BOOST_TEST(late_invoked == 0);
  BOOST_TEST(destroyed == expected_destroyed);
  BOOST_TEST(late_destroyed == 2);
  BOOST_TEST(!victim);
  for (std::size_t i = 0; i < handler_owned.size(); ++i) {
    BOOST_TEST(handler_owned[i].expired(), "timer " << i << " leaked");
  }
  // The second context's work was released with the destroyed handler.
  const auto t0 = clock_type::now();
  while (!ctx2_returned && clock_type::now() - t0 < 2s) std::this_thread::sleep_for(1ms);
  BOOST_TEST(ctx2_returned.load(), "ctx2.run() still held work of a destroyed handler");
  if (!ctx2_returned) ctx2.stop();
  ctx2_runner.join();
}

// ---------------------------------------------------------------------------------------
// 8. Exceptions from handlers
// ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(handler_exception_propagates_and_batch_survives) {
  asio::io_context ctx;
  constexpr int n = 5;
  const auto due = clock_type::now() + 10ms;  // one tick for the whole batch
  std::vector<std::unique_ptr<twheel::steady_timer>> timers;
  std::vector<int> calls(n, 0);
  std::vector<error_code> codes(n, never);
  for (int i = 0; i < n; ++i) {
    timers.push_back(std::make_unique<twheel::steady_timer>(ctx, due));
    timers.back()->async_wait([&, i](error_code ec) {
      ++calls[static_cast<std::size_t>(i)];
      codes[static_cast<std::size_t>(i)] = ec;
      if (i == 1) throw std::runtime_error("boom");
    });
  }
  twheel::steady_timer later(ctx, due + 40ms);
  error_code later_ec = never;
  later.async_wait([&](error_code ec) { later_ec = ec; });

  std::string caught;
  try {
    run_ctx(ctx);
  } catch (const std::runtime_error& e) {
    caught = e.what();
  }
  BOOST_TEST(caught == "boom");
  BOOST_TEST(calls[0] == 1);
  BOOST_TEST(calls[1] == 1);
  BOOST_TEST(calls[2] + calls[3] + calls[4] == 0);  // the batch stopped at the throw
  BOOST_TEST(later_ec == never);

  auto r = run_ctx(ctx);  // restart() + run()
  BOOST_TEST(!r.timed_out);
  for (int i = 0; i < n; ++i) {
    BOOST_TEST(calls[static_cast<std::size_t>(i)] == 1, "handler " << i);
    BOOST_TEST(codes[static_cast<std::size_t>(i)] == success, "handler " << i);
  }
  BOOST_TEST(later_ec == success);

  // Timers keep firing afterwards.
  error_code again = never;
  timers[0]->expires_after(5ms);
  timers[0]->async_wait([&](error_code ec) { again = ec; });
  r = run_ctx(ctx);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(again == success);
  auto s = wstats(ctx);
  BOOST_TEST(s.pending == 0u);
  BOOST_TEST(s.fired == static_cast<std::uint64_t>(n + 2));

  // The same for a batch of aborted waits (completed by the service's drain).
  std::vector<int> aborted_calls(3, 0);
  twheel::steady_timer multi(ctx, 1h);
  for (int i = 0; i < 3; ++i) {
    multi.async_wait([&, i](error_code ec) {
      ++aborted_calls[static_cast<std::size_t>(i)];
      BOOST_TEST(ec == aborted);
      if (i == 0) throw std::runtime_error("boom aborted");
    });
  }
  BOOST_TEST(multi.cancel() == 3u);
  caught.clear();
  try {
    run_ctx(ctx);
  } catch (const std::runtime_error& e) {
    caught = e.what();
  }
  BOOST_TEST(caught == "boom aborted");
  r = run_ctx(ctx);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(ms(r.elapsed) < 500);
  BOOST_TEST(aborted_calls == (std::vector<int>{1, 1, 1}), boost::test_tools::per_element());
  s = wstats(ctx);
  BOOST_TEST(s.pending == 0u);
  BOOST_TEST(s.cancelled == 3u);
}

// ---------------------------------------------------------------------------------------
// 9. A timer destroyed by another timer's handler in the same batch
// ---------------------------------------------------------------------------------------

// Observed (and asserted): the destroyed timer's waits had already fired when the batch
// was taken from the wheel, so they complete exactly once, with success (as with Asio's
// own steady_timer, where cancel() returns 0 for a wait that already expired).
BOOST_AUTO_TEST_CASE(timer_destroyed_by_handler_in_same_batch) {
  asio::io_context ctx;
  const auto due = clock_type::now() + 10ms;  // both in the same tick
  twheel::steady_timer killer(ctx, due);
  auto victim = std::make_unique<twheel::steady_timer>(ctx, due);
  wait_log log;
  std::size_t cancelled_by_destruction = 99;
  killer.async_wait([&](error_code ec) {
    log.handler(1)(ec);
    cancelled_by_destruction = wstats(ctx).cancelled;
    victim.reset();  // its waits are in this very batch
    cancelled_by_destruction = wstats(ctx).cancelled - cancelled_by_destruction;
  });
  victim->async_wait(log.handler(2));
  victim->async_wait(log.handler(3));

  auto r = run_ctx(ctx);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(!victim);
  BOOST_TEST(log.order == (std::vector<int>{1, 2, 3}), boost::test_tools::per_element());
  BOOST_TEST(log.count(2) == 1u);
  BOOST_TEST(log.count(3) == 1u);
  BOOST_TEST_MESSAGE("destroyed timer's waits completed with: " << log.ec(2).message()
                                                                << ", " << log.ec(3).message());
  BOOST_TEST((log.ec(2) == success || log.ec(2) == aborted));
  BOOST_TEST(log.ec(2) == success);  // what twheel does: they had fired
  BOOST_TEST(log.ec(3) == success);
  BOOST_TEST(cancelled_by_destruction == 0u);
  const auto s = wstats(ctx);
  BOOST_TEST(s.fired == 3u);
  BOOST_TEST(s.cancelled == 0u);
  BOOST_TEST(s.pending == 0u);
  BOOST_TEST(s.timers == 0u);
}

// ---------------------------------------------------------------------------------------
// 10. Handlers run on their associated executor
// ---------------------------------------------------------------------------------------

// Memory: at a million timers the 56 bytes of an any_io_executor are paid a million
// times. A timer whose executor is its wheel's own refers to the wheel's copy, so the
// drop-in costs no more than a timer typed on the context's 8-byte executor; any other
// executor (a strand) is kept by the timer itself.
BOOST_AUTO_TEST_CASE(a_timer_on_its_wheels_executor_keeps_no_copy_of_it) {
  using plain_timer =
      twheel::steady_timer::rebind_executor<boost::asio::io_context::executor_type>::other;
  BOOST_TEST(sizeof(twheel::steady_timer) == sizeof(plain_timer));

  boost::asio::io_context ctx;
  twheel::steady_timer a(ctx), b(ctx.get_executor());
  BOOST_TEST(&a.get_executor() == &b.get_executor());  // the wheel's, shared
  const boost::asio::any_io_executor strand = boost::asio::make_strand(ctx);
  twheel::steady_timer s(strand);
  BOOST_TEST(&s.get_executor() != &a.get_executor());
  BOOST_TEST((s.get_executor() == strand));
  BOOST_TEST((a.get_executor() == boost::asio::any_io_executor(ctx.get_executor())));
}

// The driver runs on the context's plain executor whatever wrapper of it the context's
// first timer was made on (it must not wait behind a user's strand, nor hold one up).
BOOST_AUTO_TEST_CASE(the_driver_runs_on_the_contexts_plain_executor) {
  using io_executor = asio::io_context::executor_type;
  using pool_executor = asio::thread_pool::executor_type;
  auto driver_on_plain_io = [](asio::io_context& ctx) {
    return twheel::wheel_service::of(ctx).executor().target<io_executor>() != nullptr;
  };
  {  // as_default_on: executor_with_default<any_io_executor> around a strand
    asio::io_context ctx;
    asio::deferred_t::as_default_on_t<twheel::steady_timer> t(asio::make_strand(ctx));
    BOOST_TEST(driver_on_plain_io(ctx));
  }
  {  // a strand of the executor with blocking.never, type-erased
    asio::io_context ctx;
    twheel::steady_timer t(asio::require(asio::make_strand(ctx), asio::execution::blocking.never));
    BOOST_TEST(driver_on_plain_io(ctx));
  }
  {  // the context's executor with work tracked, type-erased
    asio::io_context ctx;
    twheel::steady_timer t(asio::prefer(ctx.get_executor(), asio::execution::outstanding_work.tracked));
    BOOST_TEST(driver_on_plain_io(ctx));
  }
  {  // a strand of a strand, typed
    asio::io_context ctx;
    auto strand = asio::make_strand(asio::make_strand(ctx));
    twheel::basic_waitable_timer<clock_type, asio::wait_traits<clock_type>, decltype(strand)> t(
        strand);
    BOOST_TEST(driver_on_plain_io(ctx));
  }
  {  // a thread_pool's strand with relationship.continuation, type-erased
    asio::thread_pool pool(1);
    twheel::steady_timer t(
        asio::prefer(asio::make_strand(pool), asio::execution::relationship.continuation));
    BOOST_TEST(twheel::wheel_service::of(pool).executor().target<pool_executor>() != nullptr);
    pool.join();
  }
}

// A wrapper the driver cannot see through (here a strand of the context's executor with
// the user's allocator, behind any_io_executor) keeps the driver in it, and the records
// are posted to it too (the wheel cannot tell the context is an io_context), not handed
// to the scheduler, which would run a handler invoked inline outside the strand: those
// bound to the strand run in it, one at a time.
BOOST_AUTO_TEST_CASE(handlers_stay_in_a_strand_the_driver_could_not_see_through) {
  asio::io_context ctx(2);
  twheel_test::alloc_counters c;
  const auto strand = asio::make_strand(asio::require(
      ctx.get_executor(), asio::execution::allocator(twheel_test::counting_allocator<void>(&c))));
  twheel::steady_timer first{asio::any_io_executor(strand)};  // the context's first timer
  BOOST_TEST(!twheel::wheel_service::of(ctx).context_queue_goes_first());
  constexpr int n = 100;
  twheel_test::strand_log<std::decay_t<decltype(strand)>> log(strand);
  std::vector<std::unique_ptr<twheel::steady_timer>> timers;
  const auto due = clock_type::now() + 10ms;
  for (int i = 0; i < n; ++i) {
    timers.push_back(std::make_unique<twheel::steady_timer>(ctx, due));
    timers.back()->async_wait(asio::bind_executor(strand, log.handler()));
  }
  auto r = run_ctx(ctx, 10s, 2);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(log.calls.load() == n);
  BOOST_TEST(log.off_strand.load() == 0);
  BOOST_TEST(log.concurrent.load() == 0);
}

BOOST_AUTO_TEST_CASE(handlers_run_on_associated_executor) {
  {  // a wait bound to a strand; two threads run the context
    asio::io_context ctx;
    auto strand = asio::make_strand(ctx);
    std::vector<std::unique_ptr<twheel::steady_timer>> timers;
    std::atomic<int> in_strand{0}, not_in_strand{0}, concurrent{0};
    std::atomic<int> inside{0}, failed{0};
    const auto due = clock_type::now() + 5ms;
    for (int i = 0; i < 50; ++i) {
      timers.push_back(std::make_unique<twheel::steady_timer>(ctx, due));
      timers.back()->async_wait(asio::bind_executor(strand, [&](error_code ec) {
        if (inside.fetch_add(1) != 0) ++concurrent;
        (strand.running_in_this_thread() ? in_strand : not_in_strand)++;
        if (ec) ++failed;
        std::this_thread::sleep_for(50us);
        inside.fetch_sub(1);
      }));
    }
    auto r = run_ctx(ctx, 10s, 2);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(in_strand.load() == 50);
    BOOST_TEST(not_in_strand.load() == 0);
    BOOST_TEST(concurrent.load() == 0);
    BOOST_TEST(failed.load() == 0);
  }
  {  // a timer whose executor is a strand (type-erased and typed)
    asio::io_context ctx;
    auto strand = asio::make_strand(ctx);
    twheel::steady_timer erased(strand, 3ms);
    twheel::basic_waitable_timer<clock_type, asio::wait_traits<clock_type>, strand_type> typed(
        strand, 3ms);
    bool erased_in = false, typed_in = false;
    error_code e1 = never, e2 = never;
    erased.async_wait([&](error_code ec) {
      e1 = ec;
      erased_in = strand.running_in_this_thread();
    });
    typed.async_wait([&](error_code ec) {
      e2 = ec;
      typed_in = strand.running_in_this_thread();
    });
    // An aborted wait too (completed by the drain, not the driver).
    twheel::steady_timer erased2(strand, 1h);
    bool aborted_in = false;
    erased2.async_wait([&](error_code ec) {
      BOOST_TEST(ec == aborted);
      aborted_in = strand.running_in_this_thread();
    });
    erased2.cancel();
    auto r = run_ctx(ctx);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(e1 == success);
    BOOST_TEST(e2 == success);
    BOOST_TEST(erased_in);
    BOOST_TEST(typed_in);
    BOOST_TEST(aborted_in);
  }
  {  // a handler bound to the executor of a second io_context
    asio::io_context ctx1, ctx2;
    const auto t0 = clock_type::now();
    twheel::steady_timer t(ctx1, 50ms);
    std::atomic<bool> ran{false};
    std::atomic<bool> ran_in_ctx2{false};
    std::thread::id ran_on;
    error_code got = never;
    t.async_wait(asio::bind_executor(ctx2, [&](error_code ec) {
      got = ec;
      ran_on = std::this_thread::get_id();
      ran_in_ctx2 = ctx2.get_executor().running_in_this_thread();
      ran = true;
    }));
    // ctx2.run() starts before the timer fires; its only work is that wait.
    std::atomic<bool> ran_when_ctx2_returned{false};
    std::atomic<bool> ctx2_returned{false};
    std::chrono::nanoseconds ctx2_elapsed{};
    std::thread::id runner2_id;
    std::thread runner2([&] {
      ctx2.run();
      ctx2_elapsed = clock_type::now() - t0;
      ran_when_ctx2_returned = ran.load();
      ctx2_returned = true;
    });
    runner2_id = runner2.get_id();
    auto r = run_ctx(ctx1);
    BOOST_TEST(!r.timed_out);
    const auto w0 = clock_type::now();
    while (!ctx2_returned && clock_type::now() - w0 < 5s) std::this_thread::sleep_for(1ms);
    if (!ctx2_returned) ctx2.stop();
    runner2.join();
    BOOST_TEST(ran.load());
    BOOST_TEST(ran_in_ctx2.load());
    BOOST_TEST((ran_on == runner2_id));
    BOOST_TEST(ran_when_ctx2_returned.load(), "ctx2.run() returned before the handler ran");
    BOOST_TEST(ms(ctx2_elapsed) >= 50);
    BOOST_TEST(got == success);
  }
}

// ---------------------------------------------------------------------------------------
// 11. Moving a timer with a pending wait, then per-operation cancellation
// ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(move_then_per_operation_cancellation) {
  asio::io_context ctx;
  wait_log log;

  {  // move construction, then emit
    twheel::steady_timer t1(ctx, 1h);
    asio::cancellation_signal sig;
    t1.async_wait(asio::bind_cancellation_slot(sig.slot(), log.handler(1)));
    twheel::steady_timer t2(std::move(t1));
    BOOST_TEST(wstats(ctx).pending == 1u);
    BOOST_TEST(wstats(ctx).timers == 1u);
    sig.emit(asio::cancellation_type::terminal);
    BOOST_TEST(wstats(ctx).pending == 0u);
    BOOST_TEST(wstats(ctx).cancelled == 1u);
    BOOST_TEST(wstats(ctx).timers == 1u);  // t2 keeps its place, without waits
    sig.emit(asio::cancellation_type::terminal);  // again, before completion
    BOOST_TEST(wstats(ctx).cancelled == 1u);
    auto r = run_ctx(ctx);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(ms(r.elapsed) < 500);
    BOOST_TEST(log.count(1) == 1u);
    BOOST_TEST(log.ec(1) == aborted);
    sig.emit(asio::cancellation_type::total);  // after completion
    r = run_ctx(ctx);
    BOOST_TEST(log.count(1) == 1u);
    BOOST_TEST(t2.cancel() == 0u);
    BOOST_TEST(t1.cancel() == 0u);
    // The moved-from timer is usable.
    t1.expires_after(2ms);
    t1.async_wait(log.handler(2));
    r = run_ctx(ctx);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(log.ec(2) == success);
  }
  {  // move assignment (aborting the target's own wait), twice, then a partial emit
    twheel::steady_timer a(ctx, 1h), b(ctx, 1h), c(ctx, 1h);
    asio::cancellation_signal sig;
    a.async_wait(asio::bind_cancellation_slot(sig.slot(), log.handler(3)));
    b.async_wait(log.handler(4));
    b = std::move(a);  // 4 aborted; 3 now on b
    c = std::move(b);  // 3 now on c
    const auto before = wstats(ctx).cancelled;
    sig.emit(asio::cancellation_type::partial);
    BOOST_TEST(wstats(ctx).cancelled - before == 1u);
    BOOST_TEST(wstats(ctx).pending == 0u);
    BOOST_TEST(c.cancel() == 0u);
    auto r = run_ctx(ctx);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(log.count(3) == 1u);
    BOOST_TEST(log.ec(3) == aborted);
    BOOST_TEST(log.count(4) == 1u);
    BOOST_TEST(log.ec(4) == aborted);
  }
  {  // emit after the (moved-to) timer was destroyed
    auto t1 = std::make_unique<twheel::steady_timer>(ctx, 1h);
    asio::cancellation_signal sig;
    t1->async_wait(asio::bind_cancellation_slot(sig.slot(), log.handler(5)));
    auto t2 = std::make_unique<twheel::steady_timer>(std::move(*t1));
    t1.reset();  // the moved-from shell: nothing to abort
    BOOST_TEST(wstats(ctx).pending == 1u);
    t2.reset();  // aborts wait 5
    BOOST_TEST(wstats(ctx).pending == 0u);
    const auto before = wstats(ctx).cancelled;
    sig.emit(asio::cancellation_type::terminal);  // completion queued, timer gone
    BOOST_TEST(wstats(ctx).cancelled == before);
    auto r = run_ctx(ctx);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(log.count(5) == 1u);
    BOOST_TEST(log.ec(5) == aborted);
    sig.emit(asio::cancellation_type::terminal);  // after completion
    r = run_ctx(ctx);
    BOOST_TEST(log.count(5) == 1u);
  }
  {  // emit after the wait completed (moved while pending, then fired)
    twheel::steady_timer t1(ctx, 3ms);
    asio::cancellation_signal sig;
    t1.async_wait(asio::bind_cancellation_slot(sig.slot(), log.handler(6)));
    twheel::steady_timer t2(std::move(t1));
    auto r = run_ctx(ctx);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(log.ec(6) == success);
    // A new, unrelated wait on the moved-to timer must not be hit by the old signal.
    t2.expires_after(1h);
    t2.async_wait(log.handler(7));
    twheel::steady_timer t3(std::move(t2));
    const auto before = wstats(ctx).cancelled;
    sig.emit(asio::cancellation_type::terminal);
    BOOST_TEST(wstats(ctx).cancelled == before);
    BOOST_TEST(wstats(ctx).pending == 1u);
    BOOST_TEST(log.count(6) == 1u);
    BOOST_TEST(t3.cancel() == 1u);
    r = run_ctx(ctx);
    BOOST_TEST(log.ec(7) == aborted);
    BOOST_TEST(log.count(6) == 1u);
    BOOST_TEST(log.count(7) == 1u);
  }
  const auto s = wstats(ctx);
  BOOST_TEST(s.pending == 0u);
  for (const auto& [id, v] : log.results) BOOST_TEST(v.size() == 1u, "wait " << id);
}

// The service keeps a pointer from each wait to the wait_canceller it emplaced in the
// handler's cancellation slot, and writes through it when the wait completes. The slot's
// memory belongs to the cancellation_signal, which Asio lets the user destroy, or reuse
// for a new operation (emplace destroys the old handler and reuses its memory), while the
// first operation is still pending; Asio's own timer only compares that address.

// A signal destroyed while its wait is pending: the wait must complete normally, and the
// service must not touch the signal's freed memory (checked by the ASan build) on any of
// the ways a wait can end: fired, cancel(), per-timer destruction, or after a move.
BOOST_AUTO_TEST_CASE(cancellation_signal_destroyed_while_wait_pending) {
  asio::io_context ctx;
  wait_log log;
  twheel::steady_timer fires(ctx, 3ms), cancelled(ctx, 1h), moved_from(ctx, 3ms);
  auto destroyed = std::make_unique<twheel::steady_timer>(ctx, 1h);
  {
    asio::cancellation_signal s1, s2, s3, s4;
    fires.async_wait(asio::bind_cancellation_slot(s1.slot(), log.handler(1)));
    cancelled.async_wait(asio::bind_cancellation_slot(s2.slot(), log.handler(2)));
    destroyed->async_wait(asio::bind_cancellation_slot(s3.slot(), log.handler(3)));
    moved_from.async_wait(asio::bind_cancellation_slot(s4.slot(), log.handler(4)));
  }  // the signals (and the slot handlers in them) are gone; the waits are pending
  // Let other allocations reuse the freed slot memory, as a real program would.
  constexpr std::uintptr_t pattern = 0x5a5a5a5a;
  std::vector<std::vector<std::uintptr_t>> filler;
  for (int i = 0; i < 16; ++i) {
    for (std::size_t words = 4; words <= 8; ++words) filler.emplace_back(words, pattern);
  }
  twheel::steady_timer moved_to(std::move(moved_from));
  BOOST_TEST(cancelled.cancel() == 1u);
  destroyed.reset();
  auto r = run_ctx(ctx);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(log.ec(1) == success);
  BOOST_TEST(log.ec(2) == aborted);
  BOOST_TEST(log.ec(3) == aborted);
  BOOST_TEST(log.ec(4) == success);
  BOOST_TEST(log.total() == 4u);
  std::size_t intact = 0;
  for (const auto& f : filler) {
    intact += std::all_of(f.begin(), f.end(), [](std::uintptr_t v) { return v == pattern; });
  }
  BOOST_TEST(intact == filler.size(), "the service wrote into memory it does not own");
  BOOST_TEST(wstats(ctx).pending == 0u);
}

// A signal reused for a second wait while the first one (on another timer) is pending:
// the slot now holds the second wait's handler, so emit() must cancel the second wait,
// also after the first one completed (Asio's steady_timer does exactly that).
BOOST_AUTO_TEST_CASE(cancellation_signal_reused_while_previous_wait_pending) {
  {  // the first wait fires before the emit
    asio::io_context ctx;
    wait_log log;
    asio::cancellation_signal sig;
    twheel::steady_timer first(ctx, 3ms), second(ctx, 1h);
    first.async_wait(asio::bind_cancellation_slot(sig.slot(), log.handler(1)));
    second.async_wait(asio::bind_cancellation_slot(sig.slot(), log.handler(2)));
    BOOST_TEST(run_until(ctx, [&] { return log.count(1) == 1; }));
    BOOST_TEST(log.ec(1) == success);
    sig.emit(asio::cancellation_type::terminal);
    BOOST_TEST(wstats(ctx).pending == 0u, "emit() did not cancel the slot's current wait");
    BOOST_TEST(run_until(ctx, [&] { return log.count(2) == 1; }, 500ms));
    BOOST_TEST(log.ec(2) == aborted);
    second.cancel();  // clean up if emit() failed
    auto r = run_ctx(ctx);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(log.count(2) == 1u);
  }
  {  // the first wait is cancelled through its timer before the emit
    asio::io_context ctx;
    wait_log log;
    asio::cancellation_signal sig;
    twheel::steady_timer first(ctx, 1h), second(ctx, 1h);
    first.async_wait(asio::bind_cancellation_slot(sig.slot(), log.handler(1)));
    second.async_wait(asio::bind_cancellation_slot(sig.slot(), log.handler(2)));
    BOOST_TEST(first.cancel() == 1u);
    sig.emit(asio::cancellation_type::terminal);
    BOOST_TEST(wstats(ctx).pending == 0u, "emit() did not cancel the slot's current wait");
    second.cancel();
    auto r = run_ctx(ctx);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(log.ec(1) == aborted);
    BOOST_TEST(log.ec(2) == aborted);
    BOOST_TEST(log.total() == 2u);
  }
}

// ---------------------------------------------------------------------------------------
// 12. Two-thread stress on strands
// ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(stress_two_threads_strands) {
  constexpr std::size_t units_n = 20000;
  constexpr int waits_per_unit = 4;  // the first wait and three re-arms from the handler
  asio::io_context ctx;

  struct unit {
    explicit unit(asio::io_context& ctx, unsigned seed)
        : strand(asio::make_strand(ctx)), timer(strand), rng(seed) {}
    strand_type strand;
    twheel::steady_timer timer;
    asio::cancellation_signal sig;
    std::minstd_rand rng;
  };
  std::vector<std::unique_ptr<unit>> units;
  units.reserve(units_n);
  for (std::size_t i = 0; i < units_n; ++i) {
    units.push_back(std::make_unique<unit>(ctx, static_cast<unsigned>(i + 1)));
  }
  std::vector<std::atomic<int>> calls(units_n * waits_per_unit);
  std::atomic<std::uint64_t> started{0}, succeeded{0}, aborted_n{0}, other{0};
  std::atomic<std::uint64_t> off_strand{0};

  // Runs in u's strand.
  std::function<void(unit&, std::size_t, int)> arm = [&](unit& u, std::size_t index,
                                                         int round) {
    u.timer.expires_after(std::chrono::microseconds(u.rng() % 5001));
    const std::size_t id = index * waits_per_unit + static_cast<std::size_t>(round);
    started.fetch_add(1, std::memory_order_relaxed);
    u.timer.async_wait(asio::bind_cancellation_slot(
        u.sig.slot(), [&, up = &u, index, round, id](error_code ec) {
          calls[id].fetch_add(1, std::memory_order_relaxed);
          if (!up->strand.running_in_this_thread()) off_strand.fetch_add(1);
          if (ec == success) {
            succeeded.fetch_add(1, std::memory_order_relaxed);
          } else if (ec == aborted) {
            aborted_n.fetch_add(1, std::memory_order_relaxed);
          } else {
            other.fetch_add(1, std::memory_order_relaxed);
          }
          if (round + 1 < waits_per_unit) arm(*up, index, round + 1);
        }));
    switch (u.rng() % 8) {
      case 0:  // per-operation cancellation, racing the expiry
        asio::post(u.strand, [&u] { u.sig.emit(asio::cancellation_type::terminal); });
        break;
      case 1:
        asio::post(u.strand, [&u] { u.timer.cancel(); });
        break;
      default:
        break;
    }
  };
  for (std::size_t i = 0; i < units_n; ++i) {
    unit& u = *units[i];
    asio::post(u.strand, [&arm, &u, i] { arm(u, i, 0); });
  }

  auto r = run_ctx(ctx, 15s, 2);
  BOOST_TEST(!r.timed_out);

  const std::uint64_t total = units_n * waits_per_unit;
  BOOST_TEST(started.load() == total);
  std::size_t not_once = 0;
  for (auto& c : calls) not_once += c.load() != 1;
  BOOST_TEST(not_once == 0u);
  BOOST_TEST(other.load() == 0u);
  BOOST_TEST(off_strand.load() == 0u);
  const auto s = wstats(ctx);
  BOOST_TEST(s.pending == 0u);
  BOOST_TEST(s.fired + s.cancelled == total);
  BOOST_TEST(s.fired == succeeded.load());
  BOOST_TEST(s.cancelled == aborted_n.load());
  BOOST_TEST(s.rejected == 0u);
  BOOST_TEST(s.cancelled > 0u);
  BOOST_TEST(s.fired > 0u);
  BOOST_TEST_MESSAGE("stress: fired " << s.fired << ", cancelled " << s.cancelled
                                      << ", wakeups " << s.wakeups << ", cascaded "
                                      << s.cascaded << ", " << ms(r.elapsed) << " ms");
}

// ---------------------------------------------------------------------------------------
// 13. max_pending: a rejection touches none of the waits already pending
// ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(max_pending_rejection_leaves_pending_waits_untouched) {
  asio::io_context ctx;
  twheel::wheel_options o;
  o.max_pending = 2;
  twheel::configure(ctx, o);

  const auto t0 = clock_type::now();
  twheel::steady_timer a(ctx, t0 + 30ms), b(ctx, t0 + 60ms), c(ctx, t0 + 5ms);
  wait_log log;
  std::map<int, clock_type::time_point> when;
  auto handler = [&](int id) {
    return [&, id](error_code ec) {
      when[id] = clock_type::now();
      log.handler(id)(ec);
    };
  };
  a.async_wait(handler(1));
  b.async_wait(handler(2));
  // Rejected: a second wait on a timer that has one, another one on the other timer, and
  // a wait on a third timer bound to a cancellation signal.
  a.async_wait(handler(3));
  b.async_wait(handler(4));
  asio::cancellation_signal sig;
  c.async_wait(asio::bind_cancellation_slot(sig.slot(), handler(5)));
  auto s = wstats(ctx);
  BOOST_TEST(s.pending == 2u);
  BOOST_TEST(s.rejected == 3u);
  BOOST_TEST(s.timers == 2u);  // c never entered the wheel
  BOOST_TEST((a.expiry() == t0 + 30ms));
  BOOST_TEST((b.expiry() == t0 + 60ms));

  BOOST_TEST(run_until(ctx, [&] { return log.total() == 3; }));
  for (int id : {3, 4, 5}) BOOST_TEST(log.ec(id) == no_space, "wait " << id);
  BOOST_TEST(log.count(1) + log.count(2) == 0u);
  // Nothing of the rejected waits is left: their signal and the third timer's cancel()
  // find nothing, and the pending waits do not notice.
  sig.emit(asio::cancellation_type::terminal);
  BOOST_TEST(c.cancel() == 0u);
  s = wstats(ctx);
  BOOST_TEST(s.pending == 2u);
  BOOST_TEST(s.cancelled == 0u);
  BOOST_TEST(s.timers == 2u);

  auto r = run_ctx(ctx);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(log.order == (std::vector<int>{3, 4, 5, 1, 2}), boost::test_tools::per_element());
  BOOST_TEST(log.ec(1) == success);
  BOOST_TEST(log.ec(2) == success);
  // On time: not before the deadline, and not held back by the rejections (generous bound
  // for loaded machines).
  BOOST_TEST((when[1] >= t0 + 30ms));
  BOOST_TEST((when[2] >= t0 + 60ms));
  BOOST_TEST(ms(when[1] - (t0 + 30ms)) < 1000);
  BOOST_TEST(ms(when[2] - (t0 + 60ms)) < 1000);
  s = wstats(ctx);
  BOOST_TEST(s.fired == 2u);
  BOOST_TEST(s.cancelled == 0u);
  BOOST_TEST(s.rejected == 3u);
  BOOST_TEST(s.pending == 0u);
  BOOST_TEST(s.timers == 0u);
}

// ---------------------------------------------------------------------------------------
// 14. A handler's exception leaves run(); later timers fire when run() is called again
// ---------------------------------------------------------------------------------------

// Asio's rule: the exception propagates out of the throwing thread's run(), and run() may
// be called again without restart(); other threads running the context are not affected.
BOOST_AUTO_TEST_CASE(handler_exception_then_run_again_fires_later_timers) {
  for (bool on_strand : {false, true}) {
    BOOST_TEST_CONTEXT((on_strand ? "strand-bound thrower" : "inline thrower")) {
      asio::io_context ctx;
      auto strand = asio::make_strand(ctx);
      const auto t0 = clock_type::now();
      twheel::steady_timer thrower(ctx, t0 + 10ms);
      // Armed before the throw, due after it, on different levels of the wheel.
      const std::vector<std::chrono::milliseconds> delays = {30ms, 200ms, 1000ms};
      std::vector<std::unique_ptr<twheel::steady_timer>> later;
      std::vector<int> calls(delays.size(), 0);
      std::vector<error_code> codes(delays.size(), never);
      std::vector<clock_type::time_point> ran(delays.size());
      for (std::size_t i = 0; i < delays.size(); ++i) {
        later.push_back(std::make_unique<twheel::steady_timer>(ctx, t0 + delays[i]));
        later[i]->async_wait([&, i](error_code ec) {
          ++calls[i];
          codes[i] = ec;
          ran[i] = clock_type::now();
        });
      }
      int throws = 0;
      auto throwing = [&](error_code) {
        ++throws;
        throw std::runtime_error("from handler");
      };
      if (on_strand) {
        thrower.async_wait(asio::bind_executor(strand, throwing));
      } else {
        thrower.async_wait(throwing);
      }

      std::string caught;
      try {
        run_ctx(ctx);
      } catch (const std::runtime_error& e) {
        caught = e.what();
      }
      BOOST_TEST(caught == "from handler");
      BOOST_TEST(throws == 1);
      BOOST_TEST(!ctx.stopped());
      BOOST_TEST(codes[2] == never);  // due 1 s after the start: certainly still pending
      auto s = wstats(ctx);
      BOOST_TEST(s.fired >= 1u);
      BOOST_TEST(s.pending + s.fired == 1 + delays.size());

      // run() again, without restart(), as Asio's documentation shows.
      {
        watchdog dog(ctx, 10s);
        ctx.run();
        BOOST_TEST(!dog.finish());
      }
      BOOST_TEST(throws == 1);
      for (std::size_t i = 0; i < delays.size(); ++i) {
        BOOST_TEST(calls[i] == 1, "later timer " << i);
        BOOST_TEST(codes[i] == success, "later timer " << i);
        BOOST_TEST((ran[i] >= t0 + delays[i]), "later timer " << i << " fired early");
      }
      s = wstats(ctx);
      BOOST_TEST(s.pending == 0u);
      BOOST_TEST(s.fired == 1 + delays.size());

      // The wheel keeps working for new waits, including on the thrower's timer.
      error_code again = never;
      thrower.expires_after(5ms);
      thrower.async_wait([&](error_code ec) { again = ec; });
      auto r = run_ctx(ctx);
      BOOST_TEST(!r.timed_out);
      BOOST_TEST(again == success);
    }
  }
}

// Two threads run the context, each in Asio's catch-and-rejoin loop; throwing handlers in
// several batches must not lose or repeat any other wait.
BOOST_AUTO_TEST_CASE(handler_exceptions_with_two_threads_lose_nothing) {
  constexpr int n = 200;
  asio::io_context ctx(2);
  const auto t0 = clock_type::now();
  std::vector<std::unique_ptr<twheel::steady_timer>> timers;
  std::vector<std::atomic<int>> calls(n);
  std::atomic<int> failures{0};
  for (int i = 0; i < n; ++i) {
    const auto deadline = t0 + std::chrono::milliseconds(5 + (i % 20) * 3);
    timers.push_back(std::make_unique<twheel::steady_timer>(ctx, deadline));
    timers.back()->async_wait([&, i, deadline](error_code ec) {
      calls[static_cast<std::size_t>(i)].fetch_add(1);
      if (ec != success || clock_type::now() < deadline) failures.fetch_add(1);
      if (i % 10 == 0) throw std::runtime_error("from handler");
    });
  }
  std::atomic<int> caught{0};
  auto runner = [&] {
    for (;;) {
      try {
        ctx.run();
        break;
      } catch (const std::runtime_error&) {
        caught.fetch_add(1);
      }
    }
  };
  {
    watchdog dog(ctx, 10s);
    std::thread other(runner);
    runner();
    other.join();
    BOOST_TEST(!dog.finish());
  }
  BOOST_TEST(caught.load() == n / 10);
  int not_once = 0;
  for (auto& c : calls) not_once += c.load() != 1;
  BOOST_TEST(not_once == 0);
  BOOST_TEST(failures.load() == 0);
  const auto s = wstats(ctx);
  BOOST_TEST(s.fired == static_cast<std::uint64_t>(n));
  BOOST_TEST(s.pending == 0u);
}

// ---------------------------------------------------------------------------------------
// 15. io_context::stop() and restart() with waits pending
// ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(stop_and_restart_with_waits_pending) {
  asio::io_context ctx;
  const auto t0 = clock_type::now();
  twheel::steady_timer a(ctx, t0 + 20ms), b(ctx, t0 + 40ms), far(ctx, t0 + 1h),
      doomed(ctx, t0 + 1h);
  wait_log log;
  std::atomic<int> finished{0};  // completions, readable from another thread
  auto handler = [&](int id) {
    return [&, id](error_code ec) {
      log.handler(id)(ec);
      ++finished;
    };
  };
  a.async_wait(handler(1));
  b.async_wait(handler(2));
  far.async_wait(handler(3));
  doomed.async_wait(handler(4));

  // (a) stop() from a handler before anything is due: run() returns, nothing completes.
  asio::post(ctx, [&] { ctx.stop(); });
  auto r = run_ctx(ctx);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(ctx.stopped());
  BOOST_TEST(log.total() == 0u);
  auto s = wstats(ctx);
  BOOST_TEST(s.pending == 4u);
  BOOST_TEST(s.timers == 4u);

  // While stopped, a and b fall due and one wait is cancelled: nothing runs, nothing is
  // lost, the counters say so.
  std::this_thread::sleep_until(t0 + 60ms);
  BOOST_TEST(doomed.cancel() == 1u);
  BOOST_TEST(log.total() == 0u);
  s = wstats(ctx);
  BOOST_TEST(s.pending == 3u);
  BOOST_TEST(s.cancelled == 1u);
  BOOST_TEST(s.fired == 0u);

  // restart() + run(): the due waits complete (late, never early), the far one keeps
  // run() busy until it is stopped again, this time from another thread.
  std::thread stopper([&] {
    const auto give_up = clock_type::now() + 5s;
    while (finished.load() < 3 && clock_type::now() < give_up) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(20ms);  // run() is now blocked on the far wait
    ctx.stop();
  });
  r = run_ctx(ctx);
  stopper.join();
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(log.ec(1) == success);
  BOOST_TEST(log.ec(2) == success);
  BOOST_TEST(log.ec(4) == aborted);
  BOOST_TEST(log.count(3) == 0u);
  for (int id : {1, 2, 4}) BOOST_TEST(log.count(id) == 1u, "wait " << id);
  s = wstats(ctx);
  BOOST_TEST(s.pending == 1u);
  BOOST_TEST(s.fired == 2u);
  BOOST_TEST(s.cancelled == 1u);

  // (b) stop() from inside a batch of inline handlers due in the same tick: run() returns
  // early, and after restart() every wait of the batch completes exactly once.
  const auto due = clock_type::now() + 10ms;
  std::vector<std::unique_ptr<twheel::steady_timer>> batch;
  std::vector<int> calls(5, 0);
  std::size_t before_return = 0;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    batch.push_back(std::make_unique<twheel::steady_timer>(ctx, due));
    batch.back()->async_wait([&, i](error_code ec) {
      BOOST_TEST(ec == success);
      ++calls[i];
      if (i == 1) ctx.stop();
    });
  }
  BOOST_TEST(wstats(ctx).pending == 1u + calls.size());
  r = run_ctx(ctx);
  BOOST_TEST(!r.timed_out);
  for (int c : calls) before_return += static_cast<std::size_t>(c);
  BOOST_TEST_MESSAGE("stop() inside a batch: " << before_return << " of " << calls.size()
                                               << " handlers ran before run() returned");
  BOOST_TEST(before_return >= 2u);
  BOOST_TEST(log.count(3) == 0u);
  // Wait for the far timer too (re-armed near), so that run() returns on its own.
  BOOST_TEST(far.expires_at(clock_type::now() + 20ms) == 1u);
  far.async_wait(log.handler(5));
  r = run_ctx(ctx);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(calls == (std::vector<int>(calls.size(), 1)), boost::test_tools::per_element());
  BOOST_TEST(log.ec(3) == aborted);
  BOOST_TEST(log.ec(5) == success);
  s = wstats(ctx);
  BOOST_TEST(s.pending == 0u);
  BOOST_TEST(s.timers == 1u);  // doomed, cancelled, keeps its place
  BOOST_TEST(s.fired == 2u + calls.size() + 1u);
  BOOST_TEST(s.cancelled == 2u);
}

// ---------------------------------------------------------------------------------------
// 16. Destroying the context while socket operations and timer waits are both pending
// ---------------------------------------------------------------------------------------

// Handlers are destroyed, never invoked, whichever service shuts down first (sockets made
// before or after the first timer), including a read handler that owns a timer with a
// pending wait and a wait handler that owns a socket with a pending read.
BOOST_AUTO_TEST_CASE(context_destroyed_with_socket_reads_and_waits_pending) {
  using asio::ip::tcp;
  for (bool sockets_first : {true, false}) {
    BOOST_TEST_CONTEXT((sockets_first ? "sockets created first" : "timers created first")) {
      int invoked = 0;
      int destroyed = 0;
      int expected = 0;
      std::weak_ptr<tcp::socket> socket_in_wait;
      std::weak_ptr<twheel::steady_timer> timer_in_read;
      {
        std::optional<asio::io_context> ctx(std::in_place);
        auto count_destroy = [&] { return hook([&] { ++destroyed; }); };
        std::optional<tcp::acceptor> acceptor;
        std::vector<std::shared_ptr<tcp::socket>> peers;  // the silent ends
        // A connected pair over loopback; returns the end to read from.
        auto connect = [&] {
          auto client = std::make_shared<tcp::socket>(*ctx);
          client->connect(acceptor->local_endpoint());
          auto server = std::make_shared<tcp::socket>(*ctx);
          acceptor->accept(*server);
          peers.push_back(client);
          return server;
        };
        std::unique_ptr<twheel::steady_timer> first;
        if (!sockets_first) first = std::make_unique<twheel::steady_timer>(*ctx, 1h);
        acceptor.emplace(*ctx, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
        if (sockets_first) first = std::make_unique<twheel::steady_timer>(*ctx, 1h);

        // Independent: a pending read and a pending wait.
        auto buf = std::make_shared<std::array<char, 16>>();
        auto s1 = connect();
        s1->async_read_some(asio::buffer(*buf),
                            [s1, buf, h = count_destroy(), &invoked](error_code, std::size_t) {
                              ++invoked;
                            });
        ++expected;
        first->async_wait([h = count_destroy(), &invoked](error_code) { ++invoked; });
        ++expected;

        // A read handler owning a timer whose wait is pending.
        {
          auto t = std::make_shared<twheel::steady_timer>(*ctx, 1h);
          timer_in_read = t;
          t->async_wait([h = count_destroy(), &invoked](error_code) { ++invoked; });
          ++expected;
          auto s2 = connect();
          s2->async_read_some(
              asio::buffer(*buf),
              [s2, t, buf, h = count_destroy(), &invoked](error_code, std::size_t) {
                ++invoked;
              });
          ++expected;
        }
        // A wait handler owning a socket whose read is pending.
        {
          auto s3 = connect();
          socket_in_wait = s3;
          s3->async_read_some(asio::buffer(*buf),
                              [buf, h = count_destroy(), &invoked](error_code, std::size_t) {
                                ++invoked;
                              });
          ++expected;
          auto t = std::make_shared<twheel::steady_timer>(*ctx, 1h);
          t->async_wait([t, s3, h = count_destroy(), &invoked](error_code) { ++invoked; });
          ++expected;
        }

        // Let the reactor and the wheel's driver start: both services are in use.
        ctx->run_for(20ms);
        BOOST_TEST(invoked == 0);
        BOOST_TEST(destroyed == 0);
        BOOST_TEST(wstats(*ctx).pending == 3u);

        // An aborted wait whose completion is queued and never run.
        {
          twheel::steady_timer t(*ctx, 1h);
          t.async_wait([h = count_destroy(), &invoked](error_code) { ++invoked; });
          ++expected;
        }
        within(10s, "io_context destruction", [&] {
          first.reset();  // an I/O object must not outlive its context
          acceptor.reset();
          peers.clear();
          s1.reset();
          ctx.reset();
        });
      }
      BOOST_TEST(invoked == 0);
      BOOST_TEST(destroyed == expected);
      BOOST_TEST(socket_in_wait.expired(), "socket owned by a wait handler leaked");
      BOOST_TEST(timer_in_read.expired(), "timer owned by a read handler leaked");
    }
  }
}

// ---------------------------------------------------------------------------------------
// 17. Locking: none when the context is single-threaded
// ---------------------------------------------------------------------------------------

// The wheel takes its lock by default, not when the user declares the context
// single-threaded, and not when Asio itself runs the io_context without locks; timers
// behave the same either way (waits fire, aborts complete, counts stay exact).
BOOST_AUTO_TEST_CASE(single_threaded_contexts_take_no_lock) {
  struct setup {
    const char* name;
    int hint;
    bool declare;
    bool expect_locking;
  };
  for (const setup& c : {setup{"default", BOOST_ASIO_CONCURRENCY_HINT_DEFAULT, false, true},
                         setup{"hint 1", 1, false, true},
                         setup{"declared", BOOST_ASIO_CONCURRENCY_HINT_DEFAULT, true, false},
                         setup{"unsafe hint", BOOST_ASIO_CONCURRENCY_HINT_UNSAFE, false, false}}) {
    BOOST_TEST_CONTEXT(c.name) {
      asio::io_context ctx(c.hint);
      if (c.declare) {
        twheel::wheel_options o;
        o.single_threaded = true;
        twheel::configure(ctx, o);
      }
      twheel::steady_timer fires(ctx), aborted(ctx);
      BOOST_TEST(asio::use_service<twheel::wheel_service>(ctx).locking() == c.expect_locking);
      std::vector<error_code> results;
      fires.expires_after(5ms);
      fires.async_wait([&](error_code ec) { results.push_back(ec); });
      aborted.expires_after(10s);
      aborted.async_wait([&](error_code ec) { results.push_back(ec); });
      BOOST_TEST(aborted.cancel() == 1u);
      BOOST_TEST(ctx.run() == 2u);
      BOOST_TEST(results.size() == 2u);
      if (results.size() == 2u) {
        BOOST_TEST(results[0] == asio::error::operation_aborted);
        BOOST_TEST(!results[1]);
      }
      BOOST_TEST(twheel::stats(ctx).pending == 0u);
    }
  }
}

// The wheel's lock excludes: threads that find it held spin, then sleep in the kernel and
// are woken by the unlock. A holder that keeps it for milliseconds forces the sleeping
// path; an unguarded read-modify-write in the critical section loses increments if two
// threads are ever inside at once.
BOOST_AUTO_TEST_CASE(the_wheels_lock_excludes_and_wakes_sleepers) {
  twheel::detail::service_mutex mutex(true);
  constexpr int threads = 4;
  constexpr int rounds = 20000;
  std::uint64_t guarded = 0;  // plain: only the lock protects it
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> ready{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < threads) std::this_thread::yield();  // start together
      for (int i = 0; i < rounds; ++i) {
        std::lock_guard<twheel::detail::service_mutex> hold(mutex);
        if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
        const std::uint64_t seen = guarded;
        for (int k = 0; k < 50; ++k) inside.load();  // widen the window
        // Now and then hold the lock long enough for the others to go to sleep on it.
        if (t == 0 && i % 5000 == 0) std::this_thread::sleep_for(2ms);
        guarded = seen + 1;
        inside.fetch_sub(1);
      }
    });
  }
  for (auto& th : pool) th.join();
  BOOST_TEST(overlaps.load() == 0);
  BOOST_TEST(guarded == std::uint64_t{threads} * rounds);
}

// wheel_service::of() answers from a per-thread cache; a context made where a destroyed
// one was (the allocator reuses the address) must get its own wheel, never the old one.
BOOST_AUTO_TEST_CASE(wheel_lookup_never_returns_a_destroyed_contexts_wheel) {
  int fired = 0;
  for (int i = 0; i < 50; ++i) {
    auto ctx = std::make_unique<asio::io_context>();
    auto& found = twheel::wheel_service::of(*ctx);
    BOOST_TEST(&found == &asio::use_service<twheel::wheel_service>(*ctx));
    BOOST_TEST(&twheel::wheel_service::of(*ctx) == &found);  // the cached answer
    twheel::steady_timer t(*ctx);
    t.expires_after(1ms);
    t.async_wait([&](error_code ec) { fired += !ec; });
    ctx->run();
    BOOST_TEST(twheel::stats(*ctx).fired == 1u);
  }
  BOOST_TEST(fired == 50);
}

// A handler that the context's shutdown destroys unrun starts the wheel's first wait,
// on a timer its handler owns: the wheel is created after its context began shutting its
// services down, so the context never shuts it down. Its destruction must still destroy
// that handler (it leaked) and leave nothing of the wheel to the scheduler, which
// destroys what it holds after the wheel is gone (ASan saw the driver's timer and pass
// used after free), with the context's reactor made before or only by the wheel.
namespace {
struct starts_a_wait_when_destroyed {
  asio::io_context* ctx;
  std::chrono::seconds after;
  std::weak_ptr<twheel::steady_timer>* made;
  bool* started;
  int* ran;
  std::unique_ptr<int> armed = std::make_unique<int>(0);  // moved-from copies do nothing
  starts_a_wait_when_destroyed(asio::io_context& c, std::chrono::seconds a,
                               std::weak_ptr<twheel::steady_timer>& m, bool& s, int& r)
      : ctx(&c), after(a), made(&m), started(&s), ran(&r) {}
  ~starts_a_wait_when_destroyed() {
    if (!armed) return;
    auto timer = std::make_shared<twheel::steady_timer>(*ctx, after);
    *made = timer;
    int* r = ran;
    timer->async_wait([timer, r](error_code) { ++*r; });
    *started = true;
  }
  starts_a_wait_when_destroyed(starts_a_wait_when_destroyed&&) = default;
  void operator()() {}
};
}  // namespace

BOOST_AUTO_TEST_CASE(a_wheel_first_used_while_its_context_shuts_down_is_destroyed_cleanly) {
  for (const bool reactor_first : {false, true}) {
    for (const std::chrono::seconds after : {0s, 3600s}) {
      BOOST_TEST_CONTEXT("reactor made first: " << reactor_first
                                                << ", wait for " << after.count() << " s") {
        std::weak_ptr<twheel::steady_timer> made;
        bool started = false;
        int ran = 0;
        {
          asio::io_context ctx;
          std::optional<asio::steady_timer> asio_timer;
          if (reactor_first) asio_timer.emplace(ctx);
          asio::post(ctx, starts_a_wait_when_destroyed(ctx, after, made, started, ran));
          BOOST_TEST(!asio::has_service<twheel::wheel_service>(ctx));
        }
        BOOST_TEST(started);
        BOOST_TEST(ran == 0);
        BOOST_TEST(made.expired());  // the wait's handler, which owned it, is destroyed
      }
    }
  }
}

// A context of the user's own may destroy its queue after its services (queue_context, as
// Asio's priority_scheduler example does). Settled waits and the driver's pass queued there
// are then destroyed after the wheel is gone: each handler exactly once, and nothing
// reaching for the wheel's memory (ASan saw the records' blocks used after free).
BOOST_AUTO_TEST_CASE(waits_queued_in_a_context_that_destroys_its_queue_after_the_wheel) {
  auto alive = std::make_shared<int>(0);
  const std::weak_ptr<int> probe = alive;
  int ran = 0;
  {
    twheel_test::queue_context ctx;
    twheel::steady_timer boxed(ctx.get_executor(), 1h), allocated(ctx.get_executor(), 1h);
    twheel::steady_timer due(ctx.get_executor(), twheel::steady_timer::time_point::min());
    const std::array<char, 64> big{};
    boxed.async_wait([alive, &ran](error_code) { ++ran; });
    allocated.async_wait([alive, big, &ran](error_code) { ran += 1 + big[0]; });
    due.async_wait([alive, &ran](error_code) { ++ran; });  // the driver posts a pass for it
    BOOST_TEST(boxed.cancel() == 1u);
    BOOST_TEST(allocated.cancel() == 1u);
    alive.reset();
    // Two records and the driver's pass (and, from Asio's own scheduler thread, perhaps
    // the driver's cancelled wait).
    BOOST_TEST(ctx.queued() >= 3u);
  }
  BOOST_TEST(ran == 0);
  BOOST_TEST(probe.expired());
}

// The same context run: each settled wait is an item of its queue, run there.
BOOST_AUTO_TEST_CASE(waits_complete_through_the_queue_of_a_context_of_the_users_own) {
  twheel_test::queue_context ctx;
  twheel::steady_timer cancelled(ctx.get_executor(), 1h);
  twheel::steady_timer due(ctx.get_executor(), twheel::steady_timer::time_point::min());
  std::vector<error_code> of_cancelled, of_due;
  cancelled.async_wait([&](error_code ec) { of_cancelled.push_back(ec); });
  due.async_wait([&](error_code ec) { of_due.push_back(ec); });
  BOOST_TEST(cancelled.cancel() == 1u);
  // Never inside the initiating call or cancel().
  BOOST_TEST(of_cancelled.empty());
  BOOST_TEST(of_due.empty());
  ctx.poll();
  BOOST_TEST_REQUIRE(of_cancelled.size() == 1u);
  BOOST_TEST((of_cancelled[0] == asio::error::operation_aborted));
  BOOST_TEST_REQUIRE(of_due.size() == 1u);
  BOOST_TEST(!of_due[0]);
  BOOST_TEST(twheel::stats(ctx).pending == 0u);
}

// An Asio I/O object on a context of the user's own gives that context a scheduler
// service, its reactor's, which runs on a thread of Asio's own and not the context's
// handlers. Made before the wheel, it was taken for the context's (a review found it):
// aborted waits were flushed on that thread, racing the user's calls on a single_threaded
// wheel (TSan), and a cancel_after state whose handler the context's queue still held was
// kept in the wheel's memory, freed before that queue (ASan).
BOOST_AUTO_TEST_CASE(an_asio_object_on_a_users_context_leaves_the_wheels_work_there) {
  int aborted_waits = 0;
  bool timeout_ran = false;
  {
    twheel_test::queue_context ctx;
    asio::steady_timer asio_first(ctx.get_executor());
    twheel::configure(ctx, twheel::wheel_options{.single_threaded = true});
    twheel::steady_timer timer(ctx.get_executor(), 1h);
    BOOST_TEST(!twheel::wheel_service::of(ctx).context_queue_goes_first());
    for (int i = 0; i < 200; ++i) {
      timer.async_wait([&](error_code ec) {
        aborted_waits += ec == asio::error::operation_aborted;
      });
      BOOST_TEST(timer.cancel() == 1u);
      ctx.poll();
    }
    // Left queued when the context goes: its cancel_after state goes with the queue.
    timer.async_wait(twheel::cancel_after(1ms, [&](error_code) { timeout_ran = true; }));
    const auto give_up = clock_type::now() + 10s;
    while (twheel::stats(ctx).pending != 0 && clock_type::now() < give_up) {
      if (ctx.poll_one() == 0) std::this_thread::sleep_for(1ms);
    }
    BOOST_TEST(twheel::stats(ctx).pending == 0u);
  }
  BOOST_TEST(aborted_waits == 200);
  BOOST_TEST(!timeout_ran);
}
