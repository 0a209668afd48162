// twheel/detail/wait_ops.hpp: the concrete wait operations, allocated per async_wait
// through the handler's associated allocator.
#ifndef TWHEEL_DETAIL_WAIT_OPS_HPP
#define TWHEEL_DETAIL_WAIT_OPS_HPP

#include <twheel/detail/op_queue.hpp>

#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/execution/allocator.hpp>
#include <boost/asio/execution/executor.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/recycling_allocator.hpp>
#include <boost/system/error_code.hpp>

#include <memory>
#include <type_traits>
#include <utility>

namespace twheel::detail {

// Handlers without an allocator of their own get Asio's per-thread recycling allocator,
// as Asio's own operations do.
template <class Handler>
auto op_allocator(const Handler& handler) noexcept {
  return boost::asio::get_associated_allocator(handler,
                                               boost::asio::recycling_allocator<void>());
}

template <class Op, class Handler>
using op_allocator_t = typename std::allocator_traits<decltype(op_allocator(
    std::declval<const Handler&>()))>::template rebind_alloc<Op>;

template <class Handler>
struct is_executor_binder : std::false_type {};
template <class T, class Executor>
struct is_executor_binder<boost::asio::executor_binder<T, Executor>> : std::true_type {};

// Allocates and constructs an Op from the handler; frees the memory if construction throws.
template <class Op, class Handler, class... Args>
Op* make_op(Handler& handler, Args&&... args) {
  op_allocator_t<Op, Handler> alloc(op_allocator(handler));
  Op* p = std::allocator_traits<decltype(alloc)>::allocate(alloc, 1);
  try {
    return ::new (static_cast<void*>(p)) Op(std::move(handler), std::forward<Args>(args)...);
  } catch (...) {
    std::allocator_traits<decltype(alloc)>::deallocate(alloc, p, 1);
    throw;
  }
}

// Destroys and frees an Op whose handler has been moved to `handler` (the allocator is
// taken from the live handler, not from the moved-from one, as Asio does).
template <class Op, class Handler>
void free_op(Op* op, const Handler& handler) noexcept {
  op_allocator_t<Op, Handler> alloc(op_allocator(handler));
  op->~Op();
  std::allocator_traits<decltype(alloc)>::deallocate(alloc, op, 1);
}

// A wait whose handler runs on the io_context the service runs on: the service's driver
// is already running there, so it invokes the handler directly (what dispatch would do).
template <class Handler>
class inline_wait_op : public wait_op {
 public:
  explicit inline_wait_op(Handler&& handler)
      : wait_op(&inline_wait_op::do_complete), handler_(std::move(handler)) {}

  Handler handler_;

 private:
  static void do_complete(wait_op* base, bool invoke) {
    auto* op = static_cast<inline_wait_op*>(base);
    const boost::system::error_code ec = op->error();
    // The memory is freed before the upcall (Asio's rule), so move the handler out.
    Handler handler(std::move(op->handler_));
    free_op(op, handler);
    if (invoke) std::move(handler)(ec);
  }
};

// A settled wait's handler with its result, as a nullary function for an executor.
template <class Handler>
struct bound_wait_handler {
  Handler handler;
  boost::system::error_code ec;
  void operator()() { std::move(handler)(ec); }
};

// Whether `Executor` already allocates with `Allocator`: std::allocator on both sides.
template <class Executor, class Allocator, class = void>
struct allocates_with_default : std::false_type {};
template <class Executor, class Allocator>
struct allocates_with_default<
    Executor, Allocator,
    std::enable_if_t<boost::asio::can_query<const Executor&,
                                            boost::asio::execution::allocator_t<void>>::value>>
    : std::bool_constant<
          std::is_same_v<Allocator, std::allocator<void>> &&
          std::is_same_v<std::decay_t<typename boost::asio::query_result<
                             const Executor&, boost::asio::execution::allocator_t<void>>::type>,
                         std::allocator<void>>> {};

// Runs `f` on `ex` the way Asio's handler_work completes an I/O operation: straight on the
// handler's executor, as it is (inline where it may block and the caller runs on it, posted
// where it was required never to block), with the handler's allocator preferred.
// dispatch(ex, handler) would wrap a handler that has an associated executor (one bound to
// a strand) in a work_dispatcher, which goes through the strand a second time and copies
// the strand (an atomic reference count on a line the threads share) three more times.
//
// The allocator is not preferred when the executor has it already (the handler has none
// of its own, and the executor uses std::allocator, as an io_context's executor and its
// strands do by default): the preference would copy the executor, a strand's copy being
// an atomic count on a line the threads share, and a tracked one a second on the
// scheduler's work count.
template <class Executor, class Function, class Allocator>
void complete_on(const Executor& ex, Function&& f, const Allocator& alloc) {
  if constexpr (boost::asio::execution::is_executor<Executor>::value) {
    if constexpr (allocates_with_default<Executor, Allocator>::value) {
      ex.execute(std::forward<Function>(f));
    } else {
      boost::asio::prefer(ex, boost::asio::execution::allocator(alloc))
          .execute(std::forward<Function>(f));
    }
  } else {
    ex.dispatch(std::forward<Function>(f), alloc);  // a Networking TS executor
  }
}

// A wait whose handler runs on another executor (a strand, another context, ...): `work`
// keeps that executor's context alive while pending, and is what it completes on.
template <class Handler, class WorkExecutor>
class dispatch_wait_op : public wait_op {
 public:
  dispatch_wait_op(Handler&& handler, WorkExecutor work)
      : wait_op(&dispatch_wait_op::do_complete),
        handler_(std::move(handler)),
        work_(std::move(work)) {}

  Handler handler_;
  WorkExecutor work_;

 private:
  static void do_complete(wait_op* base, bool invoke) {
    auto* op = static_cast<dispatch_wait_op*>(base);
    const boost::system::error_code ec = op->error();
    Handler handler(std::move(op->handler_));
    WorkExecutor work(std::move(op->work_));
    free_op(op, handler);
    if (invoke) {
      const auto alloc = boost::asio::get_associated_allocator(handler);
      complete_on(work.executor(), bound_wait_handler<Handler>{std::move(handler), ec}, alloc);
    }
  }
};

}  // namespace twheel::detail

#endif  // TWHEEL_DETAIL_WAIT_OPS_HPP
