// idle_timer_test.cpp: tests of twheel::idle_timer (twheel/idle_timer.hpp).
//
// The contract under test: a wait completes with success once no touch() happened for a
// whole period: never before `period` after the last touch (or after the wait started),
// and at most one wheel tick plus scheduling delay after it; cancel(), destruction and
// per-operation cancellation complete it with operation_aborted.
//
// Timing rules: lower bounds are exact (times of touches are read just before the touch,
// and touch() stamps a reading taken inside the call, so "completion >= last touch +
// period" is exact; a time read after the touch would not be, by the length of the call,
// which under a sanitizer or preemption can be long); upper
// bounds against the real clock are generous because the machine may be loaded and the
// suites also run under sanitizers. The exact upper bound (one tick) is tested with a
// hand-moved clock, through the same code the driver runs (suite wheel_model).
#define BOOST_TEST_MODULE idle_timer
#include <boost/test/unit_test.hpp>

#include <twheel/idle_timer.hpp>
#include <twheel/timing_wheel.hpp>
#include <twheel/steady_timer.hpp>
#include <twheel/wheel_service.hpp>

#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "support.hpp"

namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using namespace std::chrono_literals;
using wall = std::chrono::steady_clock;
using twheel::idle_timer;

const error_code aborted = asio::error::operation_aborted;

constexpr auto slack = 200ms;  // upper bounds only

using twheel_test::alloc_counters;
using twheel_test::counting_allocator;
using twheel_test::ms;
using twheel_test::run_ctx;
using twheel_test::run_until;

// The outcome of one idle wait.
struct outcome {
  int calls = 0;
  error_code ec;
  wall::time_point at{};
  auto handler() {
    return [this](error_code e) {
      ++calls;
      ec = e;
      at = wall::now();
    };
  }
};

// Memory a session owns (as in Asio's allocation example); `arena_watch` outlives it and
// counts what was given back to it once it was gone.
struct arena_watch {
  bool alive = true;
  int late_frees = 0;
};

struct arena {
  explicit arena(arena_watch& w) noexcept : watch(&w) {}
  arena(const arena&) = delete;
  arena& operator=(const arena&) = delete;
  ~arena() { watch->alive = false; }
  arena_watch* watch;
  alignas(std::max_align_t) unsigned char storage[1024];
  bool in_use = false;
};

template <class T>
struct arena_allocator {
  using value_type = T;
  arena* a;
  arena_watch* w;

  explicit arena_allocator(arena* mem) noexcept : a(mem), w(mem->watch) {}
  template <class U>
  arena_allocator(const arena_allocator<U>& o) noexcept : a(o.a), w(o.w) {}

  T* allocate(std::size_t n) {
    if (!a->in_use && n * sizeof(T) <= sizeof a->storage) {
      a->in_use = true;
      return reinterpret_cast<T*>(a->storage);
    }
    return std::allocator<T>{}.allocate(n);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (!w->alive) {
      ++w->late_frees;  // the arena is gone: touch nothing of it
      return;
    }
    if (reinterpret_cast<unsigned char*>(p) == a->storage) {
      a->in_use = false;
    } else {
      std::allocator<T>{}.deallocate(p, n);
    }
  }
  template <class U>
  bool operator==(const arena_allocator<U>& o) const noexcept {
    return a == o.a;
  }
  template <class U>
  bool operator!=(const arena_allocator<U>& o) const noexcept {
    return a != o.a;
  }
};

// Touches `idle` every `every` until `until`, recording the time before each touch.
// Uses an Asio timer, so that the toucher does not share the wheel with the timer under
// test.
struct toucher {
  toucher(asio::io_context& ctx, idle_timer& idle, wall::duration every, wall::time_point until)
      : timer(ctx), idle(idle), every(every), until(until) {}

  void start() {
    timer.expires_after(every);
    timer.async_wait([this](error_code ec) {
      if (ec || wall::now() >= until) return;
      last = wall::now();  // before: a touch counts from the moment it is called
      idle.touch();
      ++count;
      start();
    });
  }

  asio::steady_timer timer;
  idle_timer& idle;
  wall::duration every;
  wall::time_point until;
  wall::time_point last{};
  int count = 0;
};

}  // namespace

// ---------------------------------------------------------------------------------------
BOOST_AUTO_TEST_SUITE(construction)

BOOST_AUTO_TEST_CASE(invalid_period_throws_invalid_argument) {
  asio::io_context ctx;
  BOOST_CHECK_THROW(idle_timer(ctx, 0ns), std::invalid_argument);
  BOOST_CHECK_THROW(idle_timer(ctx, -1ms), std::invalid_argument);
  BOOST_CHECK_THROW(idle_timer(ctx, wall::duration::min()), std::invalid_argument);
  BOOST_CHECK_THROW(idle_timer(ctx.get_executor(), 0s), std::invalid_argument);
  BOOST_CHECK_THROW(idle_timer(ctx.get_executor(), -3s), std::invalid_argument);
  BOOST_CHECK_NO_THROW(idle_timer(ctx, 1ns));
  idle_timer ok(ctx, 250ms);
  BOOST_TEST(ms(ok.period()) == 250);
  BOOST_TEST((ok.get_executor() == asio::any_io_executor(ctx.get_executor())));
}

