// bench_timers: twheel::steady_timer against boost::asio::steady_timer, in the same process
// and the same run, interleaved (asio, twheel, asio, twheel, ...), medians of repetitions.
//
// Every workload is one function template over the timer type, so both libraries run
// exactly the same code with the same random inputs; each repetition gets a fresh
// io_context. Workloads, at N pending timers:
//
//   arm     N timers constructed (not timed); time expires_after(random 1..60 s) +
//           async_wait(handler) on each: ns per timer. The context is fresh, so the
//           waits' memory is had (and its pages first written) inside the timed loop.
//   arm-warm  the same on a context where as many timers were armed, cancelled and
//           destroyed before (not timed): the memory has been had once.
//   churn   N timers armed (not timed); time M = min(N, 200000) re-arms of a random
//           timer (expires_after(random 1..60 s), which aborts its wait, then async_wait)
//           plus the ctx.poll() that runs the M aborted handlers: ns per re-arm, aborted
//           handler included.
//   floor   churn's picks and memory pattern with no timer library (see bench_floor):
//           what the machine itself costs; also with a mutex per pick, with a clock read,
//           prefetched, with picks as long as a re-arm, and churn as a multiple of it
//           (runs with churn).
//   cancel  N timers armed (not timed); time cancel() on each plus the ctx.poll() that
//           runs the N aborted handlers: ns per timer. cancel-destroy: the same, then the
//           timers destroyed, timed too (twheel's cancel() leaves the timer's entry in
//           the wheel; its destruction takes it out; Asio's cancel() does that at once).
//           Beside it, handler-floor: N handlers of the same kind posted to an
//           io_context (not timed), then the poll() that runs them: what Asio's
//           scheduler itself costs per handler, which every aborted or expired wait pays
//           in both libraries (each is one operation).
//   burst   N timers armed with one common deadline in the future; ctx.run() until the
//           last handler. Three views of the same run (handlers per second):
//             burst      wall time from the deadline (or from entering run(), if later)
//                        to the last handler: everything the library does after the
//                        deadline (asio: heap pops; twheel: wheel passes, plus its tick
//                        rounding of up to one tick, 8 us by default, which is latency
//                        rather than work);
//             burst-cpu  thread CPU time from entering run() to the last handler (work
//                        only: no idle wait, no tick rounding);
//             burst-f2l  wall time from the first handler to the last (excludes work done
//                        before the first handler, e.g. asio pops all due timers first).
//   spread  N timers armed with deadlines uniform over one second (expires_at); ctx.run()
//           until the last handler. Each handler records its lateness: the time it ran
//           minus the deadline its timer was given. Reported: handlers per second (window
//           start -> last handler), thread CPU ns per handler, lateness p50 / p99 / p99.9 /
//           max (medians over repetitions), the smallest lateness of all repetitions and
//           the number of negative ones (a wait completed early: counted as a failure),
//           twheel's driver wake-ups (stats().wakeups during run(), passes included that
//           did not sleep), and for both the thread's sleeps: its voluntary context
//           switches during run() (getrusage), the wake-ups as the kernel counts them,
//           with nothing traced.
//   wakeups the spread run for each library once more, in a child process under
//           `strace -f -e trace=epoll_wait,timerfd_settime`: the reactor's waits (and of
//           them the blocking ones, with a non-zero timeout) and timer re-settings as the
//           kernel saw them (needs strace).
//   handler-32B  arm, churn and memory (arm-32B, churn-32B, memory-32B) with a 32-byte
//           handler (wide_counting_handler), which twheel's in-timer handler box (16
//           bytes) does not hold: each wait's operation is allocated.
//   memory  in a separate process per measurement (this program re-executed with
//           --memory <lib> <n>): N timers each with one pending async_wait, in a
//           std::vector<std::optional<Timer>> allocated before the baseline. Reported:
//           heap bytes in use (mallinfo2 uordblks + hblkhd) per timer + sizeof(Timer).
//
// Handlers: a lambda capturing one pointer (counts calls and errors; 8 bytes), but for
// the -32B rows; the counts are checked after every repetition (every handler called
// exactly once, with the expected error code), and burst handlers are checked not to run
// before the deadline. If arming takes over 1 s (a loaded machine), the earliest churn
// timers expire inside the timed poll(); that is counted and reported as a warning under
// the churn row.
//
// The table goes to stdout as it is measured, then every row again as a "csv," line
// (bench_report.hpp); scripts/bench.sh collects those into out/bench.csv.
//
// Usage: bench_timers [--quick] [--reps R] [--sizes n1,n2,...] [--workloads w1,w2,...]
//                     [--lib both|asio|twheel] [--clock wall|cpu] [--unlocked]
//                     [--huge-pages]  (the timers and the floor's objects in 2 MiB pages)
//                     [--tick-us T] [--slack-us S] (twheel's wheel_options; default: its defaults)
//                     [--watchdog S (default 300, 0: off)]
//                     [--spread-trace]  (spread: lateness by 50 ms of the window, per run)
//                     [--expiry-scale F (valgrind only)]
//        bench_timers --memory asio|twheel N      (internal: one memory measurement)

#include "bench_report.hpp"

#include <twheel/steady_timer.hpp>
#include <twheel/wheel_service.hpp>

#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/system/error_code.hpp>

#include <malloc.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <fstream>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;
using asio_timer = boost::asio::steady_timer;
using wheel_timer = twheel::steady_timer;

static_assert(std::is_same_v<asio_timer::executor_type, wheel_timer::executor_type>,
              "both timers should use the same executor type");

// ---- utilities -------------------------------------------------------------------------

double elapsed_ns(clock_type::time_point a, clock_type::time_point b) {
  return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}

std::int64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Every context's concurrency hint: Asio's default, or with --unlocked
// BOOST_ASIO_CONCURRENCY_HINT_UNSAFE (Asio takes no lock, and twheel, seeing it, none
// either): the single-threaded case of both libraries.
int g_concurrency_hint = BOOST_ASIO_CONCURRENCY_HINT_DEFAULT;
// --tick-us / --slack-us: twheel's contexts get these options (configure()) instead of the
// defaults; Asio's contexts are untouched.
std::optional<twheel::wheel_options> g_wheel_options;

twheel::wheel_options& wheel_options_to_set() {
  if (!g_wheel_options) g_wheel_options.emplace();
  return *g_wheel_options;
}

// The clock of the arm, churn and cancel timings: wall (steady_clock, the default) or,
// with --clock cpu, this thread's CPU time (ignores time spent preempted on a busy machine).
bool g_cpu_clock = false;

// --spread-trace: after each spread repetition, the lateness by 50 ms of the window.
bool g_spread_trace = false;

std::int64_t timestamp_ns() {
  if (g_cpu_clock) return thread_cpu_ns();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             clock_type::now().time_since_epoch()).count();
}

int g_failures = 0;

void fail(const std::string& what) {
  ++g_failures;
  std::fprintf(stderr, "ERROR: %s\n", what.c_str());
  std::fflush(stderr);
}

void expect_eq(const char* lib, const char* workload, std::size_t n, const char* what,
               std::uint64_t got, std::uint64_t want) {
  if (got != want) {
    fail(std::string(lib) + " " + workload + " n=" + std::to_string(n) + ": " + what + " = " +
         std::to_string(got) + ", expected " + std::to_string(want));
  }
}

// A watchdog: a hung workload is reported by name instead of hanging the run.
char g_phase[160] = "startup";
unsigned g_watchdog_s = 300;  // --watchdog S; 0: off

extern "C" void on_alarm(int) {
  const char msg[] = "\nERROR: watchdog: phase took longer than the --watchdog limit: ";
  ssize_t r = write(2, msg, sizeof msg - 1);
  r = write(2, g_phase, std::strlen(g_phase));
  r = write(2, "\n", 1);
  (void)r;
  _exit(3);
}

