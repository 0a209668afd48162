// twheel/beast/tcp_stream.hpp: boost::beast::basic_stream's timeouts with the expiries in
// the context's timing wheel. With impl/tcp_stream.hpp (the operations), the only twheel
// headers that include Beast.
//
// The operations follow Beast's own (boost/beast/core/impl/basic_stream.hpp, Boost 1.81)
// step for step, so the observable semantics are Beast's: each direction has one timer
// (here a twheel timer: one wheel entry per direction per stream), a timeout handler that
// closes the socket and marks the direction timed out if its generation ("tick") is still
// current, and the operation's completion decides the race by cancelling that timer:
// cancel() == 1 means the operation won; 0 with the mark set means the timeout won (the
// operation reports beast::error::timeout even if it had succeeded, as Beast's does); 0
// without the mark means the timeout is already queued and will find a stale tick.
#ifndef TWHEEL_BEAST_TCP_STREAM_HPP
#define TWHEEL_BEAST_TCP_STREAM_HPP

#include <twheel/basic_waitable_timer.hpp>
#include <twheel/beast/detail/timeout_allocator.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/basic_stream_socket.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/wait_traits.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/websocket/teardown.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <type_traits>
#include <utility>

namespace boost::asio::ssl {
template <typename Stream>
class stream;
}  // namespace boost::asio::ssl

namespace twheel::beast {

namespace detail {

// Called with (error_code, Arg), F returns void: a completion handler, not a connect
// condition. False when F cannot be called so.
template <class F, class Arg, class = void>
struct returns_void : std::false_type {};
template <class F, class Arg>
struct returns_void<
    F, Arg, std::enable_if_t<std::is_invocable_v<F&, const boost::system::error_code&, Arg>>>
    : std::is_void<std::invoke_result_t<F&, const boost::system::error_code&, Arg>> {};

}  // namespace detail

/// A stream socket wrapper with timeouts, an executor and Beast's timeout semantics, as
/// boost::beast::basic_stream (without a rate policy: reads and writes are unlimited).
///
/// A call to expires_after() or expires_at() sets the timeout of the reads and writes
/// (and connects) started after it, until it is changed; expires_never() disables it.
/// When the expiry passes while an operation of a direction is pending, the socket is
/// closed and the pending read and write complete with boost::beast::error::timeout. A
/// direction whose operation is pending keeps the expiry it started with: expires_after()
/// only changes the other one (as Beast's does). If the expiry passed before an operation
/// starts, that operation times out at once; on a socket already closed (by an earlier
/// timeout of the other direction, say), that can be error::timeout where Beast's stream
/// reports the socket's own error (bad_descriptor): which of the two completes first
/// decides. One read and one write may be pending at a time (Beast asserts it; so do
/// twheel's debug builds).
///
/// The expiries live in the timing wheel of the socket executor's context: one wheel entry
/// per direction, re-armed per operation. Expiries are rounded up to the wheel's tick
/// (8 us by default): a timeout is never early, and at most a tick plus the wheel's slack
/// plus scheduling late.
///
/// @tparam Protocol A protocol meeting Asio's Protocol requirements (ip::tcp).
/// @tparam Executor The executor of the socket and of handlers without their own.
///
/// @par Thread Safety
/// @e Distinct @e objects: Safe.
/// @e Shared @e objects: Unsafe. The application must also ensure that all asynchronous
/// operations are performed within the same implicit or explicit strand. With a timeout
/// set, on a context run by several threads, the strand must be explicit (the stream's
/// executor, or its handlers' executor, a strand): the timeout's handler is not part of
/// the chain of operations, and runs beside a completing operation otherwise (a review
/// saw ThreadSanitizer report it, for Beast's stream as for this one).
template <class Protocol, class Executor = boost::asio::any_io_executor>
class basic_stream {
 public:
  /// The type of the underlying socket.
  using socket_type = boost::asio::basic_stream_socket<Protocol, Executor>;
  /// The type of the executor associated with the stream.
  using executor_type = Executor;
  /// Rebinds the stream type to another executor.
  template <class Executor1>
  struct rebind_executor {
    /// The stream type when rebound to the specified executor.
    using other = basic_stream<Protocol, Executor1>;
  };
  /// The protocol type.
  using protocol_type = Protocol;
  /// The endpoint type.
  using endpoint_type = typename Protocol::endpoint;

