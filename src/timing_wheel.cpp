// The non-template core of twheel: see the design comment in timing_wheel.hpp.
#include <twheel/timing_wheel.hpp>

#include <algorithm>
#include <cassert>
#include <stdexcept>
#include <string>

namespace twheel {

namespace {

constexpr std::int64_t max_ns = std::numeric_limits<std::int64_t>::max();

__extension__ using uint128 = unsigned __int128;  // GCC and Clang; -Wpedantic otherwise warns

}  // namespace

// The messages are built only to be thrown: every context checks its options twice
// (the service's and the wheel's), and building the name up front cost a valid one 572
// of the 10,177 instructions of its first wait (callgrind).
void detail::validate_wheel_config(const wheel_config& config, const char* spelled_as) {
  const auto name = [spelled_as] { return std::string("twheel: ") + spelled_as; };
  if (config.tick.count() <= 0) {
    throw std::invalid_argument(name() + ".tick must be positive, got " +
                                std::to_string(config.tick.count()) + " ns");
  }
  if (config.levels < 1 || config.levels > wheel_config::max_levels) {
    throw std::invalid_argument(name() + ".levels must be in [1, " +
                                std::to_string(wheel_config::max_levels) + "], got " +
                                std::to_string(config.levels));
  }
}

void timing_wheel::validate(const wheel_config& config) {
  detail::validate_wheel_config(config, "wheel_config");
}

timing_wheel::timing_wheel(wheel_config config, duration start)
    : tick_ns_((validate(config), config.tick.count())),
      levels_(config.levels),
      tick_reciprocal_(config.tick.count() == 1
                           ? 0
                           : static_cast<std::uint64_t>((static_cast<uint128>(1) << 64) /
                                                        static_cast<std::uint64_t>(
                                                            config.tick.count()))),
      max_tick_(static_cast<std::uint64_t>(max_ns / config.tick.count())),
      elapsed_(0),
      wheel_(new detail::wheel_level<wheel_entry>[config.levels]) {
  elapsed_ = tick_of(start);
}

timing_wheel::~timing_wheel() {
  // Leave entries idle so that their owners may still call remove() safely. size_ counts
  // every linked entry, so an empty wheel (its owner's shutdown detached them) is left
  // without a second walk of its levels and lanes.
  if (size_ == 0) return;
  wheel_entry_list all;
  detach_all(all);  // and `all` leaves them idle
}

// floor(n / tick) without a division (20 to 90 cycles on the hot path): the reciprocal
// floor(2^64 / tick) gives an estimate that is exact or one short, and one comparison
// corrects it. n < 2^63.
std::uint64_t timing_wheel::divide_by_tick(std::uint64_t n) const noexcept {
  if (tick_reciprocal_ == 0) return n;  // a 1 ns tick
  auto q = static_cast<std::uint64_t>((static_cast<uint128>(n) * tick_reciprocal_) >> 64);
  if (n - q * static_cast<std::uint64_t>(tick_ns_) >= static_cast<std::uint64_t>(tick_ns_)) ++q;
  return q;
}

std::uint64_t timing_wheel::deadline_tick(duration deadline) const noexcept {
  const std::int64_t ns = deadline.count();
  if (ns <= 0) return 0;
  return divide_by_tick(static_cast<std::uint64_t>(ns - 1)) + 1;  // round up
}

std::uint64_t timing_wheel::tick_of(duration now) const noexcept {
  const std::int64_t ns = now.count();
  if (ns <= 0) return 0;
  return divide_by_tick(static_cast<std::uint64_t>(ns));  // round down
}

timing_wheel::duration timing_wheel::from_tick(std::uint64_t tick) const noexcept {
  if (tick > max_tick_) return duration::max();
  return duration(static_cast<std::int64_t>(tick) * tick_ns_);
}

void timing_wheel::unlink(wheel_entry& entry) noexcept {
  using list = detail::slot_list<wheel_entry>;
  list::node_algorithms::unlink(list::value_traits::to_node_ptr(entry));
}

std::uint64_t timing_wheel::file(wheel_entry& entry) noexcept {
  const std::uint64_t deadline = entry.deadline_;
  if (deadline <= elapsed_) {
    overdue_.push_back(entry);
    entry.where_ = detail::where_due;
    return elapsed_;
  }
  const placement at = place(deadline);
  const unsigned shift = detail::slot_bits * at.level;
  const auto slot = static_cast<unsigned>((at.tick >> shift) & detail::slot_mask);
  const std::uint64_t wake = (at.staged ? staged_ : wheel_[at.level]).push(slot, entry, deadline);
  entry.where_ = static_cast<std::uint16_t>(at.level * detail::slots_per_level + slot);
  // next_expiry() already stops at early_from_ for the staged entries.
  if (at.staged) return early_from_;
  // A slot that just became crowded may be due for an early cascade now.
  if (wake == detail::wheel_level<wheel_entry>::made_crowded) return elapsed_;
  // The slot's wake-up, not just its start: an owner already set for a slot's earliest
  // deadline (a burst's) then needs no scan of the levels per entry.
  return wake_tick(at.level, (at.tick >> shift) << shift, wake);
}

timing_wheel::placement timing_wheel::place(std::uint64_t deadline) const noexcept {
  // Park deadlines beyond the top level's reach inside it: the slot then comes due no
  // later than the deadline, and the entry is re-filed from there.
  const std::uint64_t reach = (std::uint64_t{1} << (detail::slot_bits * levels_)) - 1;
  const std::uint64_t filed = deadline - elapsed_ > reach ? elapsed_ + reach : deadline;
  const std::uint64_t differing = (elapsed_ ^ filed) | detail::slot_mask;
  unsigned level = (63 - detail::clz64(differing)) / detail::slot_bits;
  if (level >= levels_) level = levels_ - 1;
  // The slot cascaded early stays empty until its start: what it would get goes where its
  // entries went, one level down (else it would be found only a rotation later).
  if (level == early_level_ && elapsed_ < early_start_ &&
      (filed >> (detail::slot_bits * level)) == (early_start_ >> (detail::slot_bits * level))) {
    return placement{early_level_ - 1, deadline, staged_pending_};
  }
  return placement{level, filed, false};
}

bool timing_wheel::file_whole(slot_list& lane, std::uint64_t deadline,
                              std::uint32_t filed) noexcept {
  if (deadline <= elapsed_) return false;  // due: detached from the taken lanes, in runs
  const placement at = place(deadline);
  const unsigned shift = detail::slot_bits * at.level;
  const auto slot = static_cast<unsigned>((at.tick >> shift) & detail::slot_mask);
  (at.staged ? staged_ : wheel_[at.level]).push_lane(slot, lane, deadline, filed);
  ++counters_.moved_whole;
  return true;
}

bool timing_wheel::stop_at_join_point(std::uint64_t next) noexcept {
  // Moved past the join point, the wheel would join the staged entries into slots behind
  // its time, found only a rotation of their level later. Nothing is filed between the
  // join point and `next`, so stopping there skips nothing.
  if (!staged_pending_ || early_from_ >= next) return false;
  elapsed_ = early_from_;
  join_staged();
  return true;
}

void timing_wheel::join_staged() noexcept {
  if (staged_pending_ && elapsed_ >= early_from_) {
    // Level early_level_ - 1 holds nothing else now: its last slot before early_start_
    // was taken, and what was filed since lies inside that slot, hence lower.
    wheel_[early_level_ - 1].merge(staged_);
    staged_pending_ = false;
  }
}

timing_wheel::duration timing_wheel::insert(wheel_entry& entry, duration deadline) noexcept {
  assert(!entry.is_pending() && "twheel: insert() of an entry that is already pending");
  if (entry.where_ == detail::where_detached) unlink(entry);
  return insert_tick(entry, deadline_tick(deadline));
}

timing_wheel::duration timing_wheel::insert_tick(wheel_entry& entry, std::uint64_t tick) noexcept {
  entry.deadline_ = tick;
  const std::uint64_t floor = file(entry);
  ++size_;
  ++counters_.inserted;
  return from_tick(floor);
}

timing_wheel::duration timing_wheel::reschedule(wheel_entry& entry, duration deadline) noexcept {
  if (!entry.is_pending()) return insert(entry, deadline);
  const std::uint64_t tick = deadline_tick(deadline);
  if (tick >= entry.deadline_) {
    // Its slot comes due no later than the old deadline, so no later than the new one.
    entry.deadline_ = tick;
    return duration::max();
  }
  remove(entry);  // leaves it idle, as insert_tick() wants it
  return insert_tick(entry, tick);
}

void timing_wheel::undo_reschedule(wheel_entry& entry, std::uint64_t tick) noexcept {
  assert(entry.is_pending() && "twheel: undo_reschedule() of an entry that is not pending");
  // Later than the reschedule's deadline: its slot (or overdue_) is examined when due and
  // the entry re-filed from there. Not later: the reschedule only stored its deadline.
  entry.deadline_ = tick;
}

bool timing_wheel::remove(wheel_entry& entry) noexcept {
  const std::uint16_t where = entry.where_;
  if (where == detail::where_idle) return false;
  // The entry may sit in its slot, in overdue_, taken_ or early_ (its slot was taken), in
  // staged_ or in a caller's list: unlinking a node of a circular list needs no owner.
  unlink(entry);
  entry.where_ = detail::where_idle;
  if (where == detail::where_detached) return false;
  if (where != detail::where_due) {
    wheel_[where / detail::slots_per_level].after_unlink(where % detail::slots_per_level);
  }
  --size_;
  ++counters_.removed;
  return true;
}

void timing_wheel::replace(wheel_entry& entry, wheel_entry& fresh) noexcept {
  assert(fresh.where_ == detail::where_idle);
  if (entry.where_ == detail::where_idle) return;
  using list = detail::slot_list<wheel_entry>;
  list::node_algorithms::link_after(list::value_traits::to_node_ptr(entry),
                                    list::value_traits::to_node_ptr(fresh));
  unlink(entry);
  fresh.deadline_ = entry.deadline_;
  fresh.where_ = entry.where_;
  entry.where_ = detail::where_idle;
}

std::optional<timing_wheel::slot_ref> timing_wheel::next_slot() const noexcept {
  // Entries of a finer level lie inside the current slot of every coarser level, so the
  // first non-empty level holds the earliest slot.
  for (unsigned level = 0; level < levels_; ++level) {
    // Not const: a slot marked occupied that holds nothing (its entries were moved into it
    // whole, then removed) is unmarked on the way; that changes no answer.
    auto& lv = wheel_[level];
    if (lv.empty()) continue;
    const unsigned shift = detail::slot_bits * level;
    const std::uint64_t slot_span = std::uint64_t{1} << shift;
    const std::uint64_t level_span = slot_span << detail::slot_bits;
    const auto current = static_cast<unsigned>((elapsed_ >> shift) & detail::slot_mask);
    // Search from the slot after the current one: only the top level (a ring) can hold
    // entries in the current slot or behind it, and those are a rotation ahead.
    std::uint64_t occupied = lv.occupied();
    while (occupied != 0) {
      const unsigned ahead =
          current + 1 +
          detail::distance_to_next(occupied, (current + 1) % detail::slots_per_level);
      const unsigned slot = ahead % detail::slots_per_level;
      if (!lv.drop_if_emptied(slot)) {
        return slot_ref{level, slot, (elapsed_ & ~(level_span - 1)) + ahead * slot_span};
      }
      occupied &= ~(std::uint64_t{1} << slot);
    }
  }
  return std::nullopt;
}

bool timing_wheel::has_due() const noexcept {
  if (!overdue_.empty()) return true;
  for (unsigned mask = taken_mask_; mask != 0; mask &= mask - 1) {
    if (!taken_[detail::ctz64(mask)].empty()) return true;
  }
  for (unsigned mask = early_mask_; mask != 0; mask &= mask - 1) {
    if (!early_[detail::ctz64(mask)].empty()) return true;
  }
  return false;
}

std::optional<timing_wheel::early_ref> timing_wheel::early_candidate() const noexcept {
  // One at a time, until its slot starts: file() redirects into one slot's range only.
  if (levels_ < 4) return std::nullopt;
  if (early_level_ != 0 && (elapsed_ < early_start_ || early_mask_ != 0)) return std::nullopt;
  // Only the slot right after each level's current one, and not the top level, whose
  // slots may hold parked entries of later rotations. The coarsest first: it has the most
  // entries and the longest to go, and a finer crowded slot passed over is still
  // cascaded at its start.
  for (unsigned level = levels_ - 2; level >= 2 && level + 1 < levels_; --level) {
    const unsigned shift = detail::slot_bits * level;
    const std::uint64_t start = ((elapsed_ >> shift) + 1) << shift;
    const auto slot = static_cast<unsigned>((start >> shift) & detail::slot_mask);
    const auto& lv = wheel_[level];
    if ((lv.occupied() >> slot & 1u) == 0 || !lv.crowded(slot) || !lv.holds(slot)) continue;
    return early_ref{level, slot, start, start - (std::uint64_t{1} << (shift - detail::slot_bits))};
  }
  return std::nullopt;
}

void timing_wheel::cascade_early(wheel_entry& entry) noexcept {
  // Inside the slot's range, file() puts it where the walked entries go; moved later than
  // the slot since it was filed, where any entry goes.
  ++counters_.cascaded;
  entry.where_ = detail::where_idle;
  file(entry);
}

// A coarse slot need not be cascaded before its earliest deadline: nothing in it can be
// due sooner, and advance() cascades and detaches in one call, so the owner wakes once
// instead of once to cascade and again to fire. Not for the top level, whose nearest
// slot may hold only parked entries while a later one holds earlier deadlines, nor for
// a crowded slot, whose walk would delay its first due entries (see crowded_slot),
// unless its entries share one deadline tick: it then moves whole, one splice, and
// waking at its start as well would only cost a wake-up.
std::uint64_t timing_wheel::wake_tick(unsigned level, std::uint64_t start,
                                      std::uint64_t hint) const noexcept {
  return level + 1 < levels_ ? std::max(start, hint) : start;
}

std::optional<timing_wheel::duration> timing_wheel::next_expiry() const noexcept {
  // A crowded slot to cascade early is begun at once: the sooner, the more idle time the
  // walk can use.
  if (has_due() || early_candidate()) return from_tick(elapsed_);
  const auto slot = next_slot();
  if (!slot) {
    if (staged_pending_) return from_tick(early_from_);
    return std::nullopt;
  }
  std::uint64_t at =
      wake_tick(slot->level, slot->start, wheel_[slot->level].wake_hint(slot->slot));
  // Staged entries join their level at early_from_ (all of them are due after it).
  if (staged_pending_ && early_from_ < at) at = early_from_;
  return from_tick(at);
}

std::optional<timing_wheel::duration> timing_wheel::next_fine_slot_after(
    duration t) const noexcept {
  const std::uint64_t tick = tick_of(t);
  if (tick < elapsed_) return std::nullopt;
  constexpr unsigned bits = detail::slot_bits;
  // Level 1 is searched only below a coarser level (not when it is the top, a ring) and
  // with no staged entries that might join it first.
  const bool level1_known = levels_ >= 3 && !staged_pending_;
  if ((tick >> bits) == (elapsed_ >> bits)) {
    // In level 0's rotation: its next non-empty slot after the one of `t`, or else level
    // 1's next (its entries all lie after level 0's).
    const auto index = static_cast<unsigned>(tick & detail::slot_mask);
    if (const auto slot = wheel_[0].next_held_after(index)) return from_tick(tick - index + *slot);
    if (!level1_known) return std::nullopt;
    const auto wake = level1_wake_after(tick);
    if (!wake) return std::nullopt;
    return from_tick(*wake);
  }
  // In a later rotation of level 0 within level 1's: `t` is the wake-up of a sparse level-1
  // slot (its earliest deadline), whose entries go to level 0 then. The next wake-up is
  // the earliest of their later deadlines inside the slot, or level 1's next slot.
  if (!level1_known || (tick >> (2 * bits)) != (elapsed_ >> (2 * bits))) return std::nullopt;
  const auto& level1 = wheel_[1];
  const auto slot = static_cast<unsigned>((tick >> bits) & detail::slot_mask);
  const std::uint64_t start = tick >> bits << bits;
  if (!level1.holds(slot) || wake_tick(1, start, level1.wake_hint(slot)) != tick) {
    return std::nullopt;
  }
  std::uint64_t best = std::numeric_limits<std::uint64_t>::max();
  const bool walked = level1.visit_up_to(slot, sparse_look_ahead, [&](const wheel_entry& e) {
    if (e.deadline_ > tick && e.deadline_ < start + detail::slots_per_level &&
        e.deadline_ < best) {
      best = e.deadline_;
    }
  });
  if (!walked) return std::nullopt;
  if (const auto wake = level1_wake_after(tick); wake && *wake < best) best = *wake;
  if (best == std::numeric_limits<std::uint64_t>::max()) return std::nullopt;
  return from_tick(best);
}

std::optional<std::uint64_t> timing_wheel::level1_wake_after(std::uint64_t tick) const noexcept {
  constexpr unsigned bits = detail::slot_bits;
  const auto index = static_cast<unsigned>((tick >> bits) & detail::slot_mask);
  const auto slot = wheel_[1].next_held_after(index);
  if (!slot) return std::nullopt;
  const std::uint64_t start = (tick >> (2 * bits) << (2 * bits)) + (std::uint64_t{*slot} << bits);
  return wake_tick(1, start, wheel_[1].wake_hint(*slot));
}

// A slot about to be taken, and whether it may be moved whole: crowded and uniform (see
// wheel_level::uniform), its entries are then one lane, re-filed in one splice instead
// of a walk. Only crowded ones: entries moved whole keep naming the slot they came from,
// so a slot they all leave by remove() stays marked occupied until a search finds it
// empty (looking into its lanes: wheel_level::holds); a sparse slot's walk is short,
// and its removals then keep the bitmap exact.
struct timing_wheel::whole_slot {
  bool whole;
  std::uint64_t deadline;
  std::uint32_t filed;

