// twheel/detail/touch_epoch: idle_timer::touch()'s stamps, with no clock read while
// connections are busy.
#ifndef TWHEEL_DETAIL_TOUCH_EPOCH_HPP
#define TWHEEL_DETAIL_TOUCH_EPOCH_HPP

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

namespace twheel::detail {

// When generations ended, for the stamps of earlier generations (times are clock ticks
// of nanoseconds, >= 0). The last 2048 generations' ends are kept exactly. An older
// stamp is bounded by the end of the time bucket in which the next generation started,
// from three rings of 2048 buckets: 32.768 ms (the last 67 s), 1.049 s (the last 36 min)
// and 33.55 s (the last 19 hours). That bound is later than the generation's end by less
// than a bucket, and a level is used only once the finer one no longer holds the stamp,
// so by at most 1/64 of the stamp's age. Older still: the oldest bucket kept, an upper
// bound that is only later. Buckets, not blocks of generations, because generations
// differ in length (1 ms while touches are stamped, 64 ms while not).
class epoch_history {
 public:
  static constexpr unsigned entry_bits = 11;
  static constexpr std::uint64_t entries = std::uint64_t{1} << entry_bits;
  static constexpr unsigned bucket_levels = 3;
  static constexpr std::int64_t bucket_ns[bucket_levels] = {std::int64_t{1} << 25,
                                                            std::int64_t{1} << 30,
                                                            std::int64_t{1} << 35};

  // Generation `g` ended at `end`, when g + 1 started; generations end in order, each
  // once, from 0.
  void record(std::uint64_t g, std::int64_t end) noexcept {
    ends_[g & (entries - 1)] = end;
    for (unsigned level = 0; level < bucket_levels; ++level) {
      bucket_ring& ring = rings_[level];
      const std::int64_t b = end / bucket_ns[level];
      if (!ring.started) {
        ring.started = true;
        ring.first = ring.open = b;
      }
      // The buckets from the open one to b's close with g in progress at their end.
      const std::int64_t from =
          b - ring.open > static_cast<std::int64_t>(entries) ? b - entries : ring.open;
      for (std::int64_t c = from; c < b; ++c) ring.at(c) = g;
      ring.open = b;
      ring.at(b) = g + 1;  // in progress at the end of b, so far
    }
  }

  // An upper bound of the end of generation `g`, given that `current` > g is in progress.
  std::int64_t end_of(std::uint64_t g, std::uint64_t current) const noexcept {
    if (current - g <= entries) return ends_[g & (entries - 1)];
    std::int64_t bound = 0;
    for (unsigned level = 0; level < bucket_levels; ++level) {
      const bucket_ring& ring = rings_[level];
      const std::int64_t hi = ring.open;  // open: g + 1 may have started in it
      const std::int64_t lo = std::max(ring.first, hi - static_cast<std::int64_t>(entries) + 1);
      bound = (lo + 1) * bucket_ns[level];
      // g + 1 started at or before lo, which is not the first bucket: too old here.
      if (ring.at(lo) >= g + 1 && lo != ring.first) continue;
      // The first bucket at whose end g + 1 had started (the open one's end at the latest).
      std::int64_t a = lo, z = hi;
      while (a < z) {
        const std::int64_t mid = a + (z - a) / 2;
        if (ring.at(mid) >= g + 1) {
          z = mid;
        } else {
          a = mid + 1;
        }
      }
      return (a + 1) * bucket_ns[level];
    }
    return bound;  // older than every ring: the end of the oldest bucket kept
  }

 private:
  struct bucket_ring {
    bool started = false;
    std::int64_t first = 0;  // the bucket of the first generation's end
    std::int64_t open = 0;   // the bucket of the last generation's end
    std::uint64_t gen[entries] = {};  // the generation in progress at each bucket's end

    std::uint64_t& at(std::int64_t b) noexcept {
      return gen[static_cast<std::uint64_t>(b) & (entries - 1)];
    }
    const std::uint64_t& at(std::int64_t b) const noexcept {
      return gen[static_cast<std::uint64_t>(b) & (entries - 1)];
    }
  };

