// steady_timer_test.cpp: conformance suite for twheel::steady_timer.
//
// Every test case is a template run against boost::asio::steady_timer AND
// twheel::steady_timer, so each expectation below is first proven to be Asio's own
// behaviour and then required of twheel. Nothing twheel-specific may appear in this file:
// the timer type is only ever spelled `Timer`.
//
// Timing rules: deadlines are a few ms; handlers may run late (twheel has 1 ms
// resolution plus scheduling delay) but never early, so upper bounds are generous
// (hundreds of ms) while lower bounds are exact.
//
// Define TWHEEL_CONFORMANCE_ASIO_ONLY to run against Asio alone.
//
// Every case carries a Boost.Test timeout so that an implementation that blocks forever
// (e.g. in wait() or run()) fails the case instead of hanging the suite; calls to run()
// additionally go through a watchdog that stops the context.
#define BOOST_TEST_MODULE steady_timer
#include <boost/test/unit_test.hpp>

#include <boost/asio.hpp>
#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/mpl/list.hpp>

#if __has_include(<twheel/steady_timer.hpp>) && !defined(TWHEEL_CONFORMANCE_ASIO_ONLY)
#include <twheel/steady_timer.hpp>
#define TWHEEL_CONFORMANCE_TWHEEL 1
using timer_types = boost::mpl::list<boost::asio::steady_timer, twheel::steady_timer>;
#else
using timer_types = boost::mpl::list<boost::asio::steady_timer>;
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "support.hpp"

namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using namespace std::chrono_literals;
using wall = std::chrono::steady_clock;  // for measuring the tests themselves

const error_code aborted = asio::error::operation_aborted;

using twheel_test::alloc_counters;
using twheel_test::counting_allocator;
using twheel_test::ms;
using twheel_test::run_ctx;
using twheel_test::run_until;
using twheel_test::wait_log;

// The watchdog budget of one run() in this suite: its deadlines are a few ms.
constexpr auto run_limit = 5s;

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

// Runs whatever is ready now (nothing blocks).
void poll_ctx(asio::io_context& ctx) {
  ctx.restart();
  ctx.poll();
}

// Increments a counter when destroyed: tracks what handlers own.
struct dtor_probe {
  int* dtors;
  explicit dtor_probe(int* d) : dtors(d) {}
  dtor_probe(const dtor_probe&) = delete;
  dtor_probe& operator=(const dtor_probe&) = delete;
  ~dtor_probe() { ++*dtors; }
};

#if defined(BOOST_ASIO_HAS_CO_AWAIT)
// Coroutines (free functions: no lambda captures that could dangle).

template <class Timer>
asio::awaitable<void> co_wait_own_timer(std::chrono::milliseconds d, bool* ok,
                                        std::chrono::nanoseconds* elapsed) {
  const auto t0 = Timer::clock_type::now();
  Timer t(co_await asio::this_coro::executor, d);
  co_await t.async_wait(asio::use_awaitable);
  *elapsed = Timer::clock_type::now() - t0;
  *ok = Timer::clock_type::now() >= t.expiry();
}

template <class Timer>
asio::awaitable<void> co_wait_throwing(Timer* t, std::optional<error_code>* result) {
  try {
    co_await t->async_wait(asio::use_awaitable);
    *result = error_code{};
  } catch (const boost::system::system_error& e) {
    *result = e.code();
  }
}

template <class Timer>
asio::awaitable<void> co_wait_as_tuple(Timer* t, std::optional<error_code>* result) {
  auto [ec] = co_await t->async_wait(asio::as_tuple(asio::use_awaitable));
  *result = ec;
}

template <class Timer>
asio::awaitable<void> co_wait_redirect(Timer* t, std::optional<error_code>* result) {
  error_code ec = asio::error::would_block;
  co_await t->async_wait(asio::redirect_error(asio::use_awaitable, ec));
  *result = ec;
}
#endif

}  // namespace

// ---------------------------------------------------------------------------------------
// 0. Types, constructors, accessors
// ---------------------------------------------------------------------------------------

BOOST_TEST_DECORATOR(*boost::unit_test::timeout(10))
BOOST_AUTO_TEST_CASE_TEMPLATE(api_types_and_constructors, Timer, timer_types) {
  using clock = std::chrono::steady_clock;
  using time_point = typename Timer::time_point;
  using io_ex = asio::io_context::executor_type;
  using R = typename Timer::template rebind_executor<io_ex>::other;

  BOOST_TEST((std::is_same_v<typename Timer::clock_type, clock>));
  BOOST_TEST((std::is_same_v<typename Timer::duration, clock::duration>));
  BOOST_TEST((std::is_same_v<time_point, clock::time_point>));
  BOOST_TEST((std::is_same_v<typename Timer::traits_type, asio::wait_traits<clock>>));
  BOOST_TEST((std::is_same_v<typename Timer::executor_type, asio::any_io_executor>));
  BOOST_TEST((std::is_same_v<typename R::executor_type, io_ex>));
  BOOST_TEST((std::is_same_v<typename R::clock_type, clock>));
  BOOST_TEST((std::is_same_v<
              typename R::template rebind_executor<asio::any_io_executor>::other, Timer>));

  BOOST_TEST(!std::is_default_constructible_v<Timer>);
  BOOST_TEST(!std::is_copy_constructible_v<Timer>);
  BOOST_TEST(!std::is_copy_assignable_v<Timer>);
  BOOST_TEST(std::is_move_constructible_v<Timer>);
  BOOST_TEST(std::is_move_assignable_v<Timer>);
  // The constructors are explicit.
  BOOST_TEST(!(std::is_convertible_v<asio::io_context&, Timer>));
  BOOST_TEST(!(std::is_convertible_v<const asio::any_io_executor&, Timer>));
  // Converting moves go only where the executor converts.
  BOOST_TEST((std::is_constructible_v<Timer, R&&>));
  BOOST_TEST((std::is_assignable_v<Timer&, R&&>));
  BOOST_TEST(!(std::is_constructible_v<R, Timer&&>));
  BOOST_TEST(!(std::is_assignable_v<R&, Timer&&>));

  BOOST_TEST((std::is_same_v<decltype(std::declval<Timer&>().expires_at(
                                 std::declval<const time_point&>())),
                             std::size_t>));
  BOOST_TEST((std::is_same_v<decltype(std::declval<Timer&>().expires_after(
                                 std::declval<const typename Timer::duration&>())),
                             std::size_t>));
  BOOST_TEST((std::is_same_v<decltype(std::declval<Timer&>().cancel()), std::size_t>));
  BOOST_TEST((std::is_same_v<decltype(std::declval<Timer&>().cancel_one()), std::size_t>));
  BOOST_TEST((std::is_same_v<decltype(std::declval<const Timer&>().expiry()), time_point>));
  BOOST_TEST((std::is_same_v<decltype(std::declval<Timer&>().get_executor()),
                             const asio::any_io_executor&>));
  BOOST_TEST(noexcept(std::declval<Timer&>().get_executor()));
  BOOST_TEST((std::is_void_v<decltype(std::declval<Timer&>().wait())>));
  BOOST_TEST((std::is_void_v<decltype(std::declval<Timer&>().wait(
                  std::declval<error_code&>()))>));
  BOOST_TEST((std::is_void_v<decltype(std::declval<Timer&>().async_wait(
                  std::declval<void (*)(error_code)>()))>));

  asio::io_context ctx;
  const asio::any_io_executor ex = ctx.get_executor();

  Timer a(ctx);
  BOOST_TEST((a.expiry() == time_point{}));
  BOOST_TEST((a.get_executor() == ex));
  Timer b(ctx.get_executor());
  BOOST_TEST((b.expiry() == time_point{}));
  BOOST_TEST((b.get_executor() == ex));

  const time_point tp = clock::now() + 1h;
  Timer c(ctx, tp);
  BOOST_TEST((c.expiry() == tp));
  Timer d(ex, tp);
  BOOST_TEST((d.expiry() == tp));
  BOOST_TEST((d.get_executor() == ex));

  const auto before = clock::now();
  Timer e(ctx, 1h);
  Timer f(ex, std::chrono::minutes(60));
  const auto after = clock::now();
  BOOST_TEST((e.expiry() >= before + 1h && e.expiry() <= after + 1h));
  BOOST_TEST((f.expiry() >= before + 1h && f.expiry() <= after + 1h));

  // const expiry()
  const Timer& cc = c;
  BOOST_TEST((cc.expiry() == tp));

  // Rebound type: from its own executor and from the context.
  R r1(ctx.get_executor());
  R r2(ctx, tp);
  R r3(ctx.get_executor(), 1h);
  BOOST_TEST((r1.get_executor() == ctx.get_executor()));
  BOOST_TEST((r2.expiry() == tp));
  BOOST_TEST((r3.expiry() >= before + 1h));

  // A strand executor is kept (as the target of any_io_executor).
  auto strand = asio::make_strand(ctx);
  Timer s(strand, tp);
  BOOST_TEST((s.get_executor() == asio::any_io_executor(strand)));
  BOOST_TEST((s.get_executor().template target<decltype(strand)>() != nullptr));

  // Nothing here started a wait: run() returns at once.
  auto rr = run_ctx(ctx, run_limit);
  BOOST_TEST(!rr.timed_out);
  BOOST_TEST(rr.handlers == 0u);
  BOOST_TEST(ms(rr.elapsed) < 1000);
}

// ---------------------------------------------------------------------------------------
// 1. An already expired wait completes with success, never inside async_wait
// ---------------------------------------------------------------------------------------

BOOST_TEST_DECORATOR(*boost::unit_test::timeout(10))
BOOST_AUTO_TEST_CASE_TEMPLATE(expired_wait_completes_outside_initiation, Timer, timer_types) {
  using time_point = typename Timer::time_point;
  using clock = typename Timer::clock_type;
  const std::vector<std::pair<const char*, std::function<void(Timer&)>>> setters = {
      {"never set (epoch)", [](Timer&) {}},
      {"past", [](Timer& t) { t.expires_at(clock::now() - 1s); }},
      {"now", [](Timer& t) { t.expires_at(clock::now()); }},
      {"after zero", [](Timer& t) { t.expires_after(Timer::duration::zero()); }},
      {"after negative", [](Timer& t) { t.expires_after(-5ms); }},
      {"time_point::min", [](Timer& t) { t.expires_at((time_point::min)()); }},
  };
  for (const auto& [name, set] : setters) {
    BOOST_TEST_CONTEXT("expiry: " << name) {
      asio::io_context ctx;
      Timer t(ctx);
      set(t);
      int calls = 0;
      bool returned = false;
      bool returned_seen = false;
      error_code seen = asio::error::would_block;
      t.async_wait([&](error_code ec) {
        ++calls;
        seen = ec;
        returned_seen = returned;
      });
      BOOST_TEST(calls == 0);  // not invoked from inside async_wait
      returned = true;
      auto r = run_ctx(ctx, run_limit);
      BOOST_TEST(!r.timed_out);
      BOOST_TEST(calls == 1);
      BOOST_TEST(seen == error_code{});
      BOOST_TEST(returned_seen);
      BOOST_TEST(ms(r.elapsed) < 500);
      BOOST_TEST((clock::now() >= t.expiry()));
    }
  }

  // Several expired waits, and an expired wait initiated from inside a handler.
  asio::io_context ctx;
  Timer t(ctx, clock::now() - 1ms);
  wait_log log;
  bool inner_returned = false, inner_returned_seen = false;
  t.async_wait(log.handler(1));
  t.async_wait([&](error_code ec) {
    log.handler(2)(ec);
    t.async_wait([&](error_code ec2) {
      inner_returned_seen = inner_returned;
      log.handler(3)(ec2);
    });
    BOOST_TEST(log.count(3) == 0u);
    inner_returned = true;
  });
  BOOST_TEST(log.total() == 0u);
  auto r = run_ctx(ctx, run_limit);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(log.order == (std::vector<int>{1, 2, 3}), boost::test_tools::per_element());
  BOOST_TEST(log.ec(1) == error_code{});
  BOOST_TEST(log.ec(2) == error_code{});
  BOOST_TEST(log.ec(3) == error_code{});
  BOOST_TEST(inner_returned_seen);
}

// ---------------------------------------------------------------------------------------
// 2. Never early
// ---------------------------------------------------------------------------------------

BOOST_TEST_DECORATOR(*boost::unit_test::timeout(10))
BOOST_AUTO_TEST_CASE_TEMPLATE(never_early, Timer, timer_types) {
  using clock = typename Timer::clock_type;
  using time_point = typename Timer::time_point;
  constexpr int n = 200;
  asio::io_context ctx;
  std::mt19937 rng(20240607);
  std::uniform_int_distribution<int> us(0, 20000);

  std::vector<std::unique_ptr<Timer>> timers;
  std::vector<time_point> deadlines(n);
  std::vector<int> calls(n, 0);
  std::vector<char> early(n, 0);
  std::vector<error_code> ecs(n);
  std::chrono::nanoseconds max_late{0};
  const auto base = clock::now();
  for (int i = 0; i < n; ++i) {
    timers.push_back(std::make_unique<Timer>(ctx));
    Timer& t = *timers.back();
    const auto off = std::chrono::microseconds(us(rng));
    if (i % 2 == 0) {
      t.expires_at(base + off);
    } else {
      t.expires_after(off);
    }
    deadlines[i] = t.expiry();
    BOOST_TEST((deadlines[i] >= base + off));
    t.async_wait([&, i](error_code ec) {
      const auto now = clock::now();
      ++calls[i];
      ecs[i] = ec;
      if (now < timers[i]->expiry() || now < deadlines[i]) early[i] = 1;
      max_late = std::max(max_late, std::chrono::nanoseconds(now - deadlines[i]));
    });
  }
  auto r = run_ctx(ctx, run_limit);
  BOOST_TEST(!r.timed_out);
  for (int i = 0; i < n; ++i) {
    BOOST_TEST_CONTEXT("timer " << i) {
      BOOST_TEST(calls[i] == 1);
      BOOST_TEST(ecs[i] == error_code{});
      BOOST_TEST(!early[i]);
    }
  }
  BOOST_TEST_MESSAGE("never_early: max lateness " << max_late.count() / 1000 << " us");
  BOOST_TEST(ms(max_late) < 500);
}