  static whole_slot of(const detail::wheel_level<wheel_entry>& level, unsigned slot) noexcept {
    return whole_slot{level.uniform(slot) && level.crowded(slot), level.earliest(slot),
                      level.filed(slot)};
  }

  // After the take into `lanes` (`mask`: the lanes that got entries): moves them on and
  // clears `mask` if it can. False if they must be walked (due, or emptied).
  bool moved(timing_wheel& wheel, detail::slot_lanes<wheel_entry>& lanes,
             unsigned& mask) const noexcept {
    const unsigned lane = detail::lane_of(deadline);
    if (!whole || mask != 1u << lane || !wheel.file_whole(lanes[lane], deadline, filed)) {
      return false;
    }
    mask = 0;
    return true;
  }
};

namespace {

// One turn of each lane of `mask` in turn, at most `budget` entries in all (an emptied
// lane leaves the mask), so that the lanes' cache misses overlap. `turn(lane, budget)`
// takes at least one entry off the front of the non-empty `lane`, at most `budget`, and
// returns how many. Returns the entries taken.
template <class Lanes, class Turn>
std::size_t walk_lanes(Lanes& lanes, unsigned& mask, std::size_t budget, Turn&& turn) {
  std::size_t visited = 0;
  for (unsigned todo = mask; todo != 0 && visited < budget; todo &= todo - 1) {
    const unsigned lane = detail::ctz64(todo);
    auto& list = lanes[lane];
    if (!list.empty()) visited += turn(list, budget - visited);  // else emptied by remove()
    if (list.empty()) mask &= ~(1u << lane);
  }
  return visited;
}

// A turn of walk_lanes() that visits the lane's front entry.
template <class Visit>
auto front_entry(Visit&& visit) {
  return [&visit](detail::slot_list<wheel_entry>& lane, std::size_t) -> std::size_t {
    wheel_entry& entry = lane.front();
    lane.pop_front();
    visit(entry);
    return 1;
  };
}

}  // namespace

std::size_t timing_wheel::advance(duration now, wheel_entry_list& out,
                                  std::size_t max_entries, std::size_t max_early) {
  return advance(now, out, nullptr, nullptr, max_entries, max_early);
}

std::size_t timing_wheel::advance(duration now, wheel_entry_list& out, due_visitor visit,
                                  void* context, std::size_t max_entries,
                                  std::size_t max_early) {
  std::uint64_t target = tick_of(now);
  if (target < elapsed_) target = elapsed_;
  std::size_t examined = 0;
  std::size_t early_examined = 0;
  if (max_early == 0) max_early = 1;
  std::size_t detached = 0;
  // `n` entries examined and moved to `out` (their where_ already says so).
  const auto note_detached = [&](std::size_t n) {
    examined += n;
    size_ -= n;
    detached += n;
    counters_.expired += n;
  };
  // A due entry, unlinked, goes to the visitor and, unless it is done with it, to `out`.
  const auto detach = [&](wheel_entry& entry) {
    entry.where_ = detail::where_detached;
    if (visit != nullptr && visit(context, entry)) {
      entry.where_ = detail::where_idle;
    } else {
      out.list_.push_back(entry);
    }
  };
  // Compare with the slot's start, not with target: entries due later than this slot are
  // re-filed so that a late advance still hands them out in deadline order.
  const auto examine = [&](wheel_entry& entry) {
    if (entry.deadline_ <= elapsed_) {
      detach(entry);
      note_detached(1);
    } else {
      ++examined;
      entry.where_ = detail::where_idle;
      file(entry);
      ++counters_.cascaded;
    }
  };
  // A lane's due entries at its front (a burst's, once its slot is taken) leave in one
  // splice instead of one unlink and one link each; otherwise its front entry is examined.
  const auto detach_or_examine = [&](detail::slot_list<wheel_entry>& lane,
                                     std::size_t budget) -> std::size_t {
    std::size_t run = 0;
    auto end = lane.begin();
    if (visit == nullptr) {
      for (; run < budget && end != lane.end() && end->deadline_ <= elapsed_; ++end, ++run) {
        end->where_ = detail::where_detached;
      }
      if (run == 0) return front_entry(examine)(lane, budget);
      out.list_.splice(out.list_.end(), lane, lane.begin(), end);
      note_detached(run);
      return run;
    }
    // The run of due entries at the lane's front. Each one's successor is fetched before
    // the visit, whose work then hides the miss. Entries the visitor is done with stay
    // linked until the run is cut out of the lane in one unlink (marked idle already;
    // their links are still used until then, hence the visitor's contract); the others
    // move to `out` one by one.
    while (run < budget && end != lane.end() && end->deadline_ <= elapsed_) {
      wheel_entry& entry = *end++;
#if defined(__GNUC__)
      if (end != lane.end()) __builtin_prefetch(&*end, 1);
#endif
      ++run;
      entry.where_ = detail::where_detached;
      if (visit(context, entry)) {
        entry.where_ = detail::where_idle;
      } else {
        out.list_.splice(out.list_.end(), lane, lane.iterator_to(entry));
      }
    }
    if (run == 0) return front_entry(examine)(lane, budget);
    lane.erase(lane.begin(), end);
    note_detached(run);
    return run;
  };
  while (examined < max_entries) {
    if (!overdue_.empty()) {
      wheel_entry& entry = overdue_.front();
      overdue_.pop_front();
      examine(entry);
      continue;
    }
    if (taken_mask_ != 0) {
      // One turn of each lane in turn, so that the lanes' cache misses overlap.
      // Everything detached from one slot has the slot's start as its deadline tick,
      // hence one lane: its turns keep its filing order.
      walk_lanes(taken_, taken_mask_, max_entries - examined, detach_or_examine);
      continue;
    }
    const auto slot = next_slot();
    // An early cascade in progress is finished before anything at or after its slot's
    // start is taken: its entries belong to those slots.
    if (slot && slot->start <= target && (early_mask_ == 0 || slot->start < early_start_)) {
      if (stop_at_join_point(slot->start)) continue;
      elapsed_ = slot->start;
      const whole_slot whole = whole_slot::of(wheel_[slot->level], slot->slot);
      taken_mask_ |= wheel_[slot->level].take(slot->slot, taken_);
      join_staged();  // after the take: the staged entries are not due yet
      if (whole.moved(*this, taken_, taken_mask_)) ++examined;
      continue;
    }
    if (early_mask_ != 0) {
      if (early_examined >= max_early) break;
      while (early_mask_ != 0 && examined < max_entries && early_examined < max_early) {
        const std::size_t walked = walk_lanes(
            early_, early_mask_, std::min(max_entries - examined, max_early - early_examined),
            front_entry([this](wheel_entry& entry) { cascade_early(entry); }));
        examined += walked;
        early_examined += walked;
      }
      continue;
    }
    if (stop_at_join_point(target)) continue;
    // Nothing is due before `target`: the wheel's time may move there first.
    elapsed_ = target;
    join_staged();  // a join point at `target` itself: its slot is empty
    const auto early = early_candidate();
    if (!early) break;
    const whole_slot whole = whole_slot::of(wheel_[early->level], early->slot);
    early_mask_ = wheel_[early->level].take(early->slot, early_);
    early_level_ = early->level;
    early_start_ = early->start;
    early_from_ = early->from;
    staged_pending_ = elapsed_ < early_from_;
    ++counters_.cascaded_early;
    if (whole.moved(*this, early_, early_mask_)) ++examined;
  }
  return detached;
}

std::size_t timing_wheel::detach_all(wheel_entry_list& out) noexcept {
  detail::slot_list<wheel_entry> all;
  all.splice(all.end(), overdue_);
  // Only occupied slots can hold entries: an empty wheel (a context's whole life, for
  // many) is emptied without reading its 3,584 lanes.
  const auto take_occupied = [this](detail::wheel_level<wheel_entry>& lv) {
    for (std::uint64_t todo = lv.occupied(); todo != 0; todo &= todo - 1) {
      lv.take(detail::ctz64(todo), taken_);
    }
  };
  for (unsigned level = 0; level < levels_; ++level) take_occupied(wheel_[level]);
  take_occupied(staged_);
  for (auto& lane : taken_) all.splice(all.end(), lane);
  for (auto& lane : early_) all.splice(all.end(), lane);
  taken_mask_ = 0;
  early_mask_ = 0;
  early_level_ = 0;  // nothing left to redirect to
  staged_pending_ = false;
  std::size_t count = 0;
  for (auto& e : all) {
    e.where_ = detail::where_detached;
    ++count;
  }
  out.list_.splice(out.list_.end(), all);
  size_ = 0;
  return count;
}

}  // namespace twheel
