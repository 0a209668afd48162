// twheel/cancel_after.hpp: a completion-token adapter that times out any asynchronous
// operation through the context's timing wheel.
#ifndef TWHEEL_CANCEL_AFTER_HPP
#define TWHEEL_CANCEL_AFTER_HPP

#include <twheel/detail/asio_compat.hpp>
#include <twheel/detail/cancel_after_op.hpp>
#include <twheel/detail/executor_traits.hpp>
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

/// The partial completion token made by cancel_after(timeout) and cancel_at(deadline)
/// without a completion token: used as the completion token of an operation, it times
/// out that operation and completes it with the default completion token of the
/// operation's I/O executor (deferred from Boost 1.86; before 1.86 only executors that
/// name a default completion token, such as use_awaitable_t<>::as_default_on(...), have
/// one). As Asio's own partial cancel_after. Called with a token, it makes the full one.
class partial_cancel_after {
 public:
  /// The clock of timeouts and deadlines.
  using clock_type = std::chrono::steady_clock;

  /// Times out `timeout` after the operation is started.
  partial_cancel_after(clock_type::duration timeout, boost::asio::cancellation_type_t type)
      : timeout_(timeout), type_(type) {}

  /// Times out at `deadline`.
  partial_cancel_after(clock_type::time_point deadline, boost::asio::cancellation_type_t type)
      : deadline_(deadline), type_(type) {}

  /// Makes the full completion token: this timeout around `token`.
  template <class CompletionToken>
  cancel_after_t<std::decay_t<CompletionToken>> operator()(CompletionToken&& token) const {
    if (timeout_) {
      return cancel_after_t<std::decay_t<CompletionToken>>(
          std::forward<CompletionToken>(token), *timeout_, type_);
    }
    return cancel_after_t<std::decay_t<CompletionToken>>(std::forward<CompletionToken>(token),
                                                         deadline_, type_);
  }

  /// Set by cancel_after().
  std::optional<clock_type::duration> timeout_;
  /// Set by cancel_at().
  clock_type::time_point deadline_{};
  /// The cancellation type emitted at the deadline.
  boost::asio::cancellation_type_t type_;
};

namespace detail {

using compat::has_get_executor;

template <class... T>
struct type_list {};

template <class T>
inline constexpr bool dependent_false_v = false;

// The default completion token of an operation's I/O executor: what the partial
// cancel_after(timeout) completes with.
template <class Initiation>
using partial_default_token_t = boost::asio::default_completion_token_t<
    boost::asio::associated_executor_t<std::decay_t<Initiation>>>;

template <bool HasDefaultToken, class Initiation, class ArgList, class... Signatures>
struct partial_initiate_result {
  using type = void;  // not usable: initiate() says why
};

template <class Initiation, class... Args, class... Signatures>
struct partial_initiate_result<true, Initiation, type_list<Args...>, Signatures...> {
  using token_type = cancel_after_t<partial_default_token_t<Initiation>>;
  using type = decltype(boost::asio::async_initiate<token_type, Signatures...>(
      std::declval<Initiation>(), std::declval<token_type&>(), std::declval<Args>()...));
};

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
  auto& svc = wheel_service::of(detail::context_of(ex));
  svc.attach(ex);
  return svc;
}

// The executor_type of an initiation with get_executor(), which adapters around ours
// (Asio's own cancel_after from Boost 1.86) look for through associated_executor.
template <class Initiation, class = void>
struct initiation_executor_type {};
template <class Initiation>
struct initiation_executor_type<Initiation, std::enable_if_t<has_get_executor<Initiation>::value>> {
  using executor_type = std::decay_t<decltype(std::declval<const Initiation&>().get_executor())>;
};

