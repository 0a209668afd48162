// twheel/detail/wheel_level.hpp: one level of the wheel, 64 slots and their bitmap.
#ifndef TWHEEL_DETAIL_WHEEL_LEVEL_HPP
#define TWHEEL_DETAIL_WHEEL_LEVEL_HPP

#include <boost/intrusive/list.hpp>

#include <array>
#include <cstdint>

namespace twheel::detail {

inline constexpr unsigned slot_bits = 6;
inline constexpr unsigned slots_per_level = 1u << slot_bits;  // 64: one bitmap word
inline constexpr std::uint64_t slot_mask = slots_per_level - 1;

// Where an entry is: a slot index (level * 64 + slot) or one of these.
inline constexpr std::uint16_t where_due = 0xFFFD;       // in the wheel's due list
inline constexpr std::uint16_t where_detached = 0xFFFE;  // in a caller's list
inline constexpr std::uint16_t where_idle = 0xFFFF;      // not linked anywhere

template <class Entry>
using slot_list =
    boost::intrusive::list<Entry, boost::intrusive::constant_time_size<false>>;

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

template <class Entry>
class wheel_level {
 public:
  void push(unsigned slot, Entry& e) noexcept {
    slots_[slot].push_back(e);
    occupied_ |= std::uint64_t{1} << slot;
  }

  // Call after an entry of `slot` was unlinked without the list: keeps the bit honest.
  void after_unlink(unsigned slot) noexcept {
    if (slots_[slot].empty()) occupied_ &= ~(std::uint64_t{1} << slot);
  }

  // Moves all entries of `slot` to the back of `into` and marks the slot empty.
  void take(unsigned slot, slot_list<Entry>& into) noexcept {
    into.splice(into.end(), slots_[slot]);
    occupied_ &= ~(std::uint64_t{1} << slot);
  }

  bool empty() const noexcept { return occupied_ == 0; }

  // Slots ahead of `current` (0 = current itself, wrapping) to the first occupied one.
  // Precondition: !empty().
  unsigned distance_to_next(unsigned current) const noexcept {
    return ctz64(rotr64(occupied_, current));
  }

  std::uint64_t occupied() const noexcept { return occupied_; }

 private:
  std::uint64_t occupied_ = 0;
  std::array<slot_list<Entry>, slots_per_level> slots_;
};

}  // namespace twheel::detail

#endif  // TWHEEL_DETAIL_WHEEL_LEVEL_HPP
