// twheel/timing_wheel.hpp: the hierarchical timing wheel as a pure data structure.
//
// Design (read this first; the code is its consequence)
// -------------------------------------------------------
// Time is counted in ticks (default 1 ms) since an origin chosen by the owner. Deadlines
// are given in nanoseconds since that origin and rounded UP to a tick; `now` is rounded
// DOWN. An entry is due only when its deadline tick <= the current tick, so an entry can
// never be due before its deadline (it can be up to one tick late).
//
// There are `levels` levels of 64 slots. Slot s of level L covers 64^L ticks. An entry is
// filed at the level of the highest 6-bit digit in which its deadline differs from the
// wheel's current tick, in the slot named by that digit; so a slot's start is always in
// the future and the slot at level L comes due no later than the entry's deadline. When a
// slot comes due its entries are either due (detached into the caller's list) or re-filed
// relative to the slot's start, which puts them on a finer level ("cascading"). An entry
// whose deadline is within the top level's span cascades at most `levels - 1` times; a
// parked one (below) is also re-filed once per rotation of the top level it waits out.
//
// Every level keeps a 64-bit occupancy bitmap; the next non-empty slot of a level is a
// rotate and a count-trailing-zeros, so next_expiry() is O(levels) and the driver can
// sleep exactly until something may be due. Each slot also remembers the earliest
// deadline filed into it, so that a coarse slot is cascaded when its first entry is due
// rather than at its start: one wake-up instead of two.
//
// Deadlines beyond the top level's span are parked in the top level (which acts as a
// ring) at a slot that comes due no later than the deadline, and are re-filed then. The
// same rule makes moving a deadline later free: reschedule() only stores the new deadline
// and the entry is re-filed when its old slot comes due. Entries are re-checked against
// their stored deadline whenever a slot is processed, so lazy and parked entries are
// never reported early.
//
// A slot is 8 lists ("lanes", by deadline tick modulo 8) rather than one, and a slot that
// comes due is examined one entry of each lane in turn, so that walking a crowded slot is
// 8 independent chains of cache misses rather than one (see wheel_level.hpp).
//
// A crowded slot of level L >= 2 (below the top) is cascaded early: as soon as it is the
// next slot of its level, in bounded steps between the due work, each entry sorted by the
// level L-1 slot of its deadline's digit. Until the start of the last level L-1 slot
// before it ("from"), level L-1's own slots are still in use, so the sorted entries wait
// in a level of their own (staged_); at "from" that level is merged into level L-1 in 512
// splices. Its slots are then a rotation ahead of level L-1's current slot (the last one),
// which the ring search of next_slot() already reads as the next rotation; nothing else is
// in level L-1 then, and the finer levels hold only deadlines before the slot. So the walk
// of a million entries filed together happens while the wheel is otherwise idle, up to
// 64^L ticks before them, instead of delaying them, and no entry is examined for being due
// by it (nothing in the slot can be due before its start). One slot is cascaded early at a
// time, the coarsest first, until its start; meanwhile deadlines filed into its range go
// where its entries went.
//
// Entries are intrusive (Boost.Intrusive list hooks): insert and remove never allocate.
// The wheel is not thread-safe; its owner locks. As with Boost.Intrusive's containers, an
// entry does not know its wheel: the preconditions on entries (an entry inserted while
// pending, removed from a wheel it is not in, destroyed while linked) are not checked in
// release builds (some are asserted in debug builds), and breaking one corrupts the
// wheels involved.
#ifndef TWHEEL_TIMING_WHEEL_HPP
#define TWHEEL_TIMING_WHEEL_HPP

#include <twheel/detail/wheel_level.hpp>

#include <boost/intrusive/list.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>

namespace twheel {

class timing_wheel;
class wheel_entry_list;

/// Configuration of a timing_wheel. Invalid values make the wheel's constructor throw
/// std::invalid_argument naming the value.
struct wheel_config {
  /// Length of one tick: the wheel's resolution. Must be > 0.
  std::chrono::nanoseconds tick{std::chrono::milliseconds(1)};
  /// Number of levels of 64 slots, 1..max_levels. 6 levels of 1 ms span ~2.2 years;
  /// later deadlines are still exact (parked and re-filed).
  unsigned levels = 6;

