// twheel/detail/service_lock.hpp: the wheel's mutex, taken only when the context may run
// on several threads.
//
// Why optional: an uncontended lock is two atomic read-modify-writes, and each is a full
// barrier, so the cache misses of consecutive timer operations cannot overlap across it.
// A context that the user declares single-threaded (wheel_options::single_threaded), or
// an io_context created with BOOST_ASIO_CONCURRENCY_HINT_UNSAFE, needs none.
#ifndef TWHEEL_DETAIL_SERVICE_LOCK_HPP
#define TWHEEL_DETAIL_SERVICE_LOCK_HPP

#include <mutex>

namespace twheel::detail {

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
  std::mutex mutex_;
};

using service_lock = std::unique_lock<service_mutex>;

}  // namespace twheel::detail

#endif  // TWHEEL_DETAIL_SERVICE_LOCK_HPP