// ---------------------------------------------------------------------------------------
// 3. expires_at / expires_after / cancel / cancel_one return counts and abort waits
// ---------------------------------------------------------------------------------------

BOOST_TEST_DECORATOR(*boost::unit_test::timeout(10))
BOOST_AUTO_TEST_CASE_TEMPLATE(expiry_changes_and_cancel_counts, Timer, timer_types) {
  using clock = typename Timer::clock_type;
  asio::io_context ctx;
  wait_log log;
  Timer t(ctx, 10s);

  // No waits: 0.
  BOOST_TEST(t.expires_after(10s) == 0u);
  BOOST_TEST(t.expires_at(clock::now() + 10s) == 0u);
  BOOST_TEST(t.cancel() == 0u);
  BOOST_TEST(t.cancel_one() == 0u);

  // One wait: expires_after cancels it.
  t.async_wait(log.handler(1));
  BOOST_TEST(t.expires_after(10s) == 1u);
  BOOST_TEST(log.count(1) == 0u);  // not invoked from inside expires_after
  BOOST_TEST(run_until(ctx, [&] { return log.count(1) == 1; }));
  BOOST_TEST(log.ec(1) == aborted);

  // Three waits: expires_at cancels all, in initiation order.
  t.async_wait(log.handler(2));
  t.async_wait(log.handler(3));
  t.async_wait(log.handler(4));
  BOOST_TEST(t.expires_at(clock::now() + 10s) == 3u);
  BOOST_TEST(log.count(2) + log.count(3) + log.count(4) == 0u);
  BOOST_TEST(run_until(ctx, [&] { return log.total() == 4; }));
  BOOST_TEST(log.order == (std::vector<int>{1, 2, 3, 4}), boost::test_tools::per_element());
  BOOST_TEST(log.ec(2) == aborted);
  BOOST_TEST(log.ec(3) == aborted);
  BOOST_TEST(log.ec(4) == aborted);
  BOOST_TEST(t.expires_after(10s) == 0u);  // nothing left

  // A wait after re-arming to a near deadline succeeds.
  t.expires_after(2ms);
  t.async_wait(log.handler(5));
  BOOST_TEST(run_until(ctx, [&] { return log.count(5) == 1; }));
  BOOST_TEST(log.ec(5) == error_code{});
  BOOST_TEST((clock::now() >= t.expiry()));

  // cancel(): count, aborts all, expiry unchanged.
  t.expires_after(10s);
  const auto exp = t.expiry();
  t.async_wait(log.handler(6));
  t.async_wait(log.handler(7));
  BOOST_TEST(t.cancel() == 2u);
  BOOST_TEST((t.expiry() == exp));
  BOOST_TEST(t.cancel() == 0u);
  BOOST_TEST(log.count(6) + log.count(7) == 0u);  // not invoked from inside cancel
  BOOST_TEST(run_until(ctx, [&] { return log.count(6) == 1 && log.count(7) == 1; }));
  BOOST_TEST(log.ec(6) == aborted);
  BOOST_TEST(log.ec(7) == aborted);
  BOOST_TEST(log.order.back() == 7);

  // cancel_one(): FIFO, one at a time.
  t.async_wait(log.handler(8));
  t.async_wait(log.handler(9));
  t.async_wait(log.handler(10));
  BOOST_TEST(t.cancel_one() == 1u);
  BOOST_TEST(log.count(8) == 0u);
  BOOST_TEST(run_until(ctx, [&] { return log.count(8) == 1; }));
  poll_ctx(ctx);
  BOOST_TEST(log.ec(8) == aborted);
  BOOST_TEST(log.count(9) == 0u);
  BOOST_TEST(log.count(10) == 0u);
  BOOST_TEST(t.cancel_one() == 1u);
  BOOST_TEST(run_until(ctx, [&] { return log.count(9) == 1; }));
  poll_ctx(ctx);
  BOOST_TEST(log.ec(9) == aborted);
  BOOST_TEST(log.count(10) == 0u);
  BOOST_TEST(t.cancel_one() == 1u);
  BOOST_TEST(t.cancel_one() == 0u);
  BOOST_TEST(t.cancel() == 0u);
  BOOST_TEST(run_until(ctx, [&] { return log.count(10) == 1; }));
  BOOST_TEST(log.ec(10) == aborted);
  BOOST_TEST((t.expiry() == exp));

  // Cancelling after the timer has expired (its completion already queued) returns 0 and
  // the wait completes with success: u and v share one deadline, whichever handler runs
  // first cancels the other.
  {
    Timer u(ctx), v(ctx);
    const auto deadline = clock::now() + 3ms;
    u.expires_at(deadline);
    v.expires_at(deadline);
    std::size_t cancelled = 99;
    int first = 0;
    error_code ec_u = asio::error::would_block, ec_v = asio::error::would_block;
    u.async_wait([&](error_code ec) {
      ec_u = ec;
      if (first == 0) {
        first = 1;
        cancelled = v.cancel();
      }
    });
    v.async_wait([&](error_code ec) {
      ec_v = ec;
      if (first == 0) {
        first = 2;
        cancelled = u.cancel();
      }
    });
    auto r = run_ctx(ctx, run_limit);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(first != 0);
    BOOST_TEST(cancelled == 0u);
    BOOST_TEST(ec_u == error_code{});
    BOOST_TEST(ec_v == error_code{});
  }

  // Every wait completed exactly once.
  for (const auto& [id, v] : log.results) BOOST_TEST(v.size() == 1u, "wait " << id);
}

// ---------------------------------------------------------------------------------------
// 4. Several waits on one timer complete in initiation order
// ---------------------------------------------------------------------------------------

BOOST_TEST_DECORATOR(*boost::unit_test::timeout(10))
BOOST_AUTO_TEST_CASE_TEMPLATE(waits_complete_in_initiation_order, Timer, timer_types) {
  using clock = typename Timer::clock_type;
  asio::io_context ctx;
  Timer t(ctx, 3ms);
  std::vector<int> order;
  std::vector<error_code> ecs;
  bool early = false;
  for (int i = 0; i < 8; ++i) {
    t.async_wait([&, i](error_code ec) {
      if (clock::now() < t.expiry()) early = true;
      order.push_back(i);
      ecs.push_back(ec);
    });
  }
  BOOST_TEST(order.empty());
  auto r = run_ctx(ctx, run_limit);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(order == (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}), boost::test_tools::per_element());
  for (auto& ec : ecs) BOOST_TEST(ec == error_code{});
  BOOST_TEST(!early);
  BOOST_TEST((clock::now() >= t.expiry()));
}

// ---------------------------------------------------------------------------------------
// 5. Distinct deadlines fire in deadline order
// ---------------------------------------------------------------------------------------

BOOST_TEST_DECORATOR(*boost::unit_test::timeout(10))
BOOST_AUTO_TEST_CASE_TEMPLATE(distinct_deadlines_fire_in_order, Timer, timer_types) {
  using clock = typename Timer::clock_type;
  constexpr int n = 10;
  asio::io_context ctx;
  std::vector<int> ranks(n);
  std::iota(ranks.begin(), ranks.end(), 0);
  std::shuffle(ranks.begin(), ranks.end(), std::mt19937(7));
  BOOST_REQUIRE(!std::is_sorted(ranks.begin(), ranks.end()));

  const auto base = clock::now() + 5ms;
  std::vector<std::unique_ptr<Timer>> timers;
  std::vector<int> order;
  bool early = false;
  for (int rank : ranks) {
    timers.push_back(std::make_unique<Timer>(ctx, base + rank * 5ms));
    Timer* t = timers.back().get();
    t->async_wait([&, rank, t](error_code ec) {
      if (ec || clock::now() < t->expiry()) early = true;
      order.push_back(rank);
    });
  }
  auto r = run_ctx(ctx, run_limit);
  BOOST_TEST(!r.timed_out);
  std::vector<int> expected(n);
  std::iota(expected.begin(), expected.end(), 0);
  BOOST_TEST(order == expected, boost::test_tools::per_element());
  BOOST_TEST(!early);
}

// ---------------------------------------------------------------------------------------
// 6. Destroying a timer aborts its waits (later, from run())
// ---------------------------------------------------------------------------------------

BOOST_TEST_DECORATOR(*boost::unit_test::timeout(10))
BOOST_AUTO_TEST_CASE_TEMPLATE(destroying_timer_aborts_waits, Timer, timer_types) {
  asio::io_context ctx;
  wait_log log;
  auto owned = std::make_shared<int>(0);
  auto t = std::make_unique<Timer>(ctx, 10s);
  t->async_wait(log.handler(1));
  t->async_wait([&log, owned](error_code ec) { log.handler(2)(ec); });
  BOOST_TEST(owned.use_count() == 2);
  t.reset();
  BOOST_TEST(log.total() == 0u);  // not invoked from inside the destructor
  auto r = run_ctx(ctx, run_limit);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(ms(r.elapsed) < 1000);
  BOOST_TEST(log.order == (std::vector<int>{1, 2}), boost::test_tools::per_element());
  BOOST_TEST(log.ec(1) == aborted);
  BOOST_TEST(log.ec(2) == aborted);
  BOOST_TEST(owned.use_count() == 1);  // the handler was destroyed after the call

  // Same for a timer that was already due but not yet processed... and one never armed.
  wait_log log2;
  auto a = std::make_unique<Timer>(ctx);
  a->expires_after(10s);
  a->async_wait(log2.handler(1));
  auto b = std::make_unique<Timer>(ctx, 10s);  // no waits: destroying it is a no-op
  b.reset();
  a.reset();
  BOOST_TEST(log2.total() == 0u);
  r = run_ctx(ctx, run_limit);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(ms(r.elapsed) < 1000);
  BOOST_TEST(log2.count(1) == 1u);
  BOOST_TEST(log2.ec(1) == aborted);
}

// ---------------------------------------------------------------------------------------
// 7. Moves carry pending waits; move assignment aborts the target's waits
// ---------------------------------------------------------------------------------------

BOOST_TEST_DECORATOR(*boost::unit_test::timeout(10))
BOOST_AUTO_TEST_CASE_TEMPLATE(move_construction_carries_waits, Timer, timer_types) {
  using clock = typename Timer::clock_type;
  using time_point = typename Timer::time_point;
  asio::io_context ctx;
  wait_log log;
  bool early = false;
  Timer a(ctx, 5ms);
  const auto exp = a.expiry();
  auto checked = [&](int id) {
    return [&, id](error_code ec) {
      if (clock::now() < exp) early = true;
      log.handler(id)(ec);
    };
  };
  a.async_wait(checked(1));
  a.async_wait(checked(2));

  Timer b(std::move(a));
  BOOST_TEST((b.expiry() == exp));
  BOOST_TEST((b.get_executor() == asio::any_io_executor(ctx.get_executor())));
  // The moved-from timer is as if newly constructed from the executor.
  BOOST_TEST((a.expiry() == time_point{}));
  BOOST_TEST((a.get_executor() == asio::any_io_executor(ctx.get_executor())));
  BOOST_TEST(a.cancel() == 0u);
  BOOST_TEST(log.total() == 0u);

  // And it is usable.
  a.expires_after(1ms);
  a.async_wait(log.handler(3));

  auto r = run_ctx(ctx, run_limit);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(log.count(1) == 1u);
  BOOST_TEST(log.count(2) == 1u);
  BOOST_TEST(log.count(3) == 1u);
  BOOST_TEST(log.ec(1) == error_code{});
  BOOST_TEST(log.ec(2) == error_code{});
  BOOST_TEST(log.ec(3) == error_code{});
  BOOST_TEST(!early);

  // The moved-to timer owns the waits: cancelling it aborts them.
  wait_log log2;
  Timer c(ctx, 10s);
  c.async_wait(log2.handler(1));
  c.async_wait(log2.handler(2));
  Timer d(std::move(c));
  BOOST_TEST(c.cancel() == 0u);
  BOOST_TEST(d.cancel() == 2u);
  r = run_ctx(ctx, run_limit);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(ms(r.elapsed) < 1000);
  BOOST_TEST(log2.order == (std::vector<int>{1, 2}), boost::test_tools::per_element());
  BOOST_TEST(log2.ec(1) == aborted);
  BOOST_TEST(log2.ec(2) == aborted);

  // Moving again (chain of moves) and destroying the final owner aborts.
  wait_log log3;
  auto e = std::make_unique<Timer>(ctx, 10s);
  e->async_wait(log3.handler(1));
  auto f = std::make_unique<Timer>(std::move(*e));
  auto g = std::make_unique<Timer>(std::move(*f));
  e.reset();
  f.reset();
  poll_ctx(ctx);
  BOOST_TEST(log3.total() == 0u);  // destroying moved-from timers touches nothing
  g.reset();
  r = run_ctx(ctx, run_limit);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(ms(r.elapsed) < 1000);
  BOOST_TEST(log3.count(1) == 1u);
  BOOST_TEST(log3.ec(1) == aborted);
}

