// twheel/cancel_after.hpp: a completion-token adapter that times out any asynchronous
// operation through the context's timing wheel.
#ifndef TWHEEL_CANCEL_AFTER_HPP
#define TWHEEL_CANCEL_AFTER_HPP

#include <twheel/detail/cancel_after_op.hpp>
#include <twheel/wheel_service.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/execution/executor.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/is_executor.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/system_executor.hpp>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace twheel {

/// The completion token made by cancel_after() and cancel_at(): the operation runs with
/// `token_`, and if it has not completed by `deadline_`, cancellation of type `type_` is
/// emitted into it. A plain value: copy or move it freely until it is used.
///
/// @tparam CompletionToken The wrapped completion token (decayed).
template <class CompletionToken>
class cancel_after_t {
 public:
  /// The clock of timeouts and deadlines.
  using clock_type = std::chrono::steady_clock;

  /// Times out `timeout` after the operation is started (with deferred, when launched).
  /// `service` names the wheel; null: that of the operation's I/O executor.
  template <class T>
  cancel_after_t(T&& token, clock_type::duration timeout, boost::asio::cancellation_type_t type,
                 wheel_service* service = nullptr)
      : token_(std::forward<T>(token)), timeout_(timeout), type_(type), service_(service) {}

  /// Times out at `deadline`. `service` names the wheel; null: that of the operation's
  /// I/O executor.
  template <class T>
  cancel_after_t(T&& token, clock_type::time_point deadline,
                 boost::asio::cancellation_type_t type, wheel_service* service = nullptr)
      : token_(std::forward<T>(token)), deadline_(deadline), type_(type), service_(service) {}

  /// The wrapped completion token.
  CompletionToken token_;
  /// Set by cancel_after(): the deadline is computed when the operation starts.
  std::optional<clock_type::duration> timeout_;  // relative: counted from the start
  /// Set by cancel_at().
  clock_type::time_point deadline_{};             // absolute, when timeout_ is empty
  /// The cancellation type emitted at the deadline.
  boost::asio::cancellation_type_t type_;
  /// The wheel the timeout is filed in, when the caller named one.
  wheel_service* service_;  // null: found through the operation's I/O executor
};

namespace detail {

template <class T, class = void>
struct has_get_executor : std::false_type {};
template <class T>
struct has_get_executor<T, std::void_t<decltype(std::declval<const T&>().get_executor())>>
    : std::true_type {};

template <class T, class = void>
struct has_inner_initiation : std::false_type {};
template <class T>
struct has_inner_initiation<T, std::void_t<decltype(std::declval<const T&>().initiation_)>>
    : std::true_type {};

template <class T, class = void>
struct binds_cancellation_slot : std::false_type {};
template <class T>
struct binds_cancellation_slot<
    T, std::enable_if_t<std::is_same_v<decltype(std::declval<T&>().slot_),
                                       boost::asio::cancellation_slot>>> : std::true_type {};

// The I/O executor of an operation: its initiation's executor, looking through the
// wrappers of adapters applied around cancel_after (Asio 1.81's as_tuple, redirect_error,
// bind_executor, ... keep the wrapped initiation in a member `initiation_` and do not
// forward get_executor()). system_executor when there is none.
template <class Initiation>
auto io_executor_of(const Initiation& init) {
  if constexpr (has_get_executor<Initiation>::value) {
    return init.get_executor();
  } else if constexpr (has_inner_initiation<Initiation>::value) {
    return io_executor_of(init.initiation_);
  } else {
    return boost::asio::system_executor();
  }
}

template <class T>
inline constexpr bool is_any_executor_v =
    boost::asio::execution::is_executor<T>::value || boost::asio::is_executor<T>::value;

inline std::chrono::steady_clock::time_point deadline_after(
    std::chrono::steady_clock::duration timeout) {
  using clock = std::chrono::steady_clock;
  const auto now = clock::now();
  if (timeout > clock::duration::zero() && now > clock::time_point::max() - timeout) {
    return clock::time_point::max();
  }
  return timeout < clock::duration::zero() ? now : now + timeout;
}

template <class Executor>
wheel_service& service_of(const Executor& ex) {
  auto& svc = boost::asio::use_service<wheel_service>(
      boost::asio::query(ex, boost::asio::execution::context));
  svc.attach(ex);
  return svc;
}

// Wraps an operation's initiation: the handler gets our cancellation slot, and the
// operation's timeout is filed in the wheel once the operation has started.
template <class Initiation>
class cancel_after_initiation {
 public:
  template <class I>
  cancel_after_initiation(I&& init, std::optional<std::chrono::steady_clock::duration> timeout,
                          std::chrono::steady_clock::time_point deadline,
                          boost::asio::cancellation_type_t type, wheel_service* service)
      : init_(std::forward<I>(init)),
        timeout_(timeout),
        deadline_(deadline),
        type_(type),
        service_(service) {}