// rebind_executor, as Asio's I/O objects have it: as_default_on_t gives a timer whose
// async_wait() takes the executor's default token (here deferred: nothing starts until
// the operation is launched).
BOOST_AUTO_TEST_CASE(rebinds_to_an_executor_with_a_default_token) {
  const auto r = twheel_test::run_deferred_wait<idle_timer>(
      [](asio::io_context& ctx) { return twheel::stats(ctx).pending; }, 5ms);
  BOOST_TEST(r.pending_before_launch == 0u);  // deferred: not started until launched
  BOOST_TEST(r.pending_after_launch == 1u);
  BOOST_TEST((r.ec == error_code()));
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------------------------------
BOOST_AUTO_TEST_SUITE(idleness)

// Touched every 10 ms for 200 ms with a 50 ms period: no completion while touched; then
// it completes a period after the last touch (not up to two).
BOOST_AUTO_TEST_CASE(touches_keep_it_from_firing) {
  asio::io_context ctx;
  idle_timer idle(ctx, 50ms);
  outcome out;
  const auto t0 = wall::now();
  idle.async_wait(out.handler());
  toucher t(ctx, idle, 10ms, t0 + 200ms);
  t.start();
  const auto r = run_ctx(ctx);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(out.calls == 1);
  BOOST_TEST(!out.ec);
  BOOST_TEST_REQUIRE(t.count >= 5);
  BOOST_TEST((t.last >= t0 + 150ms));  // the toucher really ran until ~200 ms
  BOOST_TEST((out.at >= t.last + 50ms),
             "completed " << ms(out.at - t.last) << " ms after the last touch");
  BOOST_TEST((out.at >= t0 + 200ms));  // nothing while it was touched
  BOOST_TEST((out.at <= t.last + 50ms + slack),
             "completed " << ms(out.at - t.last) << " ms after the last touch");
  BOOST_TEST(twheel::stats(ctx).pending == 0u);
}

BOOST_AUTO_TEST_CASE(silence_fires_it_after_one_period) {
  asio::io_context ctx;
  idle_timer idle(ctx, 50ms);
  outcome out;
  const auto t0 = wall::now();
  idle.async_wait(out.handler());
  const auto r = run_ctx(ctx);
  BOOST_TEST(out.calls == 1);
  BOOST_TEST(!out.ec);
  BOOST_TEST((out.at >= t0 + 50ms), "completed after " << ms(out.at - t0) << " ms");
  BOOST_TEST((out.at <= t0 + 50ms + slack), "completed after " << ms(out.at - t0) << " ms");
  BOOST_TEST((r.elapsed < 1s));
}

// One touch in the middle of the first period: completion >= that touch + period.
BOOST_AUTO_TEST_CASE(one_touch_pushes_completion_past_touch_plus_period) {
  asio::io_context ctx;
  idle_timer idle(ctx, 40ms);
  outcome out;
  const auto t0 = wall::now();
  idle.async_wait(out.handler());
  asio::steady_timer once(ctx, 30ms);
  wall::time_point touched{};
  once.async_wait([&](error_code) {
    touched = wall::now();
    idle.touch();
  });
  run_ctx(ctx);
  BOOST_TEST(out.calls == 1);
  BOOST_TEST(!out.ec);
  BOOST_TEST((out.at >= touched + 40ms), "completed " << ms(out.at - touched) << " ms after the touch");
  BOOST_TEST((out.at <= touched + 40ms + slack));
  BOOST_TEST((out.at >= t0 + 70ms));
}

// Touches before async_wait() do not count: the idle period is measured from the call.
BOOST_AUTO_TEST_CASE(period_measured_from_the_wait_when_not_touched) {
  asio::io_context ctx;
  idle_timer idle(ctx, 30ms);
  idle.touch();
  outcome out;
  const auto t0 = wall::now();
  idle.async_wait(out.handler());
  run_ctx(ctx);
  BOOST_TEST(!out.ec);
  BOOST_TEST((out.at >= t0 + 30ms));
  BOOST_TEST((out.at < t0 + 30ms + slack));
}

// Repeated waits on the same idle timer: each is measured from its own start.
BOOST_AUTO_TEST_CASE(waits_in_sequence) {
  asio::io_context ctx;
  idle_timer idle(ctx, 15ms);
  std::vector<wall::duration> lengths;
  std::function<void()> wait = [&] {
    const auto started = wall::now();
    idle.async_wait([&, started](error_code ec) {
      BOOST_TEST(!ec);
      lengths.push_back(wall::now() - started);
      if (lengths.size() < 5) wait();
    });
  };
  wait();
  run_ctx(ctx);
  BOOST_TEST_REQUIRE(lengths.size() == 5u);
  for (auto d : lengths) {
    BOOST_TEST((d >= 15ms));
    BOOST_TEST((d < 15ms + slack));
  }
}

// 1,000 idle timers with random periods and random touch schedules (fixed seed): none
// completes before its last touch + its period (or its start + its period), each
// completes exactly once, with success.
BOOST_AUTO_TEST_CASE(never_early_across_many_timers) {
  constexpr std::size_t n = 1000;
  constexpr int steps = 30;          // touch steps, every 5 ms: 150 ms of activity
  constexpr auto step = 5ms;
  asio::io_context ctx;
  std::mt19937 rng(20240611);
  std::uniform_int_distribution<int> period_ms(10, 60);
  std::uniform_int_distribution<int> last_step(-1, steps - 1);  // -1: never touched
  std::bernoulli_distribution touch_now(0.4);

  std::vector<std::unique_ptr<idle_timer>> timers;
  std::vector<std::vector<bool>> schedule(n, std::vector<bool>(steps, false));
  std::vector<wall::time_point> started(n), last_touch(n), completed(n);
  std::vector<int> calls(n, 0);
  std::vector<error_code> ecs(n);
  timers.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    timers.push_back(std::make_unique<idle_timer>(ctx, std::chrono::milliseconds(period_ms(rng))));
    const int last = last_step(rng);
    for (int s = 0; s <= last; ++s) schedule[i][s] = (s == last) || touch_now(rng);
  }
  for (std::size_t i = 0; i < n; ++i) {
    started[i] = wall::now();
    last_touch[i] = started[i];
    timers[i]->async_wait([&, i](error_code ec) {
      ++calls[i];
      ecs[i] = ec;
      completed[i] = wall::now();
    });
  }
  asio::steady_timer stepper(ctx);
  int current = 0;
  std::function<void()> next_step = [&] {
    stepper.expires_after(step);
    stepper.async_wait([&](error_code ec) {
      if (ec) return;
      std::vector<std::size_t> touched;
      const auto now = wall::now();  // before the touches: exact lower bound
      for (std::size_t i = 0; i < n; ++i) {
        // A wait idle for its period already may have been completed by the wheel, its
        // handler not yet run: a touch now races that decision, so the test skips it.
        if (schedule[i][current] && calls[i] == 0 && now < last_touch[i] + timers[i]->period()) {
          timers[i]->touch();
          touched.push_back(i);
        }
      }
      for (auto i : touched) last_touch[i] = now;
      if (++current < steps) next_step();
    });
  };
  next_step();
  const auto r = run_ctx(ctx, 20s);
  BOOST_TEST(!r.timed_out);

  std::size_t early = 0, late = 0, wrong = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto period = timers[i]->period();
    if (calls[i] != 1 || ecs[i]) {
      ++wrong;
      BOOST_TEST_MESSAGE("timer " << i << ": " << calls[i] << " calls, " << ecs[i].message());
      continue;
    }
    if (completed[i] < last_touch[i] + period) {
      ++early;
      BOOST_TEST_MESSAGE("timer " << i << " early by "
                                  << ms(last_touch[i] + period - completed[i]) << " ms");
    }
    if (completed[i] > last_touch[i] + period + slack) ++late;
  }
  BOOST_TEST(wrong == 0u);
  BOOST_TEST(early == 0u);
  BOOST_TEST(late == 0u);
  BOOST_TEST(twheel::stats(ctx).pending == 0u);
}

// The first idle timer of a context makes its wheel keep the process's touch epoch going
// (the epoch's history, and the driver's ticks while touches are stamped); later ones find
// it so. A wheel with no idle timer does not tick for the epoch.
BOOST_AUTO_TEST_CASE(the_first_idle_timer_turns_the_touch_stamps_on) {
  asio::io_context ctx;
  twheel::steady_timer plain(ctx);  // the wheel exists, with no idle timer yet
  auto& service = twheel::wheel_service::of(ctx);
  BOOST_TEST(!service.keeps_touch_epoch());
  {
    idle_timer first(ctx, 1s);
    BOOST_TEST(service.keeps_touch_epoch());
  }
  idle_timer second(ctx.get_executor(), 1s);
  BOOST_TEST(service.keeps_touch_epoch());
  asio::io_context other;
  twheel::steady_timer other_plain(other);
  BOOST_TEST(!twheel::wheel_service::of(other).keeps_touch_epoch());
}

// The epoch is the process's, but only wheels with idle timers keep it going: another
// context's wheel, with one steady_timer wait pending a second out, does not wake while
// an idle timer elsewhere is touched (it would every millisecond if it kept the epoch).
BOOST_AUTO_TEST_CASE(a_wheel_without_idle_timers_does_not_tick_for_the_epoch) {
  asio::io_context idle_ctx;
  idle_timer idle(idle_ctx, 1s);
  idle.async_wait([](error_code) {});
  asio::io_context ctx;
  twheel::steady_timer plain(ctx, 1s);
  plain.async_wait([](error_code) {});
  const auto wakeups = twheel::stats(ctx).wakeups;
  // At least 150 ms, and on until the idle timer's wheel has passed a few times (it may
  // first wait for an exact generation, 64 ms, to end, then passes every millisecond).
  const auto start = wall::now();
  while (wall::now() < start + 150ms ||
         (twheel::stats(idle_ctx).wakeups <= 5u && wall::now() < start + 5s)) {
    idle.touch();
    idle_ctx.poll();
    ctx.run_for(1ms);
  }
  BOOST_TEST(twheel::stats(ctx).wakeups == wakeups);
  BOOST_TEST(twheel::stats(idle_ctx).wakeups > 5u);  // the idle timer's wheel did pass
  plain.cancel();
  idle.cancel();
  ctx.run();
  idle_ctx.run();
}

