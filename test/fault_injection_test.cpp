// fault_injection_test.cpp: allocation failure injected at every allocation site.
//
// The global operator new (every overload) is replaced by one with a per-thread countdown:
// armed with N, the Nth allocation of this thread fails (std::bad_alloc, or nullptr from
// the nothrow forms). Each scenario is run for N = 1, 2, 3, ... until a run makes no
// injection (it completed with every allocation succeeding); so every allocation the
// scenario makes on this thread fails once. Then again in bursts: every allocation from
// the Nth on fails until the test catches the bad_alloc, so that the fallbacks that
// allocate (a timeout filed again, a wake-up re-armed) fail too. The expectations, as
// with Asio:
//   - an initiating call that throws changes nothing: the handler it was given is
//     destroyed without being invoked, the timer's expiry and the wheel's pending count
//     are as before;
//   - every handler accepted completes exactly once (checked after a drain with
//     injection off), or is destroyed unrun when the context is destroyed;
//   - members that do not initiate (cancel, expiry changes, moves, destruction) never
//     throw; nothing calls std::terminate (a noexcept path that allocates would);
//   - nothing leaks (the suite runs under LeakSanitizer in CI).
// An exception out of run() (a handler or an internal pass that could not allocate) is
// allowed, as with Asio: run() is called again.
//
// Single-threaded on purpose: the countdown is per thread, so a run is deterministic.
// (idle_timer_racing_a_refused_first_one adds a thread, whose allocations never fail.)
#define BOOST_TEST_MODULE fault_injection
#include <boost/test/unit_test.hpp>

#include <twheel/beast/tcp_stream.hpp>
#include <twheel/cancel_after.hpp>
#include <twheel/idle_timer.hpp>
#include <twheel/periodic_timer.hpp>
#include <twheel/steady_timer.hpp>
#include <twheel/wheel_service.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <thread>
#include <vector>

#include "support.hpp"

namespace {

// ---- the allocation hook -------------------------------------------------------------

thread_local long countdown = 0;    // 0: off; otherwise allocations left until the failing one
thread_local bool paused = false;   // the test's own bookkeeping allocates freely
thread_local bool injected = false; // the armed countdown reached its allocation
thread_local long seen = 0;         // allocations made while armed
// Bursts (for_every_allocation's second round): from the failing allocation on, every
// allocation fails until the test catches the bad_alloc (end_burst()), so a fallback that
// allocates fails too.
thread_local bool burst_mode = false;
thread_local bool bursting = false;

bool should_fail() noexcept {
  if (paused) return false;
  if (bursting) {
    ++seen;
    return true;
  }
  if (countdown == 0) return false;
  ++seen;
  if (--countdown != 0) return false;
  injected = true;
  bursting = burst_mode;
  // FI_TRAP=N: stop in a debugger at the Nth allocation of a run (where was it made?).
  if (const char* e = std::getenv("FI_TRAP"); e && std::atol(e) == seen) __builtin_trap();
  return true;
}

void* allocate(std::size_t n) {
  if (should_fail()) throw std::bad_alloc();
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}

void* allocate_aligned(std::size_t n, std::align_val_t al) {
  if (should_fail()) throw std::bad_alloc();
  const auto a = std::max(static_cast<std::size_t>(al), sizeof(void*));
  void* p = nullptr;
  if (posix_memalign(&p, a, n == 0 ? 1 : n) == 0) return p;
  throw std::bad_alloc();
}

}  // namespace

// Asio's recycling allocator (handlers without an allocator of their own, cancellation
// slots' handlers, executor functions) takes its memory from aligned_alloc, not operator
// new: hooked too, so that its failures are injected as well (Asio then throws bad_alloc).
// It also serves Asio's dispatch of a completion to a handler's own executor (a strand),
// which, failing, leaves run() with bad_alloc and destroys that handler: Asio's own
// timers complete through the same dispatch and lose the handler the same way, so such
// handlers (ledger::on_strand) may end destroyed, but exactly once.
// posix_memalign, not aligned_alloc, underneath: this definition is the program's.
extern "C" void* aligned_alloc(std::size_t alignment, std::size_t size) noexcept {
  if (should_fail()) return nullptr;
  void* p = nullptr;
  const std::size_t a = std::max(alignment, sizeof(void*));
  return posix_memalign(&p, a, size == 0 ? 1 : size) == 0 ? p : nullptr;
}

