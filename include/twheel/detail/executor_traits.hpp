// twheel/detail/executor_traits.hpp: what twheel decides from an executor's type alone.
//
// Why: the handler box (handler_box.hpp) and the driver's choice of executor
// (impl/wheel_service.hpp) both ask whether an executor is a strand; one definition keeps
// them from disagreeing.
#ifndef TWHEEL_DETAIL_EXECUTOR_TRAITS_HPP
#define TWHEEL_DETAIL_EXECUTOR_TRAITS_HPP

#include <boost/asio/execution/context.hpp>
#include <boost/asio/execution/executor.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/strand.hpp>

#include <type_traits>

namespace twheel::detail {

// boost::asio::strand<Inner> for any Inner. io_context::strand is a different type and is
// named where it matters.
template <class T>
struct is_strand : std::false_type {};
template <class Inner>
struct is_strand<boost::asio::strand<Inner>> : std::true_type {};

// The execution context `ex` runs work in, for an executor of either model: one of the
// older model (io_context::strand) has context() and no query(), and Asio's timers take
// it as their executor.
template <class Executor>
boost::asio::execution_context& context_of(const Executor& ex) noexcept {
  if constexpr (boost::asio::execution::is_executor<Executor>::value) {
    return boost::asio::query(ex, boost::asio::execution::context);
  } else {
    return ex.context();
  }
}

}  // namespace twheel::detail

#endif  // TWHEEL_DETAIL_EXECUTOR_TRAITS_HPP
