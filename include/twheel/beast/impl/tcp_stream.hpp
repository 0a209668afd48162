// twheel/beast/impl/tcp_stream.hpp: basic_stream's state and operations (the timeout
// race of each read, write and connect; see the top of twheel/beast/tcp_stream.hpp).
#ifndef TWHEEL_BEAST_IMPL_TCP_STREAM_HPP
#define TWHEEL_BEAST_IMPL_TCP_STREAM_HPP

#include <twheel/detail/executor_traits.hpp>

#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/coroutine.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/query.hpp>
#include <boost/assert.hpp>
#include <boost/beast/core/async_base.hpp>
#include <boost/beast/core/buffer_traits.hpp>
#include <boost/beast/core/error.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

namespace twheel::beast {

// The executor of the wheel of `ex`'s context (made by its first timer, through `ex`).
template <class Protocol, class Executor>
const boost::asio::any_io_executor& basic_stream<Protocol, Executor>::wheel_executor(const Executor& ex) {
  wheel_service& service =
      wheel_service::of(twheel::detail::context_of(ex));
  service.attach(ex);
  return service.executor();
}

// One direction: its timer (the wheel entry), the generation of its operations, and
// whether an operation is pending or was timed out.
template <class Protocol, class Executor>
struct basic_stream<Protocol, Executor>::op_state {
  timer_type timer;
  std::uint64_t tick = 0;  // counts operations; a timeout of an older one is stale
  bool pending = false;
  bool timeout = false;  // set by the timeout handler, consumed by the operation

  explicit op_state(const Executor& ex) : timer(wheel_executor(ex), never()) {
    // A timeout is never refused by max_pending, as cancel_after's are not: refused, it
    // completed at once and closed a healthy connection as timed out.
    twheel::detail::timer_access::state(timer).never_refused = true;
  }
  op_state(op_state&&) = default;
};

// Shared with the operations (they hold it strongly) so that the stream can be moved
// or destroyed while they are pending; timeouts hold it weakly.
template <class Protocol, class Executor>
struct basic_stream<Protocol, Executor>::impl_type {
  socket_type socket;
  op_state read;
  op_state write;

  template <class... Args>
  explicit impl_type(Args&&... args)
      : socket(std::forward<Args>(args)...),
        read(socket.get_executor()),
        write(socket.get_executor()) {}
  impl_type(impl_type&&) = default;

  void close() noexcept {
    error_code ec;
    socket.close(ec);
  }

  // Beast's rule: a pending direction keeps its expiry; expires_* changes the others.
  void set_expiry(time_point t) {
    if (!read.pending) read.timer.expires_at(t);
    if (!write.pending) write.timer.expires_at(t);
  }
};

// Clears a pending flag when the operation completes or is destroyed without completing.
template <class Protocol, class Executor>
class basic_stream<Protocol, Executor>::pending_guard {
 public:
  pending_guard() = default;
  explicit pending_guard(bool& b) { assign(b); }
  pending_guard(pending_guard&& other) noexcept : b_(std::exchange(other.b_, nullptr)) {}
  pending_guard& operator=(pending_guard&&) = delete;
  ~pending_guard() { reset(); }
  // One operation per direction at a time, as Beast asserts too: a second would lose the
  // first's timeout.
  void assign(bool& b) {
    BOOST_ASSERT(!b);
    b_ = &b;
    *b_ = true;
  }
  void reset() noexcept {
    if (b_) *std::exchange(b_, nullptr) = false;
  }

 private:
  bool* b_ = nullptr;
};

// Runs on the operation's executor (a strand stays a strand). Small on purpose: it is
// the per-operation wheel wait's whole state.
template <class Protocol, class Executor>
template <class Executor2>
struct basic_stream<Protocol, Executor>::timeout_handler {
  using executor_type = Executor2;

  op_state* state;
  std::weak_ptr<impl_type> wp;
  std::uint64_t tick;
  Executor2 ex;

  executor_type get_executor() const noexcept { return ex; }

  // Exact-size blocks (see detail::timeout_block_cache).
  using allocator_type = detail::timeout_allocator<void>;
  allocator_type get_allocator() const noexcept { return {}; }