void enter_phase(const char* lib, const char* workload, std::size_t n, int rep) {
  std::snprintf(g_phase, sizeof g_phase, "%s %s n=%zu rep=%d", lib, workload, n, rep);
  alarm(g_watchdog_s);
}

template <class Timer>
constexpr const char* lib_name() {
  return std::is_same_v<Timer, wheel_timer> ? "twheel" : "asio";
}

// A context for `Timer`: twheel's with the options of --tick-us / --slack-us, if given.
template <class Timer>
void configure_for(boost::asio::io_context& ctx) {
  if constexpr (std::is_same_v<Timer, wheel_timer>) {
    if (g_wheel_options) twheel::configure(ctx, *g_wheel_options);
  } else {
    (void)ctx;
  }
}

// ---- inputs shared by both libraries ---------------------------------------------------

struct inputs {
  std::vector<std::int64_t> arm_ns;    // per timer: 1..60 s
  std::vector<std::uint32_t> pick;     // churn: which timer
  std::vector<std::int64_t> rearm_ns;  // churn: its new expiry, 1..60 s
  std::vector<std::int64_t> spread_ns;  // spread: per timer, offset 0..1 s from the start
};

constexpr std::int64_t min_expiry_ns = 1'000'000'000;
constexpr std::int64_t max_expiry_ns = 60'000'000'000;
// --expiry-scale F multiplies the 1..60 s range: only for running under valgrind, which is
// slow enough for the earliest timers to expire while the others are still being armed.
std::int64_t g_expiry_scale = 1;

constexpr std::int64_t spread_window_ns = 1'000'000'000;  // spread: deadlines over 1 s