BOOST_TEST_DECORATOR(*boost::unit_test::timeout(10))
BOOST_AUTO_TEST_CASE_TEMPLATE(move_assignment_carries_waits_and_aborts_target, Timer,
                              timer_types) {
  using clock = typename Timer::clock_type;
  using time_point = typename Timer::time_point;
  asio::io_context ctx;
  wait_log log;
  bool early = false;

  Timer a(ctx, 5ms);
  const auto exp = a.expiry();
  a.async_wait([&](error_code ec) {
    if (clock::now() < exp) early = true;
    log.handler(1)(ec);
  });
  Timer c(ctx, 10s);
  c.async_wait(log.handler(2));
  c.async_wait(log.handler(3));

  c = std::move(a);
  BOOST_TEST(log.total() == 0u);  // nothing invoked from inside the assignment
  BOOST_TEST((c.expiry() == exp));
  BOOST_TEST((a.expiry() == time_point{}));
  BOOST_TEST(a.cancel() == 0u);

  auto r = run_ctx(ctx, run_limit);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(ms(r.elapsed) < 1000);  // c's old 10 s waits don't keep run() alive
  // Asio: the target's old waits are aborted (queued at once, so they run first);
  // the carried wait completes with success at the source's expiry.
  BOOST_TEST(log.order == (std::vector<int>{2, 3, 1}), boost::test_tools::per_element());
  BOOST_TEST(log.ec(2) == aborted);
  BOOST_TEST(log.ec(3) == aborted);
  BOOST_TEST(log.ec(1) == error_code{});
  BOOST_TEST(!early);

  // After move assignment, the target owns the carried wait: cancel() reaches it.
  wait_log log2;
  Timer x(ctx, 10s), y(ctx, 10s);
  x.async_wait(log2.handler(1));
  y.async_wait(log2.handler(2));
  y = std::move(x);
  BOOST_TEST(x.cancel() == 0u);
  BOOST_TEST(y.cancel() == 1u);
  r = run_ctx(ctx, run_limit);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(ms(r.elapsed) < 1000);
  BOOST_TEST(log2.ec(1) == aborted);
  BOOST_TEST(log2.ec(2) == aborted);

  // Assigning a timer without waits over one with waits aborts them too.
  wait_log log3;
  Timer p(ctx, 10s), q(ctx);
  p.async_wait(log3.handler(1));
  p = std::move(q);
  BOOST_TEST((p.expiry() == time_point{}));
  BOOST_TEST(p.cancel() == 0u);
  r = run_ctx(ctx, run_limit);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(ms(r.elapsed) < 1000);
  BOOST_TEST(log3.ec(1) == aborted);

  // Self move assignment leaves the timer and its waits untouched.
  wait_log log4;
  Timer s(ctx, 3ms);
  const auto s_exp = s.expiry();
  s.async_wait(log4.handler(1));
  Timer& alias = s;
  s = std::move(alias);
  BOOST_TEST((s.expiry() == s_exp));
  r = run_ctx(ctx, run_limit);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(log4.count(1) == 1u);
  BOOST_TEST(log4.ec(1) == error_code{});
}

// Every timer keeps its own executor through moves, whichever context and executor type
// the timers on either side have: the moved-from one keeps it (as if newly constructed),
// and it outlives the timer it was moved from.
BOOST_TEST_DECORATOR(*boost::unit_test::timeout(10))
BOOST_AUTO_TEST_CASE_TEMPLATE(executors_kept_through_moves, Timer, timer_types) {
  asio::io_context ctx1, ctx2;
  const asio::any_io_executor plain1 = ctx1.get_executor();
  const asio::any_io_executor plain2 = ctx2.get_executor();
  const asio::any_io_executor strand1 = asio::make_strand(ctx1);
  const asio::any_io_executor strand2 = asio::make_strand(ctx2);

  // Move construction: both keep the executor, and the new timer keeps it after the old
  // one is gone.
  for (const auto& ex : {plain1, strand1, plain2, strand2}) {
    std::optional<Timer> from(std::in_place, ex);
    Timer to(std::move(*from));
    BOOST_TEST((from->get_executor() == ex));
    BOOST_TEST((to.get_executor() == ex));
    from.reset();
    BOOST_TEST((to.get_executor() == ex));
  }

  // Move assignment between every pair: the target takes the source's executor (and
  // context), the source keeps its own, and the target keeps it after the source is gone.
  for (const auto& to_ex : {plain1, strand1, plain2, strand2}) {
    for (const auto& from_ex : {plain1, strand1, plain2, strand2}) {
      Timer to(to_ex);
      std::optional<Timer> from(std::in_place, from_ex);
      to = std::move(*from);
      BOOST_TEST((to.get_executor() == from_ex));
      BOOST_TEST((from->get_executor() == from_ex));
      from.reset();
      BOOST_TEST((to.get_executor() == from_ex));
    }
  }

  // A strand timer moved into a vector that grows still runs its handlers in its strand
  // once the timers it was moved from are gone.
  std::vector<Timer> timers;
  int in_strand = 0;
  int done = 0;
  for (int i = 0; i < 8; ++i) {
    timers.emplace_back(strand1, 2ms);
    timers.back().async_wait([&](error_code ec) {
      ++done;
      const auto* strand = timers.front().get_executor().template target<
          asio::strand<asio::io_context::executor_type>>();
      if (!ec && strand != nullptr && strand->running_in_this_thread()) ++in_strand;
    });
  }
  auto r = run_ctx(ctx1, run_limit);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(done == 8);
  BOOST_TEST(in_strand == 8);
}

// An executor of the older model (io_context::strand: context(), no query()) as the
// timer's executor, on a context run by two threads: the handlers, completed or aborted,
// run in the strand.
BOOST_TEST_DECORATOR(*boost::unit_test::timeout(10))
BOOST_AUTO_TEST_CASE_TEMPLATE(an_older_model_strand_as_the_executor, Timer, timer_types) {
  using S = typename Timer::template rebind_executor<asio::io_context::strand>::other;
  asio::io_context ctx;
  asio::io_context::strand strand(ctx);
  std::vector<std::unique_ptr<S>> timers;
  std::atomic<int> in_strand{0}, fired{0}, aborted{0};
  for (int i = 0; i < 8; ++i) {
    timers.push_back(std::make_unique<S>(strand, std::chrono::milliseconds(1 + i % 3)));
    BOOST_TEST((timers.back()->get_executor() == strand));
    timers.back()->async_wait([&](error_code ec) {
      if (strand.running_in_this_thread()) ++in_strand;
      ++(ec ? aborted : fired);
    });
  }
  BOOST_TEST(timers[0]->cancel() == 1u);
  std::thread other([&] { ctx.run(); });
  auto r = run_ctx(ctx, run_limit);
  other.join();
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(fired == 7);
  BOOST_TEST(aborted == 1);
  BOOST_TEST(in_strand == 8);
}

BOOST_TEST_DECORATOR(*boost::unit_test::timeout(10))
BOOST_AUTO_TEST_CASE_TEMPLATE(converting_move_between_executor_types, Timer, timer_types) {
  using clock = typename Timer::clock_type;
  using time_point = typename Timer::time_point;
  using io_ex = asio::io_context::executor_type;
  using R = typename Timer::template rebind_executor<io_ex>::other;
  asio::io_context ctx;
  wait_log log;

  // Converting move construction: io_context::executor_type -> any_io_executor.
  R r(ctx.get_executor(), 5ms);
  const auto exp = r.expiry();
  bool early = false;
  r.async_wait([&](error_code ec) {
    if (clock::now() < exp) early = true;
    log.handler(1)(ec);
  });
  Timer t(std::move(r));
  BOOST_TEST((t.expiry() == exp));
  BOOST_TEST((t.get_executor() == asio::any_io_executor(ctx.get_executor())));
  BOOST_TEST((r.expiry() == time_point{}));
  BOOST_TEST(r.cancel() == 0u);

  // Converting move assignment: aborts the target's waits, carries the source's.
  R r2(ctx, 5ms);
  r2.async_wait(log.handler(2));
  Timer t2(ctx, 10s);
  t2.async_wait(log.handler(3));
  t2 = std::move(r2);
  BOOST_TEST(log.total() == 0u);
  BOOST_TEST(r2.cancel() == 0u);

  auto rr = run_ctx(ctx, run_limit);
  BOOST_TEST(!rr.timed_out);
  BOOST_TEST(ms(rr.elapsed) < 1000);
  BOOST_TEST(log.ec(1) == error_code{});
  BOOST_TEST(log.ec(2) == error_code{});
  BOOST_TEST(log.ec(3) == aborted);
  BOOST_TEST(!early);

  // The carried wait can be cancelled through the converted timer.
  wait_log log2;
  R r3(ctx, 10s);
  r3.async_wait(log2.handler(1));
  Timer t3(std::move(r3));
  BOOST_TEST(t3.cancel() == 1u);
  rr = run_ctx(ctx, run_limit);
  BOOST_TEST(!rr.timed_out);
  BOOST_TEST(log2.ec(1) == aborted);

  // A wait started on a strand-executor timer still completes in the strand after a
  // converting move to the any_io_executor timer.
  auto strand = asio::make_strand(ctx);
  using S = typename Timer::template rebind_executor<decltype(strand)>::other;
  S s(strand, 2ms);
  bool in_strand = false;
  error_code s_ec = asio::error::would_block;
  s.async_wait([&](error_code ec) {
    s_ec = ec;
    in_strand = strand.running_in_this_thread();
  });
  Timer t4(std::move(s));
  BOOST_TEST((t4.get_executor() == asio::any_io_executor(strand)));
  rr = run_ctx(ctx, run_limit);
  BOOST_TEST(!rr.timed_out);
  BOOST_TEST(s_ec == error_code{});
  BOOST_TEST(in_strand);
}

// ---------------------------------------------------------------------------------------
// 8. run() returns once nothing is pending
// ---------------------------------------------------------------------------------------

BOOST_TEST_DECORATOR(*boost::unit_test::timeout(10))
BOOST_AUTO_TEST_CASE_TEMPLATE(run_returns_when_nothing_pending, Timer, timer_types) {
  {  // the only wait was cancelled before run()
    asio::io_context ctx;
    Timer t(ctx, 10s);
    wait_log log;
    t.async_wait(log.handler(1));
    BOOST_TEST(t.cancel() == 1u);
    auto r = run_ctx(ctx, run_limit);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(ms(r.elapsed) < 1000);
    BOOST_TEST(log.ec(1) == aborted);
  }
  {  // the only wait is cancelled while run() is executing
    asio::io_context ctx;
    Timer t(ctx, 10s), killer(ctx, 5ms);
    wait_log log;
    t.async_wait(log.handler(1));
    std::size_t n = 99;
    killer.async_wait([&](error_code) { n = t.cancel(); });
    auto r = run_ctx(ctx, run_limit);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(ms(r.elapsed) < 1000);
    BOOST_TEST(n == 1u);
    BOOST_TEST(log.ec(1) == aborted);
  }
  {  // cancel_one of the only wait
    asio::io_context ctx;
    Timer t(ctx, 10s);
    wait_log log;
    t.async_wait(log.handler(1));
    BOOST_TEST(t.cancel_one() == 1u);
    auto r = run_ctx(ctx, run_limit);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(ms(r.elapsed) < 1000);
    BOOST_TEST(log.ec(1) == aborted);
  }
  {  // a timer with no waits at all
    asio::io_context ctx;
    Timer t(ctx);
    auto r = run_ctx(ctx, run_limit);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(r.handlers == 0u);
    BOOST_TEST(ms(r.elapsed) < 1000);
  }
  {  // expiry set (constructor and expires_*) but never waited on
    asio::io_context ctx;
    Timer t(ctx, 10s);
    Timer u(ctx);
    u.expires_after(10s);
    Timer v(ctx);
    v.expires_at(Timer::clock_type::now() + 10s);
    auto r = run_ctx(ctx, run_limit);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(r.handlers == 0u);
    BOOST_TEST(ms(r.elapsed) < 1000);
  }
  {  // after a wait completed normally, the (still alive) timer holds nothing
    asio::io_context ctx;
    Timer t(ctx, 2ms);
    wait_log log;
    t.async_wait(log.handler(1));
    auto r = run_ctx(ctx, run_limit);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(ms(r.elapsed) < 1000);
    BOOST_TEST(log.ec(1) == error_code{});
    r = run_ctx(ctx, run_limit);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(r.handlers == 0u);
    BOOST_TEST(ms(r.elapsed) < 1000);
  }
  {  // a pending wait does keep run() alive until it completes
    asio::io_context ctx;
    const auto t0 = Timer::clock_type::now();
    Timer t(ctx, 30ms);
    wait_log log;
    t.async_wait(log.handler(1));
    auto r = run_ctx(ctx, run_limit);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(ms(Timer::clock_type::now() - t0) >= 30);
    BOOST_TEST(log.ec(1) == error_code{});
  }
}

// ---------------------------------------------------------------------------------------
// 9. Per-operation cancellation
// ---------------------------------------------------------------------------------------