  void operator()(error_code ec) {
    if (ec) return;  // aborted: the operation won (and no other error is a timeout)
    auto sp = wp.lock();
    if (!sp) return;                  // the stream and its operations are gone
    if (tick < state->tick) return;   // fired after its operation completed: stale
    sp->close();                      // fails the pending read and write
    state->timeout = true;
  }
};

// The race, decided at the operation's completion (see the top of
// twheel/beast/tcp_stream.hpp).
template <class Protocol, class Executor>
void basic_stream<Protocol, Executor>::settle(op_state& state, error_code& ec) {
  if (state.timer.expiry() == never()) return;
  ++state.tick;
  if (state.timer.cancel() == 0 && state.timeout) {
    ec = boost::beast::error::timeout;
    state.timeout = false;
  }
}

// Files the operation's timeout in the wheel, unless the direction has none.
template <class Protocol, class Executor>
template <class Executor2>
void basic_stream<Protocol, Executor>::arm(const std::shared_ptr<impl_type>& impl, op_state& state,
                                       const Executor2& ex) {
  if (state.timer.expiry() != never()) {
    state.timer.async_wait(timeout_handler<Executor2>{&state, impl, state.tick, ex});
  }
}

template <class Protocol, class Executor>
template <bool IsRead, class Buffers, class Handler>
class basic_stream<Protocol, Executor>::transfer_op
    : public boost::beast::async_base<Handler, Executor>,
                    public boost::asio::coroutine {
 public:
  template <class Handler_>
  transfer_op(Handler_&& h, basic_stream& s, const Buffers& b)
      : boost::beast::async_base<Handler, Executor>(std::forward<Handler_>(h),
                                                    s.get_executor()),
        impl_(s.impl_),
        b_(b) {
    this->set_allowed_cancellation(boost::asio::cancellation_type::all);
    if (boost::beast::buffer_bytes(b_) == 0 && state().pending) {
      // Beast's corner case (boostorg/beast#2065): a zero-length operation while one is
      // pending (an SSL stream's zero-length write) completes at once, untimed.
      this->complete(false, error_code(), 0);
    } else {
      pg_.assign(state().pending);
      (*this)({});
    }
  }

  void operator()(error_code ec, std::size_t bytes_transferred = 0) {
    BOOST_ASIO_CORO_REENTER(*this) {
      if (boost::beast::buffer_bytes(b_) == 0) {
        // No wait for an empty transfer: the expiry is checked by hand afterwards, as
        // Beast does, so the result does not depend on the platform.
        BOOST_ASIO_CORO_YIELD perform(boost::asio::mutable_buffer());
        if (state().timer.expiry() <= clock_type::now()) {
          impl_->close();
          ec = boost::beast::error::timeout;
        }
        goto upcall;
      }
      arm(impl_, state(), this->get_executor());
      BOOST_ASIO_CORO_YIELD perform_timed(b_);
      settle(state(), ec);
    upcall:
      pg_.reset();
      this->complete_now(ec, bytes_transferred);
    }
  }

 private:
  op_state& state() { return IsRead ? impl_->read : impl_->write; }

  template <class B>
  void perform(const B& b) {
    if constexpr (IsRead) {
      impl_->socket.async_read_some(b, std::move(*this));
    } else {
      impl_->socket.async_write_some(b, std::move(*this));
    }
  }

  // perform() after arm(). If the start throws, the timeout is settled as at a
  // completion, its result unused: taken back, or found stale if already queued.
  // `*this` may be moved from by then.
  template <class B>
  void perform_timed(const B& b) {
    op_state& armed = state();
    try {
      perform(b);
    } catch (...) {
      error_code unused;
      settle(armed, unused);
      throw;
    }
  }

  std::shared_ptr<impl_type> impl_;
  pending_guard pg_;
  Buffers b_;
};

// A connect counts as a read and a write (both pending); the write timer times it.
template <class Protocol, class Executor>
template <class Handler>
class basic_stream<Protocol, Executor>::connect_op
    : public boost::beast::async_base<Handler, Executor> {
 public:
  template <class Handler_, class Start>
  connect_op(Handler_&& h, basic_stream& s, Start&& start)
      : boost::beast::async_base<Handler, Executor>(std::forward<Handler_>(h),
                                                    s.get_executor()),
        impl_(s.impl_),
        pg0_(impl_->read.pending),
        pg1_(impl_->write.pending) {
    this->set_allowed_cancellation(boost::asio::cancellation_type::all);
    arm(impl_, impl_->write, this->get_executor());
    op_state& armed = impl_->write;  // lives in the stream: *this is moved from below
    try {
      std::forward<Start>(start)(impl_->socket, std::move(*this));
    } catch (...) {
      error_code unused;  // as perform_timed()
      settle(armed, unused);
      throw;
    }
  }

  template <class... Args>
  void operator()(error_code ec, Args&&... args) {
    settle(impl_->write, ec);
    pg0_.reset();
    pg1_.reset();
    this->complete_now(ec, std::forward<Args>(args)...);
  }

 private:
  std::shared_ptr<impl_type> impl_;
  pending_guard pg0_;
  pending_guard pg1_;
};

// The initiations name the stream's executor, as an I/O object's do: adapters that
// look for it (twheel::cancel_after, which finds its wheel there) see the socket's.
template <class Protocol, class Executor>
struct basic_stream<Protocol, Executor>::initiation {
  using executor_type = Executor;
  basic_stream* self;
  executor_type get_executor() const noexcept { return self->impl_->socket.get_executor(); }
};

template <class Protocol, class Executor>
struct basic_stream<Protocol, Executor>::run_read_op : initiation {
  template <class ReadHandler, class Buffers>
  void operator()(ReadHandler&& h, const Buffers& b) const {
    transfer_op<true, Buffers, std::decay_t<ReadHandler>>(std::forward<ReadHandler>(h),
                                                           *this->self, b);
  }
};

template <class Protocol, class Executor>
struct basic_stream<Protocol, Executor>::run_write_op : initiation {
  template <class WriteHandler, class Buffers>
  void operator()(WriteHandler&& h, const Buffers& b) const {
    transfer_op<false, Buffers, std::decay_t<WriteHandler>>(std::forward<WriteHandler>(h),
                                                            *this->self, b);
  }
};

template <class Protocol, class Executor>
struct basic_stream<Protocol, Executor>::run_connect_op : initiation {
  template <class ConnectHandler>
  void operator()(ConnectHandler&& h, const endpoint_type& ep) const {
    connect_op<std::decay_t<ConnectHandler>>(
        std::forward<ConnectHandler>(h), *this->self,
        [&ep](socket_type& socket, auto&& op) { socket.async_connect(ep, std::move(op)); });
  }
};

template <class Protocol, class Executor>
struct basic_stream<Protocol, Executor>::run_connect_range_op : initiation {
  template <class RangeConnectHandler, class EndpointSequence, class Condition>
  void operator()(RangeConnectHandler&& h, const EndpointSequence& eps,
                  const Condition& cond) const {
    connect_op<std::decay_t<RangeConnectHandler>>(
        std::forward<RangeConnectHandler>(h), *this->self, [&](socket_type& socket, auto&& op) {
          boost::asio::async_connect(socket, eps, cond, std::move(op));
        });
  }
};

template <class Protocol, class Executor>
struct basic_stream<Protocol, Executor>::run_connect_iter_op : initiation {
  template <class IteratorConnectHandler, class Iterator, class Condition>
  void operator()(IteratorConnectHandler&& h, Iterator begin, Iterator end,
                  const Condition& cond) const {
    connect_op<std::decay_t<IteratorConnectHandler>>(
        std::forward<IteratorConnectHandler>(h), *this->self,
        [&](socket_type& socket, auto&& op) {
          boost::asio::async_connect(socket, begin, end, cond, std::move(op));
        });
  }
};

template <class Protocol, class Executor>
struct basic_stream<Protocol, Executor>::any_endpoint {
  template <class Error, class Endpoint>
  bool operator()(const Error&, const Endpoint&) const noexcept {
    return true;
  }
};

}  // namespace twheel::beast

#endif  // TWHEEL_BEAST_IMPL_TCP_STREAM_HPP
