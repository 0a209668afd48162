// twheel/detail/prefault.hpp: makes a range of fresh memory resident, and written, before
// it is used.
//
// Why: a fresh block of 64 KiB would otherwise be mapped a page at a time, one page fault
// per 85 records, each a trip into the kernel; Linux's MADV_POPULATE_WRITE (5.14) maps the
// block's pages in one call. Where it is not available the pages fault in as they are
// first written, which is slower but otherwise the same.
//
// Mapped is not enough: on this project's VM (a Firecracker guest, Linux 6.18) the first
// write from user space to each freshly mapped page still cost about 5 us, a fault the
// guest does not see, so the records' first writes, when waits settle, paid it inside the
// burst: after glibc had trimmed its heap between repetitions, `bench_timers --workloads
// burst --sizes 10000,100000` ran twheel's burst at 100,000 at 0.70x Asio, and at 2.1x
// once each page was written here (2026-12-07). So each page is also written once (its
// first byte, rewritten with its own value), and the cost is paid at reservation, as
// Asio's operations pay for their memory at async_wait.
#ifndef TWHEEL_DETAIL_PREFAULT_HPP
#define TWHEEL_DETAIL_PREFAULT_HPP

#include <cstddef>
#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace twheel::detail {

// Every page that [p, p + n) touches is written, its contents kept; the whole pages
// inside it are also mapped in one call. Never fails (it only moves the cost of first
// use here).
inline void prefault(void* p, std::size_t n) noexcept {
#if defined(__linux__)
#if defined(MADV_POPULATE_WRITE)
  constexpr int populate_write = MADV_POPULATE_WRITE;
#else
  constexpr int populate_write = 23;  // the value in Linux's uapi headers
#endif
  static const std::uintptr_t page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t end = begin + n;
  const std::uintptr_t first = (begin + page - 1) & ~(page - 1);
  const std::uintptr_t last = end & ~(page - 1);
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, populate_write);
  // Written, whatever the range holds already: its first byte, then the first byte of
  // each page after it that the range reaches.
  for (std::uintptr_t a = begin; a < end; a = (a | (page - 1)) + 1) {
    volatile unsigned char* byte = reinterpret_cast<unsigned char*>(a);
    *byte = *byte;
  }
#else
  (void)p;
  (void)n;
#endif
}

}  // namespace twheel::detail

#endif  // TWHEEL_DETAIL_PREFAULT_HPP