// A wheel whose driver was armed before its first idle timer, for a steady_timer at
// 500 ms: the touches of another context left the process's generations stamped, and that
// context no longer runs, so only this wheel can end the generation its touch is stamped
// with. The idle wait (700 ms, filed after the armed 500 ms, so starting it does not
// re-arm the driver) must complete 700 ms after the touch; were the driver not re-armed
// for the epoch's tick when the idle timer was made, the touch's generation would end
// only at the 500 ms pass and the wait would complete 1,200 ms after the touch.
BOOST_AUTO_TEST_CASE(an_idle_timer_on_a_wheel_armed_far_ahead_ends_its_generations) {
  asio::io_context other;
  idle_timer busy(other, 10s);
  busy.async_wait([](error_code) {});
  const auto start = wall::now();
  while (!twheel::wheel_service::epoch().stamping() && wall::now() < start + 5s) {
    busy.touch();
    other.run_for(1ms);
  }
  busy.touch();
  BOOST_TEST_REQUIRE(twheel::wheel_service::epoch().stamping());

  asio::io_context ctx;
  twheel::steady_timer far(ctx, 500ms);
  far.async_wait([](error_code) {});
  ctx.poll();  // the driver is armed for 500 ms
  idle_timer idle(ctx, 700ms);
  outcome out;
  idle.async_wait(out.handler());
  const auto touched = wall::now();
  idle.touch();
  BOOST_TEST(run_until(ctx, [&] { return out.calls != 0; }, 3s));
  BOOST_TEST(out.calls == 1);
  BOOST_TEST(!out.ec);
  BOOST_TEST((out.at >= touched + 700ms));
  BOOST_TEST((out.at < touched + 1100ms), "completed " << ms(out.at - touched)
                                                       << " ms after the touch");
  far.cancel();
  busy.cancel();
  ctx.run();
  other.run();
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------------------------------
BOOST_AUTO_TEST_SUITE(wheel_model)

// What the clocks of the wheel_model suite declare: nanoseconds, steady.
template <class Clock>
struct test_clock_types {
  using duration = std::chrono::nanoseconds;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<Clock, duration>;
  static constexpr bool is_steady = true;
};

// The hand-moved clock of the wheel_model suite (nanoseconds from 0).
struct manual_clock : test_clock_types<manual_clock> {
  static inline time_point current{};
  static time_point now() noexcept { return current; }
};
using manual_epoch = twheel::detail::basic_touch_epoch<manual_clock>;

// The epoch's modes, step by step: exact stamps until a pass sees touches, generation
// stamps (and ticks) while every generation is touched, exact again after an untouched
// one. Each stamp's bound is checked against the time of its touch: never before it, and
// for a generation stamp the end of its generation (the pass that started the next one).
BOOST_AUTO_TEST_CASE(touch_epoch_stamps_and_their_bounds) {
  using ns = std::chrono::nanoseconds;
  using tp = manual_clock::time_point;
  const auto at = [](ns t) {
    manual_clock::current = tp(t);
    return tp(t);
  };
  manual_epoch epoch;
  epoch.enable();
  at(100us);
  const std::int64_t first = epoch.stamp();
  BOOST_TEST((first & 1) == 1);  // exact before any pass
  BOOST_TEST((epoch.upper_bound(first) == tp(100us)));
  BOOST_TEST(!epoch.stamping());
  BOOST_TEST(epoch.ticking());  // a pass is due at once: none has started a generation
  BOOST_TEST((epoch.tick_at() <= tp(100us)));

  epoch.pass(at(200us));  // saw a touch: generations are stamped from now on
  BOOST_TEST(epoch.stamping());
  BOOST_TEST((epoch.tick_at() == tp(1200us)));
  at(500us);
  const std::int64_t g1 = epoch.stamp();
  BOOST_TEST((g1 & 1) == 0);
  // Its generation is in progress: the bound is the clock's now, never the generation's
  // start (200 us, before the touch).
  at(700us);
  BOOST_TEST((epoch.upper_bound(g1) == tp(700us)));
  epoch.pass(at(900us));  // within the resolution: the same generation goes on
  BOOST_TEST((epoch.stamp() == g1));
  BOOST_TEST((epoch.upper_bound(g1) == tp(900us)));
  epoch.pass(at(1300us));  // a new generation: g1 ended at 1300 us
  BOOST_TEST((epoch.upper_bound(g1) == tp(1300us)));
  BOOST_TEST(epoch.stamping());  // g1 was touched
  const std::int64_t g2 = epoch.stamp();
  BOOST_TEST((g2 == g1 + 2));

  epoch.pass(at(2400us));  // g2 was touched: still stamped
  BOOST_TEST((epoch.upper_bound(g2) == tp(2400us)));
  BOOST_TEST((epoch.upper_bound(g1) == tp(1300us)));
  BOOST_TEST(epoch.stamping());
  BOOST_TEST((epoch.tick_at() == tp(3400us)));
  epoch.pass(at(3500us));  // the generation from 2400 us was not touched: exact again
  BOOST_TEST(!epoch.stamping());
  BOOST_TEST((epoch.tick_at() == tp(3500us + 64ms)));  // the driver still passes, rarely
  at(3600us);
  const std::int64_t e2 = epoch.stamp();
  BOOST_TEST((e2 & 1) == 1);
  BOOST_TEST((epoch.upper_bound(e2) == tp(3600us)));
  epoch.pass(at(3700us));  // within the resolution of the last start: nothing changes
  BOOST_TEST(!epoch.stamping());
  // An exact generation is not ended before its tick, though touched and though a pass
  // comes: tick_at() never moves earlier, so no wheel armed for it wakes too late.
  epoch.pass(at(4600us));
  BOOST_TEST(!epoch.stamping());
  BOOST_TEST((epoch.tick_at() == tp(3500us + 64ms)));
  BOOST_TEST((epoch.stamp() & 1) == 1);
  epoch.pass(at(3500us + 64ms));  // touched while exact: stamped again
  BOOST_TEST(epoch.stamping());
  BOOST_TEST((epoch.tick_at() == tp(3500us + 65ms)));
  BOOST_TEST((epoch.stamp() & 1) == 0);
  BOOST_TEST((epoch.upper_bound(e2) == tp(3600us)));  // exact stamps keep their time
}

// A clock for many threads that runs fast: every reading is 100 us after the last one,
// so that a test of a few milliseconds goes through thousands of generations.
struct racing_clock : test_clock_types<racing_clock> {
  static inline std::atomic<rep> ticks{0};
  static time_point now() noexcept {
    return time_point(duration(ticks.fetch_add(100'000, std::memory_order_relaxed)));
  }
};

// Two threads pass (each may start a generation, or find it started), two touch and read
// back the bounds of earlier touches, for `run_for` of real time. Every bound of a stamp
// is at or after the time read before the touch (never early) and at or before the time
// read after asking for it (no bound from the future). Returns how many bounds were of
// generation stamps older than the last 2048 generations (the history's locked path).
template <class Clock>
std::size_t check_shared_epoch(std::chrono::milliseconds run_for, bool until_old_bounds) {
  twheel::detail::basic_touch_epoch<Clock> epoch;
  epoch.enable();
  constexpr std::uint64_t entries = twheel::detail::epoch_history::entries;
  std::atomic<bool> stop{false};
  std::atomic<std::size_t> checked{0}, wrong{0}, generation_stamps{0}, old_bounds{0};
  std::vector<std::thread> threads;
  for (int d = 0; d < 2; ++d) {
    threads.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        epoch.pass(Clock::now());
        // On the real clock a driver passes now and then; on the racing one as often as
        // it can, to reach thousands of generations.
        if (std::is_same_v<Clock, wall>) {
          std::this_thread::sleep_for(100us);
        } else {
          std::this_thread::yield();
        }
      }
    });
  }
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      std::vector<std::pair<typename Clock::time_point, std::int64_t>> touches;
      std::size_t first_generation_stamp = 0;  // + 1; 0: none yet
      while (!stop.load(std::memory_order_relaxed)) {
        const auto before = Clock::now();
        const std::int64_t stamp = epoch.stamp();
        touches.emplace_back(before, stamp);
        if ((stamp & 1) == 0) {
          generation_stamps.fetch_add(1, std::memory_order_relaxed);
          if (first_generation_stamp == 0) first_generation_stamp = touches.size();
        }
        // The bounds of a few earlier touches: in the generation in progress, in ended
        // ones, and the thread's first generation stamp (with the racing clock, older
        // than the last 2048 generations).
        const std::size_t oldest =
            first_generation_stamp == 0 ? 1 : touches.size() - first_generation_stamp + 1;
        for (std::size_t back : {std::size_t{1}, std::size_t{37}, std::size_t{1000}, oldest}) {
          if (touches.size() < back) continue;
          const auto& [at, s] = touches[touches.size() - back];
          const std::int64_t current = epoch.stamp();
          const auto bound = epoch.upper_bound(s);
          const auto after = Clock::now();
          checked.fetch_add(1, std::memory_order_relaxed);
          if ((s & 1) == 0 && (current & 1) == 0 &&
              static_cast<std::uint64_t>(current - s) / 2 > entries) {
            old_bounds.fetch_add(1, std::memory_order_relaxed);
          }
          if (bound < at || bound > after) wrong.fetch_add(1, std::memory_order_relaxed);
        }
        if (std::is_same_v<Clock, wall>) {
          std::this_thread::sleep_for(10us);
        } else {
          std::this_thread::yield();  // touched in (nearly) every generation: stamped
        }
      }
    });
  }
  // At least `run_for`, and on (up to 10 s, for a loaded machine) until generation stamps
  // were seen and, if asked, bounds of stamps older than 2048 generations.
  const auto start = wall::now();
  while (wall::now() < start + run_for ||
         ((generation_stamps.load() == 0 || (until_old_bounds && old_bounds.load() == 0)) &&
          wall::now() < start + 10s)) {
    std::this_thread::sleep_for(10ms);
  }
  stop = true;
  for (auto& t : threads) t.join();
  BOOST_TEST_MESSAGE(checked.load() << " bounds checked, " << generation_stamps.load()
                                    << " generation stamps, " << old_bounds.load()
                                    << " older than 2048 generations");
  BOOST_TEST(checked.load() > 100u);
  BOOST_TEST(generation_stamps.load() > 0u);
  BOOST_TEST(wrong.load() == 0u);
  return old_bounds.load();
}