  /// The largest accepted value of `levels`.
  static constexpr unsigned max_levels = 10;
};

namespace detail {
// timing_wheel::validate(), naming the fields `spelled_as`.tick and `spelled_as`.levels:
// wheel_service checks its wheel_options with it.
void validate_wheel_config(const wheel_config& config, const char* spelled_as);
}  // namespace detail

/// A wheel entry: derive from it (or embed it). The hook lets the wheel link the entry
/// without allocating. An entry must not be destroyed while it is linked into a wheel or
/// a caller's list; remove() it first.
class wheel_entry
    : public boost::intrusive::list_base_hook<
          boost::intrusive::link_mode<boost::intrusive::normal_link>> {
 public:
  /// An idle entry: in no wheel and in no list.
  wheel_entry() noexcept = default;
  /// Copying or moving an entry never copies its links: the new entry is idle.
  wheel_entry(const wheel_entry&) noexcept : wheel_entry() {}
  /// Leaves this entry as it is (its links and deadline are not copied).
  wheel_entry& operator=(const wheel_entry&) noexcept { return *this; }

  /// The deadline tick (deadline rounded up to the tick), as last given to the wheel.
  std::uint64_t deadline_tick() const noexcept { return deadline_; }

  /// True while the entry is in a wheel (filed or waiting to be detached).
  bool is_pending() const noexcept { return where_ < detail::where_detached; }

  /// True while the entry sits in a caller's list after advance() detached it.
  bool is_detached() const noexcept { return where_ == detail::where_detached; }

 private:
  friend class timing_wheel;
  friend class wheel_entry_list;
  std::uint64_t deadline_ = 0;
  std::uint16_t where_ = detail::where_idle;
};

/// The batch advance() detaches due entries into. Entries leave it through pop_front()
/// or clear() (which make them idle again) or through timing_wheel::remove() (an owner
/// cancelling an entry while its batch is being completed); destroying the batch makes the
/// entries left in it idle. So an entry never keeps links into a batch it has left.
class wheel_entry_list {
  using list_type =
      boost::intrusive::list<wheel_entry, boost::intrusive::constant_time_size<false>>;

 public:
  /// Iterates over the entries, front to back.
  using iterator = list_type::iterator;
  /// Iterates over the entries, front to back, without modifying them.
  using const_iterator = list_type::const_iterator;

  /// An empty batch.
  wheel_entry_list() noexcept = default;
  /// Not copyable: an entry is linked into one list at a time.
  wheel_entry_list(const wheel_entry_list&) = delete;
  wheel_entry_list& operator=(const wheel_entry_list&) = delete;
  /// Makes the entries left in the batch idle.
  ~wheel_entry_list() { clear(); }

  /// True if the batch holds no entry. O(1).
  bool empty() const noexcept { return list_.empty(); }
  /// The number of entries in the batch.
  std::size_t size() const noexcept { return list_.size(); }  // O(n)
  /// The first entry. Precondition: !empty().
  wheel_entry& front() noexcept { return list_.front(); }

  /// Takes the first entry out; it is idle afterwards.
  wheel_entry& pop_front() noexcept {
    wheel_entry& e = list_.front();
    list_.pop_front();
    e.where_ = detail::where_idle;
    return e;
  }

  /// Takes every entry out; they are idle afterwards.
  void clear() noexcept {
    while (!empty()) pop_front();
  }

  /// Moves `entry` from the batch `from` to the back of this one. Precondition: `entry`
  /// is in `from`.
  void splice_back(wheel_entry_list& from, wheel_entry& entry) noexcept {
    list_.splice(list_.end(), from.list_, from.list_.iterator_to(entry));
  }

  /// Iterators over the entries, front to back.
  iterator begin() noexcept { return list_.begin(); }
  iterator end() noexcept { return list_.end(); }
  const_iterator begin() const noexcept { return list_.begin(); }
  const_iterator end() const noexcept { return list_.end(); }

 private:
  friend class timing_wheel;
  list_type list_;
};

/// Counters that never drift: see the invariant tests. Cumulative since the wheel was
/// constructed; reschedule() to an earlier deadline counts as one remove and one insert.
struct wheel_counters {
  std::uint64_t inserted = 0;   ///< entries filed by insert()
  std::uint64_t removed = 0;    ///< pending entries taken out by remove()
  std::uint64_t expired = 0;    ///< entries detached by advance()
  std::uint64_t cascaded = 0;   ///< entries re-filed one by one because their slot came due early
  std::uint64_t cascaded_early = 0;  ///< crowded slots cascaded before their start
  /// Slots re-filed whole, as one list, because every entry in them had one deadline tick
  /// (their entries are not counted in `cascaded`).
  std::uint64_t moved_whole = 0;
};

/// A hierarchical timing wheel. Times are nanoseconds since an origin the owner picks.
///
/// @par Thread Safety
/// @e Distinct @e objects: Safe.
/// @e Shared @e objects: Unsafe. The owner locks; the wheel's entries and the batches
/// advance() fills are guarded by the same lock.
class timing_wheel {
 public:
  /// Times and deadlines: nanoseconds since the owner's origin.
  using duration = std::chrono::nanoseconds;