std::size_t churn_ops(std::size_t n) { return std::min<std::size_t>(n, 200'000); }

inputs make_inputs(std::size_t n) {
  inputs in;
  std::mt19937_64 rng(0x7768656c + n);
  std::uniform_int_distribution<std::int64_t> expiry(min_expiry_ns * g_expiry_scale,
                                                     max_expiry_ns * g_expiry_scale);
  std::uniform_int_distribution<std::uint32_t> index(0, static_cast<std::uint32_t>(n - 1));
  in.arm_ns.resize(n);
  for (auto& v : in.arm_ns) v = expiry(rng);
  const std::size_t m = churn_ops(n);
  in.pick.resize(m);
  in.rearm_ns.resize(m);
  for (std::size_t j = 0; j < m; ++j) {
    in.pick[j] = index(rng);
    in.rearm_ns[j] = expiry(rng);
  }
  std::uniform_int_distribution<std::int64_t> offset(0, spread_window_ns - 1);
  in.spread_ns.resize(n);
  for (auto& v : in.spread_ns) v = offset(rng);
  return in;
}

// ---- handlers --------------------------------------------------------------------------

struct counters {
  std::uint64_t calls = 0;
  std::uint64_t errors = 0;
};

// The handler of arm, churn, cancel and memory: a lambda capturing one pointer.
inline auto counting_handler(counters* c) {
  return [c](const boost::system::error_code& ec) {
    ++c->calls;
    if (ec) ++c->errors;
  };
}

// The handler of the "-32B" rows: 32 bytes, as beast::bind_front_handler(&session::f,
// shared_from_this()) is (a member function pointer and a shared_ptr). twheel keeps a
// handler of up to 16 bytes (with no associated executor, allocator or cancellation slot)
// in the timer itself; this one does not fit, so each wait's operation is allocated, as
// Asio's always is.
struct wide_counting_handler {
  counters* c;
  std::uintptr_t unused[3];
  void operator()(const boost::system::error_code& ec) const {
    ++c->calls;
    if (ec) ++c->errors;
  }
};
static_assert(sizeof(wide_counting_handler) == 32);

enum class handler_size { narrow, wide };

template <handler_size H>
auto make_handler(counters* c) {
  if constexpr (H == handler_size::narrow) {
    return counting_handler(c);
  } else {
    return wide_counting_handler{c, {}};
  }
}

// --huge-pages: the timers (both libraries' alike) and the floor's objects in 2 MiB pages
// (madvise(MADV_HUGEPAGE) on their vector's memory before it is first written; needs
// transparent huge pages in "madvise" or "always" mode). At a million timers a 4 KiB
// page is a TLB miss, a page walk, per random pick. Each library's own memory (Asio's
// operations, twheel's records) is left as it is.
bool g_huge_pages = false;

template <class T>
struct huge_page_allocator {
  using value_type = T;
  static constexpr std::size_t huge = std::size_t{2} << 20;

  huge_page_allocator() = default;
  template <class U>
  huge_page_allocator(const huge_page_allocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    if (!g_huge_pages || bytes < huge) return std::allocator<T>().allocate(n);
    const std::size_t rounded = (bytes + huge - 1) / huge * huge;
    void* p = std::aligned_alloc(huge, rounded);
    if (p == nullptr) throw std::bad_alloc();
    ::madvise(p, rounded, MADV_HUGEPAGE);  // advice: failure leaves 4 KiB pages
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (!g_huge_pages || n * sizeof(T) < huge) {
      std::allocator<T>().deallocate(p, n);
    } else {
      std::free(p);
    }
  }
  template <class U>
  bool operator==(const huge_page_allocator<U>&) const noexcept { return true; }
  template <class U>
  bool operator!=(const huge_page_allocator<U>&) const noexcept { return false; }
};

template <class Timer>
using timer_vector = std::vector<std::optional<Timer>, huge_page_allocator<std::optional<Timer>>>;

template <class Timer>
timer_vector<Timer> make_timers(boost::asio::io_context& ctx, std::size_t n) {
  timer_vector<Timer> timers(n);
  for (auto& t : timers) t.emplace(ctx);
  return timers;
}

// The timed regions are functions of their own (noinline) so that profilers can single
// them out; the call costs once per region, not per operation.
template <class Timer, handler_size H = handler_size::narrow>
[[gnu::noinline]] void arm_all(timer_vector<Timer>& timers, const inputs& in, counters* c) {
  const std::size_t n = timers.size();
  for (std::size_t i = 0; i < n; ++i) {
    Timer& t = *timers[i];
    t.expires_after(std::chrono::nanoseconds(in.arm_ns[i]));
    t.async_wait(make_handler<H>(c));
  }
}

// Cancels everything still pending and runs the aborted handlers (not timed).
template <class Timer>
void cancel_all(boost::asio::io_context& ctx, timer_vector<Timer>& timers) {
  for (auto& t : timers) t->cancel();
  ctx.restart();  // in case an earlier run()/poll() ran out of work and stopped it
  ctx.poll();
}

std::uint64_t g_churn_expired = 0;  // timers that expired inside churn's timed poll()

template <class Timer, handler_size H = handler_size::narrow>
[[gnu::noinline]] std::size_t churn_loop(boost::asio::io_context& ctx,
                                         timer_vector<Timer>& timers, const inputs& in,
                                         counters* c) {
  const std::size_t m = in.pick.size();
  std::size_t aborted = 0;  // what expires_after() reports
  for (std::size_t j = 0; j < m; ++j) {
    Timer& t = *timers[in.pick[j]];
    aborted += t.expires_after(std::chrono::nanoseconds(in.rearm_ns[j]));
    t.async_wait(make_handler<H>(c));
  }
  ctx.poll();
  return aborted;
}

template <class Timer>
[[gnu::noinline]] void cancel_loop(boost::asio::io_context& ctx, timer_vector<Timer>& timers) {
  for (auto& t : timers) t->cancel();
  ctx.poll();
}

// Destroys the timers in place; the vector's memory stays (freed untimed, later).
template <class Timer>
[[gnu::noinline]] void destroy_all(timer_vector<Timer>& timers) {
  for (auto& t : timers) t.reset();
}

// ---- workloads -------------------------------------------------------------------------

// 1. arm: ns per expires_after + async_wait. Warm (arm-warm): on a context whose first
// round of as many timers (armed, cancelled, destroyed) ran before, untimed, so that the
// memory the waits take has been had once (Asio's operations from the heap, which glibc
// may have trimmed since; twheel's records from its pool); the timers are new, as a new
// connection's are.
template <class Timer, handler_size H = handler_size::narrow, bool Warm = false>
double bench_arm(std::size_t n, const inputs& in) {
  boost::asio::io_context ctx(g_concurrency_hint);
  configure_for<Timer>(ctx);
  counters c;
  double ns = 0;
  if constexpr (Warm) {
    counters first;
    auto timers = make_timers<Timer>(ctx, n);
    arm_all<Timer, H>(timers, in, &first);
    cancel_all(ctx, timers);
    expect_eq(lib_name<Timer>(), "arm-warm", n, "first round's handlers", first.calls, n);
  }
  {
    auto timers = make_timers<Timer>(ctx, n);
    const std::int64_t t0 = timestamp_ns();
    arm_all<Timer, H>(timers, in, &c);
    const std::int64_t t1 = timestamp_ns();
    ns = static_cast<double>(t1 - t0) / static_cast<double>(n);
    expect_eq(lib_name<Timer>(), "arm", n, "handlers run before cancel", c.calls, 0);
    cancel_all(ctx, timers);
    expect_eq(lib_name<Timer>(), "arm", n, "handlers after cancel", c.calls, n);
    expect_eq(lib_name<Timer>(), "arm", n, "aborted handlers", c.errors, n);
  }
  return ns;
}

// 2. churn: ns per (expires_after + async_wait) on a random armed timer, with the poll()
// that runs the aborted handlers included.
template <class Timer, handler_size H = handler_size::narrow>
double bench_churn(std::size_t n, const inputs& in) {
  boost::asio::io_context ctx(g_concurrency_hint);
  configure_for<Timer>(ctx);
  counters c;
  const std::size_t m = churn_ops(n);
  double ns = 0;
  {
    auto timers = make_timers<Timer>(ctx, n);
    arm_all<Timer, H>(timers, in, &c);
    const std::int64_t t0 = timestamp_ns();
    const std::size_t reported = churn_loop<Timer, H>(ctx, timers, in, &c);
    const std::int64_t t1 = timestamp_ns();
    expect_eq(lib_name<Timer>(), "churn", n, "waits expires_after() reported cancelled",
              reported, m);
    ns = static_cast<double>(t1 - t0) / static_cast<double>(m);
    // Every re-arm aborts exactly one wait. Timers armed first may reach their deadline
    // (1 s at the earliest) if arming was that slow; those then complete in the timed
    // poll() too, with success. Counted, and reported as a contaminated measurement.
    const std::uint64_t expired = c.calls - c.errors;
    expect_eq(lib_name<Timer>(), "churn", n, "aborted handlers run by poll()", c.errors, m);
    g_churn_expired += expired;
    cancel_all(ctx, timers);
    expect_eq(lib_name<Timer>(), "churn", n, "handlers after cancel", c.calls, m + n);
    expect_eq(lib_name<Timer>(), "churn", n, "aborted handlers", c.errors, m + n - expired);
  }
  return ns;
}

// 2b. floor: churn's memory pattern with no timer library, so that every table shows how
// far each library is from the machine. The same picks and new expiries as churn, over N
// objects of the churn timer's size (sizeof(std::optional<twheel::steady_timer>)): store
// the deadline in the picked object, append it to a ready queue (an array of pointers: an
// object picked twice before the queue runs is queued twice, as its two waits would be)
// and, every 1,024 picks, call a function pointer on each queued object (the aborted
// handlers). Three flavours:
// - plain: the above; one `now` read before the loop, and the object only written;
// - locked: an uncontended mutex taken around each pick, as a thread-safe library must;
// - clocked: what expires_after()'s contract adds on top of plain, still with no library:
//   a steady_clock read per pick (now + d; the vDSO orders its rdtsc with lfence, which
//   waits for every earlier load) and a read of the object before the store (a timer must
//   know whether a wait is pending before it can abort it). Each pick's miss can then no
//   longer overlap the next one's;
// - prefetched: clocked with the object prefetched before the clock read, as
//   twheel's expires_after() does: the fence does not wait for a prefetch, so the miss
//   overlaps the clock read and the picks around it again. The lowest of the three
//   that keeps expires_after()'s contract.
// - long: prefetched, plus about 380 instructions of work per pick that touch no memory
//   (eight independent chains of register adds), as long as a twheel re-arm (callgrind:
//   about 380 instructions for expires_after + async_wait). A short pick leaves the next
//   picks' prefetches inside the processor's reorder window, so their misses overlap; a
//   pick this long does not, and each miss is paid in full. What twheel's churn would
//   cost if its instructions cost nothing beyond their own execution.
enum class floor_kind { plain, locked, clocked, prefetched, prefetched_long };

// About 380 instructions of register work (38 iterations of eight independent adds, a
// decrement and a branch); the asm is volatile, so the compiler keeps it.
inline std::int64_t work_of_a_rearm(std::int64_t x) {
#if defined(__GNUC__) && defined(__x86_64__)
  std::int64_t a = x, b = x + 1, c = x + 2, d = x + 3, e = x + 4, f = x + 5, g = x + 6,
               h = x + 7;
  long i = 38;
  asm volatile(
      "1:\n\t"
      "add $1, %0\n\tadd $1, %1\n\tadd $1, %2\n\tadd $1, %3\n\t"
      "add $1, %4\n\tadd $1, %5\n\tadd $1, %6\n\tadd $1, %7\n\t"
      "dec %8\n\tjnz 1b"
      : "+r"(a), "+r"(b), "+r"(c), "+r"(d), "+r"(e), "+r"(f), "+r"(g), "+r"(h), "+r"(i));
  return a ^ b ^ c ^ d ^ e ^ f ^ g ^ h;
#else
  volatile std::int64_t v = x;
  for (int i = 0; i < 64; ++i) v = v + 1;
  return v;
#endif
}

struct floor_object {
  void (*fn)(floor_object*, counters*);
  std::int64_t deadline;
  unsigned char waiting;
  unsigned char rest[sizeof(std::optional<wheel_timer>) - 17];
};
static_assert(sizeof(floor_object) == sizeof(std::optional<wheel_timer>));

void floor_handler(floor_object*, counters* c) {
  ++c->calls;
  ++c->errors;
}

using floor_objects = std::vector<floor_object, huge_page_allocator<floor_object>>;

template <floor_kind Kind>
[[gnu::noinline]] void floor_loop(floor_objects& objects, const inputs& in,
                                  counters* c, std::mutex& mutex) {
  const std::size_t m = in.pick.size();
  constexpr std::size_t batch = 1024;
  floor_object* ready[batch];
  std::size_t queued = 0;
  const std::int64_t start = timestamp_ns();
  for (std::size_t j = 0; j < m; ++j) {
    floor_object& o = objects[in.pick[j]];
    if constexpr (Kind == floor_kind::locked) mutex.lock();
    if constexpr (Kind != floor_kind::plain && Kind != floor_kind::locked) {
      if constexpr (Kind != floor_kind::clocked) __builtin_prefetch(&o, 1);
      const std::int64_t now = clock_type::now().time_since_epoch().count();
      if (o.waiting) ready[queued++] = &o;  // always true: every object has a wait
      o.deadline = now + in.rearm_ns[j];
      if constexpr (Kind == floor_kind::prefetched_long) (void)work_of_a_rearm(now);
    } else {
      o.deadline = start + in.rearm_ns[j];
      ready[queued++] = &o;
    }
    if constexpr (Kind == floor_kind::locked) mutex.unlock();
    if (queued == batch || j + 1 == m) {
      for (std::size_t k = 0; k < queued; ++k) ready[k]->fn(ready[k], c);
      queued = 0;
    }
  }
}

template <floor_kind Kind>
double bench_floor(std::size_t n, const inputs& in) {
  floor_objects objects(n);
  for (auto& o : objects) {
    o.fn = &floor_handler;
    o.deadline = 0;
    o.waiting = 1;
  }
  counters c;
  std::mutex mutex;
  const std::int64_t t0 = timestamp_ns();
  floor_loop<Kind>(objects, in, &c, mutex);
  const std::int64_t t1 = timestamp_ns();
  expect_eq("floor", "floor", n, "function calls", c.calls, in.pick.size());
  return static_cast<double>(t1 - t0) / static_cast<double>(in.pick.size());
}

// 3. cancel: ns per cancel(), with the poll() that runs the aborted handlers included.
// With Destroy (cancel-destroy), the timers' destruction after that poll() is timed too:
// twheel's cancel() leaves the timer's entry in the wheel, for its next wait to reuse,
// and takes it out when the timer is destroyed (or when its slot comes due), while
// Asio's cancel() takes the timer out of its heap at once. A connection that closes
// pays both.
template <class Timer, bool Destroy = false>
double bench_cancel(std::size_t n, const inputs& in) {
  boost::asio::io_context ctx(g_concurrency_hint);
  configure_for<Timer>(ctx);
  counters c;
  double ns = 0;
  {
    auto timers = make_timers<Timer>(ctx, n);
    arm_all(timers, in, &c);
    const std::int64_t t0 = timestamp_ns();
    cancel_loop(ctx, timers);
    if constexpr (Destroy) destroy_all(timers);
    const std::int64_t t1 = timestamp_ns();
    ns = static_cast<double>(t1 - t0) / static_cast<double>(n);
    expect_eq(lib_name<Timer>(), "cancel", n, "handlers run", c.calls, n);
    expect_eq(lib_name<Timer>(), "cancel", n, "aborted handlers", c.errors, n);
  }
  return ns;
}

// 3b. handler-floor: ns per handler for io_context::poll() to run N already-posted
// handlers (the counting handler, posted with asio::post: one operation each).
double bench_handler_floor(std::size_t n) {
  boost::asio::io_context ctx(g_concurrency_hint);
  counters c;
  const boost::system::error_code aborted = boost::asio::error::operation_aborted;
  for (std::size_t i = 0; i < n; ++i) {
    boost::asio::post(ctx, [h = counting_handler(&c), aborted]() mutable { h(aborted); });
  }
  const std::int64_t t0 = timestamp_ns();
  ctx.poll();
  const std::int64_t t1 = timestamp_ns();
  expect_eq("floor", "handler-floor", n, "handlers run", c.calls, n);
  return static_cast<double>(t1 - t0) / static_cast<double>(n);
}

// 4. burst expiry.
struct burst_state {
  std::uint64_t n = 0;
  std::uint64_t calls = 0;
  std::uint64_t errors = 0;
  clock_type::time_point deadline{};
  clock_type::time_point first{};
  clock_type::time_point last{};
  std::int64_t last_cpu = 0;
};

struct burst_result {
  double wall_rate = 0;  // handlers/s, deadline (or run() entry) -> last handler
  double cpu_rate = 0;   // handlers/s, thread CPU time in run() up to the last handler
  double f2l_rate = 0;   // handlers/s, first handler -> last handler
  bool late_start = false;  // the deadline had passed before run() was entered
  std::optional<twheel::wheel_stats> stats;
};

template <class Timer>
burst_result bench_burst(std::size_t n) {
  boost::asio::io_context ctx(g_concurrency_hint);
  configure_for<Timer>(ctx);
  burst_state s;
  s.n = n;
  burst_result r;
  {
    auto timers = make_timers<Timer>(ctx, n);
    // Far enough ahead that arming is over before it (about 0.2 us per timer is needed).
    s.deadline = clock_type::now() + std::chrono::milliseconds(20) +
                 std::chrono::nanoseconds(500) * static_cast<std::int64_t>(n);
    burst_state* p = &s;
    for (auto& t : timers) {
      t->expires_at(s.deadline);
      t->async_wait([p](const boost::system::error_code& ec) {
        if (++p->calls == 1) p->first = clock_type::now();
        if (ec) ++p->errors;
        if (p->calls == p->n) {
          p->last = clock_type::now();
          p->last_cpu = thread_cpu_ns();
        }
      });
    }
    const auto run_wall = clock_type::now();
    const std::int64_t run_cpu = thread_cpu_ns();
    ctx.run();
    const char* lib = lib_name<Timer>();
    expect_eq(lib, "burst", n, "handlers run", s.calls, n);
    expect_eq(lib, "burst", n, "handlers with an error", s.errors, 0);
    if (s.calls != 0 && s.first < s.deadline) {
      fail(std::string(lib) + " burst n=" + std::to_string(n) + ": first handler ran " +
           std::to_string(elapsed_ns(s.first, s.deadline)) + " ns before the deadline");
    }
    if (s.calls == n) {
      r.late_start = run_wall > s.deadline;
      const auto from = std::max(run_wall, s.deadline);
      const double dn = static_cast<double>(n);
      r.wall_rate = dn / (elapsed_ns(from, s.last) * 1e-9);
      r.cpu_rate = dn / (static_cast<double>(s.last_cpu - run_cpu) * 1e-9);
      // n - 1 intervals between the first and the last handler.
      r.f2l_rate = n > 1 ? static_cast<double>(n - 1) / (elapsed_ns(s.first, s.last) * 1e-9) : 0;
    }
    if constexpr (std::is_same_v<Timer, wheel_timer>) r.stats = twheel::stats(ctx);
  }
  return r;
}

// 5. spread expiry: N timers with deadlines uniform over 1 s; ctx.run() until the last
// handler. Each handler records its lateness: the time it runs minus the deadline its
// timer was given (expires_at). A negative lateness is a wait completed early: a bug.
struct spread_slot {
  clock_type::time_point deadline{};
  std::int64_t late_ns = 0;
};

struct spread_state {
  std::uint64_t n = 0;
  std::uint64_t calls = 0;
  std::uint64_t errors = 0;
  clock_type::time_point last{};
  std::int64_t last_cpu = 0;
};

struct spread_result {
  double rate = 0;        // handlers/s, start of the window -> last handler
  double cpu_ns = 0;      // thread CPU time in run() per handler
  double p50_us = 0, p99_us = 0, p999_us = 0, max_us = 0, min_us = 0;
  std::uint64_t negative = 0;  // handlers that ran before their deadline
  std::uint64_t due_before_run = 0;  // deadlines already passed when run() was entered
  double wakeups = bench::na;  // twheel: stats().wakeups during run()
  double sleeps = 0;  // voluntary context switches of the thread during run(): its sleeps
};

// The calling thread's voluntary context switches so far: each time it blocked (here, in
// epoll_wait) and was woken. Counted by the kernel, with nothing traced.
std::int64_t thread_sleeps() {
  rusage ru{};
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_nvcsw;
}

// Where in the window the lateness is: one line per 50 ms of deadlines.
void print_spread_trace(const char* lib, std::size_t n, const inputs& in,
                        const std::vector<std::int64_t>& late_ns) {
  constexpr std::int64_t bucket_ns = 50'000'000;
  std::vector<std::vector<std::int64_t>> buckets(spread_window_ns / bucket_ns);
  for (std::size_t i = 0; i < n; ++i) {
    buckets[static_cast<std::size_t>(in.spread_ns[i] / bucket_ns)].push_back(late_ns[i]);
  }
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    auto& v = buckets[b];
    if (v.empty()) continue;
    std::sort(v.begin(), v.end());
    const auto at = [&](double q) {
      return static_cast<double>(v[std::min(v.size() - 1, static_cast<std::size_t>(
                                                            q * static_cast<double>(v.size())))]) *
             1e-3;
    };
    std::printf("spread-trace %s n=%zu window %4zu-%4zu ms: %7zu deadlines, lateness us p50 "
                "%9.1f p99 %9.1f max %9.1f\n",
                lib, n, b * 50, b * 50 + 50, v.size(), at(0.5), at(0.99),
                static_cast<double>(v.back()) * 1e-3);
  }
}

template <class Timer>
spread_result bench_spread(std::size_t n, const inputs& in) {
  boost::asio::io_context ctx(g_concurrency_hint);
  configure_for<Timer>(ctx);
  spread_state s;
  s.n = n;
  spread_result r;
  std::vector<spread_slot> slots(n);
  {
    auto timers = make_timers<Timer>(ctx, n);
    // The window starts once arming is surely over (0.2 to 1 us per timer is needed,
    // more on a loaded machine).
    const auto start = clock_type::now() + std::chrono::milliseconds(20) +
                       std::chrono::nanoseconds(2000) * static_cast<std::int64_t>(n);
    spread_state* p = &s;
    for (std::size_t i = 0; i < n; ++i) {
      spread_slot* slot = &slots[i];
      slot->deadline = start + std::chrono::nanoseconds(in.spread_ns[i]);
      timers[i]->expires_at(slot->deadline);
      timers[i]->async_wait([p, slot](const boost::system::error_code& ec) {
        const auto now = clock_type::now();
        slot->late_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            now - slot->deadline).count();
        if (ec) ++p->errors;
        if (++p->calls == p->n) {
          p->last = now;
          p->last_cpu = thread_cpu_ns();
        }
      });
    }
    std::uint64_t wakeups0 = 0;
    if constexpr (std::is_same_v<Timer, wheel_timer>) wakeups0 = twheel::stats(ctx).wakeups;
    const auto run_wall = clock_type::now();
    const std::int64_t run_cpu = thread_cpu_ns();
    const std::int64_t sleeps0 = thread_sleeps();
    ctx.run();
    r.sleeps = static_cast<double>(thread_sleeps() - sleeps0);
    if constexpr (std::is_same_v<Timer, wheel_timer>) {
      r.wakeups = static_cast<double>(twheel::stats(ctx).wakeups - wakeups0);
    }
    const char* lib = lib_name<Timer>();
    expect_eq(lib, "spread", n, "handlers run", s.calls, n);
    expect_eq(lib, "spread", n, "handlers with an error", s.errors, 0);
    if (s.calls != n) return r;
    std::vector<std::int64_t> late(n);
    for (std::size_t i = 0; i < n; ++i) {
      late[i] = slots[i].late_ns;
      if (late[i] < 0) ++r.negative;
      if (slots[i].deadline < run_wall) ++r.due_before_run;
    }
    if (g_spread_trace) print_spread_trace(lib_name<Timer>(), n, in, late);
    std::sort(late.begin(), late.end());
    const auto pct = [&](double q) {
      const auto i = std::min(n - 1, static_cast<std::size_t>(q * static_cast<double>(n)));
      return static_cast<double>(late[i]) * 1e-3;
    };
    r.p50_us = pct(0.5);
    r.p99_us = pct(0.99);
    r.p999_us = pct(0.999);
    r.max_us = static_cast<double>(late.back()) * 1e-3;
    r.min_us = static_cast<double>(late.front()) * 1e-3;
    r.rate = static_cast<double>(n) / (elapsed_ns(std::max(start, run_wall), s.last) * 1e-9);
    r.cpu_ns = static_cast<double>(s.last_cpu - run_cpu) / static_cast<double>(n);
    if (r.negative != 0) {
      fail(std::string(lib) + " spread n=" + std::to_string(n) + ": " +
           std::to_string(r.negative) + " handler(s) ran before their deadline (min lateness " +
           std::to_string(r.min_us) + " us)");
    }
  }
  return r;
}

