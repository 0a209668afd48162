// twheel/detail/wheel_level.hpp: one level of the wheel, 64 slots of 8 lanes, and their
// bitmap.
#ifndef TWHEEL_DETAIL_WHEEL_LEVEL_HPP
#define TWHEEL_DETAIL_WHEEL_LEVEL_HPP

#include <boost/intrusive/list.hpp>

#include <array>
#include <cassert>
#include <cstdint>
#include <limits>
#include <new>
#include <optional>

namespace twheel::detail {

inline constexpr unsigned slot_bits = 6;
inline constexpr unsigned slots_per_level = 1u << slot_bits;  // 64: one bitmap word
inline constexpr std::uint64_t slot_mask = slots_per_level - 1;

// A slot is 8 lists ("lanes"), an entry's lane being its deadline tick modulo 8. Walking a
// crowded slot is then 8 independent chains of pointers instead of one, so the cache
// misses of a cascade overlap (at 1,000,000 timers, the walk of one list was 95% stalled
// on the next entry's line). Entries of one deadline tick share a lane, so they keep
// their filing order.
inline constexpr unsigned lane_bits = 3;
inline constexpr unsigned lanes_per_slot = 1u << lane_bits;
inline constexpr std::uint64_t lane_mask = lanes_per_slot - 1;

// A slot with at least this many entries filed (since it was last taken) is cascaded at
// its start rather than at its earliest deadline: walking it (about 20 to 100 ns an entry
// at a million timers) then happens while nothing in it is due, instead of delaying its
// first due entries by the whole walk. A sparse slot keeps the single wake-up.
inline constexpr std::uint32_t crowded_slot = 1024;

inline unsigned lane_of(std::uint64_t deadline_tick) noexcept {
  return static_cast<unsigned>(deadline_tick & lane_mask);
}

// Where an entry is: a slot index (level * 64 + slot) or one of these.
inline constexpr std::uint16_t where_due = 0xFFFD;       // in the wheel's due list
inline constexpr std::uint16_t where_detached = 0xFFFE;  // in a caller's list
inline constexpr std::uint16_t where_idle = 0xFFFF;      // not linked anywhere

template <class Entry>
using slot_list =
    boost::intrusive::list<Entry, boost::intrusive::constant_time_size<false>>;

template <class Entry>
using slot_lanes = std::array<slot_list<Entry>, lanes_per_slot>;

inline std::uint64_t rotr64(std::uint64_t v, unsigned n) noexcept {
  n &= 63;
  return n == 0 ? v : (v >> n) | (v << (64 - n));
}

inline unsigned ctz64(std::uint64_t v) noexcept {
  return static_cast<unsigned>(__builtin_ctzll(v));  // v != 0
}

inline unsigned clz64(std::uint64_t v) noexcept {
  return static_cast<unsigned>(__builtin_clzll(v));  // v != 0
}

// Slots ahead of `current` (0 = current itself, wrapping) to the first one set in `mask`.
// Precondition: mask != 0.
inline unsigned distance_to_next(std::uint64_t mask, unsigned current) noexcept {
  return ctz64(rotr64(mask, current));
}

template <class Entry>
class wheel_level {
 public:
  wheel_level() noexcept = default;
  ~wheel_level() {
    for (std::uint64_t todo = built_; todo != 0; todo &= todo - 1) {
      lanes(ctz64(todo)).~slot_lanes<Entry>();
    }
  }
  wheel_level(const wheel_level&) = delete;
  wheel_level& operator=(const wheel_level&) = delete;

  // What push() returns when the entry made its slot crowded.
  static constexpr std::uint64_t made_crowded = std::numeric_limits<std::uint64_t>::max();

  // `deadline`: the entry's deadline tick, kept as the slot's earliest if it is. Returns
  // made_crowded if this entry made the slot crowded, else wake_hint(slot).
  std::uint64_t push(unsigned slot, Entry& e, std::uint64_t deadline) noexcept {
    build(slot);
    lanes(slot)[lane_of(deadline)].push_back(e);
    note_deadline(slot, deadline);
    if (++filed_[slot] == crowded_slot) return made_crowded;
    return wake_hint(slot);
  }

  // The slot's earliest deadline tick if it is woken at that (woken_at_earliest()), else 0
  // (woken at its start).
  std::uint64_t wake_hint(unsigned slot) const noexcept {
    return woken_at_earliest(slot) ? earliest_[slot] : 0;
  }

