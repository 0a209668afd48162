// twheel/detail/touch_epoch: idle_timer::touch()'s stamps, with no clock read while
// connections are busy, shared by every wheel of the process.
#ifndef TWHEEL_DETAIL_TOUCH_EPOCH_HPP
#define TWHEEL_DETAIL_TOUCH_EPOCH_HPP

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <new>

namespace twheel::detail {

// When generations ended, for the stamps of earlier generations (times are clock ticks
// of nanoseconds, >= 0). The last 2048 generations' ends are kept exactly. An older
// stamp is bounded by the end of the time bucket in which the next generation started,
// from three rings of 2048 buckets of 2^25, 2^30 and 2^35 ns: 33.55 ms (the last 68 s),
// 1.074 s (the last 36 min) and 34.36 s (the last 19 hours). That bound is later than
// the generation's end by less than a bucket, and a level is used only once the finer
// one no longer holds the stamp, so by at most 1/64 of the stamp's age. Older still: the
// oldest bucket kept, an upper bound that is only later. Buckets, not blocks of
// generations, because generations differ in length (1 ms while touches are stamped,
// 64 ms while not).
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
    ends_[g & (entries - 1)].store(end, std::memory_order_relaxed);
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

  // The end of generation `g`, one of the last `entries` to end. Safe beside record():
  // a slot is only ever overwritten with a later generation's end, which is later still,
  // so a read racing an overwrite still gets an upper bound.
  std::int64_t recent_end(std::uint64_t g) const noexcept {
    return ends_[g & (entries - 1)].load(std::memory_order_relaxed);
  }

  // An upper bound of the end of generation `g`, given that `current` > g is in progress.
  // Not safe beside record() beyond the last `entries` generations.
  std::int64_t end_of(std::uint64_t g, std::uint64_t current) const noexcept {
    if (current - g <= entries) return recent_end(g);
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

  std::atomic<std::int64_t> ends_[entries] = {};
  bucket_ring rings_[bucket_levels];
};

// The stamp touch() stores, and the upper bound of the touch's time the wheel reads from
// it. Two kinds of stamp, told apart by the low bit:
// - exact (odd): the clock read inside touch(), as today's steady_clock count * 2 + 1;
// - generation (even): the generation in progress, * 2. Drivers start a new generation
//   at their passes, once the last one has lasted its length (tick_at()), and record
//   when each ended (the clock read after the next one was published): a touch that saw
//   generation g happened before g's end, so that end is an upper bound of its time.
//
// Why: at a million connections the clock read is touch()'s cost: it is ordered (the
// vDSO fences the TSC read), so the cache miss of the store into the cold timer object
// no longer overlaps the next touch's. bench_adapters measured 74 ns a touch with the
// read, 8 ns with a word loaded from one shared place instead.
//
// The wheels share one epoch, process_touch_epoch(): touch() then finds the word at a
// fixed address, where a wheel's own epoch had to be found through a pointer loaded from
// the timer object, a cache miss that the store had to wait for (bench_adapters' touch
// at 1,000,000: 46 ns with the wheel's epoch, 17 to 18 ns with a word at a fixed place).
// Any wheel's pass may start the next generation; the others find it started. No
// generation ends before its tick_at(), so tick_at() only ever moves later: a wheel armed
// for a tick_at() it read earlier wakes no later than needed, finds the generation going
// on, and arms for the new one. (Were an exact generation, 64 ms long, ended early by one
// wheel's pass, the stamped one after it would end only when the other wheels woke for
// the old tick_at(), up to 64 ms late.)
//
// A generation stamp is only as good as the generation is short: while generations are
// stamped, the drivers must pass at least every `resolution` (tick_at()). That costs a
// wake-up per millisecond, which pays only while connections are touched that often. So
// the mode follows the touches: a generation in which nothing was touched makes the next
// one exact (touches read the clock, and the drivers pass only every `exact_resolution`,
// 16 times a second, while waits are pending), and a touch in an exact generation makes
// the next one, up to 64 ms later, stamped again. Either kind of stamp is an upper bound;
// the mode only moves the cost.
//
// Thread safety: every member from any thread (the history behind an internal mutex,
// taken by enable(), by a pass that starts a generation, and by upper_bound() of a stamp
// older than the last 2048 generations).
template <class Clock>
class basic_touch_epoch {
 public:
  using clock_type = Clock;
  using time_point = typename clock_type::time_point;
  // How long a stamped generation lasts at least, and, while a driver keeps up, at most.
  static constexpr std::chrono::nanoseconds resolution{1'000'000};
  // How long an exact generation lasts at least, and, while a driver keeps up, at most.
  static constexpr std::chrono::nanoseconds exact_resolution = 64 * resolution;

  basic_touch_epoch() noexcept = default;
  basic_touch_epoch(const basic_touch_epoch&) = delete;
  basic_touch_epoch& operator=(const basic_touch_epoch&) = delete;

  // The stamp of a touch now. Lock-free, no allocation; a clock read only in an exact
  // generation, and one atomic read-modify-write per generation (the first touch's).
  std::int64_t stamp() noexcept {
    const std::uint64_t word = word_.load(std::memory_order_relaxed);
    if ((word & touched_bit) == 0) word_.fetch_or(touched_bit, std::memory_order_relaxed);
    if ((word & exact_bit) != 0) return exact_stamp(clock_type::now());
    return static_cast<std::int64_t>((word >> 2) << 1);
  }

