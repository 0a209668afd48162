// twheel/detail/prefault.hpp: makes a range of fresh memory resident in one system call.
//
// Why: a fresh block of 64 KiB would otherwise be mapped a page at a time, one page fault
// per 85 records, each a trip into the kernel; Linux's MADV_POPULATE_WRITE (5.14) maps the
// block's pages in one call. Where it is not available the pages fault in as they are
// first written, which is slower but otherwise the same.
#ifndef TWHEEL_DETAIL_PREFAULT_HPP
#define TWHEEL_DETAIL_PREFAULT_HPP

#include <cstddef>
#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace twheel::detail {

// The whole pages inside [p, p + n); never fails (it only saves page faults).
inline void prefault(void* p, std::size_t n) noexcept {
#if defined(__linux__)
#if defined(MADV_POPULATE_WRITE)
  constexpr int populate_write = MADV_POPULATE_WRITE;
#else
  constexpr int populate_write = 23;  // the value in Linux's uapi headers
#endif
  static const std::uintptr_t page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t first = (begin + page - 1) & ~(page - 1);
  const std::uintptr_t last = (begin + n) & ~(page - 1);
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, populate_write);
#else
  (void)p;
  (void)n;
#endif
}

}  // namespace twheel::detail

#endif  // TWHEEL_DETAIL_PREFAULT_HPP