  // Moves every entry of `lane` (each filed with deadline tick `deadline`, lazily moved
  // later since or not) to the back of its lane in `slot`; `filed` is their count (a hint).
  void push_lane(unsigned slot, slot_list<Entry>& lane, std::uint64_t deadline,
                 std::uint32_t filed) noexcept {
    build(slot);
    auto& to = lanes(slot)[lane_of(deadline)];
    to.splice(to.end(), lane);
    note_deadline(slot, deadline);
    filed_[slot] += filed;
  }

  // Call after an entry of `slot` was unlinked without the list: keeps the bit honest.
  void after_unlink(unsigned slot) noexcept {
    // An entry taken with its slot keeps naming it, so this count may be decremented for
    // an entry no longer there: it is a hint (when to cascade), never relied on for
    // correctness, and saturates at 0.
    if (filed_[slot] != 0) --filed_[slot];
    drop_if_emptied(slot);
  }

  // Unmarks `slot` if it holds no entry; returns whether it did.
  bool drop_if_emptied(unsigned slot) noexcept {
    if (built(slot) && !all_empty(lanes(slot))) return false;
    occupied_ &= ~(std::uint64_t{1} << slot);
    mixed_ &= ~(std::uint64_t{1} << slot);
    earliest_[slot] = none;
    filed_[slot] = 0;
    return true;
  }

  // Moves the entries of each lane of `slot` to the back of the same lane of `into`,
  // marks the slot empty and returns the lanes that had entries, one bit each.
  unsigned take(unsigned slot, slot_lanes<Entry>& into) noexcept {
    unsigned taken = 0;
    for (unsigned lane = 0; lane < lanes_per_slot; ++lane) {
      auto& from = lanes(slot)[lane];
      if (from.empty()) continue;
      into[lane].splice(into[lane].end(), from);
      taken |= 1u << lane;
    }
    occupied_ &= ~(std::uint64_t{1} << slot);
    mixed_ &= ~(std::uint64_t{1} << slot);
    earliest_[slot] = none;
    filed_[slot] = 0;
    return taken;
  }

  // Moves every entry of `other` to the same slot and lane here, with its slot's earliest
  // deadline and count; `other` is left empty. Entries keep naming the slot they are in.
  void merge(wheel_level& other) noexcept {
    for (std::uint64_t todo = other.occupied_; todo != 0; todo &= todo - 1) {
      const unsigned slot = ctz64(todo);
      const std::uint64_t earliest = other.earliest_[slot];
      const std::uint32_t filed = other.filed_[slot];
      const bool mixed = !other.uniform(slot);
      build(slot);
      if (other.take(slot, lanes(slot)) == 0) continue;  // emptied by removals
      if (mixed) mixed_ |= std::uint64_t{1} << slot;
      note_deadline(slot, earliest);
      filed_[slot] += filed;
    }
  }

  static bool all_empty(const slot_lanes<Entry>& lanes) noexcept {
    for (const auto& lane : lanes) {
      if (!lane.empty()) return false;
    }
    return true;
  }

  bool empty() const noexcept { return occupied_ == 0; }

  // The first slot after `index` (in this rotation, no wrap) that holds entries.
  std::optional<unsigned> next_held_after(unsigned index) const noexcept {
    if (index >= slot_mask) return std::nullopt;
    for (std::uint64_t later = occupied_ >> (index + 1) << (index + 1); later != 0;
         later &= later - 1) {
      const unsigned slot = ctz64(later);
      if (holds(slot)) return slot;
    }
    return std::nullopt;
  }

  // Calls f(entry) for each entry of occupied `slot`, up to `max` of them; false if the
  // slot holds more (some may have been visited).
  template <class F>
  bool visit_up_to(unsigned slot, std::uint32_t max, F&& f) const noexcept {
    std::uint32_t visited = 0;
    for (const auto& lane : lanes(slot)) {
      for (const Entry& e : lane) {
        if (++visited > max) return false;
        f(e);
      }
    }
    return true;
  }

  // Marked occupied: holding entries, or emptied by remove() after entries were moved into
  // it whole (they name the slot they came from, so the bit stays until the slot is taken
  // or a search finds it empty: drop_if_emptied()).
  std::uint64_t occupied() const noexcept { return occupied_; }
  // Whether an occupied slot holds entries.
  bool holds(unsigned slot) const noexcept { return built(slot) && !all_empty(lanes(slot)); }

