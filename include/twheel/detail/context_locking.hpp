// twheel/detail/context_locking.hpp: whether Asio itself runs a context without locks.
//
// The one place twheel reads how Asio was configured. Asio 1.33 (Boost 1.87) and later
// answer through the public boost::asio::config; before that, only the io_context's
// scheduler knows its concurrency hint (a detail member, present from Boost 1.81 to 1.86).
#ifndef TWHEEL_DETAIL_CONTEXT_LOCKING_HPP
#define TWHEEL_DETAIL_CONTEXT_LOCKING_HPP

#include <boost/asio/execution_context.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/version.hpp>

#if BOOST_ASIO_VERSION >= 103300
#include <boost/asio/config.hpp>
#elif !defined(BOOST_ASIO_HAS_IOCP)
#include <boost/asio/detail/concurrency_hint.hpp>
#include <boost/asio/detail/scheduler.hpp>
#endif

namespace twheel::detail {

// True when `ctx` (an io_context or a thread_pool) has a scheduler that takes no lock
// (created with BOOST_ASIO_CONCURRENCY_HINT_UNSAFE): it only ever runs on one thread.
inline bool asio_runs_unlocked(boost::asio::execution_context& ctx) {
#if BOOST_ASIO_VERSION >= 103300
  return !boost::asio::config(ctx).get("scheduler", "locking", true);
#elif !defined(BOOST_ASIO_HAS_IOCP)
  using scheduler = boost::asio::detail::scheduler;
  if (!boost::asio::has_service<scheduler>(ctx)) return false;
  const int hint = boost::asio::use_service<scheduler>(ctx).concurrency_hint();
  return !BOOST_ASIO_CONCURRENCY_HINT_IS_LOCKING(SCHEDULER, hint);
#else
  return false;
#endif
}

}  // namespace twheel::detail

#endif  // TWHEEL_DETAIL_CONTEXT_LOCKING_HPP
