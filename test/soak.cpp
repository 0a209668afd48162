// soak.cpp: long-running random workload over twheel::steady_timer (not part of the default
// test run; CTest label `soak`).
//
//   twheel_soak [--seconds N] [--timers N] [--seed N]
//
// Two threads run one io_context. The timers are partitioned across strands (a timer object
// is not thread-safe, as in Asio); each strand repeatedly applies random operations to its
// own timers: re-arm (expires_after + async_wait, aborting the pending waits), an extra
// wait, cancel, cancel_one, destroy, move-construct, move-assign, a wait bound to a
// cancellation_signal and emitting such a signal. Handlers run inline on the context or
// through the strand, at random.
//
// Every started wait has an id and a record; its handler settles the record. Checked, and
// reported as violations (exit status 1):
//   - every handler runs exactly once: no duplicate (a record settled twice), no loss
//     (after everything is cancelled and run() has returned, started == completed and no
//     record is still pending);
//   - never early: a wait completing with success runs at or after its deadline;
//   - error codes: only success and operation_aborted;
//   - handlers bound to a strand run on it;
//   - twheel::stats() agrees with our counts: bounded by them every second while running,
//     equal to them at the end (fired, cancelled, rejected 0, pending 0, timers 0);
//   - run() returns once everything is cancelled (no work left behind);
//   - resident memory (from /proc/self/statm) stops growing after warm-up (the first 20%
//     of the time, and at least 10% of it after every timer has been armed once): its
//     maximum afterwards exceeds the warm-up value by at most max(16 MiB, 5%) (not
//     enforced under sanitizers that hold memory of their own, see rss_unchecked).
#include <twheel/steady_timer.hpp>
#include <twheel/wheel_service.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using clock_type = std::chrono::steady_clock;
using timer_type = twheel::steady_timer;
using strand_type = asio::strand<asio::io_context::executor_type>;
using namespace std::chrono_literals;

constexpr std::size_t shard_count = 16;
constexpr std::size_t ops_per_step = 64;  // small: the wheel's driver gets a turn per round
constexpr std::size_t signals_per_shard = 8;
constexpr unsigned threads = 2;

// Sanitizer runtimes hold memory of their own: AddressSanitizer keeps freed memory in a
// quarantine (256 MiB by default) unless ASAN_OPTIONS=quarantine_size_mb=0, ThreadSanitizer
// keeps shadow and history memory that grows with the addresses used. The RSS bound is not
// enforced then.
#if defined(__SANITIZE_THREAD__)
const char* const rss_unchecked = "ThreadSanitizer's own memory";
#elif defined(__SANITIZE_ADDRESS__)
const char* const rss_unchecked = [] {
  const char* o = std::getenv("ASAN_OPTIONS");
  return o == nullptr || std::strstr(o, "quarantine_size_mb=0") == nullptr
             ? "AddressSanitizer's quarantine is on"
             : nullptr;
}();
#else
const char* const rss_unchecked = nullptr;
#endif

struct options {
  long long seconds = 30;
  std::size_t timers = 1'000'000;
  std::uint64_t seed = 1;
};

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s [--seconds N] [--timers N] [--seed N]\n", argv0);
  std::exit(2);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage(argv[0]);
    char* end = nullptr;
    const unsigned long long v = std::strtoull(argv[i + 1], &end, 10);
    if (end == argv[i + 1] || *end != '\0') usage(argv[0]);
    ++i;
    if (a == "--seconds" && v > 0) {
      o.seconds = static_cast<long long>(v);
    } else if (a == "--timers" && v >= shard_count) {
      o.timers = static_cast<std::size_t>(v);
    } else if (a == "--seed") {
      o.seed = v;
    } else {
      usage(argv[0]);
    }
  }
  return o;
}

std::size_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  std::size_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