BOOST_TEST_DECORATOR(*boost::unit_test::timeout(10))
BOOST_AUTO_TEST_CASE_TEMPLATE(per_operation_cancellation, Timer, timer_types) {
  const std::vector<std::pair<const char*, asio::cancellation_type>> types = {
      {"terminal", asio::cancellation_type::terminal},
      {"partial", asio::cancellation_type::partial},
      {"total", asio::cancellation_type::total},
  };
  for (const auto& [name, type] : types) {
    BOOST_TEST_CONTEXT("cancellation_type::" << name) {
      asio::io_context ctx;
      Timer t(ctx, 10s);
      asio::cancellation_signal sig;
      wait_log log;
      t.async_wait(log.handler(0));
      t.async_wait(asio::bind_cancellation_slot(sig.slot(), log.handler(1)));
      t.async_wait(log.handler(2));
      BOOST_TEST(sig.slot().has_handler());

      sig.emit(asio::cancellation_type::none);  // not a cancellation request
      poll_ctx(ctx);
      BOOST_TEST(log.total() == 0u);

      sig.emit(type);
      BOOST_TEST(log.count(1) == 0u);  // not invoked from inside emit
      BOOST_TEST(run_until(ctx, [&] { return log.count(1) == 1; }));
      poll_ctx(ctx);
      BOOST_TEST(log.ec(1) == aborted);
      BOOST_TEST(log.count(0) == 0u);
      BOOST_TEST(log.count(2) == 0u);

      // Emitting again after completion is harmless and touches no other wait.
      sig.emit(type);
      sig.emit(asio::cancellation_type::terminal);
      poll_ctx(ctx);
      BOOST_TEST(log.total() == 1u);

      // Only the two untouched waits remain on the timer.
      BOOST_TEST(t.cancel() == 2u);
      auto r = run_ctx(ctx, run_limit);
      BOOST_TEST(!r.timed_out);
      BOOST_TEST(ms(r.elapsed) < 1000);
      BOOST_TEST(log.order == (std::vector<int>{1, 0, 2}), boost::test_tools::per_element());
      BOOST_TEST(log.ec(0) == aborted);
      BOOST_TEST(log.ec(2) == aborted);
    }
  }

  {  // the only wait cancelled per-operation: run() returns
    asio::io_context ctx;
    Timer t(ctx, 10s), killer(ctx, 3ms);
    asio::cancellation_signal sig;
    wait_log log;
    t.async_wait(asio::bind_cancellation_slot(sig.slot(), log.handler(1)));
    killer.async_wait([&](error_code) { sig.emit(asio::cancellation_type::terminal); });
    auto r = run_ctx(ctx, run_limit);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(ms(r.elapsed) < 1000);
    BOOST_TEST(log.ec(1) == aborted);
    BOOST_TEST(t.cancel() == 0u);
  }

  {  // emitting after a successful completion is harmless; the slot can be reused
    asio::io_context ctx;
    Timer t(ctx, 2ms);
    asio::cancellation_signal sig;
    wait_log log;
    t.async_wait(asio::bind_cancellation_slot(sig.slot(), log.handler(1)));
    auto r = run_ctx(ctx, run_limit);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(log.ec(1) == error_code{});

    t.expires_after(10s);
    t.async_wait(log.handler(2));  // an unrelated wait on the same timer
    sig.emit(asio::cancellation_type::terminal);
    sig.emit(asio::cancellation_type::total);
    poll_ctx(ctx);
    BOOST_TEST(log.count(1) == 1u);
    BOOST_TEST(log.count(2) == 0u);

    // Reuse the signal for a new wait: it cancels only that one.
    t.async_wait(asio::bind_cancellation_slot(sig.slot(), log.handler(3)));
    sig.emit(asio::cancellation_type::partial);
    BOOST_TEST(run_until(ctx, [&] { return log.count(3) == 1; }));
    poll_ctx(ctx);
    BOOST_TEST(log.ec(3) == aborted);
    BOOST_TEST(log.count(2) == 0u);
    BOOST_TEST(t.cancel() == 1u);
    r = run_ctx(ctx, run_limit);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(log.ec(2) == aborted);
    for (const auto& [id, v] : log.results) BOOST_TEST(v.size() == 1u, "wait " << id);
  }

  {  // emitting after the wait was aborted by cancel() is harmless
    asio::io_context ctx;
    Timer t(ctx, 10s);
    asio::cancellation_signal sig;
    wait_log log;
    t.async_wait(asio::bind_cancellation_slot(sig.slot(), log.handler(1)));
    BOOST_TEST(t.cancel() == 1u);
    sig.emit(asio::cancellation_type::terminal);  // completion queued, not yet run
    auto r = run_ctx(ctx, run_limit);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(log.count(1) == 1u);
    BOOST_TEST(log.ec(1) == aborted);
    sig.emit(asio::cancellation_type::terminal);  // after completion
    poll_ctx(ctx);
    BOOST_TEST(log.count(1) == 1u);
  }
}

// ---------------------------------------------------------------------------------------
// 10. Completion tokens
// ---------------------------------------------------------------------------------------

BOOST_TEST_DECORATOR(*boost::unit_test::timeout(10))
BOOST_AUTO_TEST_CASE_TEMPLATE(token_use_future, Timer, timer_types) {
  using clock = typename Timer::clock_type;
  asio::io_context ctx;
  Timer t(ctx, 5ms), u(ctx, 10s);
  std::future<void> ok = t.async_wait(asio::use_future);
  std::future<void> ab = u.async_wait(asio::use_future);
  BOOST_TEST((ok.wait_for(0s) == std::future_status::timeout));
  BOOST_TEST(u.cancel() == 1u);
  auto exp = t.expiry();
  std::thread runner([&] { ctx.run(); });
  bool ok_threw = false;
  try {
    ok.get();
  } catch (...) {
    ok_threw = true;
  }
  const bool ok_late = clock::now() >= exp;
  std::optional<error_code> ab_code;
  try {
    ab.get();
  } catch (const boost::system::system_error& e) {
    ab_code = e.code();
  }
  runner.join();
  BOOST_TEST(!ok_threw);
  BOOST_TEST(ok_late);
  BOOST_TEST(ab_code.has_value());
  if (ab_code) BOOST_TEST(*ab_code == aborted);
}

BOOST_TEST_DECORATOR(*boost::unit_test::timeout(10))
BOOST_AUTO_TEST_CASE_TEMPLATE(token_deferred, Timer, timer_types) {
  using clock = typename Timer::clock_type;
  asio::io_context ctx;
  Timer t(ctx, 3ms);
  auto op = t.async_wait(asio::deferred);
  // Nothing is initiated until the deferred operation is invoked.
  BOOST_TEST(t.cancel() == 0u);
  auto r = run_ctx(ctx, run_limit);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(r.handlers == 0u);

  t.expires_after(3ms);
  wait_log log;
  bool early = false;
  std::move(op)([&](error_code ec) {
    if (clock::now() < t.expiry()) early = true;
    log.handler(1)(ec);
  });
  BOOST_TEST(log.total() == 0u);
  r = run_ctx(ctx, run_limit);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(log.ec(1) == error_code{});
  BOOST_TEST(!early);

  // Abort path.
  Timer u(ctx, 10s);
  auto op2 = u.async_wait(asio::deferred);
  std::move(op2)(log.handler(2));
  BOOST_TEST(u.cancel() == 1u);
  r = run_ctx(ctx, run_limit);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(ms(r.elapsed) < 1000);
  BOOST_TEST(log.ec(2) == aborted);
}

BOOST_TEST_DECORATOR(*boost::unit_test::timeout(10))
BOOST_AUTO_TEST_CASE_TEMPLATE(token_detached_consign_append_redirect, Timer, timer_types) {
  asio::io_context ctx;
  {  // detached
    const auto t0 = Timer::clock_type::now();
    Timer t(ctx, 10ms);
    t.async_wait(asio::detached);
    auto r = run_ctx(ctx, run_limit);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(ms(Timer::clock_type::now() - t0) >= 10);  // run() waited for it
    BOOST_TEST(ms(r.elapsed) < 1000);
  }
  {  // consign keeps its values alive until the completion, then releases them
    Timer t(ctx, 2ms), u(ctx, 10s);
    auto keep = std::make_shared<int>(1);
    wait_log log;
    t.async_wait(asio::consign(log.handler(1), keep));
    u.async_wait(asio::consign(log.handler(2), keep, keep));
    BOOST_TEST(keep.use_count() == 4);
    BOOST_TEST(u.cancel() == 1u);
    auto r = run_ctx(ctx, run_limit);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(log.ec(1) == error_code{});
    BOOST_TEST(log.ec(2) == aborted);
    BOOST_TEST(keep.use_count() == 1);
  }
  {  // append
    Timer t(ctx, 1ms);
    int got = 0;
    error_code got_ec = asio::error::would_block;
    t.async_wait(asio::append(
        [&](error_code ec, int v) {
          got_ec = ec;
          got = v;
        },
        42));
    auto r = run_ctx(ctx, run_limit);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(got == 42);
    BOOST_TEST(got_ec == error_code{});
  }
  {  // redirect_error with a plain callback
    Timer t(ctx, 10s);
    error_code ec = asio::error::would_block;
    int calls = 0;
    t.async_wait(asio::redirect_error([&] { ++calls; }, ec));
    t.cancel();
    auto r = run_ctx(ctx, run_limit);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(calls == 1);
    BOOST_TEST(ec == aborted);
  }
}

#if defined(BOOST_ASIO_HAS_CO_AWAIT)
BOOST_TEST_DECORATOR(*boost::unit_test::timeout(10))
BOOST_AUTO_TEST_CASE_TEMPLATE(token_use_awaitable, Timer, timer_types) {
  asio::io_context ctx;

  // Success: a coroutine constructs its own timer on its executor and awaits it.
  {
    bool ok = false;
    std::chrono::nanoseconds elapsed{};
    bool done = false;
    std::exception_ptr ex;
    asio::co_spawn(ctx, co_wait_own_timer<Timer>(5ms, &ok, &elapsed),
                   [&](std::exception_ptr e) {
                     done = true;
                     ex = e;
                   });
    auto r = run_ctx(ctx, run_limit);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(done);
    BOOST_TEST(!ex);
    BOOST_TEST(ok);
    BOOST_TEST(ms(elapsed) >= 5);
  }

  // Abort paths: cancel the timer as soon as the coroutine's wait is pending.
  auto abort_case = [&](auto coro_factory, const char* name) {
    BOOST_TEST_CONTEXT(name) {
      Timer t(ctx, 10s);
      std::optional<error_code> result;
      bool done = false;
      std::exception_ptr ex;
      asio::co_spawn(ctx, coro_factory(&t, &result), [&](std::exception_ptr e) {
        done = true;
        ex = e;
      });
      BOOST_TEST(run_until(ctx, [&] { return done || t.cancel() > 0; }));
      BOOST_TEST(run_until(ctx, [&] { return done; }));
      BOOST_TEST(done);
      BOOST_TEST(!ex);
      BOOST_TEST(result.has_value());
      if (result) BOOST_TEST(*result == aborted);
    }
  };
  abort_case([](Timer* t, std::optional<error_code>* r) { return co_wait_throwing(t, r); },
             "use_awaitable throws system_error");
  abort_case([](Timer* t, std::optional<error_code>* r) { return co_wait_as_tuple(t, r); },
             "as_tuple(use_awaitable)");
  abort_case([](Timer* t, std::optional<error_code>* r) { return co_wait_redirect(t, r); },
             "redirect_error(use_awaitable)");

  // Success paths of the same coroutines.
  auto success_case = [&](auto coro_factory, const char* name) {
    BOOST_TEST_CONTEXT(name) {
      Timer t(ctx, 3ms);
      std::optional<error_code> result;
      asio::co_spawn(ctx, coro_factory(&t, &result), asio::detached);
      auto r = run_ctx(ctx, run_limit);
      BOOST_TEST(!r.timed_out);
      BOOST_TEST(result.has_value());
      if (result) BOOST_TEST(*result == error_code{});
      BOOST_TEST((Timer::clock_type::now() >= t.expiry()));
    }
  };
  success_case([](Timer* t, std::optional<error_code>* r) { return co_wait_throwing(t, r); },
               "use_awaitable");
  success_case([](Timer* t, std::optional<error_code>* r) { return co_wait_as_tuple(t, r); },
               "as_tuple(use_awaitable)");
  success_case([](Timer* t, std::optional<error_code>* r) { return co_wait_redirect(t, r); },
               "redirect_error(use_awaitable)");
}
#endif

// ---------------------------------------------------------------------------------------
// 11. Strands
// ---------------------------------------------------------------------------------------

// A handler bound to the context's own executor (bind_executor(ctx.get_executor(), h), or
// with it as its own executor, as a coroutine's handler has): it runs on the context, never
// inside the initiating call, exactly once, with its result; two waits on one timer complete
// in the order they were started. The handlers hold one pointer and an id, so that twheel
// keeps the first wait of a timer in the timer (the path under test; the static_asserts
// say so) and allocates the second, putting a binder back together.
struct context_log {
  asio::io_context* ctx;
  wait_log log;
  void add(int id, error_code ec) {
    BOOST_TEST(ctx->get_executor().running_in_this_thread());
    log.handler(id)(ec);
  }
};

struct own_executor_handler {
  context_log* log;
  int id;
  using executor_type = asio::io_context::executor_type;
  executor_type get_executor() const noexcept { return log->ctx->get_executor(); }
  void operator()(error_code ec) const { log->add(id, ec); }
};

#if defined(TWHEEL_CONFORMANCE_TWHEEL)
static_assert(twheel::detail::fits_in_box_if_inline<own_executor_handler>);
#endif

BOOST_TEST_DECORATOR(*boost::unit_test::timeout(10))
BOOST_AUTO_TEST_CASE_TEMPLATE(handlers_bound_to_the_contexts_executor, Timer, timer_types) {
  asio::io_context ctx;
  context_log cl{&ctx, {}};
  auto bound = [&](int id) {
    return asio::bind_executor(ctx.get_executor(),
                               [l = &cl, id](error_code ec) { l->add(id, ec); });
  };
#if defined(TWHEEL_CONFORMANCE_TWHEEL)
  static_assert(twheel::detail::boxable_binder<decltype(bound(0))>::value);
#endif
  Timer a(ctx, 2ms), b(ctx, 1ms), c(ctx, 10s), d(ctx, 10s);
  a.async_wait(bound(1));
  a.async_wait(bound(2));  // behind 1 on the same timer
  b.async_wait(own_executor_handler{&cl, 3});
  b.async_wait(own_executor_handler{&cl, 6});  // behind 3
  c.async_wait(bound(4));
  d.async_wait(own_executor_handler{&cl, 5});
  BOOST_TEST(cl.log.total() == 0u);  // never inside the initiating call
  BOOST_TEST(c.cancel() == 1u);
  BOOST_TEST(d.expires_after(10s) == 1u);
  BOOST_TEST(cl.log.total() == 0u);  // nor inside the aborting one
  auto r = run_ctx(ctx, run_limit);
  BOOST_TEST(!r.timed_out);
  // The aborted ones first, in the order they were aborted, then by deadline, each
  // timer's waits in the order they were started.
  BOOST_TEST(cl.log.order == (std::vector<int>{4, 5, 3, 6, 1, 2}),
             boost::test_tools::per_element());
  BOOST_TEST(cl.log.ec(4) == aborted);
  BOOST_TEST(cl.log.ec(5) == aborted);
  for (int id : {1, 2, 3, 6}) BOOST_TEST(!cl.log.ec(id));
}

