// twheel/detail/service_lock.hpp: the wheel's mutex, taken only when the context may run
// on several threads.
//
// Why optional: an uncontended lock is two atomic read-modify-writes, and each is a full
// barrier, so the cache misses of consecutive timer operations cannot overlap across it.
// A context that the user declares single-threaded (wheel_options::single_threaded), or
// an io_context created with BOOST_ASIO_CONCURRENCY_HINT_UNSAFE, needs none.
//
// Why not std::mutex on Linux: glibc's pthread_mutex_lock and unlock run about 80
// instructions per pair (callgrind: 48 + 31, type and elision checks), and a churn re-arm
// takes two pairs: about a fifth of its instructions at 10,000 timers. The futex lock
// below is a compare-exchange to lock and an exchange to unlock, the same two atomic
// operations, with nothing else on the uncontended path. Its critical sections are a few
// hundred instructions, so a waiter spins briefly before it sleeps, as glibc's adaptive
// mutexes do: two threads re-arming timers of one context would otherwise sleep and wake
// each other on most contended calls.
#ifndef TWHEEL_DETAIL_SERVICE_LOCK_HPP
#define TWHEEL_DETAIL_SERVICE_LOCK_HPP

#include <mutex>

#if defined(__linux__)
#include <twheel/detail/process_threads.hpp>

#include <atomic>
#include <climits>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace twheel::detail {

#if defined(__linux__)

// Drepper's three-state futex mutex ("Futexes Are Tricky", mutex2): 0 free, 1 locked,
// 2 locked and a thread may be sleeping on it.
class futex_mutex {
 public:
  futex_mutex() noexcept = default;
  futex_mutex(const futex_mutex&) = delete;
  futex_mutex& operator=(const futex_mutex&) = delete;

  void lock() noexcept {
    if (single_threaded_process()) {
      // No other thread exists to contend (see process_threads.hpp).
      // glibc clears the flag at a thread's creation, which orders this
      // store before anything the new thread does.
      state_.store(1, std::memory_order_relaxed);
      return;
    }
    int expected = 0;
    if (state_.compare_exchange_strong(expected, 1, std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
      return;
    }
    lock_contended();
  }

  void unlock() noexcept {
    if (single_threaded_process()) {
      // Nobody can sleep on the lock: a sleeper is another thread.
      state_.store(0, std::memory_order_relaxed);
      return;
    }
    if (state_.exchange(0, std::memory_order_release) == 2) wake_one();
  }

 private:
  static constexpr int spins = 100;

  void lock_contended() noexcept {
    for (int i = 0; i < spins; ++i) {
      pause();
      int expected = 0;
      if (state_.load(std::memory_order_relaxed) == 0 &&
          state_.compare_exchange_strong(expected, 1, std::memory_order_acquire,
                                         std::memory_order_relaxed)) {
        return;
      }
    }
    // From here on the lock is taken as 2, so that our unlock wakes whoever else sleeps.
    while (state_.exchange(2, std::memory_order_acquire) != 0) {
      ::syscall(SYS_futex, reinterpret_cast<int*>(&state_), FUTEX_WAIT_PRIVATE, 2, nullptr,
                nullptr, 0);
    }
  }

  void wake_one() noexcept {
    ::syscall(SYS_futex, reinterpret_cast<int*>(&state_), FUTEX_WAKE_PRIVATE, 1, nullptr,
              nullptr, 0);
  }

  static void pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  // The futex word: an int the kernel reads; std::atomic<int> has its layout.
  std::atomic<int> state_{0};
  static_assert(sizeof(std::atomic<int>) == sizeof(int));
  static_assert(std::atomic<int>::is_always_lock_free);
};

using base_mutex = futex_mutex;

#else

using base_mutex = std::mutex;

#endif

class service_mutex {
 public:
  explicit service_mutex(bool enabled) noexcept : enabled_(enabled) {}
  bool enabled() const noexcept { return enabled_; }
  void lock() {
    if (enabled_) mutex_.lock();
  }
  void unlock() {
    if (enabled_) mutex_.unlock();
  }

 private:
  const bool enabled_;
  base_mutex mutex_;
};

using service_lock = std::unique_lock<service_mutex>;

}  // namespace twheel::detail

#endif  // TWHEEL_DETAIL_SERVICE_LOCK_HPP