  /// Constructs an empty wheel.
  ///
  /// @param config The tick and the number of levels.
  /// @param start The current time: the wheel starts at the tick containing it.
  ///
  /// @throws std::invalid_argument if `config` is invalid (see validate()).
  /// @throws std::bad_alloc if the levels cannot be allocated.
  explicit timing_wheel(wheel_config config = {}, duration start = duration::zero());

  /// Not copyable: pending entries are linked into the wheel's slots.
  timing_wheel(const timing_wheel&) = delete;
  timing_wheel& operator=(const timing_wheel&) = delete;

  /// Unlinks every pending entry (they become idle); entries in callers' lists stay there.
  ~timing_wheel();

  /// Files an idle or detached entry (a detached one is first unlinked from the caller's
  /// list). Deadlines at or before the current tick are due at the next advance().
  /// Precondition: the entry is not pending in any wheel. O(1), never allocates.
  ///
  /// @returns A time that next_expiry() was not lowered below by this call: when the slot
  /// the entry went to will be woken (its start, or its earliest deadline where
  /// next_expiry() waits for that), or now() when advance() has work sooner because of it
  /// (a deadline already due, or a slot it made crowded). An owner whose wake-up is set
  /// no later than that need not read next_expiry() again.
  duration insert(wheel_entry& entry, duration deadline) noexcept;

  /// Changes the deadline of a pending entry. Later: stores it only (the entry is re-filed
  /// when its current slot comes due). Earlier: re-files it. An entry that is not pending
  /// is inserted. Precondition: the entry is not pending in another wheel. O(1).
  ///
  /// @returns As insert(); duration::max() when the deadline only moved later.
  duration reschedule(wheel_entry& entry, duration deadline) noexcept;

  /// Undoes the reschedule() just made of a pending entry whose deadline tick was `tick`
  /// before it (its deadline_tick() then). Where that reschedule re-filed the entry earlier,
  /// it stays there with its old deadline stored, as after a later reschedule(): its slot
  /// still comes due no later than the deadline. Nothing else may have moved the entry in
  /// between. O(1).
  void undo_reschedule(wheel_entry& entry, std::uint64_t tick) noexcept;

  /// Takes an entry out of the wheel, or out of the caller's list it was detached into.
  /// Returns true if it was pending in the wheel. Idle entries are left alone.
  /// Precondition: the entry is not pending in another wheel. O(1).
  bool remove(wheel_entry& entry) noexcept;

  /// Detaches up to `max_entries` due entries into `out` (appended, in due order for
  /// entries of different ticks). Each entry examined is either detached or re-filed, and
  /// at most `max_entries` are examined, so one call is bounded even when a crowded
  /// coarse slot cascades. Returns the number detached. Time never moves backwards: a
  /// `now` before the wheel's current time is treated as the current time.
  /// `max_early` bounds, within those, the entries of an early cascade (a crowded coarse
  /// slot walked ahead of its start, see next_expiry()): that walk is work for the idle
  /// time, and waits coming due must not queue behind a long stretch of it, so the owner
  /// calls again (next_expiry() says now) after running what came due. 0 counts as 1, so
  /// that the walk always progresses.
  std::size_t advance(duration now, wheel_entry_list& out,
                      std::size_t max_entries = std::numeric_limits<std::size_t>::max(),
                      std::size_t max_early = std::numeric_limits<std::size_t>::max());

  /// What the overload below hands each due entry to. Returns true when it is done with
  /// the entry: the entry is then idle once advance() returns, and not put into the
  /// batch.
  using due_visitor = bool (*)(void* context, wheel_entry& entry) noexcept;

