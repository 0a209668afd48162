// twheel/impl/wheel_service.hpp: template members of wheel_service.
#ifndef TWHEEL_IMPL_WHEEL_SERVICE_HPP
#define TWHEEL_IMPL_WHEEL_SERVICE_HPP

#include <twheel/detail/executor_traits.hpp>
#include <twheel/detail/tracked_work.hpp>
#include <twheel/detail/wait_ops.hpp>

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/is_executor.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/prefer.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

namespace twheel {

namespace detail {

inline void wait_canceller::operator()(boost::asio::cancellation_type_t type) {
  using boost::asio::cancellation_type;
  // A timer wait has no side effects, so every kind of cancellation may abort it.
  if (!!(type & (cancellation_type::terminal | cancellation_type::partial |
                 cancellation_type::total))) {
    if (wheel_service* s = service_.load(std::memory_order_acquire)) s->cancel_wait(*this);
  }
}

inline wait_canceller::~wait_canceller() {
  if (wheel_service* s = service_.load(std::memory_order_acquire)) s->detach_canceller(*this);
}

// Bumped by every wheel's destructor: a thread's cached answer of wheel_service::of() is
// good only while it has not moved.
inline std::atomic<std::uint64_t> wheels_destroyed{0};

}  // namespace detail

inline wheel_service& wheel_service::of(boost::asio::execution_context& ctx) {
  struct last_answer {
    boost::asio::execution_context* context = nullptr;
    wheel_service* service = nullptr;
    std::uint64_t generation = 0;
  };
  thread_local last_answer last;
  const std::uint64_t generation = detail::wheels_destroyed.load(std::memory_order_acquire);
  if (last.context == &ctx && last.generation == generation) return *last.service;
  wheel_service& service = boost::asio::use_service<wheel_service>(ctx);
  last = last_answer{&ctx, &service, generation};
  return service;
}

namespace detail {

// The plain executor of the context of `ex` if `ex` holds a `Target` or a strand of one.
template <class Target>
std::optional<boost::asio::any_io_executor> plain_executor_behind(
    const boost::asio::any_io_executor& ex) {
  if (auto* t = ex.target<Target>()) {
    return boost::asio::any_io_executor(t->context().get_executor());
  }
  if (auto* s = ex.target<boost::asio::strand<Target>>()) {
    return boost::asio::any_io_executor(s->get_inner_executor().context().get_executor());
  }
  return std::nullopt;
}

template <std::uintptr_t Bits>
std::optional<boost::asio::any_io_executor> plain_executor_with_bits(
    const boost::asio::any_io_executor& ex) {
  using io = boost::asio::io_context::basic_executor_type<std::allocator<void>, Bits>;
  using pool = boost::asio::thread_pool::basic_executor_type<std::allocator<void>, Bits>;
  if (auto found = plain_executor_behind<io>(ex)) return found;
  return plain_executor_behind<pool>(ex);
}

// The context's plain executor if `ex` runs on an io_context's or a thread_pool's, seen
// through strands and the other wrappers Asio makes of them; null otherwise. `ex` is one
// of io_context's or thread_pool's executor types with any of their property bits
// (blocking.never, relationship.continuation, outstanding_work.tracked: what require()
// and prefer() make), a strand of any such executor or of an any_io_executor, or
// io_context::strand.
template <std::uintptr_t... Bits>
std::optional<boost::asio::any_io_executor> plain_executor_of(
    const boost::asio::any_io_executor& ex, std::integer_sequence<std::uintptr_t, Bits...>) {
  std::optional<boost::asio::any_io_executor> found;
  ((found = plain_executor_with_bits<Bits>(ex)) || ...);
  if (found) return found;
  if (auto* s = ex.target<boost::asio::strand<boost::asio::any_io_executor>>()) {
    return plain_executor_of(s->get_inner_executor(),
                             std::integer_sequence<std::uintptr_t, Bits...>{});
  }
  if (auto* s = ex.target<boost::asio::io_context::strand>()) {
    return boost::asio::any_io_executor(s->context().get_executor());
  }
  return std::nullopt;
}

// What query(ex, execution::context) names, when it names an io_context or a thread_pool
// (strands and executor_with_default forward the query to the executor inside); void
// otherwise.
template <class Executor, class = void>
struct queried_context {
  using type = void;
};
template <class Executor>
struct queried_context<
    Executor, std::enable_if_t<boost::asio::can_query<const Executor&,
                                                      boost::asio::execution::context_t>::value>> {
  using type = std::remove_cv_t<std::remove_reference_t<decltype(boost::asio::query(
      std::declval<const Executor&>(), boost::asio::execution::context))>>;
};

}  // namespace detail

template <class Executor>
boost::asio::any_io_executor wheel_service::driver_executor(const Executor& ex) {
  using boost::asio::any_io_executor;
  using context_t = typename detail::queried_context<Executor>::type;
  // The driver must not run inside a user's strand, or any other wrapper that serialises
  // or defers work (it would wait behind the wrapper's work, and the work behind every
  // pass): find the context's own executor behind `ex`. What cannot be seen through (a
  // user's own adapter behind any_io_executor) is kept, with work untracked; records are
  // then posted to it too (attach_executor()), so a handler runs inline (runs_inline())
  // only on an executor equal to it.
  if constexpr (std::is_base_of_v<any_io_executor, Executor>) {
    // any_io_executor itself, or as_default_on's executor_with_default<any_io_executor>
    const any_io_executor& erased = ex;
    if (auto plain = detail::plain_executor_of(erased,
                                               std::make_integer_sequence<std::uintptr_t, 8>{})) {
      return *plain;
    }
    return boost::asio::prefer(erased, boost::asio::execution::outstanding_work.untracked);
  } else if constexpr (std::is_same_v<context_t, boost::asio::io_context> ||
                       std::is_same_v<context_t, boost::asio::thread_pool>) {
    return boost::asio::query(ex, boost::asio::execution::context).get_executor();
  } else if constexpr (std::is_same_v<Executor, boost::asio::io_context::strand>) {
    return ex.context().get_executor();
  } else if constexpr (detail::is_strand<Executor>::value) {
    return driver_executor(ex.get_inner_executor());
  } else {
    return boost::asio::prefer(ex, boost::asio::execution::outstanding_work.untracked);
  }
}

template <class Executor>
bool wheel_service::runs_inline(const Executor& ex) const noexcept {
  if constexpr (std::is_same_v<Executor, boost::asio::any_io_executor>) {
    return ex == executor_;
  } else if constexpr (boost::asio::execution::is_executor<Executor>::value) {
    const Executor* target = executor_.template target<Executor>();
    return target != nullptr && *target == ex;
  } else {
    return false;
  }
}

template <class Handler, class IoExecutor>
void wheel_service::async_wait(detail::timer_state& timer, clock_type::time_point deadline,
                               Handler& handler, const IoExecutor& io_ex, bool replace) {
  auto slot = boost::asio::get_associated_cancellation_slot(handler);
  // The box takes a wait only when the timer has none (start_in_box): none to replace.
  auto allocated = [&](Handler& h) {
    start_allocated_wait(timer, deadline, h, io_ex, slot, replace);
  };
  // A wait with a cancellation slot keeps an operation the slot's handler can point to.
  const bool boxable = timer.boxable && !slot.is_connected();

  if constexpr (detail::fits_in_box<Handler>) {
    // The fast path: no allocation, no executor copied or compared (the timer decided once
    // that its executor is the wheel's).
    if (boxable) {
      start_in_box(timer, deadline, handler, allocated);
      return;
    }
  } else if constexpr (detail::boxable_binder<Handler>::value) {
    // bind_executor(ex, h): one executor compare instead of an allocation when `ex` is the
    // wheel's. Should the timer already have a wait, the binder is put back together.
    if (boxable && runs_inline(handler.get_executor())) {
      using target = typename Handler::target_type;
      start_in_box(timer, deadline, handler.get(), [&](target& h) {
        Handler rebound(boost::asio::executor_arg, handler.get_executor(), std::move(h));
        allocated(rebound);
      });
      return;
    }
  } else if constexpr (detail::fits_in_box_if_inline<Handler>) {
    if (boxable && runs_inline(boost::asio::get_associated_executor(handler, io_ex))) {
      start_in_box(timer, deadline, handler, allocated);
      return;
    }
  }
  allocated(handler);
}

template <class Handler, class IoExecutor>
void wheel_service::replace_waits(detail::timer_state& timer, clock_type::time_point deadline,
                                  Handler& handler, const IoExecutor& io_ex) {
  // Allocated: the box holds a timer's first wait, and the waits to replace are still
  // there while the new one is made.
  auto slot = boost::asio::get_associated_cancellation_slot(handler);
  start_allocated_wait(timer, deadline, handler, io_ex, slot, true);
}

template <class Boxed, class Otherwise>
void wheel_service::start_in_box(detail::timer_state& timer, clock_type::time_point deadline,
                                 Boxed& handler, Otherwise&& otherwise) {
  detail::handler_box box;
  box.emplace(std::move(handler));
  struct discard {
    detail::handler_box& box;
    ~discard() {
      if (!box.empty()) box.complete(detail::wait_result::aborted, false);
    }
  } guard{box};
  if (start_boxed_wait(timer, wheel_time(deadline), box)) return;
  // The timer already has a wait: this one queues behind it, allocated.
  Boxed unboxed(box.template release<Boxed>());
  otherwise(unboxed);
}

template <class Handler, class IoExecutor, class Slot>
void wheel_service::start_allocated_wait(detail::timer_state& timer,
                                         clock_type::time_point deadline, Handler& handler,
                                         const IoExecutor& io_ex, Slot& slot,
                                         bool replace) {
  // A handler without an executor of its own runs on the timer's: used as it is, not
  // copied (a copy of a strand is an atomic count on a line the threads share).
  detail::wait_op* op;
  if constexpr (detail::has_own_executor<Handler>) {
    op = make_wait_op(handler, boost::asio::get_associated_executor(handler, io_ex));
  } else {
    op = make_wait_op(handler, io_ex);
  }

  detail::wait_canceller* canceller = nullptr;
  try {
    if (slot.is_connected()) {
      canceller = &slot.template emplace<detail::wait_canceller>(this, &timer, op);
    }
    start_wait(timer, wheel_time(deadline), op, canceller, replace);
  } catch (...) {
    // Nothing was filed: unhook the slot (its handler still points at the op), then free.
    if (canceller) slot.clear();
    op->destroy();
    throw;
  }
}

template <class Handler, class Executor>
detail::wait_op* wheel_service::make_wait_op(Handler& handler, Executor&& ex) {
  using executor_t = std::decay_t<Executor>;
  using io_strand = boost::asio::strand<boost::asio::io_context::executor_type>;
  if constexpr (detail::is_executor_binder<Handler>::value) {
    // bind_executor(ex, h): h is kept and run on ex, which is all the binder does. Moving
    // the binder would copy its executor each time (executor_binder's move constructor
    // copies it), and a strand's copy is an atomic count on a line the threads share.
    return make_wait_op(handler.get(), std::forward<Executor>(ex));
  } else {
    if (runs_inline(ex)) return detail::make_op<detail::inline_wait_op<Handler>>(handler);
    if constexpr (std::is_same_v<executor_t, boost::asio::any_io_executor>) {
      // A strand of an io_context behind any_io_executor (a timer made on make_strand(ctx)):
      // completed on the strand itself, as one copy of it, instead of through the
      // polymorphic wrapper's preferences, each a copy.
      if (const auto* s = ex.template target<io_strand>()) {
        return detail::make_op<detail::dispatch_wait_op<Handler, detail::tracked_work<io_strand>>>(
            handler, detail::tracked_work<io_strand>(*s));
      }
    }
    return detail::make_op<detail::dispatch_wait_op<Handler, detail::tracked_work<executor_t>>>(
        handler, detail::tracked_work<executor_t>(std::forward<Executor>(ex)));
  }
}

// Inline: schedule_new() is a cancel_after's initiation, and the call cost it 27
// instructions per operation (callgrind).
inline void wheel_service::schedule_locked(lock_type& lock, detail::timer_state& timer,
                                           std::chrono::nanoseconds deadline,
                                           detail::wait_op* op) {
  if (shut_down_) {
    lock.unlock();
    op->destroy();
    return;
  }
  records_.reserve();
  file_op(timer, deadline, op);
}

template <class State, class Make, class Discard>
State* wheel_service::schedule_new(std::chrono::nanoseconds deadline, Make make,
                                   Discard discard) {
  static_assert(sizeof(State) <= state_block_size && alignof(State) <= alignof(std::max_align_t));
  lock_type lock(mutex_);
  State* state = make(state_blocks_.take());  // take() may throw: nothing made yet
  try {
    schedule_locked(lock, state->entry(), deadline, state);
  } catch (...) {  // thrown with the lock held
    lock.unlock();
    discard(state);
    throw;
  }
  return state;
}

}  // namespace twheel

#endif  // TWHEEL_IMPL_WHEEL_SERVICE_HPP