BOOST_TEST_DECORATOR(*boost::unit_test::timeout(10))
BOOST_AUTO_TEST_CASE_TEMPLATE(handlers_run_in_strand, Timer, timer_types) {
  asio::io_context ctx;
  auto strand = asio::make_strand(ctx);
  {  // bind_executor(strand, h); an unbound handler as the control
    Timer t(ctx, 2ms);
    bool bound_in = false, plain_in = true;
    int calls = 0;
    t.async_wait(asio::bind_executor(strand, [&](error_code ec) {
      ++calls;
      BOOST_TEST(!ec);
      bound_in = strand.running_in_this_thread();
    }));
    t.async_wait([&](error_code) {
      ++calls;
      plain_in = strand.running_in_this_thread();
    });
    auto r = run_ctx(ctx, run_limit);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(calls == 2);
    BOOST_TEST(bound_in);
    BOOST_TEST(!plain_in);
  }
  {  // timer constructed on the strand: handlers run in it by default (also when aborted)
    Timer t(strand, 2ms);
    using S = typename Timer::template rebind_executor<decltype(strand)>::other;
    S s(strand, 2ms);
    Timer c(strand, 10s);
    bool t_in = false, s_in = false, c_in = false;
    error_code c_ec;
    t.async_wait([&](error_code) { t_in = strand.running_in_this_thread(); });
    s.async_wait([&](error_code) { s_in = strand.running_in_this_thread(); });
    c.async_wait([&](error_code ec) {
      c_ec = ec;
      c_in = strand.running_in_this_thread();
    });
    c.cancel();
    auto r = run_ctx(ctx, run_limit);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(t_in);
    BOOST_TEST(s_in);
    BOOST_TEST(c_in);
    BOOST_TEST(c_ec == aborted);
  }
  {  // two threads: handlers of timers on one strand never overlap (TSan checks `plain`)
    constexpr int n = 300;
    std::vector<std::unique_ptr<Timer>> timers;
    std::atomic<bool> inside{false};
    std::atomic<int> overlaps{0}, not_in_strand{0}, calls{0};
    long plain = 0;
    std::mt19937 rng(11);
    std::uniform_int_distribution<int> us(0, 5000);
    for (int i = 0; i < n; ++i) {
      timers.push_back(std::make_unique<Timer>(strand, std::chrono::microseconds(us(rng))));
      timers.back()->async_wait([&](error_code) {
        if (inside.exchange(true)) overlaps.fetch_add(1);
        if (!strand.running_in_this_thread()) not_in_strand.fetch_add(1);
        ++plain;
        inside.store(false);
        calls.fetch_add(1);
      });
    }
    ctx.restart();
    std::thread other([&] { ctx.run(); });
    ctx.run();
    other.join();
    BOOST_TEST(calls.load() == n);
    BOOST_TEST(plain == n);
    BOOST_TEST(overlaps.load() == 0);
    BOOST_TEST(not_in_strand.load() == 0);
  }
}

// ---------------------------------------------------------------------------------------
// 12. Blocking wait
// ---------------------------------------------------------------------------------------

BOOST_TEST_DECORATOR(*boost::unit_test::timeout(10))
BOOST_AUTO_TEST_CASE_TEMPLATE(blocking_wait, Timer, timer_types) {
  using clock = typename Timer::clock_type;
  asio::io_context ctx;  // never run: blocking waits don't need it
  {
    const auto t0 = clock::now();
    Timer t(ctx, 20ms);
    t.wait();
    const auto now = clock::now();
    BOOST_TEST((now >= t.expiry()));
    BOOST_TEST(ms(now - t0) >= 20);
    BOOST_TEST(ms(now - t0) < 1000);
  }
  {
    Timer t(ctx);
    error_code ec = asio::error::would_block;
    const auto t0 = clock::now();
    t.expires_after(10ms);
    t.wait(ec);
    const auto now = clock::now();
    BOOST_TEST(!ec);
    BOOST_TEST((now >= t.expiry()));
    BOOST_TEST(ms(now - t0) >= 10);
  }
  {  // already expired: return at once with success
    Timer t(ctx, clock::now() - 1s);
    error_code ec = asio::error::would_block;
    const auto t0 = clock::now();
    t.wait(ec);
    BOOST_TEST(!ec);
    BOOST_TEST(ms(clock::now() - t0) < 100);
    t.wait();  // does not throw
    Timer never_set(ctx);
    never_set.wait(ec);
    BOOST_TEST(!ec);
    BOOST_TEST(ms(clock::now() - t0) < 100);
  }
  {  // a blocking wait does not disturb a pending async wait on the same timer
    Timer t(ctx, 5ms);
    wait_log log;
    t.async_wait(log.handler(1));
    t.wait();
    BOOST_TEST(log.total() == 0u);
    auto r = run_ctx(ctx, run_limit);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(log.ec(1) == error_code{});
  }
}

// ---------------------------------------------------------------------------------------
// 13. Re-arming and deleting the timer from inside its own handler
// ---------------------------------------------------------------------------------------

BOOST_TEST_DECORATOR(*boost::unit_test::timeout(10))
BOOST_AUTO_TEST_CASE_TEMPLATE(rearm_and_delete_from_own_handler, Timer, timer_types) {
  using clock = typename Timer::clock_type;
  asio::io_context ctx;
  {  // re-arm 3 rounds
    Timer t(ctx, 2ms);
    int rounds = 0;
    std::vector<error_code> ecs;
    std::vector<std::size_t> rearm_counts;
    bool early = false;
    std::function<void(error_code)> h = [&](error_code ec) {
      ecs.push_back(ec);
      if (clock::now() < t.expiry()) early = true;
      if (++rounds < 3) {
        rearm_counts.push_back(t.expires_after(2ms));  // own wait is no longer pending
        t.async_wait(h);
      }
    };
    t.async_wait(h);
    const auto t0 = clock::now();
    auto r = run_ctx(ctx, run_limit);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(rounds == 3);
    BOOST_TEST(ms(clock::now() - t0) >= 4);  // two re-arms of 2 ms each
    for (auto ec : ecs) BOOST_TEST(ec == error_code{});
    BOOST_TEST(rearm_counts == (std::vector<std::size_t>{0, 0}), boost::test_tools::per_element());
    BOOST_TEST(!early);
  }
  {  // delete the timer from inside its handler
    auto t = std::make_unique<Timer>(ctx, 2ms);
    int calls = 0;
    error_code seen = asio::error::would_block;
    t->async_wait([&](error_code ec) {
      ++calls;
      seen = ec;
      t.reset();
    });
    auto r = run_ctx(ctx, run_limit);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(calls == 1);
    BOOST_TEST(seen == error_code{});
    BOOST_TEST(!t);
  }
  {  // delete from the first of two waits on the same deadline: the second already
     // expired, so it still completes once, with success
    auto t = std::make_unique<Timer>(ctx, 2ms);
    wait_log log;
    t->async_wait([&](error_code ec) {
      log.handler(1)(ec);
      t.reset();
    });
    t->async_wait(log.handler(2));
    auto r = run_ctx(ctx, run_limit);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(log.order == (std::vector<int>{1, 2}), boost::test_tools::per_element());
    BOOST_TEST(log.ec(1) == error_code{});
    BOOST_TEST(log.ec(2) == error_code{});
  }
  {  // a handler deletes another timer with a pending wait: that wait is aborted
    auto victim = std::make_unique<Timer>(ctx, 10s);
    Timer t(ctx, 2ms);
    wait_log log;
    victim->async_wait(log.handler(2));
    t.async_wait([&](error_code ec) {
      log.handler(1)(ec);
      victim.reset();
      BOOST_TEST(log.count(2) == 0u);
    });
    auto r = run_ctx(ctx, run_limit);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(ms(r.elapsed) < 1000);
    BOOST_TEST(log.order == (std::vector<int>{1, 2}), boost::test_tools::per_element());
    BOOST_TEST(log.ec(2) == aborted);
  }
  {  // a handler owns the timer (shared_ptr) and re-arms it; the last round releases it
    std::weak_ptr<Timer> weak;
    int rounds = 0;
    {
      auto sp = std::make_shared<Timer>(ctx, 1ms);
      weak = sp;
      struct step {
        std::shared_ptr<Timer> t;
        int* rounds;
        void operator()(error_code ec) {
          if (!ec && ++*rounds < 3) {
            t->expires_after(1ms);
            auto self = t;
            self->async_wait(step{std::move(t), rounds});
          }
        }
      };
      sp->async_wait(step{sp, &rounds});
    }
    BOOST_TEST(!weak.expired());
    auto r = run_ctx(ctx, run_limit);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(rounds == 3);
    BOOST_TEST(weak.expired());
  }
}

// ---------------------------------------------------------------------------------------
// 14. time_point::max() and duration::max()
// ---------------------------------------------------------------------------------------

BOOST_TEST_DECORATOR(*boost::unit_test::timeout(10))
BOOST_AUTO_TEST_CASE_TEMPLATE(far_deadlines, Timer, timer_types) {
  using time_point = typename Timer::time_point;
  using duration = typename Timer::duration;
  asio::io_context ctx;

  Timer a(ctx);
  BOOST_TEST(a.expires_at((time_point::max)()) == 0u);
  BOOST_TEST((a.expiry() == (time_point::max)()));
  Timer b(ctx);
  BOOST_TEST(b.expires_after((duration::max)()) == 0u);
  BOOST_TEST((b.expiry() == (time_point::max)()));  // saturated, no overflow
  Timer c(ctx, (duration::max)());
  BOOST_TEST((c.expiry() == (time_point::max)()));
  Timer d(ctx.get_executor(), (time_point::max)());
  BOOST_TEST((d.expiry() == (time_point::max)()));
  Timer e(ctx, std::chrono::hours(24 * 365 * 100));  // ~100 years: large, no saturation
  BOOST_TEST((e.expiry() < (time_point::max)()));

  wait_log log;
  a.async_wait(log.handler(1));
  b.async_wait(log.handler(2));
  c.async_wait(log.handler(3));
  e.async_wait(log.handler(4));
  auto dd = std::make_unique<Timer>(std::move(d));
  dd->async_wait(log.handler(5));

  // None of them fires early (e.g. through an overflow).
  ctx.restart();
  ctx.run_for(30ms);
  BOOST_TEST(log.total() == 0u);

  BOOST_TEST(a.cancel() == 1u);
  BOOST_TEST(b.cancel_one() == 1u);
  BOOST_TEST(c.expires_at((time_point::max)()) == 1u);
  BOOST_TEST(e.expires_after((duration::max)()) == 1u);
  dd.reset();
  auto r = run_ctx(ctx, run_limit);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(ms(r.elapsed) < 1000);
  for (int i = 1; i <= 5; ++i) {
    BOOST_TEST(log.count(i) == 1u, "wait " << i);
    BOOST_TEST(log.ec(i) == aborted, "wait " << i);
  }

  // A wait re-targeted from max to a near deadline fires.
  a.expires_after(2ms);
  a.async_wait(log.handler(6));
  r = run_ctx(ctx, run_limit);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(log.ec(6) == error_code{});
}

// ---------------------------------------------------------------------------------------
// 14b. The ends of the clock's range, and durations whose sum with now overflows
// ---------------------------------------------------------------------------------------

namespace {
// now + d, saturated at the ends of the time_point's range: what Asio's own timers compute
// for expires_after() (detail::chrono_time_traits::add).
template <class TimePoint, class Duration>
TimePoint saturating_add(TimePoint t, Duration d) {
  if (d > Duration::zero() && t > (TimePoint::max)() - d) return (TimePoint::max)();
  if (d < Duration::zero() && t < (TimePoint::min)() - d) return (TimePoint::min)();
  return t + d;
}
}  // namespace