 private:
  using clock_type = std::chrono::steady_clock;
  using time_point = clock_type::time_point;
  // The timers run on their wheel's own executor, whatever the stream's: every timeout
  // handler carries its operation's executor (timeout_handler::get_executor), so the
  // timer's is never used to run one, and a timer on its wheel's executor keeps no copy
  // of it (88 bytes; a strand behind any_io_executor would cost each timer a block).
  using timer_type =
      twheel::basic_waitable_timer<clock_type, boost::asio::wait_traits<clock_type>,
                                   boost::asio::any_io_executor>;
  using error_code = boost::system::error_code;

  static time_point never() noexcept { return (time_point::max)(); }

  // The state and the operations, defined (and described) in
  // twheel/beast/impl/tcp_stream.hpp.
  static const boost::asio::any_io_executor& wheel_executor(const Executor& ex);
  struct op_state;
  struct impl_type;
  class pending_guard;
  template <class Executor2>
  struct timeout_handler;
  static void settle(op_state& state, error_code& ec);
  template <class Executor2>
  static void arm(const std::shared_ptr<impl_type>& impl, op_state& state,
                  const Executor2& ex);
  template <bool IsRead, class Buffers, class Handler>
  class transfer_op;
  template <class Handler>
  class connect_op;
  struct initiation;
  struct run_read_op;
  struct run_write_op;
  struct run_connect_op;
  struct run_connect_range_op;
  struct run_connect_iter_op;
  struct any_endpoint;

  template <class P, class E>
  friend class basic_stream;

  // boost::asio::ssl::stream (and boost::beast::ssl_stream over it) reaches the socket
  // through these, as Beast's stream lets it (deprecated there, kept for TLS): private,
  // so that nothing else bypasses the timeouts.
  template <typename>
  friend class boost::asio::ssl::stream;
  using lowest_layer_type = socket_type;
  lowest_layer_type& lowest_layer() noexcept { return impl_->socket; }
  const lowest_layer_type& lowest_layer() const noexcept { return impl_->socket; }

  std::shared_ptr<impl_type> impl_;

 public:
  /// Constructs the stream by forwarding all arguments to the underlying socket (an
  /// executor, an execution context, a socket, or what else the socket accepts). The
  /// socket must then be connected or accepted before data can be sent or received.
  template <class Arg0, class... Args,
            std::enable_if_t<!std::is_same_v<std::decay_t<Arg0>, basic_stream> &&
                                 std::is_constructible_v<socket_type, Arg0, Args...>,
                             int> = 0>
  explicit basic_stream(Arg0&& arg0, Args&&... args)
      : impl_(std::make_shared<impl_type>(std::forward<Arg0>(arg0),
                                          std::forward<Args>(args)...)) {}

  /// Constructs the stream from one with another executor type, taking its socket.
  template <class Executor_, std::enable_if_t<!std::is_same_v<Executor_, Executor>, int> = 0>
  explicit basic_stream(basic_stream<Protocol, Executor_>&& other)
      : impl_(std::make_shared<impl_type>(std::move(other.impl_->socket))) {}

  /// Move constructor. The moved-from object has no socket open, and, as in Beast, an
  /// expiry already passed (an operation started on it times out at once unless an
  /// expires_*() comes first). Operations pending on `other` stay with its old state, as
  /// in Beast: move a stream only while none is pending.
  basic_stream(basic_stream&& other)
      : impl_(std::make_shared<impl_type>(std::move(*other.impl_))) {}

  /// Not assignable (as Beast's).
  basic_stream& operator=(basic_stream&&) = delete;

  /// Destroys the stream: closes the socket, so that pending operations complete with
  /// boost::asio::error::operation_aborted (they keep the shared state alive).
  ~basic_stream() { impl_->close(); }

  /// The underlying socket.
  socket_type& socket() noexcept { return impl_->socket; }
  /// The underlying socket.
  const socket_type& socket() const noexcept { return impl_->socket; }

  /// Cancels the pending operations (as cancel()) and transfers the socket to the caller.
  socket_type release_socket() {
    cancel();
    return std::move(impl_->socket);
  }

  /// The executor of the stream (that of its socket).
  executor_type get_executor() noexcept { return impl_->socket.get_executor(); }