// Wraps an operation's initiation: the handler gets our cancellation slot, and the
// operation's timeout is filed in the wheel once the operation has started.
template <class Initiation>
class cancel_after_initiation : public initiation_executor_type<Initiation> {
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
    const auto io_ex = compat::io_executor_of(init_, args...);
    const auto ex = boost::asio::get_associated_executor(h, io_ex);
    using state_type = cancel_after_state<std::decay_t<decltype(ex)>,
                                          decltype(op_allocator(std::declval<handler_type&>()))>;
    wheel_service& svc = service_ ? *service_ : find_service(io_ex, ex);
    // A relative timeout counts from now: with deferred, from the launch.
    const auto deadline = timeout_ ? deadline_after(*timeout_) : deadline_;
    // The timeout is filed first: after the initiation, a failure could no longer be
    // reported by throwing (the operation would be running, its handler accepted).
    state_type* state = state_type::create_filed(svc, h, ex, type_, svc.wheel_time(deadline));
    // The handler's own cancellation slot (cancel_after(t, bind_cancellation_slot(slot,
    // h))) is forwarded into the timeout's now, while a failure to allocate the forwarder
    // can still be thrown with nothing started.
    auto handler_slot = boost::asio::get_associated_cancellation_slot(h);
    if (handler_slot.is_connected()) {
      try {
        handler_slot.template emplace<cancel_forwarder<state_type>>(state);
      } catch (...) {
        state->finish();   // takes the timeout back out of the wheel
        state->abandon();  // and lets go of the state
        throw;
      }
    }
    // A caller's slot bound around this token (bind_cancellation_slot(slot, cancel_after(
    // ...))) reaches the operation as a cancellation_slot_binder around our handler; the
    // associated_cancellation_slot specialization in cancel_after_op.hpp keeps our slot
    // visible through it and forwards the caller's into ours.
    try {
      std::move(init_)(cancel_after_handler<handler_type, state_type>(std::move(h), state),
                       std::forward<Args>(args)...);
    } catch (...) {
      state->abandon();
      throw;
    }
    state->start();
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
/// associated executor names the wheel. The timeout's state is one block of memory per
/// operation: through the handler's associated allocator when it has one. Otherwise, when
/// the handler's associated executor runs in the wheel's own context (its strands
/// included), from blocks the wheel recycles (taken under the lock that files the
/// timeout), which the wheel keeps, as many as were ever in flight at once, until its
/// context is destroyed; else through Asio's recycling allocator.
///
/// Memory from the handler's own allocator is freed before the handler is called, as
/// Asio requires. When the operation completes just as its timeout fires (the timeout's
/// cancellation is still queued), the call waits until the wheel has let go of the
/// state, as Asio's own cancel_after waits for its timer, and is made on the handler's
/// executor, on which it counts as outstanding work meanwhile; holding it takes one more
/// block from that allocator. If that block cannot be had, or the completion's arguments
/// may throw when moved, the handler is called at once and the state freed after it.
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
///
/// @par Allocation Failure
/// The initiating function throws std::bad_alloc, with nothing started, if the timeout's
/// state or the forwarding of a slot bound to the handler cannot be allocated. A slot
/// bound around this token is met only inside the operation's initiation, where nothing
/// may throw: if its forwarding cannot be allocated, the operation is cancelled
/// (terminal) as soon as it has started. A timeout whose emission cannot be dispatched
/// to a strand is filed again 1 ms later; one that fired while the operation was still
/// being initiated (on another thread) is then emitted on the initiating thread.
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

/// The partial form: `op(args..., twheel::cancel_after(timeout))` times out the operation
/// and completes it with the default completion token of its I/O executor (deferred from
/// Boost 1.86), as Asio's own cancel_after(timeout) does. Where the I/O executor has no
/// default completion token (Boost 1.81 to 1.85, unless it names one), using it does not
/// compile.
///
/// @param timeout How long the operation may run.
/// @param type The cancellation type to emit (terminal by default).
inline partial_cancel_after cancel_after(
    std::chrono::steady_clock::duration timeout,
    boost::asio::cancellation_type_t type = boost::asio::cancellation_type::terminal) {
  return partial_cancel_after(timeout, type);
}

/// The partial form of cancel_at(): see cancel_after(timeout).
///
/// @param deadline When to emit the cancellation.
/// @param type The cancellation type to emit (terminal by default).
inline partial_cancel_after cancel_at(
    std::chrono::steady_clock::time_point deadline,
    boost::asio::cancellation_type_t type = boost::asio::cancellation_type::terminal) {
  return partial_cancel_after(deadline, type);
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
  // The return type is declared, not deduced: C++20's completion_token_for checks it with
  // Asio's archetype initiation, which must not instantiate the body.
  template <class Initiation, class RawToken, class... Args>
  static auto initiate(Initiation&& initiation, RawToken&& token, Args&&... args)
      -> decltype(async_initiate<CompletionToken, Signatures...>(
          std::declval<twheel::detail::cancel_after_initiation<std::decay_t<Initiation>>>(),
          std::declval<CompletionToken&>(), std::forward<Args>(args)...)) {
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

/// Makes twheel::partial_cancel_after a completion token: the operation runs with the
/// default completion token of its I/O executor, timed out through the wheel.
template <class... Signatures>
struct async_result<twheel::partial_cancel_after, Signatures...> {
  // The declared return type is computed without instantiating the body, so that
  // completion_token_for<partial_cancel_after, S> holds on Boost 1.81 to 1.85 too (its
  // archetype initiation has no executor, hence no default completion token there).
  template <class Initiation, class RawToken, class... Args>
  static auto initiate(Initiation&& initiation, RawToken&& token, Args&&... args) ->
      typename twheel::detail::partial_initiate_result<
          !std::is_void_v<twheel::detail::partial_default_token_t<Initiation>>, Initiation,
          twheel::detail::type_list<Args...>, Signatures...>::type {
    using default_token = twheel::detail::partial_default_token_t<Initiation>;
    if constexpr (std::is_void_v<default_token>) {
      static_assert(twheel::detail::dependent_false_v<Initiation>,
                    "twheel::cancel_after(timeout) without a completion token needs an I/O "
                    "executor with a default completion token (every executor from Boost "
                    "1.86; before, e.g. use_awaitable_t<>::as_default_on(...)); pass a "
                    "completion token: twheel::cancel_after(timeout, token)");
    } else {
      // async_initiate takes the token by lvalue reference (Boost 1.81).
      twheel::cancel_after_t<default_token> full = token(default_token{});
      return async_initiate<twheel::cancel_after_t<default_token>, Signatures...>(
          std::forward<Initiation>(initiation), full, std::forward<Args>(args)...);
    }
  }
};

}  // namespace boost::asio

#endif  // TWHEEL_CANCEL_AFTER_HPP