// 6. memory, in this (fresh) process: prints one line for the parent.
std::size_t heap_in_use() {
  const struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;  // small chunks in use + mmapped chunks
}

std::size_t vm_rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      std::istringstream is(line.substr(6));
      std::size_t kb = 0;
      is >> kb;
      return kb * 1024;
    }
  }
  return 0;
}

template <class Timer, handler_size H = handler_size::narrow>
int memory_child(std::size_t n) {
  const inputs in = make_inputs(n);
  boost::asio::io_context ctx(g_concurrency_hint);
  configure_for<Timer>(ctx);
  counters c;
  {
    // Create the services (and the reactor, the wheel) before the baseline.
    Timer warm(ctx);
    warm.expires_after(std::chrono::seconds(1));
    warm.async_wait(counting_handler(&c));
    warm.cancel();
    ctx.poll();
  }
  timer_vector<Timer> timers(n);  // container allocated and touched before the baseline
  const std::size_t heap0 = heap_in_use();
  const std::size_t rss0 = vm_rss_bytes();
  for (auto& t : timers) t.emplace(ctx);
  arm_all<Timer, H>(timers, in, &c);
  const std::size_t heap1 = heap_in_use();
  const std::size_t rss1 = vm_rss_bytes();
  const std::size_t pending = [&] {
    if constexpr (std::is_same_v<Timer, wheel_timer>) {
      return twheel::stats(ctx).pending;
    } else {
      return n;
    }
  }();
  if (c.calls != 1 || pending != n) {
    std::fprintf(stderr, "memory %s n=%zu: unexpected state (calls %llu, pending %zu)\n",
                 lib_name<Timer>(), n, static_cast<unsigned long long>(c.calls), pending);
    return 1;
  }
  std::printf("mem %zu %zu %zu %zu\n", sizeof(Timer), sizeof(std::optional<Timer>),
              heap1 - heap0, rss1 > rss0 ? rss1 - rss0 : 0);
  std::fflush(stdout);
  cancel_all(ctx, timers);
  return c.calls == n + 1 ? 0 : 1;
}