  /// Sets the timeout of the operations started from now on, as a duration from now: of
  /// both directions, except one whose operation is pending (it keeps its own).
  void expires_after(std::chrono::steady_clock::duration expiry_time) {
    impl_->set_expiry(after_now(expiry_time));
  }

  /// Sets the timeout of the operations started from now on, as an absolute time; as
  /// expires_after() otherwise.
  void expires_at(std::chrono::steady_clock::time_point expiry_time) {
    impl_->set_expiry(expiry_time);
  }

  /// Disables the timeout of the operations started from now on (a pending direction
  /// keeps its own).
  void expires_never() { impl_->set_expiry(never()); }

  /// Cancels the pending connect, read and write: they complete with
  /// boost::asio::error::operation_aborted unless they had already completed.
  void cancel() {
    error_code ec;
    impl_->socket.cancel(ec);
  }

  /// Closes the socket, cancelling the pending operations as cancel() does.
  void close() { impl_->close(); }

  /// Connects the socket to `ep`, with the timeout of the write direction.
  ///
  /// @par Completion Signature
  /// @code void(boost::system::error_code) @endcode
  /// boost::beast::error::timeout if the timeout passed first (the socket is then closed).
  ///
  /// @par Per-Operation Cancellation
  /// Forwarded to the socket's connect: terminal, partial and total.
  template <class ConnectHandler =
                boost::asio::default_completion_token_t<executor_type>>
  auto async_connect(const endpoint_type& ep,
                     ConnectHandler&& handler =
                         boost::asio::default_completion_token_t<executor_type>{}) {
    return boost::asio::async_initiate<ConnectHandler, void(error_code)>(run_connect_op{{this}},
                                                                         handler, ep);
  }

  /// Connects to the first endpoint of `endpoints` that accepts, as
  /// boost::asio::async_connect, within one timeout.
  ///
  /// @par Completion Signature
  /// @code void(boost::system::error_code, typename Protocol::endpoint) @endcode
  template <class EndpointSequence,
            class RangeConnectHandler = boost::asio::default_completion_token_t<executor_type>,
            std::enable_if_t<boost::asio::is_endpoint_sequence<EndpointSequence>::value, int> = 0>
  auto async_connect(const EndpointSequence& endpoints,
                     RangeConnectHandler&& handler =
                         boost::asio::default_completion_token_t<executor_type>{}) {
    return boost::asio::async_initiate<RangeConnectHandler,
                                       void(error_code, typename Protocol::endpoint)>(
        run_connect_range_op{{this}}, handler, endpoints, any_endpoint{});
  }

  // A connect condition, as Asio calls it for the endpoints of `Iterator`: bool(error_code,
  // *iterator) (an endpoint, or a resolver entry), or the legacy Iterator(error_code,
  // Iterator) where Asio still takes it. Said explicitly because from Asio 1.32 the
  // default completion token is `deferred`: a handler passed where the condition goes
  // would otherwise make async_connect(endpoints, handler) ambiguous. A completion
  // handler returns void, so it is never taken for a condition. It is asked first, with
  // the arguments it completes with (`Completed`): a generic lambda's body is then only
  // instantiated with those, where asking it about `*iterator` (a resolver entry) made a
  // hard error of a handler that Beast's stream takes (a review found it).
  template <class ConnectCondition, class Iterator, class Completed>
  static constexpr bool is_connect_condition = std::conjunction_v<
      std::negation<detail::returns_void<ConnectCondition, Completed>>,
      std::disjunction<
          std::is_invocable_r<bool, ConnectCondition&, const error_code&,
                              decltype(*std::declval<const Iterator&>())>,
          std::is_invocable_r<Iterator, ConnectCondition&, const error_code&, Iterator>>>;
  template <class EndpointSequence>
  using iterator_of = decltype(std::begin(std::declval<const EndpointSequence&>()));

  /// Connects to the first endpoint of `endpoints` that passes `connect_condition` and
  /// accepts, within one timeout.
  ///
  /// @par Completion Signature
  /// @code void(boost::system::error_code, typename Protocol::endpoint) @endcode
  template <class EndpointSequence, class ConnectCondition,
            class RangeConnectHandler = boost::asio::default_completion_token_t<executor_type>,
            std::enable_if_t<boost::asio::is_endpoint_sequence<EndpointSequence>::value &&
                                 is_connect_condition<ConnectCondition,
                                                      iterator_of<EndpointSequence>,
                                                      typename Protocol::endpoint>,
                             int> = 0>
  auto async_connect(const EndpointSequence& endpoints, ConnectCondition connect_condition,
                     RangeConnectHandler&& handler =
                         boost::asio::default_completion_token_t<executor_type>{}) {
    return boost::asio::async_initiate<RangeConnectHandler,
                                       void(error_code, typename Protocol::endpoint)>(
        run_connect_range_op{{this}}, handler, endpoints, connect_condition);
  }