  // Lets adapters around this one (another cancel_after, say) see the I/O executor.
  template <class I = Initiation, std::enable_if_t<has_get_executor<I>::value, int> = 0>
  auto get_executor() const {
    return init_.get_executor();
  }

  template <class Handler, class... Args>
  void operator()(Handler&& handler, Args&&... args) {
    using handler_type = std::decay_t<Handler>;
    handler_type h(std::forward<Handler>(handler));
    const auto io_ex = io_executor_of(init_);
    const auto ex = boost::asio::get_associated_executor(h, io_ex);
    using state_type = cancel_after_state<std::decay_t<decltype(ex)>,
                                          decltype(op_allocator(std::declval<handler_type&>()))>;
    wheel_service& svc = service_ ? *service_ : find_service(io_ex, ex);
    // A relative timeout counts from now: with deferred, from the launch.
    const auto deadline = timeout_ ? deadline_after(*timeout_) : deadline_;
    state_type* state = state_type::create(svc, h, ex, type_);
    // bind_cancellation_slot(slot, cancel_after(...)) wraps this initiation in one that
    // binds `slot` to the operation, which would hide ours: bind ours and forward theirs.
    boost::asio::cancellation_slot bound;
    if constexpr (binds_cancellation_slot<Initiation>::value) {
      bound = std::exchange(init_.slot_, state->slot());
    }
    try {
      std::move(init_)(
          cancel_after_handler<handler_type, state_type>(std::move(h), state, bound),
          std::forward<Args>(args)...);
    } catch (...) {
      state->abandon();
      throw;
    }
    state->start(svc.wheel_time(deadline));
  }

 private:
  template <class IoExecutor, class HandlerExecutor>
  static wheel_service& find_service(const IoExecutor& io_ex, const HandlerExecutor& ex) {
    using boost::asio::system_executor;
    if constexpr (!std::is_same_v<IoExecutor, system_executor>) {
      return service_of(io_ex);
    } else if constexpr (!std::is_same_v<HandlerExecutor, system_executor>) {
      return service_of(ex);
    } else {
      throw std::invalid_argument(
          "twheel::cancel_after: the operation's I/O executor cannot be seen through the "
          "adapters around it; name the wheel with cancel_after(executor_or_context, ...)");
    }
  }

  Initiation init_;
  std::optional<std::chrono::steady_clock::duration> timeout_;
  std::chrono::steady_clock::time_point deadline_;
  boost::asio::cancellation_type_t type_;
  wheel_service* service_;
};

}  // namespace detail

/// Times out the operation started with `token` after `timeout`: if it has not completed
/// by then, `type` (terminal by default) cancellation is emitted into it, and it completes
/// as the operation does when cancelled (usually with operation_aborted). If the operation
/// completes first, its timeout leaves the wheel at once. The wheel is that of the
/// operation's I/O executor's context. The caller's own cancellation slot keeps working.
///
/// The timeout counts from the operation's initiation (for deferred, from its launch).
/// The I/O executor is found through Asio's token adapters applied around this token
/// (as_tuple, redirect_error, bind_executor, ...); if there is none, the handler's
/// associated executor names the wheel. The timeout's state is one allocation per
/// operation, through the handler's associated allocator.
///
/// @param timeout How long the operation may run; a negative timeout counts as zero, a
/// far one saturates.
/// @param token The completion token of the operation: a handler, use_awaitable,
/// as_tuple(...), deferred, detached, use_future, redirect_error(...), ...
///
/// @returns A cancel_after_t wrapping `token`.
///
/// @throws std::invalid_argument from the initiating function (for deferred, at launch)
/// if no wheel can be found: neither an I/O executor nor a handler's associated executor
/// is known. Use the overload taking an executor or a context then.
///
/// @par Completion Signature
/// That of the wrapped operation.
///
/// @par Per-Operation Cancellation
/// The caller's own cancellation slot, bound to the handler or around this token
/// (bind_cancellation_slot), keeps working: every type emitted into it is forwarded to
/// the operation.
///
/// @par Thread Safety
/// Cancellation is emitted on the handler's associated executor (as Asio's cancel_after
/// does): use a strand when the context runs on several threads, so that the emission
/// cannot run concurrently with the operation itself.
template <class CompletionToken>
auto cancel_after(std::chrono::steady_clock::duration timeout, CompletionToken&& token) {
  return cancel_after_t<std::decay_t<CompletionToken>>(std::forward<CompletionToken>(token),
                                                       timeout,
                                                       boost::asio::cancellation_type::terminal);
}