  /// As advance() above, but each due entry is first given to `visit(context, entry)`, in
  /// the order the batch would get it, and only an entry it is not done with goes into
  /// `out`. Every due entry still counts as detached (return value, counters). The wheel
  /// fetches the next entry of a due lane before the call, so an owner's work on one entry
  /// overlaps the walk to the next, and each due entry is touched once rather than once
  /// here and again in `out`. In the call the entry is neither pending nor idle
  /// (is_detached()), and `visit` must not call any member of the wheel. An entry it is
  /// done with may still be linked to its neighbours until advance() returns: it must
  /// not be destroyed or filed anywhere before then.
  std::size_t advance(duration now, wheel_entry_list& out, due_visitor visit, void* context,
                      std::size_t max_entries = std::numeric_limits<std::size_t>::max(),
                      std::size_t max_early = std::numeric_limits<std::size_t>::max());

  /// When to call advance() next: advance() with a `now` before it detaches nothing. It
  /// is the start of the earliest non-empty slot or, for a slot below the top level with
  /// fewer than detail::crowded_slot entries or with entries all filed with one deadline
  /// tick, the earliest deadline filed into it if that is later (so a sparse coarse slot,
  /// or a burst's, which moves whole, is cascaded by the same advance() that detaches its
  /// first due entry, and a crowded one before its first entry is due); now when a
  /// crowded slot of level 2 or more is to be cascaded early, and no later than the start
  /// of the last slot of the level below before it while its entries wait for that level.
  /// Never after the earliest deadline. Entries may
  /// be re-filed then instead of detached (lazy, parked or coarse entries), but never
  /// detached before their deadline. Empty when nothing is pending.
  /// A time at or before now() means "call advance() now". O(levels).
  std::optional<duration> next_expiry() const noexcept;

  /// The wake-up after the one at `t` (at or after now()), if the wheel can tell it from
  /// the two finest levels: a time next_expiry() will say once the wheel is past `t`,
  /// unless those entries go first or other slots come due before, so that an owner can
  /// arm that wake-up ahead. Within the finest level's current rotation, it is the start
  /// of its next non-empty slot after the one of `t`; when none follows there (and the
  /// wheel has 3 levels or more), the wake-up of level 1's next non-empty slot. When `t`
  /// is the wake-up of a sparse level-1 slot (its earliest deadline, in a later rotation
  /// of the finest level), it is the earliest later deadline in that slot (a walk of at
  /// most 16 entries), or level 1's next slot's wake-up if that is sooner. O(1).
  std::optional<duration> next_fine_slot_after(duration t) const noexcept;

  /// Pending entries (filed or awaiting detachment). O(1); never drifts.
  std::size_t size() const noexcept { return size_; }
  /// True when no entry is pending. O(1).
  bool empty() const noexcept { return size_ == 0; }

  /// The wheel's current time: the start of its current tick.
  duration now() const noexcept { return from_tick(elapsed_); }
  /// The wheel's current tick: the ticks elapsed since the origin.
  std::uint64_t current_tick() const noexcept { return elapsed_; }

  /// The length of one tick (the wheel's resolution).
  duration tick() const noexcept { return duration(tick_ns_); }
  /// The number of levels of 64 slots.
  unsigned levels() const noexcept { return levels_; }
  /// The wheel's counters since construction.
  const wheel_counters& counters() const noexcept { return counters_; }

  /// Converts a deadline to its deadline tick (rounded up; 0 for negative times).
  std::uint64_t deadline_tick(duration deadline) const noexcept;
  /// Converts a time to the tick containing it (rounded down; 0 for negative times).
  std::uint64_t tick_of(duration now) const noexcept;

  /// `fresh` (idle) takes the place of `entry` (pending in this wheel, or detached), which
  /// becomes idle. Lets an owner move an entry to a new address. Precondition: `fresh` is
  /// idle. O(1).
  void replace(wheel_entry& entry, wheel_entry& fresh) noexcept;

  /// Checks `config` as the constructor does, without constructing a wheel.
  ///
  /// @throws std::invalid_argument naming the first bad value of `config`.
  static void validate(const wheel_config& config);

  /// Detaches every pending entry into `out`, due or not (for shutdown). Returns the count.
  std::size_t detach_all(wheel_entry_list& out) noexcept;

 private:
  using slot_list = detail::slot_list<wheel_entry>;