BOOST_TEST_DECORATOR(*boost::unit_test::timeout(20))
BOOST_AUTO_TEST_CASE_TEMPLATE(range_ends_and_overflowing_durations, Timer, timer_types) {
  using clock = typename Timer::clock_type;
  using time_point = typename Timer::time_point;
  using duration = typename Timer::duration;
  // The most whole hours a duration holds (hours::max() itself does not convert).
  const duration hours_max = std::chrono::floor<std::chrono::hours>((duration::max)());

  {  // run() with only a wait at time_point::max() pending does not return: it is work
    asio::io_context ctx;
    Timer t(ctx, (time_point::max)());
    wait_log log;
    t.async_wait(log.handler(1));
    ctx.run_for(50ms);
    BOOST_TEST(log.total() == 0u);
    BOOST_TEST(!ctx.stopped(), "run() ran out of work with a wait pending");
    // Cancelled from another thread while run() blocks: run() then returns.
    const auto t0 = wall::now();
    std::thread canceller([&] {
      std::this_thread::sleep_for(30ms);
      asio::post(ctx, [&] { BOOST_TEST(t.cancel() == 1u); });
    });
    auto r = run_ctx(ctx, run_limit);
    canceller.join();
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(ms(wall::now() - t0) >= 30);
    BOOST_TEST(log.count(1) == 1u);
    BOOST_TEST(log.ec(1) == aborted);
  }

  {  // far deadlines (saturated or not): none fires early, a near wait still fires on time
    struct far_case {
      const char* name;
      std::function<void(Timer&)> set;
      duration after;  // expected expiry: saturating_add(now, after), unless `at` is set
      std::optional<time_point> at;
    };
    const std::vector<far_case> cases = {
        {"expires_at(max)", [](Timer& t) { t.expires_at((time_point::max)()); }, {},
         (time_point::max)()},
        {"expires_at(max - 1ns)",
         [](Timer& t) { t.expires_at((time_point::max)() - std::chrono::nanoseconds(1)); }, {},
         (time_point::max)() - std::chrono::nanoseconds(1)},
        {"expires_at(max - 1h)",
         [](Timer& t) { t.expires_at((time_point::max)() - std::chrono::hours(1)); }, {},
         (time_point::max)() - std::chrono::hours(1)},
        {"expires_after(duration::max())",
         [](Timer& t) { t.expires_after((duration::max)()); }, (duration::max)(), {}},
        {"expires_after(duration::max() - 1ns)",
         [](Timer& t) { t.expires_after((duration::max)() - std::chrono::nanoseconds(1)); },
         (duration::max)() - std::chrono::nanoseconds(1), {}},
        {"expires_after(floor<hours>(duration::max()))",
         [&](Timer& t) { t.expires_after(hours_max); }, hours_max, {}},
        {"expires_after(duration::max() / 2)",
         [](Timer& t) { t.expires_after((duration::max)() / 2); }, (duration::max)() / 2, {}},
        {"expires_after(max - an earlier now)",
         [](Timer& t) {
           t.expires_at(clock::now());
           t.expires_after((time_point::max)() - t.expiry());  // now has moved on: overflows
         },
         (duration::max)(), {}},
    };
    asio::io_context ctx;
    std::vector<std::unique_ptr<Timer>> timers;
    wait_log log;
    for (std::size_t i = 0; i < cases.size(); ++i) {
      BOOST_TEST_CONTEXT(cases[i].name) {
        timers.push_back(std::make_unique<Timer>(ctx));
        Timer& t = *timers.back();
        const auto before = clock::now();
        cases[i].set(t);
        const auto after = clock::now();
        if (cases[i].at) {
          BOOST_TEST((t.expiry() == *cases[i].at));
        } else {
          BOOST_TEST((t.expiry() >= saturating_add(before, cases[i].after)));
          BOOST_TEST((t.expiry() <= saturating_add(after, cases[i].after)));
        }
        BOOST_TEST((t.expiry() > after + std::chrono::hours(24 * 365 * 100)));
        t.async_wait(log.handler(static_cast<int>(i)));
      }
    }
    // The constructors saturate the same way.
    Timer c1(ctx, (duration::max)());
    BOOST_TEST((c1.expiry() == (time_point::max)()));
    const auto before = clock::now();
    Timer c2(ctx.get_executor(), hours_max);
    BOOST_TEST((c2.expiry() >= saturating_add(before, hours_max)));
    c1.async_wait(log.handler(100));
    c2.async_wait(log.handler(101));

    Timer near(ctx, 5ms);
    const auto near_deadline = near.expiry();
    std::optional<time_point> near_ran;
    near.async_wait([&](error_code ec) {
      BOOST_TEST(ec == error_code{});
      near_ran = clock::now();
    });
    BOOST_TEST(run_until(ctx, [&] { return near_ran.has_value(); }));
    BOOST_TEST((near_ran && *near_ran >= near_deadline));
    ctx.restart();
    ctx.run_for(30ms);
    BOOST_TEST(log.total() == 0u, "a far wait completed");
    BOOST_TEST(!ctx.stopped());

    for (auto& t : timers) BOOST_TEST(t->cancel() == 1u);
    BOOST_TEST(c1.cancel_one() == 1u);
    BOOST_TEST(c2.expires_at((time_point::max)()) == 1u);
    auto r = run_ctx(ctx, run_limit);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(ms(r.elapsed) < 1000);
    for (std::size_t i = 0; i < cases.size(); ++i) {
      BOOST_TEST(log.count(static_cast<int>(i)) == 1u, cases[i].name);
      BOOST_TEST(log.ec(static_cast<int>(i)) == aborted, cases[i].name);
    }
    BOOST_TEST(log.ec(100) == aborted);
    BOOST_TEST(log.ec(101) == aborted);
  }

  {  // the other end: time_point::min() and the most negative durations fire at once
    const std::vector<std::pair<const char*, std::function<void(Timer&)>>> cases = {
        {"expires_at(min)", [](Timer& t) { t.expires_at((time_point::min)()); }},
        {"expires_at(min + 1ns)",
         [](Timer& t) { t.expires_at((time_point::min)() + std::chrono::nanoseconds(1)); }},
        {"expires_after(duration::min())",
         [](Timer& t) { t.expires_after((duration::min)()); }},
        {"expires_after(-floor<hours>(duration::max()))",
         [&](Timer& t) { t.expires_after(-hours_max); }},
    };
    asio::io_context ctx;
    std::vector<std::unique_ptr<Timer>> timers;
    wait_log log;
    for (std::size_t i = 0; i < cases.size(); ++i) {
      timers.push_back(std::make_unique<Timer>(ctx, 1h));
      cases[i].second(*timers.back());
      BOOST_TEST((timers.back()->expiry() < clock::now()), cases[i].first);
      timers.back()->async_wait(log.handler(static_cast<int>(i)));
    }
    Timer c(ctx, (duration::min)());
    BOOST_TEST((c.expiry() < clock::now()));
    c.async_wait(log.handler(100));
    BOOST_TEST(log.total() == 0u);  // not inside async_wait
    auto r = run_ctx(ctx, run_limit);
    BOOST_TEST(!r.timed_out);
    BOOST_TEST(ms(r.elapsed) < 500);
    for (std::size_t i = 0; i < cases.size(); ++i) {
      BOOST_TEST(log.count(static_cast<int>(i)) == 1u, cases[i].first);
      BOOST_TEST(log.ec(static_cast<int>(i)) == error_code{}, cases[i].first);
    }
    BOOST_TEST(log.count(100) == 1u);
    BOOST_TEST(log.ec(100) == error_code{});
  }
}

// ---------------------------------------------------------------------------------------
// 15. Destroying the io_context with pending work destroys handlers without calling them
// ---------------------------------------------------------------------------------------

BOOST_TEST_DECORATOR(*boost::unit_test::timeout(10))
BOOST_AUTO_TEST_CASE_TEMPLATE(context_destruction_destroys_handlers, Timer, timer_types) {
  using clock = typename Timer::clock_type;
  {  // the timer is destroyed first (aborted handlers queued), the context never runs
    int called = 0;
    int dtors = 0;
    auto owned = std::make_shared<int>(0);
    {
      asio::io_context ctx;
      auto probe = std::make_shared<dtor_probe>(&dtors);
      auto t = std::make_unique<Timer>(ctx, 10s);
      t->async_wait([&called, owned, probe](error_code) { ++called; });
      t->async_wait([&called, owned](error_code) { ++called; });
      probe.reset();
      BOOST_TEST(owned.use_count() == 3);
      t.reset();
      BOOST_TEST(called == 0);
      BOOST_TEST(dtors == 0);  // the aborted handlers are queued, not destroyed yet
    }
    BOOST_TEST(called == 0);
    BOOST_TEST(dtors == 1);
    BOOST_TEST(owned.use_count() == 1);
  }
  {  // the handlers own their timers; the context is destroyed with the waits pending
    int called = 0;
    int dtors = 0;
    std::vector<std::weak_ptr<Timer>> weak;
    {
      asio::io_context ctx;
      auto arm = [&](std::shared_ptr<Timer> t) {
        weak.push_back(t);
        auto probe = std::make_shared<dtor_probe>(&dtors);
        t->async_wait([&called, t, probe](error_code) { ++called; });
      };
      arm(std::make_shared<Timer>(ctx, 10s));
      arm(std::make_shared<Timer>(ctx, clock::now() - 1s));  // due, never processed
      arm(std::make_shared<Timer>(ctx, (Timer::time_point::max)()));
      {
        auto shared = std::make_shared<Timer>(ctx, 10s);  // two waits own one timer
        arm(shared);
        arm(shared);
      }
      for (auto& w : weak) BOOST_TEST(!w.expired());
      BOOST_TEST(dtors == 0);
    }
    BOOST_TEST(called == 0);
    BOOST_TEST(dtors == 5);
    for (auto& w : weak) BOOST_TEST(w.expired());
  }
  {  // destroyed after a partial run: completed handlers ran once, the rest destroyed
    int called = 0;
    int dtors = 0;
    {
      asio::io_context ctx;
      auto near = std::make_shared<Timer>(ctx, 1ms);
      auto far = std::make_shared<Timer>(ctx, 10s);
      auto p1 = std::make_shared<dtor_probe>(&dtors);
      auto p2 = std::make_shared<dtor_probe>(&dtors);
      near->async_wait([&called, near, p1](error_code) { ++called; });
      far->async_wait([&called, far, p2](error_code) { ++called; });
      p1.reset();
      p2.reset();
      near.reset();
      far.reset();
      BOOST_TEST(run_until(ctx, [&] { return called == 1; }));
      BOOST_TEST(dtors == 1);
    }
    BOOST_TEST(called == 1);
    BOOST_TEST(dtors == 2);
  }
}

// ---------------------------------------------------------------------------------------
// 16. Stress: two threads, 100,000 timers, half cancelled from the context
// ---------------------------------------------------------------------------------------

BOOST_TEST_DECORATOR(*boost::unit_test::timeout(60))
BOOST_AUTO_TEST_CASE_TEMPLATE(stress_two_threads, Timer, timer_types) {
  using clock = typename Timer::clock_type;
  using time_point = typename Timer::time_point;
#if defined(__SANITIZE_THREAD__)
  constexpr std::size_t n = 25000;  // ThreadSanitizer makes every handler ~10x slower
#else
  constexpr std::size_t n = 100000;
#endif

  asio::io_context ctx(2);
  auto guard = asio::make_work_guard(ctx);
  std::vector<std::unique_ptr<Timer>> timers(n);
  std::vector<time_point> deadlines(n);
  std::unique_ptr<std::atomic<int>[]> calls(new std::atomic<int>[n]);
  for (std::size_t i = 0; i < n; ++i) calls[i].store(0, std::memory_order_relaxed);
  std::vector<int> ec_values(n, -1);    // written by the handler
  std::vector<char> early(n, 0);        // written by the handler
  std::vector<int> cancel_ret(n, -1);   // written by the posted cancel

  std::atomic<int> finished{0};
  auto worker = [&] {
    ctx.run();
    finished.fetch_add(1);
  };
  const auto t0 = wall::now();
  std::thread w1(worker), w2(worker);

  std::mt19937 rng(424242);
  std::uniform_int_distribution<int> us(0, 50000);
  const auto base = clock::now();
  for (std::size_t i = 0; i < n; ++i) {
    timers[i] = std::make_unique<Timer>(ctx);
    deadlines[i] = base + std::chrono::microseconds(us(rng));
    timers[i]->expires_at(deadlines[i]);
    timers[i]->async_wait([&, i](error_code ec) {
      const auto now = clock::now();
      if (!ec && now < deadlines[i]) early[i] = 1;
      ec_values[i] = ec.value();
      calls[i].fetch_add(1);
    });
    if (i % 2 == 1) {
      asio::post(ctx, [&, i] { cancel_ret[i] = static_cast<int>(timers[i]->cancel()); });
    }
  }
  guard.reset();
  const auto limit = wall::now() + 60s;
  while (finished.load() < 2 && wall::now() < limit) std::this_thread::sleep_for(1ms);
  const bool hung = finished.load() < 2;
  if (hung) ctx.stop();
  w1.join();
  w2.join();
  const auto elapsed = wall::now() - t0;
  BOOST_TEST(!hung);

  std::size_t bad_calls = 0, bad_ec = 0, early_count = 0, cancelled = 0, bad_cancel_ret = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (calls[i].load() != 1) ++bad_calls;
    if (early[i]) ++early_count;
    if (i % 2 == 0) {
      if (ec_values[i] != 0) ++bad_ec;
    } else if (cancel_ret[i] == 1) {
      ++cancelled;
      if (ec_values[i] != aborted.value()) ++bad_ec;
    } else if (cancel_ret[i] == 0) {
      if (ec_values[i] != 0) ++bad_ec;  // cancel came after expiry: success
    } else {
      ++bad_cancel_ret;
    }
  }
  BOOST_TEST(bad_calls == 0u);
  BOOST_TEST(bad_ec == 0u);
  BOOST_TEST(early_count == 0u);
  BOOST_TEST(bad_cancel_ret == 0u);
  BOOST_TEST_MESSAGE("stress: " << ms(elapsed) << " ms, " << cancelled << " of " << n / 2
                                << " cancels hit a pending wait");
  timers.clear();
}

// ---------------------------------------------------------------------------------------
// 16b. Each completed wait is one operation of the context
// ---------------------------------------------------------------------------------------

// run_one() runs exactly one handler even when several waits are due together, and
// poll_one() then runs the next; run() counts every handler.
BOOST_TEST_DECORATOR(*boost::unit_test::timeout(20))
BOOST_AUTO_TEST_CASE_TEMPLATE(run_one_runs_one_handler_per_call, Timer, timer_types) {
  asio::io_context ctx;
  const auto deadline = Timer::clock_type::now() + 20ms;
  int calls = 0;
  std::vector<std::unique_ptr<Timer>> timers;
  for (int i = 0; i < 3; ++i) {
    timers.push_back(std::make_unique<Timer>(ctx, deadline));
    timers.back()->async_wait([&](error_code ec) {
      BOOST_TEST(!ec);
      ++calls;
    });
  }
  BOOST_TEST(ctx.run_one() == 1u);
  BOOST_TEST(calls == 1);
  BOOST_TEST(ctx.poll_one() == 1u);
  BOOST_TEST(calls == 2);
  BOOST_TEST(ctx.poll_one() == 1u);
  BOOST_TEST(calls == 3);
  BOOST_TEST(ctx.poll_one() == 0u);
}

BOOST_TEST_DECORATOR(*boost::unit_test::timeout(20))
BOOST_AUTO_TEST_CASE_TEMPLATE(run_returns_the_number_of_handlers, Timer, timer_types) {
  asio::io_context ctx;
  const auto deadline = Timer::clock_type::now() + 20ms;
  int calls = 0;
  std::vector<std::unique_ptr<Timer>> timers;
  for (int i = 0; i < 5; ++i) {
    timers.push_back(std::make_unique<Timer>(ctx, deadline));
    timers.back()->async_wait([&](error_code) { ++calls; });
  }
  BOOST_TEST(ctx.run() == 5u);
  BOOST_TEST(calls == 5);

  // Aborted waits too: each is one operation.
  ctx.restart();
  for (auto& t : timers) {
    t->expires_after(10s);
    t->async_wait([&](error_code ec) {
      BOOST_TEST(ec == aborted);
      ++calls;
    });
  }
  for (auto& t : timers) t->expires_after(10s);  // aborts the five waits, none pending
  BOOST_TEST(ctx.poll_one() == 1u);
  BOOST_TEST(calls == 6);
  ctx.poll();
  BOOST_TEST(calls == 10);
}