  /// Connects to the first endpoint in [begin, end) that accepts, within one timeout.
  ///
  /// @par Completion Signature
  /// @code void(boost::system::error_code, Iterator) @endcode
  template <class Iterator,
            class IteratorConnectHandler = boost::asio::default_completion_token_t<executor_type>,
            std::enable_if_t<!boost::asio::is_endpoint_sequence<Iterator>::value, int> = 0>
  auto async_connect(Iterator begin, Iterator end,
                     IteratorConnectHandler&& handler =
                         boost::asio::default_completion_token_t<executor_type>{}) {
    return boost::asio::async_initiate<IteratorConnectHandler, void(error_code, Iterator)>(
        run_connect_iter_op{{this}}, handler, begin, end, any_endpoint{});
  }

  /// Connects to the first endpoint in [begin, end) that passes `connect_condition` and
  /// accepts, within one timeout.
  ///
  /// @par Completion Signature
  /// @code void(boost::system::error_code, Iterator) @endcode
  template <class Iterator, class ConnectCondition,
            class IteratorConnectHandler = boost::asio::default_completion_token_t<executor_type>,
            std::enable_if_t<!boost::asio::is_endpoint_sequence<Iterator>::value &&
                                 is_connect_condition<ConnectCondition, Iterator, Iterator>,
                             int> = 0>
  auto async_connect(Iterator begin, Iterator end, ConnectCondition connect_condition,
                     IteratorConnectHandler&& handler =
                         boost::asio::default_completion_token_t<executor_type>{}) {
    return boost::asio::async_initiate<IteratorConnectHandler, void(error_code, Iterator)>(
        run_connect_iter_op{{this}}, handler, begin, end, connect_condition);
  }

  /// Reads some data, with the read direction's timeout.
  ///
  /// @par Completion Signature
  /// @code void(boost::system::error_code, std::size_t) @endcode
  /// boost::beast::error::timeout if the timeout passed first (the socket is then closed).
  ///
  /// @par Per-Operation Cancellation
  /// Forwarded to the socket's read: terminal, partial and total.
  template <class MutableBufferSequence,
            class ReadHandler = boost::asio::default_completion_token_t<executor_type>>
  auto async_read_some(const MutableBufferSequence& buffers,
                       ReadHandler&& handler =
                           boost::asio::default_completion_token_t<executor_type>{}) {
    static_assert(boost::asio::is_mutable_buffer_sequence<MutableBufferSequence>::value,
                  "MutableBufferSequence type requirements not met");
    return boost::asio::async_initiate<ReadHandler, void(error_code, std::size_t)>(
        run_read_op{{this}}, handler, buffers);
  }

  /// Writes some data, with the write direction's timeout.
  ///
  /// @par Completion Signature
  /// @code void(boost::system::error_code, std::size_t) @endcode
  /// boost::beast::error::timeout if the timeout passed first (the socket is then closed).
  ///
  /// @par Per-Operation Cancellation
  /// Forwarded to the socket's write: terminal, partial and total.
  template <class ConstBufferSequence,
            class WriteHandler = boost::asio::default_completion_token_t<executor_type>>
  auto async_write_some(const ConstBufferSequence& buffers,
                        WriteHandler&& handler =
                            boost::asio::default_completion_token_t<executor_type>{}) {
    static_assert(boost::asio::is_const_buffer_sequence<ConstBufferSequence>::value,
                  "ConstBufferSequence type requirements not met");
    return boost::asio::async_initiate<WriteHandler, void(error_code, std::size_t)>(
        run_write_op{{this}}, handler, buffers);
  }

  // ---- blocking calls, as in Beast: forwarded to the socket, with no timeout ----------