struct memory_result {
  double total = 0;  // heap per timer + sizeof(Timer)
  double heap = 0;   // heap bytes per timer
  double rss = 0;    // VmRSS growth per timer
  std::size_t object = 0;
  bool ok = false;
};

std::string g_self;  // this executable, resolved from /proc/self/exe

memory_result measure_memory(const char* lib, std::size_t n, handler_size h) {
  memory_result r;
  const std::string cmd = "'" + g_self + "' --memory " + lib + " " + std::to_string(n) +
                          (h == handler_size::wide ? " wide" : "");
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    fail(std::string("popen failed: ") + cmd);
    return r;
  }
  char buf[256] = {};
  std::size_t obj = 0, opt = 0, heap = 0, rss = 0;
  bool parsed = false;
  while (std::fgets(buf, sizeof buf, p)) {
    if (std::sscanf(buf, "mem %zu %zu %zu %zu", &obj, &opt, &heap, &rss) == 4) parsed = true;
  }
  const int status = pclose(p);
  if (!parsed || status != 0) {
    fail(std::string("memory measurement failed (status ") + std::to_string(status) + "): " + cmd);
    return r;
  }
  const double dn = static_cast<double>(n);
  r.object = obj;
  r.heap = static_cast<double>(heap) / dn;
  r.total = r.heap + static_cast<double>(obj);
  r.rss = static_cast<double>(rss) / dn;
  r.ok = true;
  return r;
}

// 7. wake-ups of the spread workload, counted by strace: the spread run for one library in
// a child process (this program, re-executed) under `strace -f`, which logs the epoll_wait
// and timerfd_settime calls of the whole child (a few of them come from arming the timers,
// the rest are the wake-ups of the run). --seccomp-bpf stops the child only at those two
// calls, so the rest of the run is not slowed down. An epoll_wait with a zero timeout is a
// poll that did not sleep (Asio's reactor polls so when handlers are queued); the others
// could block, and are the wake-ups.
struct traced_result {
  double epoll_wait = bench::na;
  double epoll_wait_blocking = bench::na;  // of those, the ones with a non-zero timeout
  double timerfd_settime = bench::na;
  double stats_wakeups = bench::na;  // twheel: what stats() counted in that same run
};