void* operator new(std::size_t n) { return allocate(n); }
void* operator new[](std::size_t n) { return allocate(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return allocate(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return allocate(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new(std::size_t n, std::align_val_t a) { return allocate_aligned(n, a); }
void* operator new[](std::size_t n, std::align_val_t a) { return allocate_aligned(n, a); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return allocate_aligned(n, a);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return allocate_aligned(n, a);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  std::free(p);
}

namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using asio::ip::tcp;
using namespace std::chrono_literals;
using twheel_test::loopback;
using twheel_test::socket_pair;

// Arms the countdown for the scope of a scenario's body.
class fault_scope {
 public:
  explicit fault_scope(long n) noexcept {
    injected = false;
    seen = 0;
    countdown = n;
  }
  ~fault_scope() { disarm(); }
  void disarm() noexcept {
    countdown = 0;
    bursting = false;
  }
};

// The test caught the bad_alloc of a burst: allocations succeed again.
void end_burst() noexcept { bursting = false; }

struct pause_faults {
  bool was = paused;
  pause_faults() noexcept { paused = true; }
  ~pause_faults() { paused = was; }
};

// Boost.Test allocates: checks made while armed pause the injection.
#define FI_CHECK(cond)   \
  do {                   \
    pause_faults pf_;    \
    BOOST_TEST(cond);    \
  } while (false)

// Calls an initiating function: true if it accepted the operation, false if it threw
// bad_alloc. Any other exception fails the test.
template <class F>
bool initiate(F&& f) {
  try {
    f();
    return true;
  } catch (const std::bad_alloc&) {
    end_burst();
    return false;
  }
}

// Runs the context while armed: an internal pass or handler that cannot allocate leaves
// run() with bad_alloc, as a throwing handler does; run() is called again.
void run_armed(asio::io_context& ctx) {
  for (int i = 0; i < 1000; ++i) {
    try {
      ctx.run();
      return;
    } catch (const std::bad_alloc&) {
      end_burst();
    }
  }
  FI_CHECK(!"run() kept throwing");
}

// ---- handlers that record what became of them ----------------------------------------

enum outcome : int { alive = 0, invoked = 1, destroyed = 2 };

struct ledger {
  std::array<int, 64> state{};   // per handler: outcome, or > 2 if resolved twice
  std::array<int, 64> accepted{};
  // Completes through a dispatch to a strand, which allocates: if that fails, run() throws
  // and the handler is destroyed unrun, as with Asio's own timers (see aligned_alloc).
  std::array<bool, 64> on_strand{};
  int next = 0;
  int take() noexcept {
    if (next == static_cast<int>(state.size())) std::abort();  // the scenarios make fewer
    return next++;
  }
  void resolve(int id, outcome o) {
    state[id] = state[id] == alive ? o : 100;  // 100: resolved twice
  }
};

// 16 bytes, nothrow movable, no associators: held in the timer's in-object box.
struct small_handler {
  ledger* l;
  int id = 0;
  small_handler(ledger& lg, int i) noexcept : l(&lg), id(i) {}
  small_handler(small_handler&& o) noexcept : l(std::exchange(o.l, nullptr)), id(o.id) {}
  small_handler& operator=(small_handler&&) = delete;
  ~small_handler() {
    if (l) l->resolve(id, destroyed);
  }
  template <class... Args>
  void operator()(error_code, Args...) {
    std::exchange(l, nullptr)->resolve(id, invoked);
  }
};

// Too big for the box: an allocated operation. Its associated allocator is
// std::allocator, so the operation's memory comes from operator new (handlers without one
// get Asio's recycling allocator, which takes it from aligned_alloc; both are hooked).
struct big_handler : small_handler {
  using small_handler::small_handler;
  using allocator_type = std::allocator<void>;
  allocator_type get_allocator() const noexcept { return {}; }
  std::array<char, 64> pad{};
};

// Gives each handler an id in `l`; `accept` records whether its initiation accepted it.
template <class H>
H make(ledger& l, int& id) {
  id = l.take();
  return H(l, id);
}

// After the drain: every accepted handler ran exactly once, every refused one was
// destroyed unrun (at the throw).
void check_ledger(const ledger& l) {
  for (int i = 0; i < l.next; ++i) {
    BOOST_TEST_CONTEXT("handler " << i << (l.accepted[i] ? " (accepted)" : " (refused)")) {
      if (l.accepted[i] && l.on_strand[i]) {
        BOOST_TEST((l.state[i] == invoked || l.state[i] == destroyed));
      } else {
        BOOST_TEST(l.state[i] == (l.accepted[i] ? invoked : destroyed));
      }
    }
  }
}

struct terminate_guard {
  terminate_guard() {
    std::set_terminate([] {
      std::fputs("fault_injection_test: std::terminate called\n", stderr);
      std::abort();
    });
  }
};
const terminate_guard install_terminate_guard;

// Runs scenario(n) for n = 1, 2, ... until a run injected no failure; with `bursts`, each
// injected failure starts a burst (see burst_mode).
template <class Scenario>
void fail_each_allocation(Scenario& scenario, bool bursts) {
  burst_mode = bursts;
  long n = 1;
  for (;; ++n) {
    BOOST_TEST_CONTEXT((bursts ? "failing from allocation " : "failing allocation ") << n) {
      scenario(n);
    }
    if (!injected) break;
    BOOST_REQUIRE(n < 10000);
  }
  burst_mode = false;
  BOOST_TEST_MESSAGE((bursts ? "bursts" : "allocations") << " failed in turn: " << n - 1
                                                        << "; made by the last run: " << seen);
  BOOST_TEST(n > 1);  // the scenario allocates at all: the hook saw it
}

// Each allocation of the scenario fails once, then each starts a burst.
template <class Scenario>
void for_every_allocation(Scenario scenario) {
  fail_each_allocation(scenario, false);
  fail_each_allocation(scenario, true);
}

// Single failures only, for a scenario whose memory must come back without the test's
// help (a burst there ends only when a bad_alloc reaches the test).
template <class Scenario>
void for_every_single_failure(Scenario scenario) {
  fail_each_allocation(scenario, false);
}

// One timer wait (`id` is read here, after make() has set it among the arguments);
// `accepted` says whether async_wait took it. Checks that a refused
// wait changed nothing.
template <class Timer, class Handler>
void wait_on(Timer& t, asio::execution_context& ctx, ledger& l, const int& id, Handler&& h) {
  const auto expiry = t.expiry();
  const auto pending = twheel::stats(ctx).pending;
  const auto timers = twheel::stats(ctx).timers;
  l.accepted[id] = initiate([&] { t.async_wait(std::forward<Handler>(h)); });
  if (!l.accepted[id]) {
    FI_CHECK(l.state[id] == destroyed);
    FI_CHECK((t.expiry() == expiry));
    FI_CHECK(twheel::stats(ctx).pending == pending);
    FI_CHECK(twheel::stats(ctx).timers == timers);
  }
}

// A silent read whose timeout was lost would never end. The watchdog (Asio's own timer,
// not the wheel) ends it by closing the sockets and says so: it fails the test, it does
// not decide it. finish() then checks it did not fire, closes the sockets and drains the
// context with no injection.
class read_watchdog {
 public:
  read_watchdog(asio::io_context& ctx, std::vector<tcp::socket*> sockets)
      : ctx_(ctx), timer_(ctx, 5s), sockets_(std::move(sockets)) {
    timer_.async_wait([this](error_code ec) {
      if (ec) return;
      fired_ = true;
      close_all();
    });
  }
  void finish() {
    FI_CHECK(!fired_);
    timer_.cancel();
    close_all();
    ctx_.restart();
    ctx_.run();
    FI_CHECK(twheel::stats(ctx_).pending == 0);
  }

 private:
  void close_all() {
    for (tcp::socket* s : sockets_) s->close();
  }
  asio::io_context& ctx_;
  asio::steady_timer timer_;
  std::vector<tcp::socket*> sockets_;
  bool fired_ = false;
};

// One operation started by `start(id)` with a handler of ledger id `id`, as wait_on() does
// for timer waits: records whether the initiation accepted it, and checks that a refused
// one left the wheel's pending count as it was. Returns the id.
template <class Start>
int start_op(asio::io_context& ctx, ledger& l, Start start) {
  const auto pending = twheel::stats(ctx).pending;
  const int id = l.take();
  l.accepted[id] = initiate([&] { start(id); });
  if (!l.accepted[id]) FI_CHECK(twheel::stats(ctx).pending == pending);
  return id;
}

// Runs the context (while armed: a failing internal pass or handler leaves run_one()
// with bad_alloc, and it is called again) until every handler in `ids` was resolved.
void run_until_resolved(asio::io_context& ctx, const ledger& l, std::initializer_list<int> ids) {
  auto pending = [&] {
    return std::any_of(ids.begin(), ids.end(), [&](int id) { return l.state[id] == alive; });
  };
  while (pending()) {
    try {
      if (ctx.run_one() == 0) break;
    } catch (const std::bad_alloc&) {
      end_burst();
    }
  }
}

}  // namespace

// async_wait of every handler kind, re-arm, cancel, cancel_one, per-operation
// cancellation, move construction and assignment, destruction with waits pending.
BOOST_AUTO_TEST_CASE(timer_operations) {
  for_every_allocation([](long n) {
    ledger l;
    {
      asio::io_context ctx;
      auto strand = asio::make_strand(ctx);
      asio::cancellation_signal signal;
      std::optional<twheel::steady_timer> t1(std::in_place, ctx, 1ms);
      twheel::steady_timer t2(strand, 1ms);
      twheel::steady_timer t4(ctx, 1ms);
      (void)twheel::stats(ctx);  // the wheel exists: this scenario is not about first use
      {
        fault_scope armed(n);
        int id = 0;
        wait_on(*t1, ctx, l, id, make<small_handler>(l, id));  // boxed
        wait_on(*t1, ctx, l, id, make<small_handler>(l, id));  // queued behind: allocated
        wait_on(*t1, ctx, l, id, make<big_handler>(l, id));
        wait_on(*t1, ctx, l, id,
                asio::bind_allocator(std::allocator<int>(), make<small_handler>(l, id)));
        wait_on(*t1, ctx, l, id, asio::bind_executor(strand, make<small_handler>(l, id)));
        l.on_strand[id] = true;
        // Bound to the wheel's own executor: boxed in a timer with no wait, put back
        // together and allocated behind a wait.
        wait_on(t4, ctx, l, id,
                asio::bind_executor(ctx.get_executor(), make<small_handler>(l, id)));
        wait_on(*t1, ctx, l, id,
                asio::bind_executor(ctx.get_executor(), make<small_handler>(l, id)));
        wait_on(t2, ctx, l, id, make<small_handler>(l, id));
        l.on_strand[id] = true;
        wait_on(t2, ctx, l, id,
                asio::bind_cancellation_slot(signal.slot(), make<small_handler>(l, id)));
        l.on_strand[id] = true;
        signal.emit(asio::cancellation_type::terminal);
        // Re-arm: aborts what t2 has; then a fresh wait.
        t2.expires_after(2ms);
        wait_on(t2, ctx, l, id, make<big_handler>(l, id));
        l.on_strand[id] = true;
        t1->cancel_one();
        // Moves carry pending waits along.
        twheel::steady_timer t3(std::move(*t1));
        wait_on(t3, ctx, l, id, make<small_handler>(l, id));
        *t1 = std::move(t3);
        wait_on(*t1, ctx, l, id, make<small_handler>(l, id));
        run_armed(ctx);
        wait_on(t2, ctx, l, id, make<small_handler>(l, id));
        l.on_strand[id] = true;
        t2.cancel();
        wait_on(*t1, ctx, l, id, make<small_handler>(l, id));
        t1.reset();  // destroyed with a wait pending
        armed.disarm();
      }
      ctx.restart();
      ctx.run();
      FI_CHECK(twheel::stats(ctx).pending == 0);
    }
    check_ledger(l);
  });
}

// A small handler bound to the executor the wheel runs on (bind_executor with the
// context's executor, or a handler whose own executor it is, as a coroutine's is) waits in
// its timer's box as an unbound one does: the waits allocate no more than unbound ones.
// Bound to a strand, each is allocated (the control: the hook sees those).
struct counting_handler {
  int* calls;
  void operator()(error_code ec) const {
    if (!ec) ++*calls;
  }
};
struct own_executor_handler {
  int* calls;
  asio::io_context* ctx;
  using executor_type = asio::io_context::executor_type;
  executor_type get_executor() const noexcept { return ctx->get_executor(); }
  void operator()(error_code ec) const {
    if (!ec) ++*calls;
  }
};

BOOST_AUTO_TEST_CASE(handlers_bound_to_the_wheels_executor_allocate_nothing) {
  asio::io_context ctx;
  auto strand = asio::make_strand(ctx);
  constexpr int n = 16;
  std::vector<std::unique_ptr<twheel::steady_timer>> timers;
  for (int i = 0; i < n; ++i) timers.push_back(std::make_unique<twheel::steady_timer>(ctx));
  int calls = 0;
  // Allocations made by starting one wait on every timer (then run to completion).
  auto allocations = [&](auto make_handler) {
    for (auto& t : timers) t->expires_after(1ms);
    long made = 0;
    {
      fault_scope armed(std::numeric_limits<long>::max());
      for (auto& t : timers) t->async_wait(make_handler());
      made = seen;
    }
    ctx.restart();
    ctx.run();
    return made;
  };
  (void)allocations([&] { return counting_handler{&calls}; });  // the wheel's first use
  const long unbound = allocations([&] { return counting_handler{&calls}; });
  const long bound = allocations(
      [&] { return asio::bind_executor(ctx.get_executor(), counting_handler{&calls}); });
  const long own = allocations([&] { return own_executor_handler{&calls, &ctx}; });
  const long on_strand =
      allocations([&] { return asio::bind_executor(strand, counting_handler{&calls}); });
  BOOST_TEST_MESSAGE("allocations of " << n << " waits: unbound " << unbound
                                       << ", bound to the context's executor " << bound
                                       << ", with it as their own " << own << ", on a strand "
                                       << on_strand);
  BOOST_TEST(bound == unbound);
  BOOST_TEST(own == unbound);
  BOOST_TEST(on_strand >= unbound + n / 2);
  BOOST_TEST(calls == 5 * n);
}

// Each wait earlier than all before it: the wheel re-arms its internal timer every time,
// and the memory of the superseded driver waits stays in the context's queue until run()
// gets to it, so the driver's own allocation is reached too. A refused wait must leave
// the driver armed for the waits already accepted (checked by the drain: they all run).
BOOST_AUTO_TEST_CASE(earlier_and_earlier) {
  for_every_allocation([](long n) {
    ledger l;
    {
      asio::io_context ctx;
      std::array<std::optional<twheel::steady_timer>, 12> timers;
      for (auto& t : timers) t.emplace(ctx);
      const auto start = std::chrono::steady_clock::now();
      {
        fault_scope armed(n);
        int id = 0;
        for (std::size_t i = 0; i < timers.size(); ++i) {
          timers[i]->expires_at(start + std::chrono::milliseconds(2 * (timers.size() - i)));
          wait_on(*timers[i], ctx, l, id, make<small_handler>(l, id));
        }
        run_armed(ctx);
        armed.disarm();
      }
      ctx.restart();
      ctx.run();
      FI_CHECK(twheel::stats(ctx).pending == 0);
    }
    check_ledger(l);
  });
}

// Waits left pending when the context is destroyed: destroyed unrun, exactly once.
BOOST_AUTO_TEST_CASE(destroyed_at_shutdown) {
  for_every_allocation([](long n) {
    ledger l;
    {
      std::optional<asio::io_context> ctx(std::in_place);
      {
        twheel::steady_timer t(*ctx, 1h);
        twheel::steady_timer never(*ctx, 1h);
        fault_scope armed(n);
        int id = 0;
        wait_on(t, *ctx, l, id, make<small_handler>(l, id));
        wait_on(t, *ctx, l, id, make<big_handler>(l, id));
        wait_on(never, *ctx, l, id, make<big_handler>(l, id));
        armed.disarm();
        t.cancel();  // its waits are queued, unrun, when the context goes
      }
      // `never`'s destruction queued its waits too; the context is destroyed unrun.
      ctx.reset();
      for (int i = 0; i < l.next; ++i) FI_CHECK(l.state[i] == destroyed);  // accepted or not: never run
    }
  });
}

// twheel::cancel_after on a socket read: one that times out, one that completes.
BOOST_AUTO_TEST_CASE(cancel_after_socket_read) {
  for_every_allocation([](long n) {
    ledger l;
    {
      asio::io_context ctx;
      loopback lb(ctx);
      socket_pair silent = lb.connect(), talking = lb.connect(), outer = lb.connect(),
                  inner = lb.connect();
      std::array<char, 16> buf1{}, buf2{}, buf3{}, buf4{};
      // The caller's own slots, bound around the token and around the handler: forwarding
      // them into the timeout's slot allocates (in Asio's recycling allocator).
      asio::cancellation_signal outer_signal, inner_signal;
      (void)twheel::stats(ctx);
      read_watchdog watchdog(ctx,
                             {&silent.server, &talking.server, &outer.server, &inner.server});
      {
        fault_scope armed(n);
        const int id1 = start_op(ctx, l, [&](int id) {
          silent.server.async_read_some(asio::buffer(buf1),
                                        twheel::cancel_after(1ms, small_handler(l, id)));
        });
        const int id2 = start_op(ctx, l, [&](int id) {
          talking.server.async_read_some(asio::buffer(buf2),
                                         twheel::cancel_after(1h, big_handler(l, id)));
        });
        const int id3 = start_op(ctx, l, [&](int id) {
          outer.server.async_read_some(
              asio::buffer(buf3),
              asio::bind_cancellation_slot(outer_signal.slot(),
                                           twheel::cancel_after(1ms, small_handler(l, id))));
        });
        const int id4 = start_op(ctx, l, [&](int id) {
          inner.server.async_read_some(
              asio::buffer(buf4),
              twheel::cancel_after(
                  1ms, asio::bind_cancellation_slot(inner_signal.slot(), small_handler(l, id))));
        });
        {
          pause_faults p;  // the peer's write is not under test
          asio::write(talking.client, asio::buffer("x", 1));
        }
        // Until every read ended (or was refused): the silent ones by their timeouts.
        run_until_resolved(ctx, l, {id1, id2, id3, id4});
        armed.disarm();
      }
      watchdog.finish();
    }
    check_ledger(l);
  });
}

// The timeout of an operation whose handler runs on a strand is emitted through a
// dispatch to that strand, which allocates: if it cannot, the timeout is filed again a
// millisecond later, never lost (the watchdog would end the silent read). Asio's own
// completion of the read through the same strand allocates too and, failing, destroys the
// handler (Asio's behaviour): here a handler may end destroyed, but exactly once.
// Single failures only: in a burst the retry's dispatch fails too, the retry is filed
// again each millisecond, and the burst never ends, so the watchdog fires.
BOOST_AUTO_TEST_CASE(cancel_after_on_a_strand) {
  for_every_single_failure([](long n) {
    ledger l;
    {
      asio::io_context ctx;
      auto strand = asio::make_strand(ctx);
      loopback lb(ctx);
      socket_pair silent = lb.connect();
      std::array<char, 16> buf{};
      (void)twheel::stats(ctx);
      read_watchdog watchdog(ctx, {&silent.server});
      int id = -1;
      {
        fault_scope armed(n);
        id = start_op(ctx, l, [&](int i) {
          silent.server.async_read_some(
              asio::buffer(buf),
              twheel::cancel_after(1ms, asio::bind_executor(strand, small_handler(l, i))));
        });
        run_until_resolved(ctx, l, {id});
        armed.disarm();
      }
      FI_CHECK(l.state[id] != alive);
      FI_CHECK(l.state[id] != 100);  // resolved twice
      watchdog.finish();
    }
  });
}

namespace {

// With no injection: runs the wheel's context, then the handlers', to the end.
void drain_both(asio::io_context& ctx, asio::io_context& handler_ctx) {
  ctx.restart();
  ctx.run();
  handler_ctx.restart();
  handler_ctx.run();
  FI_CHECK(twheel::stats(ctx).pending == 0);
}

// Polls `a`, then `b`, while armed (a bad_alloc out of poll() is caught), until `done()`,
// for at most 200 rounds a millisecond apart.
template <class Done>
void poll_until(asio::io_context& a, asio::io_context& b, Done done) {
  for (int i = 0; i < 200 && !done(); ++i) {
    for (asio::io_context* c : {&a, &b}) {
      try {
        c->restart();
        c->poll();
      } catch (const std::bad_alloc&) {
        end_burst();
      }
    }
    if (!done()) {
      pause_faults p;
      std::this_thread::sleep_for(1ms);
    }
  }
}

}  // namespace

// A read whose handler has an allocator of its own and runs on another context, with its
// data there and its timeout due before either context runs: the read's completion and
// the timeout's emission are both queued to the handler's context, and the upcall may be
// held in the timeout's state until the emission has run (cancel_after_state::
// hold_upcall). Holding it and posting it allocate; if they cannot, the upcall is made
// at once, or in place, never lost. Asio's own dispatch of the read's completion to the
// other context may fail too and destroy the handler (ledger::on_strand). Single failures
// only, as above: a burst would fail the emission's retries for ever.
BOOST_AUTO_TEST_CASE(cancel_after_held_upcall) {
  for_every_single_failure([](long n) {
    ledger l;
    {
      asio::io_context handler_ctx;
      asio::io_context ctx;
      loopback lb(ctx);
      socket_pair pair = lb.connect();
      std::array<char, 16> buf{};
      (void)twheel::stats(ctx);
      int id = -1;
      {
        fault_scope armed(n);
        id = start_op(ctx, l, [&](int i) {
          pair.server.async_read_some(
              asio::buffer(buf),
              twheel::cancel_after(1ms, asio::bind_executor(handler_ctx, big_handler(l, i))));
        });
        {
          pause_faults p;
          l.on_strand[id] = true;
          asio::write(pair.client, asio::buffer("x", 1));
          std::this_thread::sleep_for(3ms);
        }
        // The wheel's context first, until the timeout fired: the read's completion is
        // then queued ahead of the emission.
        poll_until(ctx, ctx, [&] { return twheel::stats(ctx).fired != 0; });
        poll_until(ctx, handler_ctx, [&] { return l.state[id] != alive; });
        armed.disarm();
      }
      FI_CHECK(l.state[id] != alive);
      FI_CHECK(l.state[id] != 100);  // resolved twice
      drain_both(ctx, handler_ctx);
    }
    check_ledger(l);
  });
}

namespace {

// An operation on `ex`'s context (where cancel_after finds its wheel) that completes,
// through `handler_ctx`, when the test calls what it left in `completions`. That post is
// not under test: it cannot fail, so a handler destroyed unrun was lost by the library.
struct held_op_initiation {
  asio::io_context::executor_type ex;
  asio::io_context* handler_ctx;
  std::vector<std::function<void()>>* completions;
  asio::io_context::executor_type get_executor() const noexcept { return ex; }
  template <class Handler>
  void operator()(Handler&& handler) const {
    auto h = std::make_shared<std::decay_t<Handler>>(std::forward<Handler>(handler));
    completions->push_back([h, c = handler_ctx] {
      pause_faults p;
      asio::post(*c, [h] { (*h)(error_code()); });
    });
  }
};

}  // namespace

// The same with the timeout's record still queued in the wheel's context when the
// handler runs (a timer filed before it, due at the same time, is the pass's first
// handler, run by the pass; the timeout's record is queued): the record, run last, posts
// the held upcall to the handler's executor, an any_io_executor, whose execute()
// allocates its function wrapper after taking the function; if it cannot, the upcall is
// made in place. Every accepted handler must be called: none may be lost.
BOOST_AUTO_TEST_CASE(cancel_after_held_upcall_posted) {
  for_every_single_failure([](long n) {
    ledger l;
    {
      asio::io_context handler_ctx;
      asio::io_context ctx;
      std::vector<std::function<void()>> completions;
      twheel::steady_timer first(ctx);
      bool first_ran = false;
      int id = -1;
      {
        fault_scope armed(n);
        const auto due = std::chrono::steady_clock::now() + 1ms;  // the same for both
        first.expires_at(due);
        const bool first_accepted =
            initiate([&] { first.async_wait([&](error_code) { first_ran = true; }); });
        id = start_op(ctx, l, [&](int i) {
          auto token =
              twheel::cancel_at(due, asio::bind_executor(
                                         asio::any_io_executor(handler_ctx.get_executor()),
                                         big_handler(l, i)));
          asio::async_initiate<decltype(token), void(error_code)>(
              held_op_initiation{ctx.get_executor(), &handler_ctx, &completions}, token);
        });
        {
          pause_faults p;
          std::this_thread::sleep_for(3ms);
        }
        for (int i = 0; i < 200 && first_accepted && !first_ran; ++i) {
          try {
            ctx.run_one();
          } catch (const std::bad_alloc&) {
            end_burst();
          }
        }
        if (!completions.empty()) {
          try {
            completions[0]();
          } catch (const std::bad_alloc&) {
            end_burst();
          }
        }
        poll_until(handler_ctx, ctx, [&] { return l.state[id] != alive; });
        armed.disarm();
      }
      completions.clear();
      FI_CHECK(l.state[id] != alive);
      FI_CHECK(l.state[id] != 100);  // resolved twice
      drain_both(ctx, handler_ctx);
    }
    check_ledger(l);
  });
}

// Runs `body(ctx)` on a fresh context whose wheel exists, with the Nth allocation failing
// (a constructor that cannot allocate throws and starts nothing), then drains the context
// with no injection: every accepted wait must have completed by then.
template <class Body>
void on_fresh_context(long n, Body body) {
  asio::io_context ctx;
  (void)twheel::stats(ctx);
  fault_scope armed(n);
  try {
    body(ctx);
  } catch (const std::bad_alloc&) {
  }
  armed.disarm();
  ctx.restart();
  ctx.run();
  FI_CHECK(twheel::stats(ctx).pending == 0);
}

BOOST_AUTO_TEST_CASE(idle_timer) {
  for_every_allocation([](long n) {
    ledger l;
    on_fresh_context(n, [&](asio::io_context& ctx) {
      int id = 0;
      twheel::idle_timer idle(ctx, 1ms);
      id = l.take();
      l.accepted[id] = initiate([&] { idle.async_wait(small_handler(l, id)); });
      idle.touch();
      idle.cancel();
      id = l.take();
      l.accepted[id] = initiate([&] { idle.async_wait(big_handler(l, id)); });
      twheel::idle_timer other(ctx, 1ms);
      id = l.take();
      l.accepted[id] = initiate([&] { other.async_wait(small_handler(l, id)); });
      idle = std::move(other);  // aborts idle's wait, takes other's
      run_armed(ctx);
    });
    check_ledger(l);
  });
}

// Re-waits `timer` 24 times, alternately with a boxed handler and with one bound to
// `signal`'s slot. A refused re-wait must change nothing (`mark()`, what the timer keeps
// for its pending wait, included); an accepted one aborts the wait pending before it.
template <class Timer, class Mark>
void rewait_24_times(asio::io_context& ctx, ledger& l, Timer& timer,
                     asio::cancellation_signal& signal, Mark mark) {
  bool waiting = false;  // a wait of `timer` is in the wheel
  for (int i = 0; i < 24; ++i) {
    const auto before = twheel::stats(ctx);
    const auto marked = mark();
    const int id = l.take();
    l.accepted[id] = initiate([&] {
      if (i % 2 == 0) {
        timer.async_wait(small_handler(l, id));
      } else {
        timer.async_wait(asio::bind_cancellation_slot(signal.slot(), big_handler(l, id)));
      }
    });
    const auto after = twheel::stats(ctx);
    if (!l.accepted[id]) {
      FI_CHECK(after.pending == before.pending);
      FI_CHECK(after.cancelled == before.cancelled);
      FI_CHECK((mark() == marked));
    } else {
      FI_CHECK(after.pending == 1);
      FI_CHECK(after.cancelled == before.cancelled + (waiting ? 1 : 0));
      waiting = true;
    }
    std::this_thread::sleep_for(1us);  // the next start's stamp or tick differs
  }
}

// A new wait on an idle timer aborts the pending one only once it is accepted: one that
// cannot be made (its flag, its operation, the forwarder into the caller's slot, its
// record, the driver's wake-up) leaves the pending wait in the wheel, and nothing leaks
// (LeakSanitizer saw the flag leak when the slot's forwarder could not be made). Enough
// re-waits that the driver's pool of wake-ups grows among them: a re-wait that re-armed
// the driver after aborting the pending wait lost it when that growth failed (CI saw it).
// A refused re-wait leaves the pending wait's touch stamp as it was (it counted as a
// touch, putting the wait off: a review found it).
BOOST_AUTO_TEST_CASE(idle_timer_rewait) {
  for_every_allocation([](long n) {
    ledger l;
    on_fresh_context(n, [&](asio::io_context& ctx) {
      asio::cancellation_signal signal;
      twheel::idle_timer idle(ctx, 1ms);
      const auto& entry =
          static_cast<const twheel::detail::idle_entry&>(twheel::detail::timer_access::state(idle));
      // A refused re-wait does not put the pending wait off.
      rewait_24_times(ctx, l, idle, signal, [&] { return entry.touched.load(); });
      run_armed(ctx);
    });
    check_ledger(l);
  });
}

BOOST_AUTO_TEST_CASE(periodic_timer) {
  for_every_allocation([](long n) {
    ledger l;
    on_fresh_context(n, [&](asio::io_context& ctx) {
      int id = 0;
      twheel::periodic_timer tick(ctx, 1ms);
      for (int i = 0; i < 3; ++i) {
        id = l.take();
        l.accepted[id] = initiate([&] { tick.async_wait(small_handler(l, id)); });
        run_armed(ctx);
        ctx.restart();
      }
      id = l.take();
      l.accepted[id] = initiate([&] { tick.async_wait(big_handler(l, id)); });
      tick.cancel();
      id = l.take();
      l.accepted[id] = initiate([&] { tick.async_wait(small_handler(l, id)); });
      twheel::periodic_timer moved(std::move(tick));
      run_armed(ctx);
    });
    check_ledger(l);
  });
}

// A new wait on a periodic timer aborts the pending one only once it is accepted, and
// moves the grid only then: one that cannot be made leaves both as they were (the first
// wait's abort came before the new wait's memory: a review found it).
BOOST_AUTO_TEST_CASE(periodic_timer_rewait) {
  for (const auto mode : {twheel::tick_mode::fixed_delay, twheel::tick_mode::fixed_rate}) {
    for_every_allocation([mode](long n) {
      ledger l;
      on_fresh_context(n, [&](asio::io_context& ctx) {
        asio::cancellation_signal signal;
        twheel::periodic_timer tick(ctx, 1ms, mode);
        rewait_24_times(ctx, l, tick, signal, [&] { return tick.next_tick(); });
        run_armed(ctx);
      });
      check_ledger(l);
    });
  }
}

// A tcp_stream operation whose start throws leaves no timeout behind: its timeout is
// filed before the socket's operation is started, and was left in the wheel to close the
// socket of a stream whose operation was never accepted (a review found it).
BOOST_AUTO_TEST_CASE(beast_operation_refused_leaves_no_timeout) {
  enum class kind { read, write, connect };
  for (const kind k : {kind::read, kind::write, kind::connect}) {
    for_every_single_failure([k](long n) {
      ledger l;
      asio::io_context ctx;
      loopback lb(ctx);
      socket_pair pair = lb.connect();
      twheel::beast::tcp_stream stream(k == kind::connect ? asio::ip::tcp::socket(ctx)
                                                          : std::move(pair.server));
      (void)twheel::stats(ctx);
      stream.expires_after(10ms);
      std::array<char, 16> buf{};
      const int id = l.take();
      const auto before = twheel::stats(ctx);
      {
        fault_scope armed(n);
        l.accepted[id] = initiate([&] {
          auto h = [h = small_handler(l, id)](error_code ec, auto&&...) mutable { h(ec); };
          if (k == kind::read) {
            stream.async_read_some(asio::buffer(buf), std::move(h));
          } else if (k == kind::write) {
            stream.async_write_some(asio::buffer(buf), std::move(h));
          } else {
            stream.async_connect(lb.acceptor().local_endpoint(), std::move(h));
          }
        });
        armed.disarm();
      }
      if (!l.accepted[id]) {
        FI_CHECK(twheel::stats(ctx).pending == before.pending);
        // A timeout left behind would fire meanwhile and close the socket.
        const bool open = stream.socket().is_open();
        const auto stop = std::chrono::steady_clock::now() + 30ms;
        while (std::chrono::steady_clock::now() < stop) {
          ctx.poll();
          std::this_thread::sleep_for(1ms);
        }
        FI_CHECK(stream.socket().is_open() == open);
      }
      stream.socket().close();
      pair.client.close();
      ctx.restart();
      ctx.run();
      check_ledger(l);
    });
  }
}

namespace {
// Runs a context of the user's own, with no injection, until no wait is pending: a lost
// wake-up would leave a wait pending for good (the second only ends the test).
void drain_awake(twheel_test::queue_context& ctx) {
  const auto give_up = std::chrono::steady_clock::now() + 1s;
  while (twheel::stats(ctx).pending != 0 && std::chrono::steady_clock::now() < give_up) {
    if (ctx.poll_one() == 0) std::this_thread::sleep_for(200us);
  }
  ctx.poll();
  FI_CHECK(twheel::stats(ctx).pending == 0);
}
}  // namespace

// On a context of the user's own the driver's wake-ups are not pooled: arming it for an
// earlier wait allocates in async_wait(), after expires_at() has cancelled the armed
// wake-up. When that fails, the new wait is refused, and the wait already pending must
// still be woken (its wake-up was refused as cancelled: a review found it).
BOOST_AUTO_TEST_CASE(driver_rearm_failure_keeps_pending_waits_awake) {
  for_every_allocation([](long n) {
    ledger l;
    twheel_test::queue_context ctx;
    twheel::steady_timer late(ctx.get_executor(), 20ms);
    twheel::steady_timer early(ctx.get_executor(), 1ms);
    (void)twheel::stats(ctx);
    const int id_late = l.take();
    late.async_wait(small_handler(l, id_late));
    l.accepted[id_late] = true;
    const int id_early = l.take();
    {
      fault_scope armed(n);
      l.accepted[id_early] = initiate([&] { early.async_wait(small_handler(l, id_early)); });
    }
    drain_awake(ctx);
    check_ledger(l);
  });
}

// On an io_context the driver's wake-ups come from its pool, and a pass already due is
// queued on Asio's scheduler as an operation of the driver's: a pass that re-arms the
// driver (bounded by max_per_pass, or for a later wait) makes no allocation at all. A run
// with every allocation failing still completes every wait (a review found a pass posted
// through the context's any_io_executor, which allocates: out of memory, run() threw and
// the waits after it never completed).
//
// With a slack, so no standby timer: the standby is only a help, made when memory allows
// (its own timer and its Asio timer queue entry may be first needed inside a pass, so
// whether the first round made them depends on timing, and CI once saw one tried).
BOOST_AUTO_TEST_CASE(passes_on_an_io_context_allocate_nothing) {
  asio::io_context ctx;
  twheel::configure(ctx, twheel::wheel_options{.max_per_pass = 1, .slack = 1ns});
  std::array<twheel::steady_timer, 4> timers{twheel::steady_timer(ctx), twheel::steady_timer(ctx),
                                             twheel::steady_timer(ctx), twheel::steady_timer(ctx)};
  // The first round makes what a context makes once (Asio's timer queue, the pools).
  for (const bool armed : {false, true}) {
    BOOST_TEST_CONTEXT((armed ? "every allocation failing" : "first round")) {
      ledger l;
      for (std::size_t i = 0; i != timers.size(); ++i) {
        timers[i].expires_after(i + 1 == timers.size() ? 15ms : 1ms);
        const int id = l.take();
        timers[i].async_wait(small_handler(l, id));
        l.accepted[id] = true;
      }
      std::this_thread::sleep_for(3ms);  // three due: three bounded passes
      ctx.restart();
      bool threw = false;
      {
        burst_mode = armed;
        fault_scope scope(armed ? 1 : 0);
        try {
          ctx.run();
        } catch (const std::bad_alloc&) {
          threw = true;
        }
        FI_CHECK(!injected);  // nothing tried to allocate
        burst_mode = false;
      }
      BOOST_TEST(!threw);
      check_ledger(l);
      BOOST_TEST(twheel::stats(ctx).pending == 0u);
    }
  }
}

// The internal timer's first wait of a context (Asio's timer queue grows) made in a pass:
// the first wake-up was a pass already due. Out of memory, the exception leaves run(), as
// Asio's own failures do, and a pass is queued instead, so the waits still pending stay
// awake: the next run() completes them. Before, the driver was left unarmed, and they
// never completed (a review found it).
BOOST_AUTO_TEST_CASE(a_failed_rearm_in_a_pass_keeps_the_waits_awake) {
  for_every_allocation([](long n) {
    ledger l;
    asio::io_context ctx;
    twheel::steady_timer due(ctx);  // expired: its expiry is the clock's epoch
    twheel::steady_timer later(ctx, 10ms);
    const int id_due = l.take();
    due.async_wait(small_handler(l, id_due));  // the driver: a pass already due
    l.accepted[id_due] = true;
    const int id_later = l.take();
    later.async_wait(small_handler(l, id_later));  // armed by that pass
    l.accepted[id_later] = true;
    {
      fault_scope armed(n);
      try {
        ctx.run();
      } catch (const std::bad_alloc&) {
        end_burst();
      }
    }
    ctx.restart();
    const auto give_up = std::chrono::steady_clock::now() + 1s;
    while (twheel::stats(ctx).pending != 0 && std::chrono::steady_clock::now() < give_up) {
      if (ctx.run_one_for(100ms) == 0) ctx.restart();
    }
    ctx.run();
    check_ledger(l);
  });
}

// A periodic wait started while the due tick's handler is queued is parked, and filed for
// the grid's next tick when that handler runs. On a context of the user's own, filing it
// arms the driver, which allocates; if that fails, the parked wait is aborted rather than
// left where it was parked. Every accepted handler is invoked once. Single failures only: in
// a burst, the context's own queue (queue_context::execute) cannot take the aborted
// wait's completion either, and no library can help that.
BOOST_AUTO_TEST_CASE(periodic_parked_wait_filed_or_aborted) {
  for_every_single_failure([](long n) {
    ledger l;
    twheel_test::queue_context ctx;
    twheel::periodic_timer tick(ctx.get_executor(), 5ms);
    twheel::steady_timer other(ctx.get_executor());
    const int first = l.take();
    tick.async_wait(small_handler(l, first));
    l.accepted[first] = true;
    const int second = l.take();
    // Armed from the new wait to the tick's handler: the pass before it, and the
    // wake-ups after, are not this scenario's (the context's own queue allocates them).
    std::optional<fault_scope> armed;
    other.expires_at(tick.next_tick() - 3ms);
    other.async_wait([&](error_code) {
      armed.emplace(n);
      l.accepted[second] = initiate([&] { tick.async_wait(small_handler(l, second)); });
    });
    std::this_thread::sleep_until(tick.next_tick() + 1ms);  // one pass settles both
    const auto give_up = std::chrono::steady_clock::now() + 1s;
    while (l.state[first] == alive && std::chrono::steady_clock::now() < give_up) {
      try {
        if (ctx.poll_one() == 0) std::this_thread::sleep_for(200us);
      } catch (const std::bad_alloc&) {
        end_burst();
      }
    }
    FI_CHECK(l.state[first] != alive);
    armed.reset();
    drain_awake(ctx);
    check_ledger(l);
  });
}

// A timer whose waits were cancelled keeps its place in the wheel (cancel() spares its
// neighbours). A new wait refused because the driver could not be armed for it leaves
// that place as it was: the refusal took the timer out, and stats().timers dropped by one
// (a review found it). On a context of the user's own, where arming allocates.
BOOST_AUTO_TEST_CASE(refused_wait_keeps_a_cancelled_timers_place) {
  for (const auto expiry : {1ms, 50ms}) {  // earlier than the kept place, and later
    for_every_allocation([expiry](long n) {
      ledger l;
      twheel_test::queue_context ctx;
      twheel::steady_timer t(ctx.get_executor(), 20ms);
      int id = l.take();
      t.async_wait(small_handler(l, id));
      l.accepted[id] = true;
      t.cancel();  // no wait left: the driver is disarmed, the place kept
      ctx.poll();
      FI_CHECK(twheel::stats(ctx).timers == 1);
      t.expires_after(expiry);
      {
        fault_scope armed(n);
        wait_on(t, ctx, l, id, make<small_handler>(l, id));
      }
      drain_awake(ctx);
      check_ledger(l);
    });
  }
}

namespace {
// Whether an idle timer of `ctx` can be made with the `n`th allocation failing (it is
// destroyed at once).
bool idle_timer_made(twheel_test::queue_context& ctx, long n) {
  fault_scope armed(n);
  return initiate([&] { twheel::idle_timer idle(ctx.get_executor(), 1s); });
}
}  // namespace

// The first idle timer of a wheel makes its driver keep the touch epoch, and re-arms a
// driver already armed for the epoch's tick. When that re-arm cannot be made the
// construction fails, and the wheel does not keep the epoch: no idle timer of it exists,
// and a kept epoch would wake its driver each tick while it has waits (a review found
// it). On a context of the user's own, where arming allocates.
BOOST_AUTO_TEST_CASE(refused_idle_timer_leaves_the_epoch_unkept) {
  for_every_allocation([](long n) {
    ledger l;
    twheel_test::queue_context ctx;
    twheel::steady_timer far(ctx.get_executor(), 10s);
    const int id = l.take();
    far.async_wait(small_handler(l, id));  // the driver armed for 10 s
    l.accepted[id] = true;
    const bool made = idle_timer_made(ctx, n);
    FI_CHECK(twheel::wheel_service::of(ctx).keeps_touch_epoch() == made);
    far.cancel();
    ctx.poll();
    check_ledger(l);
  });
}

// The same, with another thread making an idle timer of the same wheel meanwhile, as
// soon as the wheel says it keeps the epoch. A wheel must never say so while the first
// idle timer's construction can still fail, nor stop keeping it once an idle timer
// exists: the flag, taken back, was read unlocked by the other constructor in between,
// which then made an idle timer on a wheel that did not keep the epoch (a review found
// it). The other thread has no countdown: only this thread's allocations fail.
BOOST_AUTO_TEST_CASE(idle_timer_racing_a_refused_first_one) {
  {
    twheel_test::queue_context warm;  // the process's epoch is made once: not here
    twheel::idle_timer idle(warm.get_executor(), 1s);
  }
  // The allocation at which the construction fails at the driver's re-arm: its last one.
  long refusing = 0;
  for (long n = 1; n <= 64; ++n) {
    twheel_test::queue_context ctx;
    twheel::steady_timer far(ctx.get_executor(), 10s);
    far.async_wait([](error_code) {});
    const bool made = idle_timer_made(ctx, n);
    far.cancel();
    ctx.poll();
    if (made) break;
    refusing = n;
  }
  BOOST_TEST_REQUIRE(refusing != 0);
  for (int i = 0; i < 200; ++i) {
    twheel_test::queue_context ctx;
    twheel::steady_timer far(ctx.get_executor(), 10s);
    far.async_wait([](error_code) {});
    auto& service = twheel::wheel_service::of(ctx);
    std::atomic<bool> ready{false}, stop{false};
    std::optional<twheel::idle_timer> other;
    std::thread racer([&] {
      ready.store(true);
      while (!stop.load(std::memory_order_relaxed)) {
        if (service.keeps_touch_epoch()) {
          other.emplace(ctx.get_executor(), 1s);
          return;
        }
      }
    });
    while (!ready.load()) std::this_thread::yield();
    const bool made = idle_timer_made(ctx, refusing);
    stop.store(true);
    racer.join();
    BOOST_TEST((made || !other));  // no idle timer while the first one's was refused
    BOOST_TEST(service.keeps_touch_epoch() == (made || other.has_value()));
    other.reset();
    far.cancel();
    ctx.poll();
  }
}

// A re-wait that replaces the pending wait (idle_timer's, and periodic_timer's through
// timer_access::replace_wait) moves the timer's entry to the new deadline before the
// driver is armed for it. When that arming fails, the re-wait is refused and the pending
// wait stays: at its own deadline, not the refused one's, later (a review found it). The
// driver needs arming there only when an earlier failure left it unarmed (`early`'s
// wait), on a context of the user's own, where arming allocates.
BOOST_AUTO_TEST_CASE(refused_rewait_keeps_the_pending_waits_deadline) {
  for (const bool idle_kind : {true, false}) {
    for (long n = 1; n <= 6; ++n) {
      for (long m = 1; m <= 6; ++m) {
        ledger l;
        twheel_test::queue_context ctx;
        twheel::idle_timer idle(ctx.get_executor(), 60ms);
        twheel::steady_timer plain(ctx.get_executor(), 60ms);
        twheel::steady_timer early(ctx.get_executor(), 5ms);
        const twheel::wheel_entry& entry = idle_kind
                                               ? twheel::detail::timer_access::state(idle)
                                               : twheel::detail::timer_access::state(plain);
        const auto rewait = [&](auto handler) {
          if (idle_kind) {
            idle.async_wait(std::move(handler));
          } else {
            twheel::detail::timer_access::replace_wait(
                plain, std::chrono::steady_clock::now() + 60ms, std::move(handler));
          }
        };
        int id = l.take();
        rewait(small_handler(l, id));
        l.accepted[id] = true;
        ctx.poll();
        id = l.take();
        {
          fault_scope armed(n);
          l.accepted[id] = initiate([&] { early.async_wait(small_handler(l, id)); });
        }
        std::this_thread::sleep_for(1ms);  // the re-wait's deadline is a later tick
        const std::uint64_t tick = entry.deadline_tick();
        id = l.take();
        {
          fault_scope armed(m);
          l.accepted[id] = initiate([&] { rewait(small_handler(l, id)); });
        }
        if (!l.accepted[id]) FI_CHECK(entry.deadline_tick() == tick);
        idle.cancel();
        plain.cancel();
        early.cancel();
        drain_awake(ctx);
        check_ledger(l);
      }
    }
  }
}

// The wheel's creation: by the first timer, or by configure(). A failure leaves the
// context as it was: configure() (or the first timer) can still be done afterwards.
BOOST_AUTO_TEST_CASE(first_use) {
  for_every_allocation([](long n) {
    ledger l;
    asio::io_context ctx;
    {
      fault_scope armed(n);
      bool made = initiate([&] {
        twheel::steady_timer t(ctx, 1ms);
        int id = 0;
        wait_on(t, ctx, l, id, make<small_handler>(l, id));
        run_armed(ctx);
      });
      armed.disarm();
      if (!made) {
        twheel::steady_timer t(ctx, 1ms);
        t.wait();
      }
    }
    ctx.restart();
    ctx.run();
    check_ledger(l);
  });
}

BOOST_AUTO_TEST_CASE(configure) {
  for_every_allocation([](long n) {
    ledger l;
    asio::io_context ctx;
    const twheel::wheel_options options{.tick = 2ms};
    error_code ec;
    {
      fault_scope armed(n);
      bool done = initiate([&] { twheel::configure(ctx, options); });
      if (!done) {
        // Nothing was made: the error_code form may still configure it (or report
        // no_memory, again changing nothing).
        twheel::configure(ctx, options, ec);
        FI_CHECK((!ec || ec == asio::error::no_memory));
        done = !ec;
      }
      armed.disarm();
      if (!done) twheel::configure(ctx, options);
    }
    // Configured exactly as asked, whatever failed on the way.
    twheel::steady_timer t(ctx, 1ms);
    BOOST_TEST((asio::use_service<twheel::wheel_service>(ctx).options().tick ==
                std::chrono::nanoseconds(2ms)));
    int id = 0;
    wait_on(t, ctx, l, id, make<small_handler>(l, id));
    ctx.run();
    check_ledger(l);
  });
}

// cancel_after on a context of the user's own (queue_context: it destroys its queue after
// its services), the handler on a strand, with memory running out from one allocation on:
// - the timeout's dispatch to the strand fails, and so may the timeout filed again a
//   millisecond later. Then the operation runs on without its timeout (documented), and
//   its handler, cancelled and queued, is destroyed with the context, after the wheel: it
//   must not reach for the wheel to take back a timeout that was never filed (ASan);
// - the driver's re-arm after a pass fails (on this context its memory is not pooled):
//   what the pass settled must still reach the context (LeakSanitizer saw the timeout's
//   record lost).
// The strand is another context's: a strand of the queue_context would itself be
// destroyed after its service.
BOOST_AUTO_TEST_CASE(cancel_after_on_a_context_of_its_own) {
  for_every_allocation([](long n) {
    ledger l;
    int id = -1;
    {
      asio::io_context handler_ctx;  // outlives ctx and what ctx leaves queued
      auto strand = asio::make_strand(handler_ctx);
      twheel_test::queue_context ctx;
      twheel::steady_timer operation(ctx.get_executor(), 1h);  // the operation under a timeout
      (void)twheel::stats(ctx);
      {
        fault_scope armed(n);
        id = l.take();
        l.accepted[id] = initiate([&] {
          operation.async_wait(
              twheel::cancel_after(1ms, asio::bind_executor(strand, small_handler(l, id))));
        });
        // One item at a time until the timeout has cancelled the operation, or was lost:
        // a burst ended in poll_one(), and nothing more happens for a while.
        auto quiet_since = std::chrono::steady_clock::now();
        bool lost = false;
        while (l.accepted[id] && twheel::stats(ctx).pending != 0 && !lost) {
          std::size_t ran = 0;
          try {
            ran = ctx.poll_one();
            ran += handler_ctx.poll_one();
          } catch (const std::bad_alloc&) {
            end_burst();
          }
          const auto now = std::chrono::steady_clock::now();
          if (ran != 0) quiet_since = now;
          lost = twheel::stats(ctx).pending == 1 && now - quiet_since > 200ms;
          if (ran == 0) std::this_thread::sleep_for(100us);
        }
        armed.disarm();
      }
      operation.cancel();  // a lost timeout's operation: its handler is queued too
      FI_CHECK(twheel::stats(ctx).pending == 0);
    }  // the queued handler is destroyed after the wheel
    FI_CHECK(l.state[id] == destroyed);
  });
}
