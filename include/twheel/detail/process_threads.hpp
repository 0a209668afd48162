// twheel/detail/process_threads.hpp: whether the process has a single thread, and
// read-modify-writes that skip their atomic instruction while it does.
//
// Why: an atomic read-modify-write is a full barrier on x86, so the cache misses of
// consecutive timer operations cannot overlap across it, and every one of a reference
// count's or a counter's costs that on the hot path. glibc (2.32 and later) says whether
// the process has ever had a second thread (__libc_single_threaded), and its malloc and
// stdio, and libstdc++'s shared_ptr, skip their atomics while it has not; so do these.
// glibc clears the flag when a thread is created, and that creation orders what this
// thread wrote before it with everything the new thread does. (Were the flag ever set
// again, it would be after the other threads were joined, which orders their writes too.)
#ifndef TWHEEL_DETAIL_PROCESS_THREADS_HPP
#define TWHEEL_DETAIL_PROCESS_THREADS_HPP

#include <atomic>

#if defined(__linux__) && defined(__GLIBC__) && \
    (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
#include <sys/single_threaded.h>
#define TWHEEL_HAS_SINGLE_THREADED_FLAG 1
#endif

namespace twheel::detail {

// True while no other thread can be touching what this thread touches.
inline bool single_threaded_process() noexcept {
#if defined(TWHEEL_HAS_SINGLE_THREADED_FLAG)
  return __libc_single_threaded != 0;
#else
  return false;
#endif
}

template <class T>
T fetch_add_if_threaded(std::atomic<T>& a, T v, std::memory_order order) noexcept {
  if (single_threaded_process()) {
    const T old = a.load(std::memory_order_relaxed);
    a.store(static_cast<T>(old + v), std::memory_order_relaxed);
    return old;
  }
  return a.fetch_add(v, order);
}

template <class T>
T fetch_sub_if_threaded(std::atomic<T>& a, T v, std::memory_order order) noexcept {
  if (single_threaded_process()) {
    const T old = a.load(std::memory_order_relaxed);
    a.store(static_cast<T>(old - v), std::memory_order_relaxed);
    return old;
  }
  return a.fetch_sub(v, order);
}

template <class T>
bool compare_exchange_if_threaded(std::atomic<T>& a, T& expected, T desired,
                                  std::memory_order order) noexcept {
  if (single_threaded_process()) {
    const T current = a.load(std::memory_order_relaxed);
    if (current != expected) {
      expected = current;
      return false;
    }
    a.store(desired, std::memory_order_relaxed);
    return true;
  }
  return a.compare_exchange_strong(expected, desired, order);
}

}  // namespace twheel::detail

#endif  // TWHEEL_DETAIL_PROCESS_THREADS_HPP