// Waits aborted by separate calls complete in the order they were aborted, one handler
// per operation of the context, whatever mix of cancel(), cancel_one(), expires_*() and
// destruction aborted them.
BOOST_TEST_DECORATOR(*boost::unit_test::timeout(20))
BOOST_AUTO_TEST_CASE_TEMPLATE(aborted_handlers_run_in_abort_order, Timer, timer_types) {
  asio::io_context ctx;
  std::vector<int> order;
  std::vector<std::unique_ptr<Timer>> timers;
  for (int i = 0; i < 5; ++i) {
    timers.push_back(std::make_unique<Timer>(ctx, 10s));
    timers.back()->async_wait([&order, i](error_code ec) {
      BOOST_TEST(ec == aborted);
      order.push_back(i);
    });
  }
  BOOST_TEST(timers[2]->cancel() == 1u);
  BOOST_TEST(timers[0]->expires_after(20s) == 1u);
  BOOST_TEST(timers[4]->cancel_one() == 1u);
  timers[3].reset();
  BOOST_TEST(timers[1]->expires_at(Timer::clock_type::now() + 30s) == 1u);
  BOOST_TEST(order.empty());
  BOOST_TEST(ctx.poll_one() == 1u);
  BOOST_TEST((order == std::vector<int>{2}));
  // (No count here: twheel's poll() also counts the wheel's own internal wait, cancelled
  // when the last pending wait went; see the README's differences.)
  ctx.poll();
  BOOST_TEST((order == std::vector<int>{2, 0, 4, 3, 1}));
}

// Waits aborted before run() complete ahead of waits that came due before run(), even
// when the due ones came due before the aborts: Asio queues each abort at once and each
// expiry when its reactor first runs. The sleep makes both timers due when run() starts;
// twheel once gave 4, 3, 5 here (the driver's pass, queued by the reactor, ran between
// the operation carrying the aborts and the aborts after its first).
BOOST_TEST_DECORATOR(*boost::unit_test::timeout(10))
BOOST_AUTO_TEST_CASE_TEMPLATE(aborts_complete_ahead_of_waits_already_due, Timer, timer_types) {
  asio::io_context ctx;
  wait_log log;
  Timer a(ctx, 2ms), b(ctx, 1ms), c(ctx, 10s), d(ctx, 10s), e(ctx, 10s);
  a.async_wait(log.handler(1));
  a.async_wait(log.handler(2));
  b.async_wait(log.handler(3));
  b.async_wait(log.handler(6));
  c.async_wait(log.handler(4));
  d.async_wait(log.handler(5));
  e.async_wait(log.handler(7));
  std::this_thread::sleep_for(5ms);  // a and b are due before anything is aborted
  BOOST_TEST(c.cancel() == 1u);
  BOOST_TEST(d.expires_after(10s) == 1u);
  BOOST_TEST(e.cancel_one() == 1u);
  auto r = run_ctx(ctx, run_limit);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(log.order == (std::vector<int>{4, 5, 7, 3, 6, 1, 2}),
             boost::test_tools::per_element());
  for (int id : {4, 5, 7}) BOOST_TEST(log.ec(id) == aborted);
  for (int id : {1, 2, 3, 6}) BOOST_TEST(!log.ec(id));
}

// Waits whose deadlines all passed before run(): once the first handler runs, the others
// are queued already (Asio's reactor queues every expired timer it finds), so cancelling,
// re-arming or destroying their timers from that handler, or emitting their cancellation
// slots, no longer aborts them, and cancel() counts none. A second wait started on such a
// timer then is not queued yet: cancel() aborts it alone. twheel's pass settles at most
// max_per_pass entries (4,096 by default, cascades included) and aborted the rest (a
// review found it: 905 of 5,000 deadlines at once, 1,088 of 2,000 spread over 4 ms).
BOOST_TEST_DECORATOR(*boost::unit_test::timeout(30))
BOOST_AUTO_TEST_CASE_TEMPLATE(waits_due_together_can_no_longer_be_cancelled, Timer, timer_types) {
  for (const bool spread : {false, true}) {
    BOOST_TEST_CONTEXT((spread ? "2,000 deadlines over 4 ms" : "5,000 deadlines at once")) {
      asio::io_context ctx;
      const int n = spread ? 2000 : 5000;
      const auto start = Timer::clock_type::now() + (spread ? 100ms : 1ms);
      std::vector<std::unique_ptr<Timer>> timers;
      std::vector<asio::cancellation_signal> signals(static_cast<std::size_t>(n));
      int succeeded = 0, aborted_count = 0, second_ok = 0, second_aborted = 0;
      std::size_t cancelled = 0, second_waits = 0, second_cancelled = 0;
      bool first = true;
      // A wait started after that on an expired timer has not been seen as due yet: it is
      // still cancelled.
      Timer expired(ctx);
      std::optional<error_code> expired_ec;
      std::size_t expired_cancelled = 0;
      const auto end_the_others = [&](int self) {
        expired.async_wait([&](error_code ec) { expired_ec = ec; });
        expired_cancelled = expired.cancel();
        for (int j = 0; j < n; ++j) {
          if (j == self || !timers[j]) continue;
          switch (j % 6) {
            case 0: cancelled += timers[j]->cancel(); break;
            case 1: cancelled += timers[j]->cancel_one(); break;
            case 2: cancelled += timers[j]->expires_after(10s); break;
            case 3: timers[j].reset(); break;
            case 4: signals[j].emit(asio::cancellation_type::all); break;
            default:
              ++second_waits;
              timers[j]->async_wait([&](error_code ec) { ++(ec ? second_aborted : second_ok); });
              second_cancelled += timers[j]->cancel();
              break;
          }
        }
      };
      for (int i = 0; i < n; ++i) {
        timers.push_back(std::make_unique<Timer>(ctx, spread ? start + (4ms * i) / n : start));
        auto handler = [&, i](error_code ec) {
          ++(ec ? aborted_count : succeeded);
          if (std::exchange(first, false)) end_the_others(i);
        };
        if (i % 6 == 4) {
          timers.back()->async_wait(asio::bind_cancellation_slot(signals[i].slot(), handler));
        } else {
          timers.back()->async_wait(handler);
        }
      }
      std::this_thread::sleep_until(start + 30ms);
      auto r = run_ctx(ctx, run_limit);
      BOOST_TEST(!r.timed_out);
      BOOST_TEST(succeeded == n);
      BOOST_TEST(aborted_count == 0);
      BOOST_TEST(cancelled == 0u);
      BOOST_TEST(second_cancelled == second_waits);
      BOOST_TEST(second_aborted == static_cast<int>(second_waits));
      BOOST_TEST(second_ok == 0);
      BOOST_TEST(expired_cancelled == 1u);
      BOOST_TEST((expired_ec == aborted));
    }
  }
}

// The handlers of waits that expire together spread over the threads running the context:
// with two threads, two of them run at the same time.
BOOST_TEST_DECORATOR(*boost::unit_test::timeout(60))
BOOST_AUTO_TEST_CASE_TEMPLATE(due_handlers_run_on_every_thread, Timer, timer_types) {
  asio::io_context ctx(2);
  constexpr int n = 200;
  const auto deadline = Timer::clock_type::now() + 50ms;
  std::atomic<int> running{0}, most{0}, calls{0};
  std::vector<std::unique_ptr<Timer>> timers;
  for (int i = 0; i < n; ++i) {
    timers.push_back(std::make_unique<Timer>(ctx, deadline));
    timers.back()->async_wait([&](error_code) {
      const int now = running.fetch_add(1) + 1;
      int seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
      std::this_thread::sleep_for(2ms);
      running.fetch_sub(1);
      calls.fetch_add(1);
    });
  }
  std::thread other([&] { ctx.run(); });
  ctx.run();
  other.join();
  BOOST_TEST(calls.load() == n);
  BOOST_TEST(most.load() == 2);
}

// A timer made first on a strand must not put the wheel's own work in that strand: a
// wait on another strand completes while the first strand is busy. `First` is the first
// timer's type, made on `first_strand`.
template <class First, class Timer>
void check_wait_completes_while_first_strand_is_busy(asio::thread_pool& pool,
                                                     const asio::any_io_executor& first_strand) {
  const asio::any_io_executor second_strand = asio::make_strand(pool);
  First first(first_strand);  // the first timer of the pool
  Timer second(second_strand);

  std::promise<void> fired;
  auto fired_future = fired.get_future();
  std::promise<bool> blocker_saw_it;
  asio::post(first_strand, [&] {
    // Busy until the other strand's wait completed, or 10 s.
    blocker_saw_it.set_value(fired_future.wait_for(10s) == std::future_status::ready);
  });
  error_code result = aborted;  // Boost.Test is not thread-safe: checked below
  second.expires_after(20ms);
  second.async_wait([&](error_code ec) {
    result = ec;
    fired.set_value();
  });
  BOOST_TEST(blocker_saw_it.get_future().get());
  pool.join();
  BOOST_TEST(!result);
}

BOOST_TEST_DECORATOR(*boost::unit_test::timeout(30))
BOOST_AUTO_TEST_CASE_TEMPLATE(waits_complete_while_another_strand_is_busy, Timer, timer_types) {
  asio::thread_pool pool(2);
  check_wait_completes_while_first_strand_is_busy<Timer, Timer>(pool, asio::make_strand(pool));
}

// The same with the first timer's executor wrapping the strand further: an as_default_on
// timer type (its executor is executor_with_default<any_io_executor>), and a strand with
// blocking.never required (a strand of another executor type).
BOOST_TEST_DECORATOR(*boost::unit_test::timeout(30))
BOOST_AUTO_TEST_CASE_TEMPLATE(waits_complete_while_a_wrapped_strand_is_busy, Timer, timer_types) {
  {
    asio::thread_pool pool(2);
    using default_on = asio::deferred_t::as_default_on_t<Timer>;
    check_wait_completes_while_first_strand_is_busy<default_on, Timer>(pool,
                                                                       asio::make_strand(pool));
  }
  {
    asio::thread_pool pool(2);
    check_wait_completes_while_first_strand_is_busy<Timer, Timer>(
        pool, asio::require(asio::make_strand(pool), asio::execution::blocking.never));
  }
}

// Waits bound to a strand run in it, one at a time, whatever the first timer of the
// context was made on: here an as_default_on timer on that very strand.
BOOST_TEST_DECORATOR(*boost::unit_test::timeout(30))
BOOST_AUTO_TEST_CASE_TEMPLATE(strand_bound_waits_stay_in_the_strand_of_the_first_timer, Timer,
                              timer_types) {
  asio::io_context ctx(2);
  const auto strand = asio::make_strand(asio::any_io_executor(ctx.get_executor()));
  asio::deferred_t::as_default_on_t<Timer> first(strand);  // the context's first timer
  constexpr int n = 200;
  twheel_test::strand_log<std::decay_t<decltype(strand)>> log(strand);
  std::vector<std::unique_ptr<Timer>> timers;
  const auto deadline = Timer::clock_type::now() + 20ms;
  for (int i = 0; i < n; ++i) {
    timers.push_back(std::make_unique<Timer>(ctx, deadline));
    timers.back()->async_wait(asio::bind_executor(strand, log.handler()));
  }
  auto r = run_ctx(ctx, 10s, 2);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(log.calls.load() == n);
  BOOST_TEST(log.off_strand.load() == 0);
  BOOST_TEST(log.concurrent.load() == 0);
  BOOST_TEST(log.failed.load() == 0);
}

// ---------------------------------------------------------------------------------------
// 17. Associated allocator
// ---------------------------------------------------------------------------------------

BOOST_TEST_DECORATOR(*boost::unit_test::timeout(10))
BOOST_AUTO_TEST_CASE_TEMPLATE(associated_allocator_is_used, Timer, timer_types) {
  alloc_counters c;
  const counting_allocator<void> alloc(&c);
  {
    asio::io_context ctx;
    {  // success path
      Timer t(ctx, 2ms);
      std::size_t outstanding_in_handler = 99;
      int calls = 0;
      t.async_wait(asio::bind_allocator(alloc, [&](error_code ec) {
        ++calls;
        BOOST_TEST(!ec);
        outstanding_in_handler = c.outstanding();
      }));
      BOOST_TEST(c.allocs.load() >= 1u);
      auto r = run_ctx(ctx, run_limit);
      BOOST_TEST(!r.timed_out);
      BOOST_TEST(calls == 1);
      // The operation's memory is released before the handler is invoked.
      BOOST_TEST(outstanding_in_handler == 0u);
      BOOST_TEST(c.outstanding() == 0u);
    }
    {  // abort path, several waits
      const auto before = c.allocs.load();
      Timer t(ctx, 10s);
      int calls = 0;
      for (int i = 0; i < 3; ++i) {
        t.async_wait(asio::bind_allocator(alloc, [&](error_code ec) {
          ++calls;
          BOOST_TEST(ec == aborted);
        }));
      }
      BOOST_TEST(c.allocs.load() - before >= 3u);
      BOOST_TEST(t.cancel() == 3u);
      auto r = run_ctx(ctx, run_limit);
      BOOST_TEST(!r.timed_out);
      BOOST_TEST(calls == 3);
      BOOST_TEST(c.outstanding() == 0u);
    }
    {  // still pending when the context is destroyed
      Timer* raw = nullptr;
      auto t = std::make_shared<Timer>(ctx, 10s);
      raw = t.get();
      raw->async_wait(asio::bind_allocator(alloc, [t](error_code) {}));
      BOOST_TEST(c.outstanding() >= 1u);
    }
  }
  BOOST_TEST(c.allocs.load() >= 5u);
  BOOST_TEST(c.outstanding() == 0u);
  BOOST_TEST(c.bytes.load() == 0);
}

