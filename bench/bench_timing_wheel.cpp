// Micro-benchmark of twheel::timing_wheel, the data structure alone (no Asio, no locking).
//
// For 10k, 100k and 1M pending entries (1 ms tick, 6 levels, deadlines uniform over the
// next hour) it measures:
//   insert+remove  an entry that is not otherwise pending (a hot set of 1024 entries, each
//                  inserted with a random deadline and removed again): the wheel's own cost;
//   re-file        remove + insert of a random pending entry with a new random deadline:
//                  dominated by the cache miss on the entry and its list neighbours;
//   lazy resched.  reschedule() of a random pending entry to a later deadline (stored only);
//   advance        advance(now + 1 tick), time moving forward through the pending entries,
//                  including taking the detached entries out of the caller's list; the
//                  detached entries are re-inserted an hour ahead outside the timed part so
//                  that the number pending stays constant.
//   cascade        (a separate table) N entries with deadlines uniform over [2.2 s, 3.2 s)
//                  filed into a fresh wheel of 8 us ticks at time 0, which puts them all in
//                  one level-3 slot; the one advance() that cascades that slot, per entry.
//                  Filed in memory order (entry i, then i+1: the list walk is sequential in
//                  memory, as in a benchmark that allocates its timers in a row) and in a
//                  random order (as in a long-running server, where arming order and
//                  addresses are unrelated).
// Each figure is the median of `repetitions` timed runs (after one warm-up run). Prints a
// table, then the same numbers as lines starting with "csv,".
#include <twheel/timing_wheel.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace {

using ns = std::chrono::nanoseconds;
using bench_clock = std::chrono::steady_clock;

struct bench_entry : twheel::wheel_entry {
  std::uint32_t id = 0;
};

constexpr int repetitions = 7;
constexpr std::int64_t tick_ns = 1'000'000;         // 1 ms
constexpr std::uint64_t hour_ticks = 3'600'000;     // deadlines spread over ~1 hour
constexpr std::size_t table_size = std::size_t{1} << 20;  // pre-generated random numbers
constexpr std::size_t table_mask = table_size - 1;

struct summary {
  double median = 0, min = 0, max = 0;
};

summary summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

double seconds_since(bench_clock::time_point t0) {
  return std::chrono::duration<double>(bench_clock::now() - t0).count();
}

struct result {
  std::size_t pending = 0;
  summary insert_remove, refile, lazy, advance_step, detached_per_s;
  double entries_per_step = 0;
};

class bench {
 public:
  bench(std::size_t pending, std::uint64_t seed)
      : rng_(seed), entries_(pending), hot_(1024), index_(table_size), delta_(table_size) {
    for (std::size_t i = 0; i < entries_.size(); ++i)
      entries_[i].id = static_cast<std::uint32_t>(i);
    for (auto& d : delta_) d = 1 + static_cast<std::int64_t>(rng_() % (hour_ticks * tick_ns));
    for (auto& i : index_) i = static_cast<std::uint32_t>(rng_() % pending);
    for (auto& e : entries_) wheel_.insert(e, ns(delta_[rng_() & table_mask]));
  }

  ~bench() {
    twheel::wheel_entry_list all;
    wheel_.detach_all(all);
    while (!all.empty()) wheel_.remove(all.front());
  }

  bench(const bench&) = delete;
  bench& operator=(const bench&) = delete;

  result run() {
    result r;
    r.pending = wheel_.size();
    r.insert_remove = measure([this] { return insert_remove(); });
    r.refile = measure([this] { return refile(); });
    r.lazy = measure([this] { return lazy_reschedule(); });
    std::vector<double> step_ns, rate;
    std::uint64_t detached_total = 0, steps_total = 0;
    advance_window();  // warm-up
    for (int i = 0; i < repetitions; ++i) {
      const auto w = advance_window();
      step_ns.push_back(w.seconds * 1e9 / static_cast<double>(w.steps));
      rate.push_back(static_cast<double>(w.detached) / w.seconds);
      detached_total += w.detached;
      steps_total += w.steps;
    }
    r.advance_step = summarize(step_ns);
    r.detached_per_s = summarize(rate);
    r.entries_per_step = static_cast<double>(detached_total) / static_cast<double>(steps_total);
    if (wheel_.size() != r.pending) std::fprintf(stderr, "pending count drifted\n");
    return r;
  }