  // The stamp of a wait's start at `t`, an exact one.
  static std::int64_t exact_stamp(time_point t) noexcept {
    return static_cast<std::int64_t>(t.time_since_epoch().count()) * 2 + 1;
  }

  // Makes the history, once. Throws std::bad_alloc; then nothing changed.
  void enable() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (history_) return;
    history_ = std::make_unique<epoch_history>();
    enabled_.store(true, std::memory_order_release);
  }

  // For a driver, at every pass, before it reads stamps: starts a new generation when
  // the one in progress has reached its tick_at() (once enabled). Lock-free when not.
  void pass(time_point now) noexcept {
    const rep t = now.time_since_epoch().count();
    if (!enabled_.load(std::memory_order_acquire) ||
        t < tick_at_.load(std::memory_order_relaxed)) {
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    // Another driver may have started one meanwhile, even after `now`.
    if (t < tick_at_.load(std::memory_order_relaxed)) return;
    const std::uint64_t generation = generation_.load(std::memory_order_relaxed);
    std::uint64_t word = word_.load(std::memory_order_relaxed);
    std::uint64_t next;
    do {
      // Touched: stamped again (or from now on); untouched: exact, and ticks 64 ms apart.
      next = ((generation + 1) << 2) | ((word & touched_bit) != 0 ? 0 : exact_bit);
    } while (!word_.compare_exchange_weak(word, next, std::memory_order_seq_cst,
                                          std::memory_order_relaxed));
    // Read after the new word is visible: every touch that saw the old one came before.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const time_point end = clock_type::now();
    history_->record(generation, static_cast<std::int64_t>(end.time_since_epoch().count()));
    // Published after its end is recorded: upper_bound() reads the end without the lock.
    generation_.store(generation + 1, std::memory_order_release);
    const bool stamping = (next & exact_bit) == 0;
    // Later than the last one: `end` is read after the last end, at or after its tick.
    tick_at_.store((end + (stamping ? resolution : exact_resolution)).time_since_epoch().count(),
                   std::memory_order_relaxed);
  }

  // Whether enable() has made the history: generations then start at passes. A stamped
  // generation must end within `resolution`; an exact one is ended every
  // `exact_resolution`, so that touches in it make the next one stamped even when nothing
  // else wakes a driver. (Which wheels pass for it is theirs to say:
  // wheel_service::keeps_touch_epoch().)
  bool ticking() const noexcept { return enabled_.load(std::memory_order_acquire); }
  // When the generation in progress ends, at the first pass from then on; never earlier,
  // so it only moves later.
  time_point tick_at() const noexcept {
    // Before the first generation was started: at once.
    return time_point(typename clock_type::duration(tick_at_.load(std::memory_order_relaxed)));
  }
  // Whether the generation in progress is stamped (else touches read the clock).
  bool stamping() const noexcept {
    return (word_.load(std::memory_order_relaxed) & exact_bit) == 0;
  }

  // An upper bound of the time of the touch (or start) that stored `stamp`; read after
  // loading the stamp.
  time_point upper_bound(std::int64_t stamp) const noexcept {
    using dur = typename clock_type::duration;
    if ((stamp & 1) != 0) return time_point(dur(stamp >> 1));
    const auto g = static_cast<std::uint64_t>(stamp) >> 1;
    const std::uint64_t current = generation_.load(std::memory_order_acquire);
    // The generation in progress (or, before the first pass, the only one): up to now.
    if (g >= current) return clock_type::now();
    // current > 0: the history exists (it was made before any generation started).
    if (current - g <= epoch_history::entries) return time_point(dur(history_->recent_end(g)));
    std::lock_guard<std::mutex> lock(mutex_);
    return time_point(dur(history_->end_of(g, generation_.load(std::memory_order_relaxed))));
  }

 private:
  using rep = typename clock_type::duration::rep;
  static constexpr std::uint64_t exact_bit = 1;
  static constexpr std::uint64_t touched_bit = 2;

  // generation << 2 | touched_bit | exact_bit. Alone on its cache line: every touch reads
  // it, from every thread.
  alignas(64) std::atomic<std::uint64_t> word_{exact_bit};
  // Read by drivers on every pass, and written at most once per `resolution`.
  alignas(64) std::atomic<bool> enabled_{false};
  std::atomic<rep> tick_at_{std::numeric_limits<rep>::min()};  // min: none started yet
  std::atomic<std::uint64_t> generation_{0};
  // Under mutex_.
  mutable std::mutex mutex_;
  std::unique_ptr<epoch_history> history_;  // 64 KiB, made by enable()
};

using touch_epoch = basic_touch_epoch<std::chrono::steady_clock>;

// The epoch of every wheel of the process: made on first use, never destroyed (wheels
// may outlive any static object), and never allocating (its history is made by enable()).
// One per copy of the library, as Asio's services are: two copies in one process (hidden
// visibility, each in its own shared object) would have an epoch each, and a timer
// touched through one copy but owned by a wheel of the other would be misread.
inline touch_epoch& process_touch_epoch() noexcept {
  alignas(touch_epoch) static unsigned char storage[sizeof(touch_epoch)];
  static touch_epoch* const epoch = ::new (static_cast<void*>(storage)) touch_epoch();
  return *epoch;
}

}  // namespace twheel::detail

#endif  // TWHEEL_DETAIL_TOUCH_EPOCH_HPP