  /// Connects the socket to `ep`, blocking, with no timeout (as Beast's).
  ///
  /// @throws boost::system::system_error on failure.
  void connect(const endpoint_type& ep) { socket().connect(ep); }
  /// Connects the socket to `ep`, blocking, with no timeout; the error goes to `ec`.
  void connect(const endpoint_type& ep, error_code& ec) { socket().connect(ep, ec); }

  /// Every other form of boost::asio::connect, blocking, with no timeout (as Beast's):
  /// an endpoint sequence or [begin, end), with or without a connect condition, with or
  /// without an error_code&. Returns what boost::asio::connect returns (the endpoint, or
  /// the iterator, connected to).
  ///
  /// @throws boost::system::system_error on failure, in the forms without an error_code&.
  template <class First, class... Rest,
            std::enable_if_t<!std::is_convertible_v<const First&, const endpoint_type&>, int> = 0>
  auto connect(const First& first, Rest&&... rest)
      -> decltype(boost::asio::connect(std::declval<socket_type&>(), first,
                                       std::forward<Rest>(rest)...)) {
    return boost::asio::connect(socket(), first, std::forward<Rest>(rest)...);
  }

  /// Reads some data, blocking, with no timeout (as Beast's).
  ///
  /// @throws boost::system::system_error on failure.
  template <class MutableBufferSequence>
  std::size_t read_some(const MutableBufferSequence& buffers) {
    static_assert(boost::asio::is_mutable_buffer_sequence<MutableBufferSequence>::value,
                  "MutableBufferSequence type requirements not met");
    return impl_->socket.read_some(buffers);
  }
  /// Reads some data, blocking, with no timeout; the error goes to `ec`.
  template <class MutableBufferSequence>
  std::size_t read_some(const MutableBufferSequence& buffers, error_code& ec) {
    static_assert(boost::asio::is_mutable_buffer_sequence<MutableBufferSequence>::value,
                  "MutableBufferSequence type requirements not met");
    return impl_->socket.read_some(buffers, ec);
  }

  /// Writes some data, blocking, with no timeout (as Beast's).
  ///
  /// @throws boost::system::system_error on failure.
  template <class ConstBufferSequence>
  std::size_t write_some(const ConstBufferSequence& buffers) {
    static_assert(boost::asio::is_const_buffer_sequence<ConstBufferSequence>::value,
                  "ConstBufferSequence type requirements not met");
    return impl_->socket.write_some(buffers);
  }
  /// Writes some data, blocking, with no timeout; the error goes to `ec`.
  template <class ConstBufferSequence>
  std::size_t write_some(const ConstBufferSequence& buffers, error_code& ec) {
    static_assert(boost::asio::is_const_buffer_sequence<ConstBufferSequence>::value,
                  "ConstBufferSequence type requirements not met");
    return impl_->socket.write_some(buffers, ec);
  }

 private:
  static time_point after_now(std::chrono::steady_clock::duration d) {
    const time_point now = clock_type::now();
    if (d > clock_type::duration::zero() && now > time_point::max() - d) return never();
    return now + d;
  }
};

/// A TCP/IP stream socket with Beast's timeouts on the wheel: the drop-in for
/// boost::beast::tcp_stream.
using tcp_stream = basic_stream<boost::asio::ip::tcp>;

/// Closes the stream's socket (found by boost::beast::close_socket through ADL).
template <class Protocol, class Executor>
void beast_close_socket(basic_stream<Protocol, Executor>& stream) {
  boost::system::error_code ec;
  stream.socket().close(ec);
}

/// Tears down the websocket connection's stream (found by websocket::stream through ADL).
template <class Protocol, class Executor>
void teardown(boost::beast::role_type role, basic_stream<Protocol, Executor>& stream,
              boost::system::error_code& ec) {
  using boost::beast::websocket::teardown;
  teardown(role, stream.socket(), ec);
}

/// Tears down the websocket connection's stream asynchronously (found through ADL).
template <class Protocol, class Executor, class TeardownHandler>
void async_teardown(boost::beast::role_type role, basic_stream<Protocol, Executor>& stream,
                    TeardownHandler&& handler) {
  using boost::beast::websocket::async_teardown;
  async_teardown(role, stream.socket(), std::forward<TeardownHandler>(handler));
}

}  // namespace twheel::beast

#include <twheel/beast/impl/tcp_stream.hpp>

#endif  // TWHEEL_BEAST_TCP_STREAM_HPP