 private:
  template <class F>
  summary measure(F f) {
    f();  // warm-up
    std::vector<double> v;
    for (int i = 0; i < repetitions; ++i) v.push_back(f());
    return summarize(v);
  }

  std::int64_t now_ns() const { return wheel_.now().count(); }

  // ns per insert+remove pair of a hot entry.
  double insert_remove() {
    constexpr std::size_t ops = 4'000'000;
    const std::int64_t base = now_ns();
    const auto t0 = bench_clock::now();
    for (std::size_t i = 0; i < ops; ++i) {
      bench_entry& e = hot_[i & 1023];
      wheel_.insert(e, ns(base + delta_[i & table_mask]));
      wheel_.remove(e);
    }
    return seconds_since(t0) * 1e9 / ops;
  }

  // ns per remove + insert of a random pending entry.
  double refile() {
    const std::size_t ops = std::min<std::size_t>(table_size, 20 * entries_.size());
    const std::int64_t base = now_ns();
    const std::size_t offset = rng_() & table_mask;
    const auto t0 = bench_clock::now();
    for (std::size_t i = 0; i < ops; ++i) {
      bench_entry& e = entries_[index_[(i + offset) & table_mask]];
      wheel_.remove(e);
      wheel_.insert(e, ns(base + delta_[i & table_mask]));
    }
    return seconds_since(t0) * 1e9 / static_cast<double>(ops);
  }

  // ns per reschedule() of a random pending entry to a later deadline (lazy: stored only).
  double lazy_reschedule() {
    const std::size_t ops = std::min<std::size_t>(table_size, 20 * entries_.size());
    const std::size_t offset = rng_() & table_mask;
    const auto t0 = bench_clock::now();
    for (std::size_t i = 0; i < ops; ++i) {
      bench_entry& e = entries_[index_[(i + offset) & table_mask]];
      // 1..8 ticks later than now; deadline_tick() reads the entry, as reschedule() must.
      const auto later = static_cast<std::int64_t>(e.deadline_tick() + 1 + (i & 7)) * tick_ns;
      wheel_.reschedule(e, ns(later));
    }
    return seconds_since(t0) * 1e9 / static_cast<double>(ops);
  }

  struct window {
    double seconds = 0;
    std::uint64_t steps = 0;
    std::uint64_t detached = 0;
  };

  // One minute of wheel time, one tick per advance(), timed in chunks of 1000 ticks; the
  // detached entries are re-inserted up to an hour ahead between chunks (not timed).
  window advance_window() {
    constexpr std::uint64_t chunk = 1000;
    constexpr std::uint64_t chunks = 60;
    window w;
    std::vector<bench_entry*> fired;
    fired.reserve(entries_.size());
    std::int64_t now = now_ns();
    for (std::uint64_t c = 0; c < chunks; ++c) {
      fired.clear();
      const auto t0 = bench_clock::now();
      for (std::uint64_t s = 0; s < chunk; ++s) {
        now += tick_ns;
        twheel::wheel_entry_list out;
        wheel_.advance(ns(now), out);
        while (!out.empty()) {
          auto& e = static_cast<bench_entry&>(out.front());
          wheel_.remove(e);  // takes it out of `out`, leaves it idle
          fired.push_back(&e);
        }
      }
      w.seconds += seconds_since(t0);
      w.steps += chunk;
      w.detached += fired.size();
      for (bench_entry* e : fired) wheel_.insert(*e, ns(now + delta_[rng_() & table_mask]));
    }
    return w;
  }

  std::mt19937_64 rng_;
  std::vector<bench_entry> entries_;
  std::vector<bench_entry> hot_;
  std::vector<std::uint32_t> index_;
  std::vector<std::int64_t> delta_;
  twheel::timing_wheel wheel_;  // after the entries: destroyed first
};