  std::int64_t ends_[entries] = {};
  bucket_ring rings_[bucket_levels];
};

// The stamp touch() stores, and the upper bound of the touch's time the wheel reads from
// it. Two kinds of stamp, told apart by the low bit:
// - exact (odd): the clock read inside touch(), as today's steady_clock count * 2 + 1;
// - generation (even): the generation in progress, * 2. The wheel's driver starts a new
//   generation at its passes, at most once per `resolution`, and records when each
//   ended (the clock read after the next one was published): a touch that saw
//   generation g happened before g's end, so that end is an upper bound of its time.
//
// Why: at a million connections the clock read is touch()'s cost: it is ordered (the
// vDSO fences the TSC read), so the cache miss of the store into the cold timer object
// no longer overlaps the next touch's. bench_adapters measured 74 ns a touch with the
// read, 8 ns with a word loaded from one shared place instead.
//
// A generation stamp is only as good as the generation is short: while generations are
// stamped, the driver must pass at least every `resolution` (tick_at()). That costs a
// wake-up per millisecond, which pays only while connections are touched that often. So
// the mode follows the touches: a generation in which nothing was touched makes the next
// one exact (touches read the clock, and the driver passes only every
// `exact_resolution`, 16 times a second, while waits are pending), and a touch in an
// exact generation makes the next one stamped again. Either kind of stamp is an upper
// bound; the mode only moves the cost.
//
// Thread safety: stamp() from any thread; the rest under the service's lock.
template <class Clock>
class basic_touch_epoch {
 public:
  using clock_type = Clock;
  // How long a stamped generation lasts at least, and, while the driver keeps up, at most.
  static constexpr std::chrono::nanoseconds resolution{1'000'000};
  // How long an exact generation lasts at most, while the driver keeps up.
  static constexpr std::chrono::nanoseconds exact_resolution = 64 * resolution;

  // The stamp of a touch now. Lock-free, no allocation; a clock read only in an exact
  // generation, and one atomic read-modify-write per generation (the first touch's).
  std::int64_t stamp() noexcept {
    const std::uint64_t word = word_.load(std::memory_order_relaxed);
    if ((word & touched_bit) == 0) word_.fetch_or(touched_bit, std::memory_order_relaxed);
    if ((word & exact_bit) != 0) return exact_stamp(clock_type::now());
    return static_cast<std::int64_t>((word >> 2) << 1);
  }

  // The stamp of a wait's start at `t`, an exact one.
  static std::int64_t exact_stamp(typename clock_type::time_point t) noexcept {
    return static_cast<std::int64_t>(t.time_since_epoch().count()) * 2 + 1;
  }

  // Called under the service's lock by wheel_service::use_touch_epoch() until it has
  // succeeded once (a context's first idle timer); makes the history, once.
  // Throws std::bad_alloc; then nothing changed.
  void enable() {
    if (!history_) history_ = std::make_unique<epoch_history>();
  }

  // For the driver, at every pass, before it reads stamps: starts a new generation when
  // `resolution` has passed since the last one began (once enabled).
  void pass(typename clock_type::time_point now) noexcept {
    if (!history_ || (started_ && now - last_start_ < resolution)) return;
    std::uint64_t word = word_.load(std::memory_order_relaxed);
    std::uint64_t next;
    do {
      // Touched: stamped again (or from now on); untouched: exact, and no more ticks.
      next = ((generation_ + 1) << 2) | ((word & touched_bit) != 0 ? 0 : exact_bit);
    } while (!word_.compare_exchange_weak(word, next, std::memory_order_seq_cst,
                                          std::memory_order_relaxed));
    // Read after the new word is visible: every touch that saw the old one came before.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const auto end = clock_type::now();
    history_->record(generation_, static_cast<std::int64_t>(end.time_since_epoch().count()));
    ++generation_;
    last_start_ = end;
    started_ = true;
    stamping_ = (next & exact_bit) == 0;
  }

  // Whether the driver must pass by tick_at(): once enabled. A stamped generation must end
  // within `resolution`; an exact one is ended every `exact_resolution`, so that touches
  // in it make the next one stamped even when nothing else wakes the driver.
  bool ticking() const noexcept { return history_ != nullptr; }
  typename clock_type::time_point tick_at() const noexcept {
    if (!started_) return clock_type::time_point::min();  // at once: none started yet
    return last_start_ + (stamping_ ? resolution : exact_resolution);
  }
  // Whether the generation in progress is stamped (else touches read the clock).
  bool stamping() const noexcept { return stamping_; }

  // An upper bound of the time of the touch (or start) that stored `stamp`; read after
  // loading the stamp, under the service's lock.
  typename clock_type::time_point upper_bound(std::int64_t stamp) const noexcept {
    using tp = typename clock_type::time_point;
    using dur = typename clock_type::duration;
    if ((stamp & 1) != 0) return tp(dur(stamp >> 1));
    const auto g = static_cast<std::uint64_t>(stamp) >> 1;
    // The generation in progress (or, before the first pass, the only one): up to now.
    if (g >= generation_ || !history_) return clock_type::now();
    return tp(dur(history_->end_of(g, generation_)));
  }

 private:
  static constexpr std::uint64_t exact_bit = 1;
  static constexpr std::uint64_t touched_bit = 2;

  // generation << 2 | touched_bit | exact_bit. Alone on its cache line: every touch reads it.
  alignas(64) std::atomic<std::uint64_t> word_{exact_bit};
  alignas(64) std::uint64_t generation_ = 0;
  bool started_ = false;
  bool stamping_ = false;
  typename clock_type::time_point last_start_{};
  std::unique_ptr<epoch_history> history_;  // 64 KiB, made by enable()
};

using touch_epoch = basic_touch_epoch<std::chrono::steady_clock>;

}  // namespace twheel::detail

#endif  // TWHEEL_DETAIL_TOUCH_EPOCH_HPP