  duration from_tick(std::uint64_t tick) const noexcept;
  std::uint64_t divide_by_tick(std::uint64_t n) const noexcept;
  // insert() of an idle entry whose deadline tick is already known (reschedule() has it).
  duration insert_tick(wheel_entry& entry, std::uint64_t tick) noexcept;
  // Files an entry by its deadline; returns the tick insert() reports.
  std::uint64_t file(wheel_entry& entry) noexcept;
  static void unlink(wheel_entry& entry) noexcept;
  // True if overdue_, taken_ or early_ holds an entry: advance() has work now.
  bool has_due() const noexcept;
  // The crowded slot to cascade early next, if any (see the design comment), with the
  // tick its walk may begin at.
  struct early_ref {
    unsigned level;
    unsigned slot;
    std::uint64_t start;
    std::uint64_t from;
  };
  std::optional<early_ref> early_candidate() const noexcept;
  // Moves one entry of early_ on to level early_level_ - 1 (or re-files it).
  void cascade_early(wheel_entry& entry) noexcept;
  // Where file() puts an entry due at `deadline` (after the current tick): the level and
  // the tick that picks its slot there, and whether it waits in staged_ instead.
  struct placement {
    unsigned level;
    std::uint64_t tick;
    bool staged;
  };
  placement place(std::uint64_t deadline) const noexcept;
  // Files every entry of `lane` (a uniform slot's, filed with deadline tick `deadline`;
  // `filed` of them) as file() would file each, in one splice. Their where_ keeps naming
  // the slot they came from, as a taken entry's does (see remove()). False, with nothing
  // done, if they are due.
  bool file_whole(slot_list& lane, std::uint64_t deadline, std::uint32_t filed) noexcept;
  struct whole_slot;
  // From early_from_ on, staged_ joins its level.
  void join_staged() noexcept;
  // The wheel's time is about to move to `next` (a slot's start, or advance()'s target):
  // if that passes the staged entries' join point, it moves there instead and they join.
  // A slot starting at the join point itself is taken first (join_staged() after it).
  bool stop_at_join_point(std::uint64_t next) noexcept;
  struct slot_ref {
    unsigned level;
    unsigned slot;
    std::uint64_t start;
  };
  std::optional<slot_ref> next_slot() const noexcept;
  // When an occupied slot of `level` that starts at tick `start` is woken, given its
  // level's wake_hint() for it; one rule for next_expiry() and for what file() reports.
  std::uint64_t wake_tick(unsigned level, std::uint64_t start, std::uint64_t hint) const noexcept;
  // The wake-up tick of level 1's first non-empty slot after the one of `tick`, in the
  // same rotation of level 1.
  std::optional<std::uint64_t> level1_wake_after(std::uint64_t tick) const noexcept;
  // The entries next_fine_slot_after() reads in a level-1 slot at most.
  static constexpr std::uint32_t sparse_look_ahead = 16;

  std::int64_t tick_ns_;
  unsigned levels_;
  std::uint64_t tick_reciprocal_;  // floor(2^64 / tick), 0 for a 1 ns tick
  std::uint64_t max_tick_;    // the last tick whose start fits in a duration (a division
                              // insert() would otherwise pay for every call)
  std::uint64_t elapsed_;     // current tick: every filed slot starts after it
  std::size_t size_ = 0;
  std::unique_ptr<detail::wheel_level<wheel_entry>[]> wheel_;
  slot_list overdue_;         // entries filed with a deadline already due, in filing order
  detail::slot_lanes<wheel_entry> taken_;  // the lanes of the slot that came due, not yet examined
  unsigned taken_mask_ = 0;   // lanes of taken_ that may hold entries (remove() may empty one)
  detail::slot_lanes<wheel_entry> early_;  // a crowded slot being cascaded early
  unsigned early_mask_ = 0;   // lanes of early_ that may hold entries
  unsigned early_level_ = 0;  // the level of the slot cascaded early (0: none)
  std::uint64_t early_start_ = 0;  // ... and its start tick (filing into it is redirected
                                   // while the wheel's time is before it)
  std::uint64_t early_from_ = 0;   // ... and the start of the last level-below slot before it
  // Entries of the slot cascaded early, by their slot of the level below, while the wheel's
  // time is before early_from_. Walked ones name that slot already (where_); ones moved
  // whole name the slot they came from. Unlinking needs neither, so remove() works.
  detail::wheel_level<wheel_entry> staged_;
  bool staged_pending_ = false;  // staged_ is not merged into its level yet
  wheel_counters counters_;
};

}  // namespace twheel

#endif  // TWHEEL_TIMING_WHEEL_HPP