// A handler bound to a strand runs in it, and the strand's hand-off is allocated with the
// handler's allocator too (Asio prefers it on the handler's executor), also when the
// strand was required never to block. A timer made on the strand runs its handlers there.
BOOST_TEST_DECORATOR(*boost::unit_test::timeout(10))
BOOST_AUTO_TEST_CASE_TEMPLATE(strand_bound_handlers_use_their_allocator, Timer, timer_types) {
  asio::io_context ctx;
  auto strand = asio::make_strand(ctx);
  const auto never = asio::require(strand, asio::execution::blocking.never);
  alloc_counters plain, bound, own;
  const counting_allocator<void> plain_alloc(&plain), bound_alloc(&bound), own_alloc(&own);
  Timer t(ctx, 2ms), u(ctx, 2ms), v(strand, 2ms);
  int calls = 0;
  bool t_in = false, u_in = false, v_in = false;
  std::size_t outstanding_in_handler = 99;
  t.async_wait(asio::bind_executor(strand, asio::bind_allocator(plain_alloc, [&](error_code ec) {
    ++calls;
    BOOST_TEST(!ec);
    t_in = strand.running_in_this_thread();
    outstanding_in_handler = plain.outstanding();
  })));
  u.async_wait(asio::bind_executor(never, asio::bind_allocator(bound_alloc, [&](error_code ec) {
    ++calls;
    BOOST_TEST(!ec);
    u_in = strand.running_in_this_thread();
  })));
  v.async_wait(asio::bind_allocator(own_alloc, [&](error_code ec) {
    ++calls;
    BOOST_TEST(!ec);
    v_in = strand.running_in_this_thread();
  }));
  auto r = run_ctx(ctx, run_limit);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(calls == 3);
  BOOST_TEST(t_in);
  BOOST_TEST(u_in);
  BOOST_TEST(v_in);
  // The wait's operation and the strand's: both released before the handler ran.
  BOOST_TEST(plain.allocs.load() >= 2u);
  BOOST_TEST(bound.allocs.load() >= 2u);
  // Asio completes through its any_io_executor, which has no allocator to prefer, so the
  // strand allocates its hand-off with its own; twheel completes on the strand itself,
  // with the handler's allocator preferred.
  if constexpr (std::is_same_v<Timer, twheel::steady_timer>) {
    BOOST_TEST(own.allocs.load() >= 2u);
  } else {
    BOOST_TEST(own.allocs.load() >= 1u);
  }
  BOOST_TEST(outstanding_in_handler == 0u);
  BOOST_TEST(plain.outstanding() == 0u);
  BOOST_TEST(bound.outstanding() == 0u);
  BOOST_TEST(own.outstanding() == 0u);
}

// A handler's executor is used as it is: one required never to block gets the handler
// posted, behind the plain wait that completes after it, as Asio's handler_work does
// (which prefers the handler's allocator and nothing else); one that may block runs it
// at once.
BOOST_TEST_DECORATOR(*boost::unit_test::timeout(10))
BOOST_AUTO_TEST_CASE_TEMPLATE(a_never_blocking_executor_gets_the_handler_posted, Timer,
                              timer_types) {
  asio::io_context ctx;
  auto strand = asio::make_strand(ctx);
  const auto never = asio::require(strand, asio::execution::blocking.never);
  // One timer, a wait with its handler bound to ex (marked `letter`), then a plain wait.
  auto order_of = [&](const auto& ex, char letter) {
    std::string order;
    ctx.restart();
    {
      Timer t(ctx, 2ms);
      t.async_wait(asio::bind_executor(ex, [&, letter](error_code) { order += letter; }));
      t.async_wait([&](error_code) { order += 'P'; });
      auto r = run_ctx(ctx, run_limit);
      BOOST_TEST(!r.timed_out);
    }
    return order;
  };
  BOOST_TEST(order_of(never, 'N') == "PN");
  BOOST_TEST(order_of(strand, 'S') == "SP");
}

// A wait whose handler is bound to a strand of a second context keeps that context busy
// until the handler has run there: ctx2.run(), started first with nothing else to do,
// returns only after it.
BOOST_TEST_DECORATOR(*boost::unit_test::timeout(10))
BOOST_AUTO_TEST_CASE_TEMPLATE(strand_of_another_context_counts_as_its_work, Timer,
                              timer_types) {
  asio::io_context ctx1, ctx2;
  auto strand2 = asio::make_strand(ctx2);
  Timer t(ctx1, 30ms);
  std::atomic<bool> ran{false}, ran_in_strand{false}, ran_before_return{false};
  std::atomic<int> ec_value{-1};
  t.async_wait(asio::bind_executor(strand2, [&](error_code ec) {
    ec_value = ec.value();
    ran_in_strand = strand2.running_in_this_thread();
    ran = true;
  }));
  std::thread runner2([&] {
    ctx2.run();
    ran_before_return = ran.load();
  });
  auto r = run_ctx(ctx1, run_limit);
  runner2.join();
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(ran.load());
  BOOST_TEST(ran_in_strand.load());
  BOOST_TEST(ran_before_return.load(), "ctx2.run() returned before the handler ran");
  BOOST_TEST(ec_value.load() == 0);
}

// ---------------------------------------------------------------------------------------
// Deprecated members. boost::asio::basic_waitable_timer has expires_from_now(),
// expires_from_now(d), expires_from_now(d, ec), the expires_at() getter,
// expires_at(t, ec), cancel(ec) and cancel_one(ec) from Boost 1.81 to 1.86 (Asio 1.26 to
// 1.32) unless BOOST_ASIO_NO_DEPRECATED is defined; Asio 1.33 (Boost 1.87) removed them.
// Every timer under test must offer them exactly where the installed Asio's does.
// ---------------------------------------------------------------------------------------
namespace {
template <class T, class = void>
struct has_deprecated_members : std::false_type {};
template <class T>
struct has_deprecated_members<
    T, std::void_t<decltype(std::declval<const T&>().expires_from_now()),
                   decltype(std::declval<T&>().expires_from_now(typename T::duration())),
                   decltype(std::declval<T&>().expires_from_now(typename T::duration(),
                                                                std::declval<error_code&>())),
                   decltype(std::declval<const T&>().expires_at()),
                   decltype(std::declval<T&>().expires_at(typename T::time_point(),
                                                          std::declval<error_code&>())),
                   decltype(std::declval<T&>().cancel(std::declval<error_code&>())),
                   decltype(std::declval<T&>().cancel_one(std::declval<error_code&>()))>>
    : std::true_type {};
}  // namespace

#if !defined(BOOST_ASIO_NO_DEPRECATED) && BOOST_ASIO_VERSION < 103300
static_assert(has_deprecated_members<asio::steady_timer>::value,
              "this Asio should still have the deprecated timer members");
#else
static_assert(!has_deprecated_members<asio::steady_timer>::value,
              "this Asio should not have the deprecated timer members");
#endif

BOOST_AUTO_TEST_CASE_TEMPLATE(deprecated_members_exactly_where_asio_has_them, Timer, timer_types) {
  BOOST_TEST(has_deprecated_members<Timer>::value ==
             has_deprecated_members<asio::steady_timer>::value);
}

#if !defined(BOOST_ASIO_NO_DEPRECATED) && BOOST_ASIO_VERSION < 103300

BOOST_TEST_DECORATOR(*boost::unit_test::timeout(30))
BOOST_AUTO_TEST_CASE_TEMPLATE(deprecated_expires_from_now, Timer, timer_types) {
  asio::io_context ctx;
  Timer t(ctx);
  // Setting: returns the number of waits cancelled, like expires_after().
  auto t0 = wall::now();
  BOOST_TEST(t.expires_from_now(10s) == 0u);
  BOOST_TEST((t.expiry() >= t0 + 10s && t.expiry() <= wall::now() + 10s));
  // Getting: expiry() - now().
  const auto left = t.expires_from_now();
  BOOST_TEST((left > 9s && left <= 10s), "expires_from_now() = " << ms(left) << " ms");
  wait_log log;
  t.async_wait(log.handler(1));
  t.async_wait(log.handler(2));
  t0 = wall::now();
  BOOST_TEST(t.expires_from_now(20ms) == 2u);
  wall::time_point fired_at{};
  t.async_wait([&](error_code ec) {
    fired_at = wall::now();
    log.handler(3)(ec);
  });
  auto r = run_ctx(ctx, run_limit);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(log.ec(1) == aborted);
  BOOST_TEST(log.ec(2) == aborted);
  BOOST_TEST(!log.ec(3));
  BOOST_TEST((fired_at - t0 >= 20ms), "fired after " << ms(fired_at - t0) << " ms");
  // An expired timer reports a negative (or zero) duration.
  BOOST_TEST((t.expires_from_now() <= Timer::duration::zero()));

  // The error_code overload clears ec and counts the waits it cancels.
  t.expires_from_now(10s);
  t.async_wait(log.handler(4));
  error_code ec = asio::error::fault;
  BOOST_TEST(t.expires_from_now(30ms, ec) == 1u);
  BOOST_TEST(!ec);
  const auto left2 = t.expires_from_now();
  BOOST_TEST((left2 > 0ms && left2 <= 30ms));
  ec = asio::error::fault;
  BOOST_TEST(t.expires_from_now(40ms, ec) == 0u);  // nothing pending: nothing cancelled
  BOOST_TEST(!ec);
  r = run_ctx(ctx, run_limit);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(log.ec(4) == aborted);
}

BOOST_TEST_DECORATOR(*boost::unit_test::timeout(30))
BOOST_AUTO_TEST_CASE_TEMPLATE(deprecated_expires_from_now_saturates, Timer, timer_types) {
  using duration = typename Timer::duration;
  using time_point = typename Timer::time_point;
  asio::io_context ctx;
  Timer t(ctx);
  // A default-constructed timer expires at the epoch: now() is after it.
  BOOST_TEST((t.expires_from_now() < duration::zero()));
  t.expires_at(time_point::min());
  BOOST_TEST((t.expires_from_now() == duration::min()));
  t.expires_at(time_point::max());
  BOOST_TEST((t.expires_from_now() > duration::max() - 24h * 365 * 10));
  BOOST_TEST((t.expires_from_now() <= duration::max()));
  // Setting a far duration saturates instead of overflowing, as expires_after() does.
  BOOST_TEST(t.expires_from_now(duration::max()) == 0u);
  BOOST_TEST((t.expiry() == time_point::max()));
  BOOST_TEST(t.expires_from_now(duration::min()) == 0u);
  BOOST_TEST((t.expiry() <= wall::now()));
  int calls = 0;
  error_code got = aborted;
  t.async_wait([&](error_code ec) {
    ++calls;
    got = ec;
  });
  const auto r = run_ctx(ctx, run_limit);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(calls == 1);
  BOOST_TEST(!got);
}

BOOST_TEST_DECORATOR(*boost::unit_test::timeout(30))
BOOST_AUTO_TEST_CASE_TEMPLATE(deprecated_expires_at, Timer, timer_types) {
  asio::io_context ctx;
  const auto when = wall::now() + 10s;
  Timer t(ctx, when);
  // The getter is expiry().
  BOOST_TEST((t.expires_at() == when));
  BOOST_TEST((t.expires_at() == t.expiry()));
  wait_log log;
  t.async_wait(log.handler(1));
  error_code ec = asio::error::fault;
  const auto soon = wall::now() + 15ms;
  BOOST_TEST(t.expires_at(soon, ec) == 1u);
  BOOST_TEST(!ec);
  BOOST_TEST((t.expires_at() == soon));
  t.async_wait(log.handler(2));
  const auto r = run_ctx(ctx, run_limit);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(log.ec(1) == aborted);
  BOOST_TEST(!log.ec(2));
  BOOST_TEST((log.order == std::vector<int>{1, 2}));
  ec = asio::error::fault;
  BOOST_TEST(t.expires_at(soon, ec) == 0u);  // already expired: nothing to cancel
  BOOST_TEST(!ec);
}

BOOST_TEST_DECORATOR(*boost::unit_test::timeout(30))
BOOST_AUTO_TEST_CASE_TEMPLATE(deprecated_cancel_with_error_code, Timer, timer_types) {
  asio::io_context ctx;
  Timer t(ctx, 10s);
  wait_log log;
  for (int id = 1; id <= 4; ++id) t.async_wait(log.handler(id));
  error_code ec = asio::error::fault;
  BOOST_TEST(t.cancel_one(ec) == 1u);  // the oldest: 1
  BOOST_TEST(!ec);
  ec = asio::error::fault;
  BOOST_TEST(t.cancel_one(ec) == 1u);  // then 2
  BOOST_TEST(!ec);
  poll_ctx(ctx);
  BOOST_TEST((log.order == std::vector<int>{1, 2}));
  BOOST_TEST(log.ec(1) == aborted);
  BOOST_TEST(log.ec(2) == aborted);
  ec = asio::error::fault;
  BOOST_TEST(t.cancel(ec) == 2u);  // 3 and 4
  BOOST_TEST(!ec);
  ec = asio::error::fault;
  BOOST_TEST(t.cancel(ec) == 0u);
  BOOST_TEST(!ec);
  ec = asio::error::fault;
  BOOST_TEST(t.cancel_one(ec) == 0u);
  BOOST_TEST(!ec);
  const auto r = run_ctx(ctx, run_limit);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST((log.order == std::vector<int>{1, 2, 3, 4}));
  BOOST_TEST(log.ec(3) == aborted);
  BOOST_TEST(log.ec(4) == aborted);
  BOOST_TEST((t.expires_at() == t.expiry()));  // cancelling leaves the expiry alone
}

#endif  // !defined(BOOST_ASIO_NO_DEPRECATED) && BOOST_ASIO_VERSION < 103300