  // No entry of `slot` had an earlier deadline tick when it was filed. Removals leave it
  // as it was and later deadlines only grow, so it stays a lower bound.
  std::uint64_t earliest(unsigned slot) const noexcept { return earliest_[slot]; }

  // About how many entries `slot` holds (see after_unlink()).
  bool crowded(unsigned slot) const noexcept { return filed_[slot] >= crowded_slot; }
  std::uint32_t filed(unsigned slot) const noexcept { return filed_[slot]; }

  // Every entry of occupied `slot` was filed with deadline tick earliest(slot) (a
  // burst's timers, armed for one instant): they are all in one lane, and the slot can be
  // re-filed as one list instead of entry by entry. Removals keep a slot uniform, and
  // a deadline moved later (lazily, in place) is re-checked when its slot comes due.
  bool uniform(unsigned slot) const noexcept { return (mixed_ >> slot & 1u) == 0; }

  // Whether `slot`, below the top level, is woken at its earliest deadline rather than at
  // its start (see timing_wheel::next_expiry()): it is sparse, or it moves whole.
  bool woken_at_earliest(unsigned slot) const noexcept { return !crowded(slot) || uniform(slot); }

 private:
  static constexpr std::uint64_t none = std::numeric_limits<std::uint64_t>::max();

  // Marks `slot` occupied and, when it already held another deadline tick, mixed.
  void note_deadline(unsigned slot, std::uint64_t deadline) noexcept {
    const std::uint64_t bit = std::uint64_t{1} << slot;
    if ((occupied_ & bit) != 0 && deadline != earliest_[slot]) mixed_ |= bit;
    occupied_ |= bit;
    if (deadline < earliest_[slot]) earliest_[slot] = deadline;
  }

  // A slot's lanes (8 list heads, 128 bytes, each pointing at itself when empty) are
  // made when the slot is first filed into: a fresh context's first wait used to make a
  // whole level's (8 KiB, 512 heads: about 5,400 instructions and two or three pages
  // touched, close to a third of that wait's instructions under callgrind), and most
  // contexts use a few slots of a level or two. A slot not built holds no entry, so it is
  // not occupied, and the readers of a slot's lanes ask about occupied slots (the
  // assertion in lanes() checks it in debug builds), except drop_if_emptied(): a staged
  // entry names a slot of the level below that it is not filed in, which may never have
  // been built, and its removal asks about that slot (holds() checks too, defensively).
  // The test of the slot's bit on the filing path replaces a test of a level-wide flag.
  bool built(unsigned slot) const noexcept { return (built_ >> slot & 1u) != 0; }
  void build(unsigned slot) noexcept {
    if (__builtin_expect(!built(slot), 0)) make_lanes(slot);
  }
  [[gnu::cold, gnu::noinline]] void make_lanes(unsigned slot) noexcept {
    ::new (static_cast<void*>(storage_[slot])) slot_lanes<Entry>();
    earliest_[slot] = none;
    built_ |= std::uint64_t{1} << slot;
  }
  slot_lanes<Entry>& lanes(unsigned slot) noexcept {
    assert(built(slot));
    return *std::launder(reinterpret_cast<slot_lanes<Entry>*>(storage_[slot]));
  }
  const slot_lanes<Entry>& lanes(unsigned slot) const noexcept {
    assert(built(slot));
    return *std::launder(reinterpret_cast<const slot_lanes<Entry>*>(storage_[slot]));
  }

  std::uint64_t occupied_ = 0;
  std::uint64_t mixed_ = 0;  // occupied slots holding more than one deadline tick
  std::uint64_t built_ = 0;  // slots whose lanes are made
  // A slot's earliest deadline is set when the slot is built, like its lanes, and read
  // only for occupied (so built) slots: a fresh level does not fill 512 bytes. The counts
  // stay zeroed from the start (a memset), since removals of staged entries may count
  // down a slot never built (after_unlink).
  std::array<std::uint64_t, slots_per_level> earliest_;
  std::array<std::uint32_t, slots_per_level> filed_{};
  alignas(slot_lanes<Entry>) unsigned char storage_[slots_per_level][sizeof(slot_lanes<Entry>)];
};

}  // namespace twheel::detail

#endif  // TWHEEL_DETAIL_WHEEL_LEVEL_HPP