// The --tick-us / --slack-us of this run, for a child process.
std::string wheel_option_args() {
  if (!g_wheel_options) return {};
  using std::chrono::duration_cast;
  using std::chrono::microseconds;
  return " --tick-us " + std::to_string(duration_cast<microseconds>(g_wheel_options->tick).count()) +
         " --slack-us " + std::to_string(duration_cast<microseconds>(g_wheel_options->slack).count());
}

bool have_strace() { return std::system("command -v strace >/dev/null 2>&1") == 0; }

// The timeout argument of a logged `epoll_wait(fd, events, max, timeout) = n` call (one
// line: the run's epoll_wait calls come from its one thread), or nothing.
std::optional<long> epoll_timeout(const std::string& line) {
  const std::size_t result = line.rfind("= ");  // strace pads before it
  if (result == std::string::npos) return std::nullopt;
  const std::size_t close = line.rfind(')', result);
  if (close == std::string::npos) return std::nullopt;
  const std::size_t comma = line.rfind(", ", close);
  if (comma == std::string::npos) return std::nullopt;
  return std::strtol(line.c_str() + comma + 2, nullptr, 10);
}

traced_result traced_spread(const char* lib, std::size_t n) {
  traced_result r;
  const std::string out = "/tmp/twheel-bench-strace-" + std::to_string(getpid()) + "-" + lib;
  const std::string cmd = "strace -f --seccomp-bpf -e trace=epoll_wait,timerfd_settime -o '" +
                          out + "' '" + g_self + "' --lib " + lib +
                          " --workloads spread --reps 1 --sizes " + std::to_string(n) +
                          wheel_option_args();
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    fail("popen failed: " + cmd);
    return r;
  }
  char buf[512] = {};
  while (std::fgets(buf, sizeof buf, p)) {
    std::size_t cn = 0;
    double w = 0;
    if (std::sscanf(buf, "csv,wakeups,%zu,,%lf", &cn, &w) == 2) r.stats_wakeups = w;
  }
  const int status = pclose(p);
  std::ifstream f(out);
  std::string line;
  std::size_t epolls = 0, blocking = 0, settimes = 0, unparsed = 0;
  bool exited = false;
  while (std::getline(f, line)) {
    if (line.find("+++ exited with") != std::string::npos) exited = true;
    if (line.find("timerfd_settime(") != std::string::npos) ++settimes;
    if (line.find("epoll_wait(") == std::string::npos) continue;
    ++epolls;
    if (const auto timeout = epoll_timeout(line)) {
      if (*timeout != 0) ++blocking;
    } else {
      ++unparsed;
    }
  }
  std::remove(out.c_str());
  if (status != 0 || !exited || unparsed != 0) {
    fail("traced spread run failed (status " + std::to_string(status) + ", " +
         std::to_string(unparsed) + " epoll_wait line(s) not understood): " + cmd);
    return traced_result{};
  }
  r.epoll_wait = static_cast<double>(epolls);
  r.epoll_wait_blocking = static_cast<double>(blocking);
  r.timerfd_settime = static_cast<double>(settimes);
  return r;
}

// ---- driver ----------------------------------------------------------------------------

bench::report g_report;
bool g_run_asio = true;
bool g_run_twheel = true;

void add_row(const std::string& workload, std::size_t n, const std::vector<double>& a,
             const std::vector<double>& t, const std::string& unit, const std::string& note,
             bool higher_is_better) {
  g_report.add(workload, n, a, t, unit, note,
               higher_is_better ? bench::better::higher : bench::better::lower);
}

// Runs f<asio_timer> and f<wheel_timer> alternately, `reps` times each.
template <class RunAsio, class RunWheel>
void interleave(int reps, const char* workload, std::size_t n, RunAsio run_asio,
                RunWheel run_wheel) {
  for (int rep = 0; rep < reps; ++rep) {
    if (g_run_asio) {
      enter_phase("asio", workload, n, rep);
      run_asio();
    }
    if (g_run_twheel) {
      enter_phase("twheel", workload, n, rep);
      run_wheel();
    }
  }
  alarm(0);
}

// A row of ns per operation (lower is better) from interleave(): each run returns one
// repetition's figure.
template <class RunAsio, class RunWheel>
void interleaved_row(int reps, const char* workload, std::size_t n, const char* unit,
                     const std::string& note, RunAsio run_asio, RunWheel run_wheel) {
  std::vector<double> a, t;
  interleave(reps, workload, n, [&] { a.push_back(run_asio()); },
             [&] { t.push_back(run_wheel()); });
  add_row(workload, n, a, t, unit, note, false);
}

using bench::split;
using bench::wants;

void print_stats(std::size_t n, const twheel::wheel_stats& s) {
  std::printf("  twheel::stats after burst n=%zu: pending=%zu timers=%zu fired=%llu "
              "cancelled=%llu rejected=%llu cascaded=%llu wakeups=%llu\n",
              n, s.pending, s.timers, static_cast<unsigned long long>(s.fired),
              static_cast<unsigned long long>(s.cancelled),
              static_cast<unsigned long long>(s.rejected),
              static_cast<unsigned long long>(s.cascaded),
              static_cast<unsigned long long>(s.wakeups));
}