/// As above, emitting cancellation of type `type` at the deadline.
///
/// @param timeout How long the operation may run.
/// @param type The cancellation type to emit: terminal, partial or total. An operation
/// that does not support it ignores it and runs on until it completes.
/// @param token The completion token of the operation.
template <class CompletionToken>
auto cancel_after(std::chrono::steady_clock::duration timeout,
                  boost::asio::cancellation_type_t type, CompletionToken&& token) {
  return cancel_after_t<std::decay_t<CompletionToken>>(std::forward<CompletionToken>(token),
                                                       timeout, type);
}

/// As cancel_after(), with an absolute deadline. A deadline already passed cancels the
/// operation at the wheel's next pass, never inside the initiating function.
///
/// @param deadline When to emit terminal cancellation.
/// @param token The completion token of the operation.
template <class CompletionToken>
auto cancel_at(std::chrono::steady_clock::time_point deadline, CompletionToken&& token) {
  return cancel_after_t<std::decay_t<CompletionToken>>(
      std::forward<CompletionToken>(token), deadline, boost::asio::cancellation_type::terminal);
}

/// As cancel_at() above, emitting cancellation of type `type` at the deadline.
///
/// @param deadline When to emit the cancellation.
/// @param type The cancellation type to emit: terminal, partial or total.
/// @param token The completion token of the operation.
template <class CompletionToken>
auto cancel_at(std::chrono::steady_clock::time_point deadline,
               boost::asio::cancellation_type_t type, CompletionToken&& token) {
  return cancel_after_t<std::decay_t<CompletionToken>>(std::forward<CompletionToken>(token),
                                                       deadline, type);
}

/// As cancel_after(), using the wheel of `ex`'s context (for operations without an I/O
/// executor, or to pick the wheel explicitly). Creates that wheel now if it does not
/// exist yet.
///
/// @param ex An executor of the context whose wheel holds the timeout.
/// @param timeout How long the operation may run.
/// @param token The completion token of the operation.
/// @param type The cancellation type to emit (terminal by default).
template <class Executor, class CompletionToken,
          std::enable_if_t<detail::is_any_executor_v<Executor>, int> = 0>
auto cancel_after(const Executor& ex, std::chrono::steady_clock::duration timeout,
                  CompletionToken&& token,
                  boost::asio::cancellation_type_t type = boost::asio::cancellation_type::terminal) {
  return cancel_after_t<std::decay_t<CompletionToken>>(std::forward<CompletionToken>(token),
                                                       timeout, type,
                                                       &detail::service_of(ex));
}

/// As cancel_after(), using the wheel of `ctx`. Creates that wheel now if it does not
/// exist yet.
///
/// @param ctx The execution context whose wheel holds the timeout.
/// @param timeout How long the operation may run.
/// @param token The completion token of the operation.
/// @param type The cancellation type to emit (terminal by default).
template <class ExecutionContext, class CompletionToken,
          std::enable_if_t<std::is_convertible_v<ExecutionContext&,
                                                 boost::asio::execution_context&>,
                           int> = 0>
auto cancel_after(ExecutionContext& ctx, std::chrono::steady_clock::duration timeout,
                  CompletionToken&& token,
                  boost::asio::cancellation_type_t type = boost::asio::cancellation_type::terminal) {
  return cancel_after(ctx.get_executor(), timeout, std::forward<CompletionToken>(token), type);
}

}  // namespace twheel

namespace boost::asio {

/// Makes twheel::cancel_after_t<CompletionToken> a completion token for the signatures
/// CompletionToken accepts; the initiating function returns what it returns with
/// CompletionToken.
template <class CompletionToken, class... Signatures>
struct async_result<twheel::cancel_after_t<CompletionToken>, Signatures...>
    : async_result<CompletionToken, Signatures...> {
  /// Starts the operation with the wrapped token, its initiation wrapped so that the
  /// timeout is filed once the operation has started.
  template <class Initiation, class RawToken, class... Args>
  static auto initiate(Initiation&& initiation, RawToken&& token, Args&&... args) {
    // async_initiate, not async_result<CompletionToken>::initiate: Boost 1.81 still has
    // tokens (use_future) whose async_result has no initiate().
    auto& inner = token.token_;
    return async_initiate<std::remove_reference_t<decltype(inner)>, Signatures...>(
        twheel::detail::cancel_after_initiation<std::decay_t<Initiation>>(
            std::forward<Initiation>(initiation), token.timeout_, token.deadline_, token.type_,
            token.service_),
        inner, std::forward<Args>(args)...);
  }
};

}  // namespace boost::asio

#endif  // TWHEEL_CANCEL_AFTER_HPP
