// twheel/detail/asio_scheduler.hpp: what the wheel uses of Asio's scheduler, the engine
// of io_context and thread_pool.
//
// What twheel asks of Asio's detail namespace besides the adapter checks of
// asio_compat.hpp (completion_queue.hpp and the driver name the scheduler_operation and
// op_queue types used here), for three things:
// - handing settled waits to the scheduler as its own operations, in batches:
//   scheduler::post_immediate_completions(n, ops, is_continuation) and
//   scheduler_operation, unchanged from Boost 1.81 to 1.89 (checked by the Boost matrix
//   in CI, which builds and runs every suite against each);
// - whether Asio runs the context without locks: Asio 1.33 (Boost 1.87) and later answer
//   through the public boost::asio::config; before that, only the scheduler knows its
//   concurrency hint;
// - the service behind boost::asio::steady_timer (the driver's), which the wheel
//   acquires in its constructor, as an Asio service acquires the services it uses: the
//   context destroys its services newest first, so that one then outlives the wheel.
// A context not run by such a scheduler (a user's own execution_context, even one with an
// Asio I/O object on it, or io_context on Windows, which runs on IOCP) gets one posted
// operation per settled wait instead (src/wheel_service.cpp tells them apart).
#ifndef TWHEEL_DETAIL_ASIO_SCHEDULER_HPP
#define TWHEEL_DETAIL_ASIO_SCHEDULER_HPP

#include <boost/asio/execution_context.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/version.hpp>

#include <boost/asio/detail/chrono_time_traits.hpp>
#include <boost/asio/detail/deadline_timer_service.hpp>
#include <boost/asio/detail/scheduler.hpp>
#include <boost/asio/wait_traits.hpp>

#include <chrono>
#if BOOST_ASIO_VERSION >= 103300
#include <boost/asio/config.hpp>
#else
#include <boost/asio/detail/concurrency_hint.hpp>
#endif

namespace twheel::detail {

// The service of boost::asio::steady_timer's implementation (basic_waitable_timer's impl_).
using steady_timer_service = boost::asio::detail::deadline_timer_service<
    boost::asio::detail::chrono_time_traits<std::chrono::steady_clock,
                                            boost::asio::wait_traits<std::chrono::steady_clock>>>;

// True when `ctx` (an io_context or a thread_pool) has a scheduler that takes no lock
// (created with BOOST_ASIO_CONCURRENCY_HINT_UNSAFE): it only ever runs on one thread.
// `sched`: ctx's scheduler service, or null. On a context of the user's own it is a
// reactor's, if any, made with the default hint (locking), so the wheel locks there.
inline bool asio_runs_unlocked(boost::asio::execution_context& ctx,
                               boost::asio::detail::scheduler* sched) {
#if BOOST_ASIO_VERSION >= 103300
  (void)sched;
  return !boost::asio::config(ctx).get("scheduler", "locking", true);
#elif !defined(BOOST_ASIO_HAS_IOCP)
  (void)ctx;
  return sched != nullptr &&
         !BOOST_ASIO_CONCURRENCY_HINT_IS_LOCKING(SCHEDULER, sched->concurrency_hint());
#else
  (void)ctx;
  (void)sched;
  return false;
#endif
}

}  // namespace twheel::detail

#endif  // TWHEEL_DETAIL_ASIO_SCHEDULER_HPP