int usage() {
  std::fprintf(stderr,
               "usage: bench_timers [--quick] [--reps R] [--sizes n1,n2,...]\n"
               "                    [--workloads arm,arm-warm,churn,floor,cancel,cancel-destroy,burst,\n"
               "                                 spread,wakeups,memory,handler-32B]\n"
               "                    [--lib both|asio|twheel]\n"
               "                    [--clock wall|cpu] [--unlocked] [--huge-pages] [--tick-us T] [--slack-us S]\n"
               "                    [--watchdog S] [--expiry-scale F] [--spread-trace]\n"
               "       bench_timers --memory asio|twheel N [wide]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // Internal mode: one memory measurement in this fresh process.
  if ((argc == 4 || argc == 5) && std::strcmp(argv[1], "--memory") == 0) {
    const std::size_t n = std::strtoull(argv[3], nullptr, 10);
    const bool wide = argc == 5 && std::strcmp(argv[4], "wide") == 0;
    if (n == 0 || (argc == 5 && !wide)) return usage();
    const bool asio = std::strcmp(argv[2], "asio") == 0;
    if (!asio && std::strcmp(argv[2], "twheel") != 0) return usage();
    if (wide) {
      return asio ? memory_child<asio_timer, handler_size::wide>(n)
                  : memory_child<wheel_timer, handler_size::wide>(n);
    }
    return asio ? memory_child<asio_timer>(n) : memory_child<wheel_timer>(n);
  }

  bool quick = false;
  int reps = 0;
  std::vector<std::size_t> sizes;
  std::vector<std::string> workloads{"arm",   "arm-warm", "churn",   "floor",
                                     "cancel", "cancel-destroy", "burst", "spread",
                                     "wakeups", "memory", "handler-32B"};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (a == "--sizes" && i + 1 < argc) {
      sizes = bench::parse_sizes(argv[++i]);
    } else if (a == "--workloads" && i + 1 < argc) {
      workloads = split(argv[++i]);
    } else if (a == "--clock" && i + 1 < argc) {
      const std::string c = argv[++i];
      if (c != "wall" && c != "cpu") return usage();
      g_cpu_clock = c == "cpu";
    } else if (a == "--tick-us" && i + 1 < argc) {
      wheel_options_to_set().tick = std::chrono::microseconds(std::atoi(argv[++i]));
    } else if (a == "--slack-us" && i + 1 < argc) {
      wheel_options_to_set().slack = std::chrono::microseconds(std::atoi(argv[++i]));
    } else if (a == "--spread-trace") {
      g_spread_trace = true;
    } else if (a == "--huge-pages") {
      g_huge_pages = true;
    } else if (a == "--unlocked") {
      g_concurrency_hint = BOOST_ASIO_CONCURRENCY_HINT_UNSAFE;
    } else if (a == "--watchdog" && i + 1 < argc) {
      g_watchdog_s = static_cast<unsigned>(std::max(0, std::atoi(argv[++i])));
    } else if (a == "--expiry-scale" && i + 1 < argc) {
      g_expiry_scale = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--lib" && i + 1 < argc) {
      const std::string l = argv[++i];
      g_run_asio = l == "both" || l == "asio";
      g_run_twheel = l == "both" || l == "twheel";
      if (!g_run_asio && !g_run_twheel) return usage();
    } else {
      return usage();
    }
  }
  if (g_wheel_options) {
    try {
      twheel::wheel_service::validate(*g_wheel_options);
    } catch (const std::invalid_argument& e) {
      std::fprintf(stderr, "bench_timers: %s\n", e.what());
      return usage();
    }
  }
  bench::default_run_shape(quick, sizes, reps);
  for (std::size_t n : sizes) {
    if (n == 0 || n > 0xFFFFFFFFu) return usage();
  }

  {
    char path[4096];
    const ssize_t len = readlink("/proc/self/exe", path, sizeof path - 1);
    if (len > 0) g_self.assign(path, static_cast<std::size_t>(len));
  }
  signal(SIGALRM, on_alarm);

  const auto started = clock_type::now();
  std::printf("load average at start: %s (this machine: %ld CPUs)\n", bench::loadavg().c_str(),
              sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("bench_timers: boost::asio::steady_timer (asio) vs twheel::steady_timer (twheel)\n");
  std::printf("mode: %s, %d repetitions per library, interleaved asio/twheel, medians; "
              "fresh io_context per repetition\n",
              quick ? "quick" : "full", reps);
  std::printf("contexts: %s\n", g_concurrency_hint == BOOST_ASIO_CONCURRENCY_HINT_UNSAFE
                                    ? "BOOST_ASIO_CONCURRENCY_HINT_UNSAFE (--unlocked: no locks "
                                      "in Asio nor in twheel)"
                                    : "default concurrency hint (locking)");
  std::printf("clock for arm/churn/cancel: %s\n",
              g_cpu_clock ? "thread CPU time (--clock cpu)" : "wall (steady_clock)");
  {
    const twheel::wheel_options o = g_wheel_options.value_or(twheel::wheel_options{});
    std::printf("sizeof(asio::steady_timer)=%zu sizeof(twheel::steady_timer)=%zu; "
                "twheel %s options: tick %lld ns, slack %lld ns, %u levels, max_per_pass %zu\n",
                sizeof(asio_timer), sizeof(wheel_timer), g_wheel_options ? "given" : "default",
                static_cast<long long>(o.tick.count()), static_cast<long long>(o.slack.count()),
                o.levels, o.max_per_pass);
  }
  if (g_expiry_scale != 1) {
    std::printf("NOTE: --expiry-scale %lld: expiries are %lld..%lld s instead of 1..60 s\n",
                static_cast<long long>(g_expiry_scale), static_cast<long long>(g_expiry_scale),
                60LL * g_expiry_scale);
  }
  std::printf("ratio: asio time / twheel time, twheel rate / asio rate, asio bytes / twheel "
              "bytes (> 1: twheel better); ±: half the min..max range of the repetitions\n\n");
  bench::print_header();

  for (std::size_t n : sizes) {
    const inputs in = make_inputs(n);
    const std::size_t m = churn_ops(n);
    if (wants(workloads, "arm")) {
      interleaved_row(reps, "arm", n, "ns/timer", "", [&] { return bench_arm<asio_timer>(n, in); },
                      [&] { return bench_arm<wheel_timer>(n, in); });
    }
    if (wants(workloads, "arm-warm")) {
      interleaved_row(
          reps, "arm-warm", n, "ns/timer", "(new timers, after a first round on the context)",
          [&] { return bench_arm<asio_timer, handler_size::narrow, true>(n, in); },
          [&] { return bench_arm<wheel_timer, handler_size::narrow, true>(n, in); });
    }
    if (wants(workloads, "churn")) {
      std::vector<double> a, t;
      g_churn_expired = 0;
      interleave(reps, "churn", n, [&] { a.push_back(bench_churn<asio_timer>(n, in)); },
                 [&] { t.push_back(bench_churn<wheel_timer>(n, in)); });
      add_row("churn", n, a, t, "ns/op",
              "(" + std::to_string(m) + " re-arms; aborted handler included)", false);
      if (wants(workloads, "floor")) {
        std::vector<double> f, fl, fc, fp, fpl;
        for (int rep = 0; rep < reps; ++rep) {
          f.push_back(bench_floor<floor_kind::plain>(n, in));
          fl.push_back(bench_floor<floor_kind::locked>(n, in));
          fc.push_back(bench_floor<floor_kind::clocked>(n, in));
          fp.push_back(bench_floor<floor_kind::prefetched>(n, in));
          fpl.push_back(bench_floor<floor_kind::prefetched_long>(n, in));
        }
        // The floor is the machine's, not a library's: the same value in both columns.
        g_report.add(bench::row{"floor", n, bench::median(f), bench::median(f), bench::na,
                                "ns/op", "(churn's picks, no library)"},
                     bench::better::none);
        g_report.add(bench::row{"floor-locked", n, bench::median(fl), bench::median(fl),
                                bench::na, "ns/op", "(the same, a mutex per pick)"},
                     bench::better::none);
        g_report.add(bench::row{"floor-clock", n, bench::median(fc), bench::median(fc),
                                bench::na, "ns/op",
                                "(the same, a clock read and a read of the object per pick)"},
                     bench::better::none);
        g_report.add(bench::row{"floor-clock-prefetch", n, bench::median(fp), bench::median(fp),
                                bench::na, "ns/op",
                                "(the same, the object prefetched before the clock read)"},
                     bench::better::none);
        g_report.add(bench::row{"floor-long-pick", n, bench::median(fpl), bench::median(fpl),
                                bench::na, "ns/op",
                                "(the same, each pick ~380 instructions long, as a re-arm)"},
                     bench::better::none);
        const double floor_ns = bench::median(f);
        g_report.add(bench::row{"churn/floor", n, a.empty() ? bench::na : bench::median(a) / floor_ns,
                                t.empty() ? bench::na : bench::median(t) / floor_ns, bench::na,
                                "x", "(churn in multiples of the floor)"},
                     bench::better::lower);
      }
      if (g_churn_expired != 0) {
        std::printf("  WARNING: %llu timer(s) reached their deadline during churn (arming took "
                    "over 1 s: machine slow or loaded); their handlers ran in the timed poll()\n",
                    static_cast<unsigned long long>(g_churn_expired));
      }
    }
    if (wants(workloads, "cancel")) {
      interleaved_row(reps, "cancel", n, "ns/timer", "(aborted handler included)",
                      [&] { return bench_cancel<asio_timer>(n, in); },
                      [&] { return bench_cancel<wheel_timer>(n, in); });
      std::vector<double> h;
      for (int rep = 0; rep < reps; ++rep) h.push_back(bench_handler_floor(n));
      g_report.add(bench::row{"handler-floor", n, bench::median(h), bench::median(h),
                              bench::na, "ns/handler",
                              "(Asio's scheduler running posted handlers, no timer)"},
                   bench::better::none);
    }
    if (wants(workloads, "cancel-destroy")) {
      interleaved_row(reps, "cancel-destroy", n, "ns/timer",
                      "(cancel, aborted handler, then the timer destroyed)",
                      [&] { return bench_cancel<asio_timer, true>(n, in); },
                      [&] { return bench_cancel<wheel_timer, true>(n, in); });
    }
    if (wants(workloads, "burst")) {
      std::vector<double> aw, ac, af, tw, tc, tf;
      int late = 0;
      std::optional<twheel::wheel_stats> stats;
      interleave(
          reps, "burst", n,
          [&] {
            const auto r = bench_burst<asio_timer>(n);
            aw.push_back(r.wall_rate / 1e6);
            ac.push_back(r.cpu_rate / 1e6);
            af.push_back(r.f2l_rate / 1e6);
            late += r.late_start;
          },
          [&] {
            const auto r = bench_burst<wheel_timer>(n);
            tw.push_back(r.wall_rate / 1e6);
            tc.push_back(r.cpu_rate / 1e6);
            tf.push_back(r.f2l_rate / 1e6);
            late += r.late_start;
            stats = r.stats;
          });
      add_row("burst", n, aw, tw, "Mhandlers/s", "(deadline -> last handler; wall)", true);
      add_row("burst-cpu", n, ac, tc, "Mhandlers/s", "(thread CPU time in run())", true);
      add_row("burst-f2l", n, af, tf, "Mhandlers/s", "(first -> last handler; wall)", true);
      if (late) {
        std::printf("  note: in %d burst run(s) arming outlasted the deadline; measured from "
                    "entering run()\n", late);
      }
      if (stats) print_stats(n, *stats);
    }
    if (wants(workloads, "spread")) {
      std::vector<double> ar, tr, ac, tc, a50, t50, a99, t99, a999, t999, amax, tmax, tw, as, ts;
      double amin = bench::na, tmin = bench::na, aneg = bench::na, tneg = bench::na;
      std::uint64_t due_before_run = 0;
      const auto keep = [&](const spread_result& r, std::vector<double>& rate,
                            std::vector<double>& cpu, std::vector<double>& p50,
                            std::vector<double>& p99, std::vector<double>& p999,
                            std::vector<double>& mx, double& mn, double& neg) {
        rate.push_back(r.rate / 1e3);
        cpu.push_back(r.cpu_ns);
        p50.push_back(r.p50_us);
        p99.push_back(r.p99_us);
        p999.push_back(r.p999_us);
        mx.push_back(r.max_us);
        mn = std::isnan(mn) ? r.min_us : std::min(mn, r.min_us);
        neg = (std::isnan(neg) ? 0 : neg) + static_cast<double>(r.negative);
        due_before_run += r.due_before_run;
      };
      interleave(
          reps, "spread", n,
          [&] {
            const auto r = bench_spread<asio_timer>(n, in);
            keep(r, ar, ac, a50, a99, a999, amax, amin, aneg);
            as.push_back(r.sleeps);
          },
          [&] {
            const auto r = bench_spread<wheel_timer>(n, in);
            keep(r, tr, tc, t50, t99, t999, tmax, tmin, tneg);
            tw.push_back(r.wakeups);
            ts.push_back(r.sleeps);
          });
      add_row("spread", n, ar, tr, "khandlers/s",
              "(deadlines uniform over 1 s; window start -> last handler; wall)", true);
      add_row("spread-cpu", n, ac, tc, "ns/handler", "(thread CPU time in run())", false);
      add_row("late-p50", n, a50, t50, "us", "(lateness: handler ran - its deadline)", false);
      add_row("late-p99", n, a99, t99, "us", "", false);
      add_row("late-p99.9", n, a999, t999, "us", "", false);
      add_row("late-max", n, amax, tmax, "us", "(median over repetitions of each run's max)",
              false);
      g_report.add(bench::row{"late-min", n, amin, tmin, bench::na, "us",
                              "(smallest of all repetitions; never negative)"},
                   bench::better::none);
      g_report.add(bench::row{"late-negative", n, aneg, tneg, bench::na, "handlers",
                              "(ran before their deadline, all repetitions; must be 0)"},
                   bench::better::none);
      add_row("wakeups", n, {}, tw, "wakeups", "(twheel stats().wakeups during run())", false);
      add_row("sleeps", n, as, ts, "sleeps",
              "(voluntary context switches of the thread during run(), untraced)", false);
      if (due_before_run != 0) {
        std::printf("  note: %llu deadline(s) had passed before run() was entered (arming was "
                    "slow); their lateness includes that wait\n",
                    static_cast<unsigned long long>(due_before_run));
      }
    }
    if (wants(workloads, "wakeups")) {
      if (!have_strace()) {
        std::printf("  wakeups n=%zu: skipped: strace not found (install it with "
                    "`apt-get install -y strace`)\n", n);
      } else {
        enter_phase("both", "wakeups (strace)", n, 0);
        const traced_result a = traced_spread("asio", n);
        const traced_result t = traced_spread("twheel", n);
        alarm(0);
        g_report.add(bench::row{"epoll_wait", n, a.epoll_wait, t.epoll_wait, bench::na, "calls",
                                "(spread run under strace -f, one run each)"},
                     bench::better::lower);
        g_report.add(bench::row{"epoll_wait-blocking", n, a.epoll_wait_blocking,
                                t.epoll_wait_blocking, bench::na, "calls",
                                "(same runs: those with a non-zero timeout, the wake-ups)"},
                     bench::better::lower);
        g_report.add(bench::row{"timerfd_settime", n, a.timerfd_settime, t.timerfd_settime,
                                bench::na, "calls", "(same runs)"},
                     bench::better::lower);
        std::printf("  (twheel stats().wakeups in that traced run: %.0f)\n", t.stats_wakeups);
      }
    }
    // Memory in a child process per measurement; `workload` names the row.
    const auto memory_row = [&](const char* workload, handler_size h) {
      std::vector<double> a, t, ah, th, ar, tr;
      std::size_t ao = 0, to = 0;
      for (int rep = 0; rep < reps; ++rep) {
        if (g_run_asio) {
          enter_phase("asio", workload, n, rep);
          const auto r = measure_memory("asio", n, h);
          if (r.ok) {
            a.push_back(r.total);
            ah.push_back(r.heap);
            ar.push_back(r.rss);
            ao = r.object;
          }
        }
        if (g_run_twheel) {
          enter_phase("twheel", workload, n, rep);
          const auto r = measure_memory("twheel", n, h);
          if (r.ok) {
            t.push_back(r.total);
            th.push_back(r.heap);
            tr.push_back(r.rss);
            to = r.object;
          }
        }
      }
      alarm(0);
      add_row(workload, n, a, t, "bytes/timer",
              h == handler_size::wide ? "(the same, a 32-byte handler)"
                                      : "(armed; mallinfo2 heap in use + sizeof(timer))",
              false);
      std::printf("  %s n=%zu: asio   sizeof %zu + heap %.1f B/timer (VmRSS growth %.1f B/timer)\n"
                  "  %s n=%zu: twheel sizeof %zu + heap %.1f B/timer (VmRSS growth %.1f B/timer)\n",
                  workload, n, ao, bench::median(ah), bench::median(ar), workload, n, to,
                  bench::median(th), bench::median(tr));
    };
    if (wants(workloads, "memory")) memory_row("memory", handler_size::narrow);
    if (wants(workloads, "handler-32B")) {
      interleaved_row(reps, "arm-32B", n, "ns/timer", "(arm, a 32-byte handler)",
                      [&] { return bench_arm<asio_timer, handler_size::wide>(n, in); },
                      [&] { return bench_arm<wheel_timer, handler_size::wide>(n, in); });
      interleaved_row(reps, "churn-32B", n, "ns/op", "(churn, a 32-byte handler)",
                      [&] { return bench_churn<asio_timer, handler_size::wide>(n, in); },
                      [&] { return bench_churn<wheel_timer, handler_size::wide>(n, in); });
      memory_row("memory-32B", handler_size::wide);
    }
  }

  std::printf("\n");
  g_report.print_csv();
  const double secs = elapsed_ns(started, clock_type::now()) * 1e-9;
  std::printf("\ntotal time %.1f s; load average at end: %s; %d check failure(s)\n", secs,
              bench::loadavg().c_str(), g_failures);
  return g_failures == 0 ? 0 : 1;
}