// ns per entry of the advance() that cascades one crowded level-3 slot (see the header).
summary cascade(std::size_t n, bool random_order) {
  std::vector<double> v;
  std::vector<bench_entry> entries(n);
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  std::mt19937_64 rng(0xca5cade + n);
  for (int rep = 0; rep < repetitions; ++rep) {
    if (random_order) std::shuffle(order.begin(), order.end(), rng);
    twheel::timing_wheel wheel(twheel::wheel_config{std::chrono::microseconds(8), 6});
    for (std::size_t i : order) {
      const auto offset = static_cast<std::int64_t>(rng() % 1'000'000'000);
      wheel.insert(entries[i], ns(2'200'000'000 + offset));
    }
    twheel::wheel_entry_list out;
    const auto at = *wheel.next_expiry();
    const auto t0 = bench_clock::now();
    wheel.advance(at, out);
    v.push_back(seconds_since(t0) * 1e9 / static_cast<double>(n));
    while (!out.empty()) wheel.remove(out.front());
    twheel::wheel_entry_list all;
    wheel.detach_all(all);
    while (!all.empty()) wheel.remove(all.front());
  }
  return summarize(v);
}

}  // namespace

int main() {
  const std::vector<std::size_t> sizes = {10'000, 100'000, 1'000'000};
  std::vector<result> results;
  const auto t0 = bench_clock::now();
  for (std::size_t n : sizes) {
    bench b(n, 0x5eed0000 + n);
    results.push_back(b.run());
  }

  std::printf("twheel::timing_wheel micro-benchmark: 1 ms tick, 6 levels, deadlines uniform "
              "over 1 h,\nentry size %zu bytes, median of %d runs (min..max in the csv lines)\n\n",
              sizeof(bench_entry), repetitions);
  std::printf("%10s  %14s  %10s  %12s  %14s  %12s  %10s\n", "pending", "insert+remove",
              "re-file", "lazy resched", "advance 1 tick", "detached/s", "per tick");
  std::printf("%10s  %14s  %10s  %12s  %14s  %12s  %10s\n", "", "ns/pair (hot)", "ns/op",
              "ns/op", "ns/step", "", "detached");
  for (const auto& r : results) {
    std::printf("%10zu  %14.1f  %10.1f  %12.1f  %14.1f  %12.3g  %10.4f\n", r.pending,
                r.insert_remove.median, r.refile.median, r.lazy.median, r.advance_step.median,
                r.detached_per_s.median, r.entries_per_step);
  }
  const std::vector<std::size_t> cascade_sizes = {100'000, 1'000'000};
  std::vector<std::pair<summary, summary>> cascades;
  for (std::size_t n : cascade_sizes) cascades.emplace_back(cascade(n, false), cascade(n, true));
  std::printf("\ncascade of one crowded level-3 slot (8 us tick), ns per entry:\n");
  std::printf("%10s  %14s  %14s\n", "entries", "memory order", "random order");
  for (std::size_t i = 0; i < cascade_sizes.size(); ++i) {
    std::printf("%10zu  %14.1f  %14.1f\n", cascade_sizes[i], cascades[i].first.median,
                cascades[i].second.median);
  }
  const double total = seconds_since(t0);
  std::printf("\n(total %.1f s)\n\n", total);
  std::printf("csv,pending,metric,median,min,max,unit\n");
  for (const auto& r : results) {
    auto line = [&](const char* metric, const summary& s, const char* unit) {
      std::printf("csv,%zu,%s,%.2f,%.2f,%.2f,%s\n", r.pending, metric, s.median, s.min, s.max,
                  unit);
    };
    line("insert_remove_hot", r.insert_remove, "ns/pair");
    line("refile_random_pending", r.refile, "ns/op");
    line("lazy_reschedule_later", r.lazy, "ns/op");
    line("advance_one_tick", r.advance_step, "ns/step");
    line("detached_per_second", r.detached_per_s, "1/s");
  }
  for (std::size_t i = 0; i < cascade_sizes.size(); ++i) {
    const auto line = [&](const char* metric, const summary& s) {
      std::printf("csv,%zu,%s,%.2f,%.2f,%.2f,ns/entry\n", cascade_sizes[i], metric, s.median,
                  s.min, s.max);
    };
    line("cascade_memory_order", cascades[i].first);
    line("cascade_random_order", cascades[i].second);
  }
  return 0;
}