// The process's epoch is used by every wheel's driver at once: its passes, stamps and
// bounds from several threads, on the real clock and on one that runs fast enough to
// overwrite the history's ring of recent ends and to need its older levels. TSan checks
// the lock-free reads against the passes.
BOOST_AUTO_TEST_CASE(touch_epoch_shared_by_passing_and_touching_threads) {
  // Longer than the first, exact generation (64 ms): the passes start before any touch.
  check_shared_epoch<wall>(150ms, false);
  BOOST_TEST(check_shared_epoch<racing_clock>(150ms, true) > 0u);
}

// The history of generation ends, across its levels and beyond, with generations of
// uneven lengths (1 to 2 ms, 64 ms, and now and then a quiet 1,000 s): for many ages, the
// bound given for a generation is never before its end; it is its end exactly while it
// is among the last 2048; otherwise it is later by less than max(32.8 ms, 1/63 of its
// age), except beyond the last ring (19 hours).
BOOST_AUTO_TEST_CASE(epoch_history_bounds_every_age) {
  using twheel::detail::epoch_history;
  auto history = std::make_unique<epoch_history>();
  std::mt19937_64 rng(20261125);
  std::vector<std::int64_t> ends;  // ends[g]: when generation g ended
  std::int64_t t = 5'000'000'000;  // ns
  std::size_t checked = 0, wrong = 0, beyond_checked = 0;
  const std::int64_t last_ring = epoch_history::entries *
                                 epoch_history::bucket_ns[epoch_history::bucket_levels - 1];
  const auto check = [&](std::uint64_t g) {
    const std::uint64_t current = ends.size();
    const std::int64_t bound = history->end_of(g, current);
    const std::int64_t end = ends[g];
    const std::int64_t age = ends.back() - end;
    const std::int64_t late = bound - end;
    const bool beyond = age > last_ring - 2 * epoch_history::bucket_ns[2];
    bool ok = late >= 0;
    if (current - g <= epoch_history::entries) {
      ok = ok && late == 0;
    } else if (!beyond) {
      ok = ok && late < std::max<std::int64_t>(epoch_history::bucket_ns[0], age / 63);
    } else {
      ++beyond_checked;
    }
    ++checked;
    if (!ok) {
      ++wrong;
      BOOST_TEST_MESSAGE("generation " << g << " of " << current << ": ended " << end
                                       << ", bound " << bound << ", age " << age);
    }
  };
  for (int round = 0; round < 12; ++round) {
    for (int k = 0; k < 40'000; ++k) {
      const auto kind = rng() % 1000;
      t += kind < 900 ? 1'000'000 + static_cast<std::int64_t>(rng() % 1'000'000)
           : kind < 999 ? 64'000'000
                        : 1'000'000'000'000;
      history->record(ends.size(), t);
      ends.push_back(t);
    }
    // Ages spread over every order of magnitude, and the last 2049 generations.
    for (int k = 0; k < 3000; ++k) {
      const std::uint64_t age = 1 + (rng() % ends.size()) / (std::uint64_t{1} << (rng() % 24));
      check(ends.size() - std::min<std::uint64_t>(age, ends.size()));
    }
    for (std::uint64_t back = 1; back <= epoch_history::entries + 1; back += 256) {
      check(ends.size() - back);
    }
    check(ends.size() - epoch_history::entries - 1);
  }
  BOOST_TEST_MESSAGE(checked << " bounds checked, " << beyond_checked << " beyond the rings; "
                             << "last generation ended at " << ends.back() / 1'000'000'000
                             << " s");
  BOOST_TEST(beyond_checked > 0u);
  BOOST_TEST(checked - beyond_checked > 30'000u);
  BOOST_TEST(wrong == 0u);
}

// What the driver does with an idle entry that comes due (detail::touch_epoch's stamps
// and detail::refile_if_touched, the code wheel_service runs), on a bare timing_wheel with
// a hand-moved clock, against a model. 400 entries with random periods are touched at
// random times, in bursts of activity with quiet gaps (so the epoch switches between
// generation stamps and exact ones), and time moves by random steps (fixed seed); a
// driver pass at every step. Each wait must complete at a step at or after its last
// touch + period, and no later than the first step at or after the upper bound of that
// touch's time (the touch's own time for an exact stamp, the first pass that started a
// new generation for a generation stamp) + period, rounded up to the tick (earlier when
// its entry, filed for an older deadline, is examined in between): never early, and late
// by less than one tick plus the step beyond the stamp's bound. Fails if a touch is not
// seen (completes early), if the entry is re-filed from anything but its last touch's
// bound, or if it completes a tick late.
BOOST_AUTO_TEST_CASE(completes_at_the_first_tick_a_period_after_the_last_touch) {
  using ns = std::chrono::nanoseconds;
  using twheel::detail::idle_entry;
  std::mt19937_64 rng(20261122);
  std::size_t stamped = 0, exact = 0;
  for (const ns tick : {ns(1ms), ns(137us), ns(5ms)}) {
    BOOST_TEST_CONTEXT("tick " << tick.count() << " ns") {
      constexpr std::size_t n = 400;
      manual_clock::current = manual_clock::time_point{};
      manual_epoch epoch;
      epoch.enable();
      twheel::timing_wheel wheel(twheel::wheel_config{tick, 6});
      std::vector<idle_entry> entries(n);
      std::vector<ns> last(n, ns(0));
      std::vector<ns> bound(n, ns(0));  // upper bound of the last touch's time, once known
      std::vector<bool> bound_pending(n, false);  // a generation stamp whose end is to come
      std::vector<ns> completed(n, ns(-1));
      std::vector<ns> steps;
      std::uniform_int_distribution<long> period_us(1, 60'000);
      std::uniform_int_distribution<long> step_us(1, 2'500);
      std::bernoulli_distribution touch(0.05);
      const auto to_wheel = [](idle_entry::clock_type::time_point t) {
        return std::chrono::duration_cast<ns>(t.time_since_epoch());
      };
      for (auto& e : entries) {
        e.period = std::chrono::microseconds(period_us(rng));
        e.touched.store(manual_epoch::exact_stamp(manual_clock::time_point{}));  // started at 0
        wheel.insert(e, e.period);
      }
      ns now{0};
      std::size_t done = 0;
      while (done < n) {
        now += std::chrono::microseconds(step_us(rng));
        manual_clock::current = manual_clock::time_point(now);
        steps.push_back(now);
        // Touches happen at `now`, before the driver's pass at `now`; activity comes in
        // 80 ms bursts with 20 ms gaps (after a gap, the exact generation lasts 64 ms: the
        // burst's touches read the clock until it ends), and stops at 400 ms so that every
        // wait ends.
        const bool active = now < 400ms && now % 100ms < 80ms;
        for (std::size_t i = 0; i < n; ++i) {
          if (completed[i] < ns(0) && active && touch(rng)) {
            const std::int64_t stamp = epoch.stamp();
            entries[i].touched.store(stamp);
            last[i] = now;
            bound[i] = now;
            bound_pending[i] = (stamp & 1) == 0;
            ++((stamp & 1) == 0 ? stamped : exact);
          }
        }
        const auto tick_at = epoch.tick_at();
        epoch.pass(manual_clock::now());
        // Never earlier: wheels armed for the old tick must not wake after the new one.
        BOOST_TEST_REQUIRE((epoch.tick_at() >= tick_at));
        // A pass due for a new generation starts one: the stamps of the last one end now.
        if (epoch.tick_at() != tick_at) {
          for (std::size_t i = 0; i < n; ++i) {
            if (bound_pending[i]) {
              bound[i] = now;
              bound_pending[i] = false;
            }
          }
        }
        // The driver is asked to pass by the end of the generation (passes come at every
        // step here, at most 2.5 ms apart).
        BOOST_TEST_REQUIRE(epoch.ticking());
        BOOST_TEST_REQUIRE((tick_at == manual_clock::time_point::min() ||
                            tick_at.time_since_epoch() >= now - 2500us));
        twheel::wheel_entry_list due;
        wheel.advance(now, due);
        while (!due.empty()) {
          auto& e = static_cast<idle_entry&>(due.pop_front());
          if (twheel::detail::refile_if_touched(wheel, e, now, epoch, to_wheel)) continue;
          const auto i = static_cast<std::size_t>(&e - entries.data());
          BOOST_TEST(completed[i] < ns(0), "entry " << i << " completed twice");
          BOOST_TEST(!bound_pending[i], "entry " << i << " completed in its touch's generation");
          completed[i] = now;
          ++done;
        }
      }
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const ns due_at = last[i] + entries[i].period;
        const ns bound_due = bound[i] + entries[i].period;
        const ns rounded = (bound_due + tick - ns(1)) / tick * tick;
        const ns expected = *std::lower_bound(steps.begin(), steps.end(), rounded);
        if (completed[i] < due_at || completed[i] > expected) {
          ++wrong;
          BOOST_TEST_MESSAGE("entry " << i << ": due " << due_at.count() << " ns, completed "
                                      << completed[i].count() << " ns, expected "
                                      << expected.count() << " ns");
        }
      }
      BOOST_TEST(wrong == 0u);
      BOOST_TEST(wheel.empty());
    }
  }
  BOOST_TEST_MESSAGE("stamps: " << stamped << " generation, " << exact << " exact");
  // Both kinds of stamp were exercised.
  BOOST_TEST(stamped > 1000u);
  BOOST_TEST(exact > 100u);
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------------------------------
BOOST_AUTO_TEST_SUITE(cancellation)

BOOST_AUTO_TEST_CASE(cancel_aborts_the_wait) {
  asio::io_context ctx;
  idle_timer idle(ctx, 10s);
  outcome out;
  idle.async_wait(out.handler());
  BOOST_TEST(idle.cancel() == 1u);
  BOOST_TEST(out.calls == 0);  // later, from run()
  const auto r = run_ctx(ctx);
  BOOST_TEST(out.calls == 1);
  BOOST_TEST(out.ec == aborted);
  BOOST_TEST((r.elapsed < 1s));
  BOOST_TEST(idle.cancel() == 0u);
  BOOST_TEST(twheel::stats(ctx).pending == 0u);
}

// A cancelled idle timer keeps its place in the wheel, but touches no longer keep it
// there: when its slot comes due it leaves, however recently it was touched.
BOOST_AUTO_TEST_CASE(a_cancelled_timer_leaves_the_wheel_though_touched) {
  asio::io_context ctx;
  idle_timer idle(ctx, 10ms);
  outcome out;
  idle.async_wait(out.handler());
  BOOST_TEST(idle.cancel() == 1u);
  BOOST_TEST(twheel::stats(ctx).timers == 1u);
  twheel::steady_timer anchor(ctx, 80ms);  // keeps the driver running past the period
  outcome anchored;
  anchor.async_wait(anchored.handler());
  toucher t(ctx, idle, 2ms, wall::now() + 100ms);
  t.start();
  const auto r = run_ctx(ctx);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(out.calls == 1);
  BOOST_TEST(out.ec == aborted);
  BOOST_TEST(anchored.calls == 1);
  BOOST_TEST(t.count > 10);
  const auto s = twheel::stats(ctx);
  BOOST_TEST(s.pending == 0u);
  BOOST_TEST(s.timers == 0u);
}

// cancel() from a handler, while the wait is in its second (re-armed) period.
BOOST_AUTO_TEST_CASE(cancel_after_a_rearm_aborts_the_wait) {
  asio::io_context ctx;
  idle_timer idle(ctx, 30ms);
  outcome out;
  const auto t0 = wall::now();
  idle.async_wait(out.handler());
  toucher t(ctx, idle, 5ms, t0 + 100ms);
  t.start();
  asio::steady_timer canceller(ctx, 70ms);
  std::size_t cancelled = 0;
  wall::time_point cancel_at{};
  canceller.async_wait([&](error_code) {
    cancelled = idle.cancel();
    cancel_at = wall::now();
  });
  run_ctx(ctx);
  BOOST_TEST(cancelled == 1u);
  BOOST_TEST(out.calls == 1);
  BOOST_TEST(out.ec == aborted);
  BOOST_TEST((out.at >= cancel_at));
  BOOST_TEST((out.at < cancel_at + 30ms), "completed " << ms(out.at - cancel_at) << " ms after cancel()");
}

// cancel() called after the wait was settled but before its handler ran: both are due in
// one driver pass, the steady_timer's wait (due earlier) completes first, and its handler
// touches and cancels. cancel() must still abort the idle wait (it did when the idle
// check ran in the handler, and still does now that the wheel settles it).
BOOST_AUTO_TEST_CASE(cancel_in_the_pass_that_checks_for_activity_aborts_the_wait) {
  asio::io_context ctx;
  idle_timer idle(ctx, 50ms);
  twheel::steady_timer first(ctx);  // same wheel, due before the idle check
  outcome out;
  idle.async_wait(out.handler());
  first.expires_after(10ms);
  std::optional<std::size_t> cancelled;
  wall::time_point cancel_at{};
  first.async_wait([&](error_code ec) {
    BOOST_TEST(!ec);
    idle.touch();  // activity...
    cancelled = idle.cancel();  // ...then the connection is closed and its reaper cancelled
    cancel_at = wall::now();
  });
  // Both deadlines pass before the context runs: one driver pass completes both, the
  // steady_timer's wait (earlier deadline) first.
  std::this_thread::sleep_for(80ms);
  run_ctx(ctx);
  BOOST_TEST_REQUIRE(cancelled.has_value());
  BOOST_TEST(out.calls == 1);
  BOOST_TEST(out.ec == aborted, "cancel() returned " << *cancelled << "; the wait completed with '"
                                                     << out.ec.message() << "' "
                                                     << ms(out.at - cancel_at)
                                                     << " ms after cancel()");
  BOOST_TEST((out.at < cancel_at + 50ms));
}

// The same window for per-operation cancellation: a terminal emit into the wait's slot
// after the wheel settled it, before its handler ran, must not be lost.
BOOST_AUTO_TEST_CASE(emit_in_the_pass_that_checks_for_activity_aborts_the_wait) {
  asio::io_context ctx;
  idle_timer idle(ctx, 50ms);
  twheel::steady_timer first(ctx);
  asio::cancellation_signal signal;
  outcome out;
  idle.async_wait(asio::bind_cancellation_slot(signal.slot(), out.handler()));
  first.expires_after(10ms);
  wall::time_point emit_at{};
  first.async_wait([&](error_code) {
    idle.touch();
    signal.emit(asio::cancellation_type::terminal);
    emit_at = wall::now();
  });
  std::this_thread::sleep_for(80ms);
  run_ctx(ctx);
  BOOST_TEST(out.calls == 1);
  BOOST_TEST(out.ec == aborted, "the wait completed with '" << out.ec.message() << "' "
                                                             << ms(out.at - emit_at)
                                                             << " ms after the emit");
  BOOST_TEST((out.at < emit_at + 50ms));
}

// Destruction aborts the wait; the handler runs later from run(), not inside the
// destructor.
BOOST_AUTO_TEST_CASE(destruction_aborts_the_wait_later_from_run) {
  asio::io_context ctx;
  auto idle = std::make_unique<idle_timer>(ctx, 10s);
  outcome out;
  idle->async_wait(out.handler());
  idle.reset();
  BOOST_TEST(out.calls == 0);
  const auto r = run_ctx(ctx);
  BOOST_TEST(out.calls == 1);
  BOOST_TEST(out.ec == aborted);
  BOOST_TEST((r.elapsed < 1s));
  BOOST_TEST(twheel::stats(ctx).pending == 0u);
}

// Destruction while the wait is being re-armed by touches, from a handler.
BOOST_AUTO_TEST_CASE(destruction_of_a_touched_timer_from_a_handler) {
  asio::io_context ctx;
  auto idle = std::make_unique<idle_timer>(ctx, 20ms);
  outcome out;
  idle->async_wait(out.handler());
  asio::steady_timer toucher_timer(ctx);
  int touches = 0;
  std::function<void()> touch = [&] {
    toucher_timer.expires_after(3ms);
    toucher_timer.async_wait([&](error_code ec) {
      if (ec || !idle) return;
      idle->touch();
      if (++touches == 20) {
        idle.reset();
        return;
      }
      touch();
    });
  };
  touch();
  run_ctx(ctx);
  BOOST_TEST(touches == 20);
  BOOST_TEST(out.calls == 1);
  BOOST_TEST(out.ec == aborted);
}

BOOST_AUTO_TEST_CASE(per_operation_cancellation) {
  for (auto type : {asio::cancellation_type::terminal, asio::cancellation_type::partial,
                    asio::cancellation_type::total}) {
    BOOST_TEST_CONTEXT("cancellation type " << static_cast<int>(type)) {
      asio::io_context ctx;
      idle_timer idle(ctx, 30ms);
      asio::cancellation_signal signal;
      outcome out;
      const auto t0 = wall::now();
      idle.async_wait(asio::bind_cancellation_slot(signal.slot(), out.handler()));
      // Keep it busy across several re-arms, then cancel through the slot.
      toucher t(ctx, idle, 5ms, t0 + 150ms);
      t.start();
      asio::steady_timer emitter(ctx, 100ms);
      wall::time_point emit_at{};
      emitter.async_wait([&](error_code) {
        signal.emit(type);
        emit_at = wall::now();
      });
      run_ctx(ctx);
      BOOST_TEST(out.calls == 1);
      BOOST_TEST(out.ec == aborted);
      BOOST_TEST((out.at >= emit_at));
      BOOST_TEST((out.at < emit_at + 30ms));
      signal.emit(type);  // after completion: harmless
      BOOST_TEST(out.calls == 1);
    }
  }
}

// The caller's signal may go, or its slot be cleared, while the wait is pending, as with
// a steady_timer: the wait then completes at its time with success. What the wait left in
// the slot goes with the signal; the handler must not read it afterwards. The next
// listener of the same size (a second idle timer's, here) is put in the freed memory, so
// a read of it would see the second wait's cancellation (ASan: use after free).
BOOST_AUTO_TEST_CASE(a_wait_outlives_its_callers_signal) {
  for (const bool clear : {false, true}) {
    BOOST_TEST_CONTEXT((clear ? "slot cleared" : "signal destroyed")) {
      asio::io_context ctx;
      idle_timer idle(ctx, 30ms);
      idle_timer other(ctx, 10s);
      outcome out, other_out;
      const auto t0 = wall::now();
      {
        auto signal = std::make_unique<asio::cancellation_signal>();
        idle.async_wait(asio::bind_cancellation_slot(signal->slot(), out.handler()));
        if (clear) {
          signal->slot().clear();
        } else {
          signal.reset();
        }
      }
      asio::cancellation_signal other_signal;
      other.async_wait(asio::bind_cancellation_slot(other_signal.slot(), other_out.handler()));
      other_signal.emit(asio::cancellation_type::terminal);
      run_ctx(ctx);
      BOOST_TEST(other_out.calls == 1);
      BOOST_TEST(other_out.ec == aborted);
      BOOST_TEST(out.calls == 1);
      BOOST_TEST(!out.ec, "the wait completed with '" << out.ec.message() << "'");
      BOOST_TEST((out.at >= t0 + 30ms));  // its period, not the other's abort
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

// A wait's operation comes from the handler's associated allocator, and all of it goes
// back before the handler runs, completed or cancelled (Asio's rule: the handler may end
// its allocator's memory). The flag the timer shares with its wait outlives the handler,
// so it is not the handler's memory.
BOOST_AUTO_TEST_CASE(a_wait_allocates_through_the_associated_allocator) {
  for (const bool cancel : {false, true}) {
    BOOST_TEST_CONTEXT("cancelled " << cancel) {
      asio::io_context ctx;
      std::optional<idle_timer> idle(std::in_place, ctx, 5ms);
      alloc_counters counts;
      int calls = 0;
      error_code result;
      std::size_t outstanding_in_handler = 99;
      idle->async_wait(asio::bind_allocator(counting_allocator<void>(&counts), [&](error_code ec) {
        ++calls;
        result = ec;
        outstanding_in_handler = counts.outstanding();
      }));
      if (cancel) idle->cancel();
      run_ctx(ctx);
      BOOST_TEST(calls == 1);
      BOOST_TEST(result == (cancel ? aborted : error_code()));
      BOOST_TEST(counts.allocs.load() == 1u);  // the operation
      BOOST_TEST(outstanding_in_handler == 0u);
      idle.reset();
      BOOST_TEST(counts.outstanding() == 0u);
    }
  }
}

// A session that owns its handlers' memory and its idle timer, and goes with its last
// handler: the timer, destroyed after that memory, must give nothing back to it (the
// timer's flag was freed into the session's freed memory; ASan saw the write before).
BOOST_AUTO_TEST_CASE(a_session_that_ends_with_its_handler_and_its_memory) {
  struct session {
    session(asio::io_context& ctx, arena_watch& w)
        : timer(ctx, 1ms), memory(std::make_unique<arena>(w)) {}
    idle_timer timer;  // declared first: destroyed after `memory`
    std::unique_ptr<arena> memory;
  };
  arena_watch watch;
  int calls = 0;
  asio::io_context ctx;
  {
    auto s = std::make_shared<session>(ctx, watch);
    s->timer.async_wait(asio::bind_allocator(arena_allocator<void>(s->memory.get()),
                                             [s, &calls](error_code) { ++calls; }));
  }
  run_ctx(ctx);
  BOOST_TEST(calls == 1);
  BOOST_TEST(!watch.alive);  // the session went with its handler
  BOOST_TEST(watch.late_frees == 0);
}

// ---------------------------------------------------------------------------------------
BOOST_AUTO_TEST_SUITE(threads_and_moves)

// touch() from another thread while the context runs the wait (run under TSan too).
// The touching thread records the time before each touch(): completion >= that + period.
BOOST_AUTO_TEST_CASE(touch_from_another_thread) {
  asio::io_context ctx;
  idle_timer idle(ctx, 100ms);  // long against a loaded machine's stalls of the thread
  outcome out;
  std::atomic<bool> go{false};
  std::atomic<wall::rep> last_touch{0};
  std::atomic<int> touches{0};
  const auto t0 = wall::now();
  idle.async_wait(out.handler());
  std::thread toucher_thread([&] {
    while (!go.load()) std::this_thread::yield();
    const auto until = wall::now() + 150ms;
    while (wall::now() < until) {
      last_touch.store(wall::now().time_since_epoch().count());
      idle.touch();
      touches.fetch_add(1);
      std::this_thread::sleep_for(1ms);
    }
  });
  go = true;
  run_ctx(ctx);
  toucher_thread.join();
  const wall::time_point last{wall::duration(last_touch.load())};
  BOOST_TEST(touches.load() > 10);
  BOOST_TEST(out.calls == 1);
  BOOST_TEST(!out.ec);
  BOOST_TEST((out.at >= last + 100ms), "completed " << ms(out.at - last) << " ms after the last touch");
  BOOST_TEST((out.at >= t0 + 150ms));
  BOOST_TEST((out.at <= last + 100ms + slack));
}

// A thread touching every timer of `timers` every 200 us for `touch_for`, then stopping.
// It records when its last sweep began and its longest gap between sweeps: a stalled
// thread stops touching.
class sweeping_toucher {
 public:
  sweeping_toucher(std::vector<std::unique_ptr<idle_timer>>& timers, wall::duration touch_for)
      : thread_([this, &timers, touch_for] {
          const auto until = wall::now() + touch_for;
          while (wall::now() < until) {
            const auto now = wall::now();
            const auto previous = last_sweep_;
            last_sweep_ = now;
            for (auto& t : timers) t->touch();
            // From the last sweep's start to the end of this one's touches: a stall inside
            // a sweep (the last one too) counts.
            if (sweeps_ > 0) longest_gap_ = std::max(longest_gap_, wall::now() - previous);
            ++sweeps_;
            std::this_thread::sleep_for(200us);
          }
        }) {}
  ~sweeping_toucher() {
    if (thread_.joinable()) thread_.join();
  }
  sweeping_toucher(const sweeping_toucher&) = delete;
  sweeping_toucher& operator=(const sweeping_toucher&) = delete;

  // After the contexts have run: each wait completed once, with success, and (unless the
  // thread stalled for half a period, which lets the waits complete legitimately before
  // its later sweeps: seen in CI under ASan) never before the last sweep began + period.
  void check(const std::vector<outcome>& outs, wall::duration period) {
    thread_.join();
    const bool stalled = longest_gap_ >= period / 2;
    if (stalled) {
      BOOST_TEST_MESSAGE("the touching thread stalled for " << ms(longest_gap_)
                                                            << " ms; lower bound not checked");
    } else {
      BOOST_TEST(sweeps_ > 10);
    }
    for (std::size_t i = 0; i < outs.size(); ++i) {
      BOOST_TEST(outs[i].calls == 1);
      BOOST_TEST(!outs[i].ec);
      if (stalled) continue;
      BOOST_TEST((outs[i].at >= last_sweep_ + period),
                 "timer " << i << " completed " << ms(outs[i].at - last_sweep_)
                          << " ms after the last sweep of touches began");
    }
  }

 private:
  wall::time_point last_sweep_{};  // written by the thread, read after join()
  wall::duration longest_gap_{};
  int sweeps_ = 0;
  std::thread thread_;
};

// touch() from another thread racing the expiry: 20 timers, touched by a second thread
// every 200 us while the driver re-files them (it reads each stamp under the wheel's lock
// as the thread stores it: the pairing TSan checks), then left silent. Each wait completes
// once, with success, never before the last touch (time read before it) + period.
BOOST_AUTO_TEST_CASE(touch_racing_the_expiry_from_another_thread) {
  constexpr std::size_t n = 20;
  constexpr auto period = 100ms;  // long against a loaded machine's stalls of the thread
  for (int round = 0; round < 4; ++round) {
    BOOST_TEST_CONTEXT("round " << round) {
      asio::io_context ctx;
      std::vector<std::unique_ptr<idle_timer>> timers;
      std::vector<outcome> outs(n);
      for (std::size_t i = 0; i < n; ++i) {
        timers.push_back(std::make_unique<idle_timer>(ctx, period));
        timers.back()->async_wait(outs[i].handler());
      }
      sweeping_toucher toucher(timers, 150ms + round * 20ms);
      run_ctx(ctx);
      toucher.check(outs, period);
      BOOST_TEST(twheel::stats(ctx).pending == 0u);
    }
  }
}

// Two contexts, each run by its own thread, share the process's touch epoch: either
// driver may start the generation whose end bounds the other's stamps. A third thread
// touches the timers of both every 200 us, then stops. Each wait completes once, with
// success, never before the last sweep of touches began + period.
BOOST_AUTO_TEST_CASE(touches_on_two_contexts_share_the_epoch) {
  constexpr std::size_t n = 10;
  constexpr auto period = 100ms;  // long against a loaded machine's stalls of the thread
  asio::io_context ctx[2];
  std::vector<std::unique_ptr<idle_timer>> timers;
  std::vector<outcome> outs(2 * n);
  for (std::size_t i = 0; i < 2 * n; ++i) {
    timers.push_back(std::make_unique<idle_timer>(ctx[i % 2], period));
    timers.back()->async_wait(outs[i].handler());
  }
  sweeping_toucher toucher(timers, 150ms);
  std::thread second([&] { run_ctx(ctx[1]); });
  run_ctx(ctx[0]);
  second.join();
  toucher.check(outs, period);
  BOOST_TEST(twheel::stats(ctx[0]).pending == 0u);
  BOOST_TEST(twheel::stats(ctx[1]).pending == 0u);
}

// Several threads touching, the context run by two threads.
BOOST_AUTO_TEST_CASE(touch_from_many_threads_with_a_multithreaded_context) {
  asio::io_context ctx;
  idle_timer idle(ctx, 20ms);
  std::atomic<int> calls{0};
  std::atomic<bool> ok{false};
  std::atomic<bool> stop{false};
  idle.async_wait([&](error_code ec) {
    ok = !ec;
    calls.fetch_add(1);
  });
  std::vector<std::thread> touchers;
  for (int i = 0; i < 3; ++i) {
    touchers.emplace_back([&] {
      const auto until = wall::now() + 100ms;
      while (!stop.load() && wall::now() < until) {
        idle.touch();
        std::this_thread::sleep_for(500us);
      }
    });
  }
  std::thread runner([&] { ctx.run(); });
  ctx.run();
  runner.join();
  stop = true;
  for (auto& t : touchers) t.join();
  BOOST_TEST(calls.load() == 1);
  BOOST_TEST(ok.load());
}

// Moving the timer keeps its pending wait: touches through the new object still count,
// and cancel() through it aborts.
BOOST_AUTO_TEST_CASE(move_construction_keeps_the_pending_wait) {
  asio::io_context ctx;
  idle_timer a(ctx, 40ms);
  outcome out;
  const auto t0 = wall::now();
  a.async_wait(out.handler());
  idle_timer b(std::move(a));
  BOOST_TEST(ms(b.period()) == 40);
  toucher t(ctx, b, 10ms, t0 + 120ms);
  t.start();
  run_ctx(ctx);
  BOOST_TEST(out.calls == 1);
  BOOST_TEST(!out.ec);
  BOOST_TEST(t.count >= 3);
  BOOST_TEST((out.at >= t.last + 40ms));
  BOOST_TEST((out.at >= t0 + 120ms));

  outcome second;
  b.async_wait(second.handler());
  idle_timer c(std::move(b));
  BOOST_TEST(c.cancel() == 1u);
  run_ctx(ctx);
  BOOST_TEST(second.calls == 1);
  BOOST_TEST(second.ec == aborted);
}

// Destroying the moved-from object does not disturb the wait; destroying the new owner
// aborts it.
BOOST_AUTO_TEST_CASE(moved_from_destruction_is_harmless) {
  asio::io_context ctx;
  outcome out;
  std::unique_ptr<idle_timer> b;
  {
    idle_timer a(ctx, 30ms);
    a.async_wait(out.handler());
    b = std::make_unique<idle_timer>(std::move(a));
  }  // `a` destroyed here
  const auto t0 = wall::now();
  run_ctx(ctx);
  BOOST_TEST(out.calls == 1);
  BOOST_TEST(!out.ec);  // not aborted by the moved-from destructor
  BOOST_TEST((out.at - t0 < 30ms + slack));

  outcome second;
  b->async_wait(second.handler());
  b.reset();
  run_ctx(ctx);
  BOOST_TEST(second.calls == 1);
  BOOST_TEST(second.ec == aborted);
}

// Move assignment over a timer with a pending wait aborts that wait and takes over the
// other's.
BOOST_AUTO_TEST_CASE(move_assignment_aborts_the_overwritten_wait) {
  asio::io_context ctx;
  idle_timer a(ctx, 10s);
  idle_timer b(ctx, 20ms);
  outcome of_a, of_b;
  a.async_wait(of_a.handler());
  b.async_wait(of_b.handler());
  a = std::move(b);
  BOOST_TEST(ms(a.period()) == 20);
  const auto r = run_ctx(ctx);
  BOOST_TEST(of_a.calls == 1);
  BOOST_TEST(of_a.ec == aborted);
  BOOST_TEST(of_b.calls == 1);
  BOOST_TEST(!of_b.ec);
  BOOST_TEST((r.elapsed < 1s));
}

// As Asio's I/O objects: a timer moves into one of another executor type (what
// as_default_on(std::move(timer)) calls), with its pending wait, last touch and executor.
BOOST_AUTO_TEST_CASE(converting_moves_between_executor_types) {
  using R = idle_timer::rebind_executor<asio::io_context::executor_type>::other;
  asio::io_context ctx;

  R r(ctx.get_executor(), 30ms);
  outcome out;
  r.async_wait(out.handler());
  const auto touched = wall::now();  // before: a touch counts from the call
  r.touch();
  idle_timer t(std::move(r));
  BOOST_TEST((t.get_executor() == asio::any_io_executor(ctx.get_executor())));
  BOOST_TEST(ms(t.period()) == 30);
  BOOST_TEST(r.cancel() == 0u);
  BOOST_CHECK_THROW(r.period(), std::logic_error);
  BOOST_CHECK_THROW(idle_timer(std::move(r)), std::logic_error);

  // Assignment aborts the target's wait and carries the source's; from a moved-from
  // timer it throws and leaves the target's wait alone.
  R r2(ctx, 20ms);
  outcome of_r2, of_t2, of_t3;
  r2.async_wait(of_r2.handler());
  idle_timer t2(ctx, 10s);
  t2.async_wait(of_t2.handler());
  t2 = std::move(r2);
  BOOST_TEST(ms(t2.period()) == 20);
  idle_timer t3(ctx, 25ms);
  t3.async_wait(of_t3.handler());
  BOOST_CHECK_THROW(t3 = std::move(r2), std::logic_error);

  // The carried wait is cancelled through the converted timer.
  R r4(ctx, 10s);
  outcome of_r4;
  r4.async_wait(of_r4.handler());
  idle_timer t4(std::move(r4));
  BOOST_TEST(t4.cancel() == 1u);

  // A wait started on a strand's timer still completes in the strand.
  auto strand = asio::make_strand(ctx);
  idle_timer::rebind_executor<decltype(strand)>::other s(strand, 5ms);
  bool in_strand = false;
  error_code s_ec = asio::error::would_block;
  s.async_wait([&](error_code ec) {
    s_ec = ec;
    in_strand = strand.running_in_this_thread();
  });
  idle_timer t5(std::move(s));
  BOOST_TEST((t5.get_executor() == asio::any_io_executor(strand)));

  auto deferred_timer = asio::deferred.as_default_on(idle_timer(ctx, 5ms));
  error_code d_ec = asio::error::would_block;
  deferred_timer.async_wait()([&](error_code ec) { d_ec = ec; });

  const auto run = run_ctx(ctx);
  BOOST_TEST(!run.timed_out);
  BOOST_TEST(out.calls == 1);
  BOOST_TEST(!out.ec);
  BOOST_TEST((out.at >= touched + 30ms));
  BOOST_TEST(of_r2.calls == 1);
  BOOST_TEST(!of_r2.ec);
  BOOST_TEST(of_t2.ec == aborted);
  BOOST_TEST(of_t3.calls == 1);
  BOOST_TEST(!of_t3.ec);
  BOOST_TEST(of_r4.ec == aborted);
  BOOST_TEST(!s_ec);
  BOOST_TEST(in_strand);
  BOOST_TEST(!d_ec);
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------------------------------
// Last on purpose: under AddressSanitizer this test aborts the process.
BOOST_AUTO_TEST_SUITE(context_destruction)

// A plain io_context whose first twheel user is an idle_timer: the wheel_service (and, inside
// it, its driver boost::asio::steady_timer) is created before Asio's timer service.
// ~execution_context destroys services newest first, so Asio's timer service is deleted
// before ~wheel_service destroys the driver timer, whose destructor then reads the freed
// service (heap-use-after-free in deadline_timer_service::cancel, reported by ASan; silent
// without a sanitizer). wheel_service::shutdown() leaves driver_ alive.
BOOST_AUTO_TEST_CASE(wheel_created_before_asios_timer_service) {
  int calls = 0;
  {
    asio::io_context ctx;  // deliberately not asio::io_context
    idle_timer idle(ctx, 5ms);
    idle.async_wait([&](error_code ec) {
      ++calls;
      BOOST_TEST(!ec);
    });
    ctx.run();
  }  // ~io_context
  BOOST_TEST(calls == 1);
}

BOOST_AUTO_TEST_SUITE_END()

// A moved-from idle_timer reports misuse instead of crashing, and can be assigned to.
BOOST_AUTO_TEST_CASE(moved_from_object_reports_misuse) {
  asio::io_context ctx;
  idle_timer a(ctx, 20ms);
  idle_timer b(std::move(a));
  a.touch();  // does nothing
  BOOST_TEST(a.cancel() == 0u);
  BOOST_CHECK_THROW(a.period(), std::logic_error);
  BOOST_CHECK_THROW(a.get_executor(), std::logic_error);
  BOOST_CHECK_THROW(a.async_wait([](error_code) {}), std::logic_error);
  BOOST_CHECK_THROW(static_cast<void>(a.async_wait(asio::deferred)), std::logic_error);  // not at launch

  a = idle_timer(ctx, 10ms);  // usable again
  int calls = 0;
  error_code got = asio::error::would_block;
  a.async_wait([&](error_code ec) {
    ++calls;
    got = ec;
  });
  b.touch();
  const auto r = run_ctx(ctx);
  BOOST_TEST(!r.timed_out);
  BOOST_TEST(calls == 1);
  BOOST_TEST(got == error_code{});
  BOOST_TEST(twheel::stats(ctx).pending == 0u);
}

#if defined(TWHEEL_TEST_HAS_ASIO_CANCEL_AFTER)
// Asio's own adapters (Boost 1.86 and later) find the timer's executor through the
// initiation's executor_type: a wait under Asio's cancel_after is cancelled by it.
BOOST_AUTO_TEST_CASE(asio_cancel_after_cancels_a_wait) {
  asio::io_context ctx;
  idle_timer t(ctx, 10s);
  const auto w = twheel_test::wait_under_asio_cancel_after(ctx, t, 20ms);
  BOOST_TEST(!w.timed_out);
  BOOST_TEST(w.calls == 1);
  BOOST_TEST(w.ec == asio::error::operation_aborted);
  BOOST_TEST((w.elapsed >= 20ms));
}
#endif

// One chain of waits, each started from the previous one's handler, on a context run by two
// threads (Asio's implicit strand). A wait may complete on the other thread before
// async_wait() returns: start() must not write the timer after filing the wait, or the
// next wait's flag is overwritten and leaked (TSan saw the race on flag_; the flags,
// allocated through the handler's allocator, were left live).
BOOST_AUTO_TEST_CASE(a_chain_of_waits_on_two_threads_leaves_nothing_behind) {
  alloc_counters counters;
  constexpr int rounds = 20000;
  int done = 0;
  int failed = 0;
  {
    asio::io_context ctx(2);
    idle_timer timer(ctx, std::chrono::nanoseconds(1));
    std::function<void()> again = [&] {
      timer.async_wait(asio::bind_allocator(counting_allocator<void>(&counters),
                                            [&](error_code ec) {
                                              if (ec) {
                                                ++failed;
                                                return;
                                              }
                                              if (++done < rounds) again();
                                            }));
    };
    again();
    std::thread other([&] { ctx.run(); });
    ctx.run();
    other.join();
  }
  BOOST_TEST(done == rounds);
  BOOST_TEST(failed == 0);
  BOOST_TEST(counters.outstanding() == 0u);
}