double mib(std::size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

void atomic_max(std::atomic<std::int64_t>& a, std::int64_t v) {
  std::int64_t cur = a.load(std::memory_order_relaxed);
  while (v > cur && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

enum op_kind : unsigned {
  op_rearm,          // expires_after + async_wait (aborts the pending waits)
  op_extra_wait,     // async_wait on the current expiry (a second wait on the timer)
  op_cancel,
  op_cancel_one,
  op_destroy,        // the timer goes away with its waits pending
  op_move_construct, // a new timer object takes over the waits
  op_move_assign,    // into another slot, whose own waits are aborted
  op_signal_wait,    // expires_after + async_wait bound to a cancellation_signal
  op_emit,           // per-operation cancellation
  op_handler_rearm,  // a strand-bound handler re-arms its slot on success (not drawn)
  op_kinds
};

const char* const op_names[op_kinds] = {"rearm",       "extra_wait",  "cancel",
                                        "cancel_one",  "destroy",     "move_construct",
                                        "move_assign", "signal_wait", "emit",
                                        "handler_rearm"};
// Relative frequencies of the operations drawn at random.
constexpr std::array<unsigned, op_kinds> op_weights = {35, 5, 10, 5, 8, 7, 7, 13, 10, 0};

// Counters shared by both threads, each on its own cache line.
struct alignas(64) counter {
  std::atomic<std::uint64_t> v{0};
  void add(std::uint64_t n = 1) noexcept { v.fetch_add(n, std::memory_order_relaxed); }
  std::uint64_t get() const noexcept { return v.load(std::memory_order_relaxed); }
};

class soak;

// One strand's timers and the records of their waits. Everything except `records` and
// `returned` is touched on the strand only.
struct shard {
  shard(asio::io_context& ctx, std::size_t timers, std::uint64_t seed)
      : strand(asio::make_strand(ctx)),
        slots(timers),
        record_count(4 * timers + 1024),
        records(new std::atomic<std::uint64_t>[record_count]),
        rng(seed) {
    free.reserve(record_count);
    returned.reserve(record_count);
    for (std::size_t i = 0; i < record_count; ++i) {
      records[i].store(0, std::memory_order_relaxed);
      free.push_back(static_cast<std::uint32_t>(record_count - 1 - i));
    }
  }

  strand_type strand;
  std::vector<std::unique_ptr<timer_type>> slots;
  std::size_t armed = 0;  // slots armed by the initial phase
  // A record holds (id << 1) | 1 while its wait is pending, (id << 1) once completed.
  std::size_t record_count;
  std::unique_ptr<std::atomic<std::uint64_t>[]> records;
  std::vector<std::uint32_t> free;
  std::mutex returned_mutex;  // handlers give records back from either thread
  std::vector<std::uint32_t> returned;
  std::array<asio::cancellation_signal, signals_per_shard> signals;
  std::mt19937_64 rng;
  std::discrete_distribution<unsigned> pick{op_weights.begin(), op_weights.end()};
  std::uint64_t next_id = 0;
  std::array<std::uint64_t, op_kinds> ops{};
  std::uint64_t constructed = 0;
  std::uint64_t aborted_by_rearm = 0;  // waits expires_after reported cancelling
  std::uint64_t no_record = 0;         // waits not started: all records in use
};

// A wait's handler: settles its record. Move-only, as most real handlers.
struct wait_handler {
  soak* s;
  shard* sh;
  std::uint64_t id;
  clock_type::time_point deadline;
  clock_type::time_point due;  // max(deadline, start of the wait): lateness is from here
  std::uint32_t rec;
  std::uint32_t slot;
  bool on_strand;

  wait_handler(soak* s_, shard* sh_, std::uint64_t id_, clock_type::time_point deadline_,
               clock_type::time_point due_, std::uint32_t rec_, std::uint32_t slot_,
               bool on_strand_)
      : s(s_),
        sh(sh_),
        id(id_),
        deadline(deadline_),
        due(due_),
        rec(rec_),
        slot(slot_),
        on_strand(on_strand_) {}
  wait_handler(wait_handler&&) = default;
  wait_handler(const wait_handler&) = delete;
  wait_handler& operator=(const wait_handler&) = delete;

  void operator()(error_code ec);
};

class soak {
 public:
  explicit soak(const options& o) : opt_(o), guard_(asio::make_work_guard(ctx_)) {
    std::mt19937_64 seeder(o.seed);
    for (std::size_t i = 0; i < shard_count; ++i) {
      const std::size_t n = o.timers / shard_count + (i < o.timers % shard_count ? 1 : 0);
      shards_.push_back(std::make_unique<shard>(ctx_, n, seeder()));
    }
  }

  int run();
  void complete(const wait_handler& h, error_code ec);

 private:
  void step(shard& sh);
  void random_op(shard& sh);
  void teardown(shard& sh);
  clock_type::duration random_delay(shard& sh);
  template <class Handler>
  void start_wait(shard& sh, timer_type& t, int signal, Handler&& h);
  void start_wait(shard& sh, std::size_t slot, int signal);
  timer_type& ensure_timer(shard& sh, std::size_t i);
  void violation(const char* what, std::uint64_t n = 1);
  void check_bounds(const char* when);

  options opt_;
  asio::io_context ctx_{static_cast<int>(threads)};
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::vector<std::unique_ptr<shard>> shards_;
  std::atomic<bool> stop_{false};
  std::atomic<std::size_t> shards_armed_{0};  // shards done with the initial arming

  counter started_, fired_, aborted_, other_error_, duplicates_, early_, off_strand_;
  std::atomic<bool> warm_{false};  // set when the warm-up is over
  std::atomic<std::int64_t> max_late_ns_{0}, max_late_warm_ns_{0};
  counter late_sum_ns_, late_sum_warm_ns_, fired_warm_;
  std::atomic<std::uint64_t> violations_{0};
  std::mutex report_mutex_;
};

void wait_handler::operator()(error_code ec) { s->complete(*this, ec); }

void soak::violation(const char* what, std::uint64_t n) {
  violations_.fetch_add(n);
  std::lock_guard<std::mutex> lk(report_mutex_);
  std::printf("VIOLATION: %s (%llu)\n", what, static_cast<unsigned long long>(n));
  std::fflush(stdout);
}

void soak::complete(const wait_handler& h, error_code ec) {
  const auto now = clock_type::now();
  shard& sh = *h.sh;
  if (h.on_strand && !sh.strand.running_in_this_thread()) off_strand_.add();
  std::uint64_t expected = (h.id << 1) | 1;
  if (!sh.records[h.rec].compare_exchange_strong(expected, h.id << 1,
                                                 std::memory_order_acq_rel)) {
    duplicates_.add();
    return;  // not ours any more: the record must not be given back twice
  }
  if (!ec) {
    fired_.add();
    if (now < h.deadline) {
      early_.add();
    } else {
      const auto late =
          std::chrono::duration_cast<std::chrono::nanoseconds>(now - h.due);
      atomic_max(max_late_ns_, late.count());
      late_sum_ns_.add(static_cast<std::uint64_t>(late.count()));
      if (warm_.load(std::memory_order_relaxed)) {
        atomic_max(max_late_warm_ns_, late.count());
        late_sum_warm_ns_.add(static_cast<std::uint64_t>(late.count()));
        fired_warm_.add();
      }
    }
  } else if (ec == asio::error::operation_aborted) {
    aborted_.add();
  } else {
    other_error_.add();
  }
  {
    std::lock_guard<std::mutex> lk(sh.returned_mutex);
    sh.returned.push_back(h.rec);
  }
  // A periodic user: re-arm whatever timer is in the slot now (it may have been moved or
  // replaced meanwhile). Only on the strand, which owns the slot.
  if (!ec && h.on_strand && !stop_.load(std::memory_order_relaxed) && sh.slots[h.slot]) {
    ++sh.ops[op_handler_rearm];
    sh.aborted_by_rearm += sh.slots[h.slot]->expires_after(random_delay(sh));
    start_wait(sh, h.slot, -1);
  }
}

clock_type::duration soak::random_delay(shard& sh) {
  const unsigned r = static_cast<unsigned>(sh.rng() % 100);
  auto uniform = [&](clock_type::duration lo, clock_type::duration hi) {
    const auto span = static_cast<std::uint64_t>((hi - lo).count());
    return lo + clock_type::duration(static_cast<clock_type::rep>(sh.rng() % span));
  };
  if (r < 5) return uniform(-5ms, 0ms);    // already due
  if (r < 30) return uniform(0ms, 50ms);   // fires soon, often in a batch
  if (r < 55) return uniform(50ms, 2s);    // often re-armed or cancelled first
  if (r < 90) return uniform(2s, 60s);     // cascades down the levels
  return uniform(1h, 2h);                  // only ever aborted
}

timer_type& soak::ensure_timer(shard& sh, std::size_t i) {
  if (!sh.slots[i]) {
    sh.slots[i] = std::make_unique<timer_type>(ctx_);
    ++sh.constructed;
  }
  return *sh.slots[i];
}

template <class Handler>
void soak::start_wait(shard& sh, timer_type& t, int signal, Handler&& h) {
  if (signal >= 0) {
    t.async_wait(asio::bind_cancellation_slot(
        sh.signals[static_cast<std::size_t>(signal)].slot(), std::forward<Handler>(h)));
  } else {
    t.async_wait(std::forward<Handler>(h));
  }
}

// Starts a wait on `t` with a fresh record; bound to the strand half of the time (completed
// through dispatch), otherwise invoked inline by the wheel's driver on either thread.
void soak::start_wait(shard& sh, std::size_t slot, int signal) {
  timer_type& t = *sh.slots[slot];
  if (sh.free.empty()) {
    std::lock_guard<std::mutex> lk(sh.returned_mutex);
    sh.free.swap(sh.returned);
  }
  if (sh.free.empty()) {
    ++sh.no_record;
    return;
  }
  const std::uint32_t rec = sh.free.back();
  sh.free.pop_back();
  const std::uint64_t id = ++sh.next_id;
  // Published to the handler by the service's lock, taken inside async_wait.
  sh.records[rec].store((id << 1) | 1, std::memory_order_relaxed);
  started_.add();
  const bool on_strand = sh.rng() & 1;
  wait_handler h(this, &sh, id, t.expiry(), std::max(t.expiry(), clock_type::now()), rec,
                 static_cast<std::uint32_t>(slot), on_strand);
  if (on_strand) {
    start_wait(sh, t, signal, asio::bind_executor(sh.strand, std::move(h)));
  } else {
    start_wait(sh, t, signal, std::move(h));
  }
}

void soak::random_op(shard& sh) {
  const unsigned kind = sh.pick(sh.rng);
  const std::size_t i = static_cast<std::size_t>(sh.rng() % sh.slots.size());
  auto& slot = sh.slots[i];
  ++sh.ops[kind];
  switch (kind) {
    case op_rearm: {
      timer_type& t = ensure_timer(sh, i);
      sh.aborted_by_rearm += t.expires_after(random_delay(sh));
      start_wait(sh, i, -1);
      break;
    }
    case op_extra_wait:
      ensure_timer(sh, i);
      start_wait(sh, i, -1);
      break;
    case op_cancel:
      if (slot) slot->cancel();
      break;
    case op_cancel_one:
      if (slot) slot->cancel_one();
      break;
    case op_destroy:
      slot.reset();
      break;
    case op_move_construct:
      if (slot) slot = std::make_unique<timer_type>(std::move(*slot));
      break;
    case op_move_assign: {
      auto& to = sh.slots[static_cast<std::size_t>(sh.rng() % sh.slots.size())];
      if (!slot || &to == &slot) break;
      if (to) {
        *to = std::move(*slot);
      } else {
        to = std::make_unique<timer_type>(std::move(*slot));
      }
      break;
    }
    case op_signal_wait: {
      timer_type& t = ensure_timer(sh, i);
      sh.aborted_by_rearm += t.expires_after(random_delay(sh));
      start_wait(sh, i, static_cast<int>(sh.rng() % signals_per_shard));
      break;
    }
    case op_emit: {
      static constexpr asio::cancellation_type types[] = {asio::cancellation_type::terminal,
                                                          asio::cancellation_type::partial,
                                                          asio::cancellation_type::total};
      sh.signals[sh.rng() % signals_per_shard].emit(types[sh.rng() % 3]);
      break;
    }
    default:
      break;
  }
}

void soak::step(shard& sh) {
  if (stop_.load(std::memory_order_relaxed)) return;
  for (std::size_t n = 0; n < ops_per_step; ++n) {
    if (sh.armed < sh.slots.size()) {  // initial phase: every timer armed once
      const std::size_t i = sh.armed++;
      ensure_timer(sh, i).expires_after(random_delay(sh));
      start_wait(sh, i, -1);
      if (sh.armed == sh.slots.size()) shards_armed_.fetch_add(1);
    } else {
      random_op(sh);
    }
  }
  asio::post(sh.strand, [this, &sh] { step(sh); });
}

// Cancels everything still pending and destroys the timers.
void soak::teardown(shard& sh) {
  for (std::size_t i = 0; i < sh.slots.size(); ++i) {
    if (sh.slots[i] && (i & 1)) sh.slots[i]->cancel();
  }
  for (auto& slot : sh.slots) slot.reset();
}

// Between two completed reads of our counters, the service's counters must lie between
// them: it counts a completion before the handler runs, and a wait after we count it.
void soak::check_bounds(const char* when) {
  const std::uint64_t f = fired_.get(), a = aborted_.get();
  const twheel::wheel_stats s = twheel::stats(ctx_);
  const std::uint64_t st = started_.get();
  bool ok = true;
  if (s.fired < f || s.cancelled < a) ok = false;
  if (s.pending + s.fired + s.cancelled > st) ok = false;
  if (s.rejected != 0) ok = false;
  if (!ok) {
    std::lock_guard<std::mutex> lk(report_mutex_);
    std::printf(
        "VIOLATION (%s): stats() pending %zu fired %llu cancelled %llu rejected %llu; "
        "ours: started %llu fired %llu aborted %llu\n",
        when, s.pending, static_cast<unsigned long long>(s.fired),
        static_cast<unsigned long long>(s.cancelled),
        static_cast<unsigned long long>(s.rejected), static_cast<unsigned long long>(st),
        static_cast<unsigned long long>(f), static_cast<unsigned long long>(a));
    violations_.fetch_add(1);
  }
}

int soak::run() {
  std::printf("twheel soak: %lld s, %zu timers on %zu strands, %u threads, seed %llu\n",
              opt_.seconds, opt_.timers, shard_count, threads,
              static_cast<unsigned long long>(opt_.seed));
  std::fflush(stdout);
  const std::size_t rss_start = rss_bytes();
  const auto t0 = clock_type::now();
  const auto duration = std::chrono::seconds(opt_.seconds);
  // Warm-up: the first 20% of the time, and at least 10% of it after the initial arming.
  auto warm_up_at = t0 + duration / 5;
  bool armed = false;

  for (auto& sh : shards_) {
    shard* p = sh.get();
    asio::post(p->strand, [this, p] { step(*p); });
  }
  std::vector<std::thread> runners;
  for (unsigned i = 0; i < threads; ++i) runners.emplace_back([this] { ctx_.run(); });

  std::size_t rss_warm = 0, rss_max_after = 0, rss_end = 0;
  clock_type::duration warm_up_time{};
  const auto report_every = std::max<clock_type::duration>(duration / 10, 1s);
  auto next_report = t0 + report_every;
  for (auto now = clock_type::now(); now < t0 + duration; now = clock_type::now()) {
    std::this_thread::sleep_for(std::min<clock_type::duration>(1s, t0 + duration - now));
    now = clock_type::now();
    check_bounds("running");
    const std::size_t rss = rss_bytes();
    if (!armed && shards_armed_.load() == shards_.size()) {
      armed = true;
      warm_up_at = std::max(warm_up_at, now + duration / 10);
      std::printf("  t=%4llds all %zu timers armed\n",
                  static_cast<long long>(
                      std::chrono::duration_cast<std::chrono::seconds>(now - t0).count()),
                  opt_.timers);
    }
    if (rss_warm == 0 && armed && now >= warm_up_at) {
      rss_warm = rss;
      warm_up_time = now - t0;
      warm_ = true;
    }
    if (rss_warm != 0) rss_max_after = std::max(rss_max_after, rss);
    if (now >= next_report) {
      next_report += report_every;
      const auto s = twheel::stats(ctx_);
      std::lock_guard<std::mutex> lk(report_mutex_);
      std::printf("  t=%4llds waits started %llu fired %llu aborted %llu pending %zu RSS %.1f MiB\n",
                  static_cast<long long>(
                      std::chrono::duration_cast<std::chrono::seconds>(now - t0).count()),
                  static_cast<unsigned long long>(started_.get()),
                  static_cast<unsigned long long>(fired_.get()),
                  static_cast<unsigned long long>(aborted_.get()), s.pending, mib(rss));
      std::fflush(stdout);
    }
  }
  rss_end = rss_bytes();
  const auto stats_end = twheel::stats(ctx_);
  const auto elapsed = clock_type::now() - t0;

  // Stop the strands' loops, then cancel and destroy everything on each strand.
  stop_ = true;
  std::mutex m;
  std::condition_variable cv;
  std::size_t torn_down = 0;
  for (auto& sh : shards_) {
    shard* p = sh.get();
    asio::post(p->strand, [&, p] {
      teardown(*p);
      std::lock_guard<std::mutex> lk(m);
      ++torn_down;
      cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lk(m);
    if (!cv.wait_for(lk, 120s, [&] { return torn_down == shards_.size(); })) {
      std::printf("VIOLATION: teardown did not run within 120 s\n");
      std::fflush(stdout);
      std::_Exit(1);
    }
  }
  // With nothing pending the wheel must leave no work behind: run() returns.
  guard_.reset();
  std::atomic<bool> joined{false};
  std::thread watchdog([&] {
    const auto until = clock_type::now() + 120s;
    while (!joined && clock_type::now() < until) std::this_thread::sleep_for(10ms);
    if (!joined) {
      std::printf("VIOLATION: io_context::run() did not return after teardown\n");
      std::fflush(stdout);
      std::_Exit(1);
    }
  });
  for (auto& t : runners) t.join();
  joined = true;
  watchdog.join();
  const std::size_t rss_after_teardown = rss_bytes();

  // ---- checks -------------------------------------------------------------------------
  std::uint64_t ops = 0, constructed = 0, aborted_by_rearm = 0, no_record = 0, lost = 0;
  std::array<std::uint64_t, op_kinds> per_kind{};
  for (auto& sh : shards_) {
    for (unsigned k = 0; k < op_kinds; ++k) {
      per_kind[k] += sh->ops[k];
      ops += sh->ops[k];
    }
    constructed += sh->constructed;
    aborted_by_rearm += sh->aborted_by_rearm;
    no_record += sh->no_record;
    for (std::size_t i = 0; i < sh->record_count; ++i) {
      if (sh->records[i].load() & 1) ++lost;
    }
  }
  const std::uint64_t started = started_.get(), fired = fired_.get(),
                      aborted = aborted_.get();
  const std::uint64_t completed = fired + aborted + other_error_.get();
  const twheel::wheel_stats s = twheel::stats(ctx_);

  if (lost != 0) violation("waits never completed (records still pending)", lost);
  if (started != completed) {
    violation("started != completed", started > completed ? started - completed
                                                          : completed - started);
  }
  if (duplicates_.get() != 0) violation("handlers run more than once", duplicates_.get());
  if (early_.get() != 0) violation("waits completed before their deadline", early_.get());
  if (other_error_.get() != 0) violation("unexpected error codes", other_error_.get());
  if (off_strand_.get() != 0) {
    violation("strand-bound handlers run off their strand", off_strand_.get());
  }
  if (s.fired != fired) violation("stats().fired != handlers run with success");
  if (s.cancelled != aborted) violation("stats().cancelled != handlers run with operation_aborted");
  if (s.rejected != 0) violation("stats().rejected != 0");
  if (s.pending != 0) violation("stats().pending != 0 after teardown", s.pending);
  if (s.timers != 0) violation("stats().timers != 0 after teardown", s.timers);
  const std::size_t rss_bound =
      std::max<std::size_t>(16u << 20, rss_warm / 20);  // max(16 MiB, 5%)
  if (rss_warm == 0) {
    violation("warm-up never ended (initial arming too slow for --seconds?)");
  } else if (rss_max_after > rss_warm + rss_bound && rss_unchecked == nullptr) {
    violation("resident memory grew after warm-up");
  }

  const double secs = std::chrono::duration<double>(elapsed).count();
  std::printf("operations: %llu (%.0f ops/s), timers constructed %llu\n",
              static_cast<unsigned long long>(ops), static_cast<double>(ops) / secs,
              static_cast<unsigned long long>(constructed));
  std::printf("  ");
  for (unsigned k = 0; k < op_kinds; ++k) {
    std::printf("%s %llu%s", op_names[k], static_cast<unsigned long long>(per_kind[k]),
                k + 1 < op_kinds ? ", " : "\n");
  }
  std::printf(
      "waits: started %llu, completed %llu (fired %llu, aborted %llu, other %llu), "
      "duplicates %llu, lost %llu, early %llu, off strand %llu, not started (no free record) "
      "%llu\n",
      static_cast<unsigned long long>(started), static_cast<unsigned long long>(completed),
      static_cast<unsigned long long>(fired), static_cast<unsigned long long>(aborted),
      static_cast<unsigned long long>(other_error_.get()),
      static_cast<unsigned long long>(duplicates_.get()), static_cast<unsigned long long>(lost),
      static_cast<unsigned long long>(early_.get()),
      static_cast<unsigned long long>(off_strand_.get()),
      static_cast<unsigned long long>(no_record));
  std::printf("  aborted by re-arm (expires_after's count) %llu\n",
              static_cast<unsigned long long>(aborted_by_rearm));
  std::printf(
      "stats() at end of run: pending %zu, timers %zu; after teardown: pending %zu, timers %zu, "
      "fired %llu, cancelled %llu, rejected %llu, cascaded %llu, wakeups %llu\n",
      stats_end.pending, stats_end.timers, s.pending, s.timers,
      static_cast<unsigned long long>(s.fired), static_cast<unsigned long long>(s.cancelled),
      static_cast<unsigned long long>(s.rejected), static_cast<unsigned long long>(s.cascaded),
      static_cast<unsigned long long>(s.wakeups));
  auto mean_ms = [](std::uint64_t sum_ns, std::uint64_t n) {
    return n ? static_cast<double>(sum_ns) / 1e6 / static_cast<double>(n) : 0.0;
  };
  std::printf(
      "lateness (handler run - max(deadline, wait start), success only): whole run max %.3f "
      "ms, mean %.3f ms; after warm-up max %.3f ms, mean %.3f ms\n",
      static_cast<double>(max_late_ns_.load()) / 1e6, mean_ms(late_sum_ns_.get(), fired),
      static_cast<double>(max_late_warm_ns_.load()) / 1e6,
      mean_ms(late_sum_warm_ns_.get(), fired_warm_.get()));
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  std::string load;
  std::getline(std::ifstream("/proc/loadavg") >> std::ws, load);
  std::printf("CPU: user %.1f s, system %.1f s over %.1f s wall; load average at end: %s\n",
              static_cast<double>(ru.ru_utime.tv_sec) + static_cast<double>(ru.ru_utime.tv_usec) / 1e6,
              static_cast<double>(ru.ru_stime.tv_sec) + static_cast<double>(ru.ru_stime.tv_usec) / 1e6,
              secs, load.c_str());
  std::printf(
      "RSS: start %.1f MiB, at warm-up (t=%lld s) %.1f MiB, max after warm-up %.1f MiB "
      "(bound +%.1f MiB), end of run %.1f MiB, after teardown %.1f MiB\n",
      mib(rss_start),
      static_cast<long long>(
          std::chrono::duration_cast<std::chrono::seconds>(warm_up_time).count()),
      mib(rss_warm), mib(rss_max_after), mib(rss_bound),
      mib(rss_end), mib(rss_after_teardown));
  if (rss_unchecked) std::printf("  (RSS bound not enforced: %s)\n", rss_unchecked);
  const std::uint64_t v = violations_.load();
  std::printf("result: %s (%llu violations)\n", v == 0 ? "OK" : "FAILED",
              static_cast<unsigned long long>(v));
  return v == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  int rc = 1;
  {
    soak s(o);
    rc = s.run();
  }
  return rc;
}
