// beast_tcp_stream_test.cpp: conformance suite for twheel::beast::tcp_stream.
//
// Every template case runs against boost::beast::tcp_stream AND twheel::beast::tcp_stream
// over real loopback sockets, so each expectation is first Beast's own behaviour and then
// required of twheel. The stream type is only ever spelled `Stream` in those cases; the
// few twheel-only checks (wheel entries, allocations) come last and say so.
//
// Timing rules: timeouts are tens of ms; a timeout may complete late (scheduling, the
// wheel's 1 ms tick) but never early, so only lower bounds are asserted.
#define BOOST_TEST_MODULE beast_tcp_stream
#include <boost/test/unit_test.hpp>

#include <twheel/beast/tcp_stream.hpp>
#include <twheel/cancel_after.hpp>
#include <twheel/steady_timer.hpp>
#include <twheel/detail/completion_queue.hpp>
#include <twheel/wheel_service.hpp>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#if TWHEEL_TEST_TLS
#include <boost/asio/ssl.hpp>
#include <boost/beast/ssl.hpp>
#endif
#include <boost/mpl/list.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "support.hpp"

// Counts every allocation of the process, for the "no allocation per operation" check.
namespace {
std::atomic<std::size_t> g_allocations{0};
}
// GCC pairs the inlined malloc/free with new/delete expressions and warns; they match.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
__attribute__((noinline)) void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
__attribute__((noinline)) void operator delete(void* p) noexcept { std::free(p); }
__attribute__((noinline)) void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using boost::system::error_code;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;
using wall = std::chrono::steady_clock;

using stream_types = boost::mpl::list<beast::tcp_stream, twheel::beast::tcp_stream>;

const error_code timeout_ec = beast::error::timeout;
const error_code aborted = asio::error::operation_aborted;
const error_code not_done = asio::error::would_block;  // "the handler never ran"

using twheel_test::run_ctx;
using twheel_test::run_until;

// A connected pair over loopback: `client` is the stream under test, `peer` a plain socket.
template <class Stream>
struct pair {
  tcp::acceptor acceptor;
  Stream client;
  tcp::socket peer;

  explicit pair(asio::io_context& ctx) : pair(ctx, ctx.get_executor()) {}
  // The client on `client_ex` (a strand, say); the acceptor and the peer on `ctx`.
  pair(asio::io_context& ctx, const asio::any_io_executor& client_ex)
      : acceptor(ctx, tcp::endpoint(asio::ip::address_v4::loopback(), 0)),
        client(client_ex),
        peer(ctx) {
    client.socket().connect(acceptor.local_endpoint());
    acceptor.accept(peer);
  }
};

// Fills the peer's receive buffer and the client's send buffer: the next write blocks.
template <class Stream>
std::size_t fill_send_buffer(Stream& s) {
  s.socket().non_blocking(true);
  std::vector<char> chunk(1 << 16, 'x');
  std::size_t total = 0;
  for (;;) {
    error_code ec;
    const std::size_t n = s.socket().write_some(asio::buffer(chunk), ec);
    if (ec == asio::error::would_block) break;
    BOOST_REQUIRE(!ec);
    total += n;
  }
  s.socket().non_blocking(false);
  return total;
}

struct result {
  error_code ec = not_done;
  std::size_t n = 0;
  int calls = 0;
  wall::time_point at{};
  auto handler() {
    return [this](error_code e, std::size_t bytes) {
      ec = e;
      n = bytes;
      ++calls;
      at = wall::now();
    };
  }
};

}  // namespace

// ---------------------------------------------------------------------------------------
// Types and construction
// ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE_TEMPLATE(types_and_construction, Stream, stream_types) {
  static_assert(beast::is_async_read_stream<Stream>::value);
  static_assert(beast::is_async_write_stream<Stream>::value);
  static_assert(std::is_same_v<typename Stream::socket_type, tcp::socket>);
  static_assert(std::is_same_v<typename Stream::executor_type, asio::any_io_executor>);
  static_assert(std::is_same_v<typename Stream::protocol_type, tcp>);
  static_assert(std::is_same_v<typename Stream::endpoint_type, tcp::endpoint>);
  using strand_stream =
      typename Stream::template rebind_executor<asio::strand<asio::io_context::executor_type>>::other;
  static_assert(std::is_same_v<typename strand_stream::executor_type,
                               asio::strand<asio::io_context::executor_type>>);
  static_assert(std::is_nothrow_move_constructible_v<tcp::socket>);
  static_assert(!std::is_copy_constructible_v<Stream>);

  asio::io_context ctx;
  Stream from_context(ctx);
  Stream from_executor(ctx.get_executor());
  Stream from_strand(asio::make_strand(ctx));
  BOOST_TEST(!from_context.socket().is_open());
  BOOST_TEST((from_executor.get_executor() == asio::any_io_executor(ctx.get_executor())));

  pair<Stream> p(ctx);
  const auto remote = p.client.socket().remote_endpoint();
  Stream moved(std::move(p.client));
  BOOST_TEST(moved.socket().is_open());
  BOOST_TEST(moved.socket().remote_endpoint() == remote);
  BOOST_TEST(!p.client.socket().is_open());

  Stream from_socket(moved.release_socket());
  BOOST_TEST(from_socket.socket().is_open());
  BOOST_TEST(from_socket.socket().remote_endpoint() == remote);

  // Converting move from a stream on a strand, as Beast's.
  strand_stream on_strand(asio::make_strand(ctx));
  on_strand.socket().open(tcp::v4());
  Stream converted(std::move(on_strand));
  BOOST_TEST(converted.socket().is_open());

  // A stream works after its socket was released and moved back.
  tcp::socket raw = from_socket.release_socket();
  Stream again(std::move(raw));
  again.expires_after(5s);
  result w;
  const std::string msg = "ping";
  again.async_write_some(asio::buffer(msg), w.handler());
  std::array<char, 4> buf{};
  result r;
  asio::async_read(p.peer, asio::buffer(buf), [&](error_code ec, std::size_t n) {
    r.ec = ec;
    r.n = n;
  });
  BOOST_REQUIRE(!run_ctx(ctx).timed_out);
  BOOST_TEST(!w.ec);
  BOOST_TEST(w.n == 4u);
  BOOST_TEST(std::string(buf.data(), 4) == msg);
}

// ---------------------------------------------------------------------------------------
// Read and write timeouts
// ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE_TEMPLATE(read_timeout_closes_the_socket, Stream, stream_types) {
  asio::io_context ctx;
  pair<Stream> p(ctx);
  std::array<char, 16> buf{};
  result r;
  const auto t0 = wall::now();
  p.client.expires_after(30ms);
  p.client.async_read_some(asio::buffer(buf), r.handler());
  BOOST_REQUIRE(!run_ctx(ctx).timed_out);
  BOOST_TEST(r.calls == 1);
  BOOST_TEST(r.ec == timeout_ec);
  BOOST_TEST(r.n == 0u);
  BOOST_TEST((r.at - t0 >= 30ms));  // never early
  BOOST_TEST(!p.client.socket().is_open());
  // The peer sees the close.
  error_code ec;
  p.peer.read_some(asio::buffer(buf), ec);
  BOOST_TEST(ec == asio::error::eof);
}

// An executor of the older model (io_context::strand: context(), no query()) as the
// stream's executor, as Beast accepts: the timeout fires, and the handler runs in the
// strand.
BOOST_AUTO_TEST_CASE_TEMPLATE(an_older_model_strand_as_the_executor, Stream, stream_types) {
  using S = typename Stream::template rebind_executor<asio::io_context::strand>::other;
  asio::io_context ctx;
  asio::io_context::strand strand(ctx);
  tcp::acceptor acceptor(ctx, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  S client(strand);
  tcp::socket peer(ctx);
  client.socket().connect(acceptor.local_endpoint());
  acceptor.accept(peer);
  std::array<char, 16> buf{};
  result r;
  bool in_strand = false;
  const auto t0 = wall::now();
  client.expires_after(30ms);
  client.async_read_some(asio::buffer(buf), [&](error_code ec, std::size_t n) {
    in_strand = strand.running_in_this_thread();
    r.handler()(ec, n);
  });
  BOOST_REQUIRE(!run_ctx(ctx).timed_out);
  BOOST_TEST(r.calls == 1);
  BOOST_TEST(r.ec == timeout_ec);
  BOOST_TEST((r.at - t0 >= 30ms));  // never early
  BOOST_TEST(in_strand);
  BOOST_TEST(!client.socket().is_open());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(write_timeout_closes_the_socket, Stream, stream_types) {
  asio::io_context ctx;
  pair<Stream> p(ctx);
  fill_send_buffer(p.client);
  std::vector<char> chunk(1 << 16, 'y');
  result w;
  const auto t0 = wall::now();
  p.client.expires_after(30ms);
  p.client.async_write_some(asio::buffer(chunk), w.handler());
  BOOST_REQUIRE(!run_ctx(ctx).timed_out);
  BOOST_TEST(w.calls == 1);
  BOOST_TEST(w.ec == timeout_ec);
  BOOST_TEST((w.at - t0 >= 30ms));
  BOOST_TEST(!p.client.socket().is_open());
}

// One expiry for both directions: when it passes, the pending read AND the pending write
// fail with timeout.
BOOST_AUTO_TEST_CASE_TEMPLATE(pending_read_and_write_both_time_out, Stream, stream_types) {
  asio::io_context ctx;
  pair<Stream> p(ctx);
  fill_send_buffer(p.client);
  std::vector<char> chunk(1 << 16, 'y');
  std::array<char, 16> buf{};
  result r, w;
  const auto t0 = wall::now();
  p.client.expires_after(40ms);
  p.client.async_read_some(asio::buffer(buf), r.handler());
  p.client.async_write_some(asio::buffer(chunk), w.handler());
  BOOST_REQUIRE(!run_ctx(ctx).timed_out);
  BOOST_TEST(r.calls == 1);
  BOOST_TEST(w.calls == 1);
  BOOST_TEST(r.ec == timeout_ec);
  BOOST_TEST(w.ec == timeout_ec);
  BOOST_TEST((r.at - t0 >= 40ms));
  BOOST_TEST((w.at - t0 >= 40ms));
}

// Operations that complete in time leave the stream open and usable, with the expiry
// applying to each of the operations started after it.
BOOST_AUTO_TEST_CASE_TEMPLATE(operations_in_time_succeed, Stream, stream_types) {
  asio::io_context ctx;
  pair<Stream> p(ctx);
  p.client.expires_after(5s);
  int rounds = 0;
  std::array<char, 5> buf{};
  std::function<void()> round = [&] {
    asio::async_write(p.client, asio::buffer("hello", 5), [&](error_code ec, std::size_t) {
      BOOST_REQUIRE(!ec);
      asio::async_read(p.peer, asio::buffer(buf), [&](error_code ec2, std::size_t) {
        BOOST_REQUIRE(!ec2);
        asio::async_write(p.peer, asio::buffer(buf), [&](error_code ec3, std::size_t) {
          BOOST_REQUIRE(!ec3);
          asio::async_read(p.client, asio::buffer(buf), [&](error_code ec4, std::size_t) {
            BOOST_REQUIRE(!ec4);
            if (++rounds < 100) round();
          });
        });
      });
    });
  };
  round();
  BOOST_REQUIRE(!run_ctx(ctx).timed_out);
  BOOST_TEST(rounds == 100);
  BOOST_TEST(p.client.socket().is_open());
}

// An expiry that passed while nothing was pending times out the next operation at once.
BOOST_AUTO_TEST_CASE_TEMPLATE(expiry_passed_before_the_operation, Stream, stream_types) {
  asio::io_context ctx;
  pair<Stream> p(ctx);
  p.client.expires_after(10ms);
  std::this_thread::sleep_for(20ms);
  asio::write(p.peer, asio::buffer("data", 4));  // even with data ready
  std::array<char, 16> buf{};
  result r;
  p.client.async_read_some(asio::buffer(buf), r.handler());
  BOOST_REQUIRE(!run_ctx(ctx).timed_out);
  BOOST_TEST(r.calls == 1);
  // Beast decides this race by the order of ready completions; either way the expiry
  // is honoured and a timeout leaves the socket closed.
  if (r.ec == timeout_ec) {
    BOOST_TEST(!p.client.socket().is_open());
  } else {
    BOOST_TEST(!r.ec);
    BOOST_TEST(r.n == 4u);
  }
  // Nothing pending on the peer side: the next read with the passed expiry times out.
  if (p.client.socket().is_open()) {
    result r2;
    p.client.async_read_some(asio::buffer(buf), r2.handler());
    BOOST_REQUIRE(!run_ctx(ctx).timed_out);
    BOOST_TEST(r2.ec == timeout_ec);
  }
}

// ---------------------------------------------------------------------------------------
// Changing the expiry
// ---------------------------------------------------------------------------------------

// A pending direction keeps the expiry it started with: a new expiry set during a read
// applies to the next operations, not to that read.
BOOST_AUTO_TEST_CASE_TEMPLATE(expiry_changed_mid_operation, Stream, stream_types) {
  asio::io_context ctx;
  pair<Stream> p(ctx);
  std::array<char, 16> buf{};
  result r;
  const auto t0 = wall::now();
  p.client.expires_after(40ms);
  p.client.async_read_some(asio::buffer(buf), r.handler());
  p.client.expires_after(10s);  // too late for the pending read
  BOOST_REQUIRE(!run_ctx(ctx).timed_out);
  BOOST_TEST(r.ec == timeout_ec);
  BOOST_TEST((r.at - t0 >= 40ms));
  BOOST_TEST((r.at - t0 < 5s));
}

// ... and the other way round: a read started without a timeout is not timed out by an
// expiry set while it is pending. That expiry applies to the write direction: a write
// started after it passed times out at once, while a second read (still untimed) is only
// aborted by the close.
BOOST_AUTO_TEST_CASE_TEMPLATE(expiry_set_during_an_untimed_read, Stream, stream_types) {
  asio::io_context ctx;
  pair<Stream> p(ctx);
  std::array<char, 16> buf{};
  result r, r2, w;
  p.client.expires_never();
  p.client.async_read_some(asio::buffer(buf), r.handler());
  p.client.expires_after(20ms);  // applies to the write direction only
  asio::steady_timer later(ctx, 80ms);
  later.async_wait([&](error_code) { asio::write(p.peer, asio::buffer("late", 4)); });
  BOOST_REQUIRE(!run_ctx(ctx).timed_out);
  BOOST_TEST(!r.ec);
  BOOST_TEST(r.n == 4u);
  BOOST_TEST(p.client.socket().is_open());
  fill_send_buffer(p.client);
  std::vector<char> chunk(1 << 16, 'y');
  p.client.async_read_some(asio::buffer(buf), r2.handler());
  p.client.async_write_some(asio::buffer(chunk), w.handler());
  BOOST_REQUIRE(!run_ctx(ctx).timed_out);
  BOOST_TEST(w.ec == timeout_ec);
  BOOST_TEST(r2.ec == aborted);
  BOOST_TEST(!p.client.socket().is_open());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(expires_never_disables_the_timeout, Stream, stream_types) {
  asio::io_context ctx;
  pair<Stream> p(ctx);
  std::array<char, 16> buf{};
  result r;
  p.client.expires_after(10ms);
  p.client.expires_never();
  p.client.async_read_some(asio::buffer(buf), r.handler());
  asio::steady_timer later(ctx, 60ms);
  later.async_wait([&](error_code) { asio::write(p.peer, asio::buffer("late", 4)); });
  BOOST_REQUIRE(!run_ctx(ctx).timed_out);
  BOOST_TEST(!r.ec);
  BOOST_TEST(r.n == 4u);
  BOOST_TEST(p.client.socket().is_open());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(expires_at_is_absolute, Stream, stream_types) {
  asio::io_context ctx;
  pair<Stream> p(ctx);
  std::array<char, 16> buf{};
  result r;
  const auto deadline = wall::now() + 30ms;
  p.client.expires_at(deadline);
  p.client.async_read_some(asio::buffer(buf), r.handler());
  BOOST_REQUIRE(!run_ctx(ctx).timed_out);
  BOOST_TEST(r.ec == timeout_ec);
  BOOST_TEST((r.at >= deadline));
}

// ---------------------------------------------------------------------------------------
// cancel, close, destruction
// ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE_TEMPLATE(cancel_aborts_and_keeps_the_socket, Stream, stream_types) {
  asio::io_context ctx;
  pair<Stream> p(ctx);
  std::array<char, 16> buf{};
  result r;
  p.client.expires_after(30ms);
  p.client.async_read_some(asio::buffer(buf), r.handler());
  asio::post(ctx, [&] { p.client.cancel(); });
  BOOST_REQUIRE(!run_ctx(ctx).timed_out);
  BOOST_TEST(r.calls == 1);
  BOOST_TEST(r.ec == aborted);
  BOOST_TEST(p.client.socket().is_open());
  // The cancelled read's timeout must not fire later and close the socket.
  std::this_thread::sleep_for(50ms);
  ctx.restart();
  ctx.poll();
  BOOST_TEST(p.client.socket().is_open());
  // And the stream still works, with a new timeout.
  result r2;
  p.client.expires_after(5s);
  p.client.async_read_some(asio::buffer(buf), r2.handler());
  asio::write(p.peer, asio::buffer("abc", 3));
  BOOST_REQUIRE(!run_ctx(ctx).timed_out);
  BOOST_TEST(!r2.ec);
  BOOST_TEST(r2.n == 3u);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(close_aborts_pending_operations, Stream, stream_types) {
  asio::io_context ctx;
  pair<Stream> p(ctx);
  fill_send_buffer(p.client);
  std::vector<char> chunk(1 << 16, 'y');
  std::array<char, 16> buf{};
  result r, w;
  p.client.expires_after(10s);
  p.client.async_read_some(asio::buffer(buf), r.handler());
  p.client.async_write_some(asio::buffer(chunk), w.handler());
  asio::post(ctx, [&] { p.client.close(); });
  BOOST_REQUIRE(!run_ctx(ctx).timed_out);
  BOOST_TEST(r.ec == aborted);
  BOOST_TEST(w.ec == aborted);
  BOOST_TEST(!p.client.socket().is_open());
}

// Destroying the stream with operations pending: they complete with operation_aborted
// (the shared state outlives the stream), and their timeouts touch nothing.
BOOST_AUTO_TEST_CASE_TEMPLATE(destroyed_with_operations_pending, Stream, stream_types) {
  asio::io_context ctx;
  tcp::acceptor acceptor(ctx, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  auto s = std::make_unique<Stream>(ctx);
  s->socket().connect(acceptor.local_endpoint());
  tcp::socket peer = acceptor.accept();
  std::array<char, 16> buf{};
  result r;
  s->expires_after(20ms);
  s->async_read_some(asio::buffer(buf), r.handler());
  asio::post(ctx, [&] { s.reset(); });
  BOOST_REQUIRE(!run_ctx(ctx).timed_out);
  BOOST_TEST(r.calls == 1);
  BOOST_TEST(r.ec == aborted);
}

// Per-operation cancellation through the handler's slot reaches the socket operation.
BOOST_AUTO_TEST_CASE_TEMPLATE(per_operation_cancellation, Stream, stream_types) {
  asio::io_context ctx;
  pair<Stream> p(ctx);
  std::array<char, 16> buf{};
  result r;
  asio::cancellation_signal sig;
  p.client.expires_after(10s);
  p.client.async_read_some(asio::buffer(buf), asio::bind_cancellation_slot(sig.slot(), r.handler()));
  asio::post(ctx, [&] { sig.emit(asio::cancellation_type::terminal); });
  BOOST_REQUIRE(!run_ctx(ctx).timed_out);
  BOOST_TEST(r.ec == aborted);
  BOOST_TEST(p.client.socket().is_open());
}

// ---------------------------------------------------------------------------------------
// The race between a timeout and a completion
// ---------------------------------------------------------------------------------------

// The data arrives and the expiry passes while the context is blocked, so the read's
// completion and the timeout are ready together. Whichever wins, the handler runs once,
// and the outcome is consistent: a timeout closed the socket; a success left it open,
// and the losing timeout (now stale) must not close it later.
BOOST_AUTO_TEST_CASE_TEMPLATE(timeout_racing_completion, Stream, stream_types) {
  int timeouts = 0;
  int successes = 0;
  for (int i = 0; i < 40; ++i) {
    asio::io_context ctx;
    pair<Stream> p(ctx);
    std::array<char, 16> buf{};
    result r;
    p.client.expires_after(std::chrono::milliseconds(2 + i % 5));
    p.client.async_read_some(asio::buffer(buf), r.handler());
    asio::post(ctx, [&] {
      asio::write(p.peer, asio::buffer("race", 4));
      std::this_thread::sleep_for(10ms);  // both are ready when the context resumes
    });
    BOOST_REQUIRE(!run_ctx(ctx).timed_out);
    BOOST_REQUIRE(r.calls == 1);
    if (r.ec == timeout_ec) {
      ++timeouts;
      BOOST_TEST(!p.client.socket().is_open());
    } else {
      ++successes;
      BOOST_TEST(!r.ec);
      BOOST_TEST(r.n == 4u);
      std::this_thread::sleep_for(10ms);
      ctx.restart();
      ctx.poll();
      BOOST_TEST(p.client.socket().is_open());
      // And the next operation gets the outcome of its own expiry.
      result r2;
      p.client.expires_after(5s);
      p.client.async_read_some(asio::buffer(buf), r2.handler());
      asio::write(p.peer, asio::buffer("next", 4));
      BOOST_REQUIRE(!run_ctx(ctx).timed_out);
      BOOST_TEST(!r2.ec);
    }
  }
  BOOST_TEST_MESSAGE("timeouts " << timeouts << ", successes " << successes);
  BOOST_TEST(timeouts + successes == 40);
}

// The same race made deterministic: the read's handler is bound to a second context that
// runs only when the test says so, so the read's completion and its timeout queue up there
// in an order the test chooses.
//
// Lets everything queued on either context finish, so that nothing outlives the test.
static void settle_both(asio::io_context& io, asio::io_context& handlers) {
  for (int i = 0; i < 10; ++i) {
    io.restart();
    io.run_for(5ms);
    handlers.restart();
    handlers.poll();
  }
}

// Timeout first, then the data: the timeout closes the socket, but the read had already
// completed with the data. Beast reports beast::error::timeout (with the bytes count).
BOOST_AUTO_TEST_CASE_TEMPLATE(timeout_queued_before_a_completed_read_wins, Stream,
                              stream_types) {
  asio::io_context handlers;  // where the read's handler (and so its timeout) runs
  asio::io_context io;        // sockets, timers, the wheel (destroyed first: its
                              // operations hold work on `handlers`)
  pair<Stream> p(io);
  std::array<char, 16> buf{};
  result r;
  p.client.expires_after(10ms);
  p.client.async_read_some(asio::buffer(buf),
                           asio::bind_executor(handlers.get_executor(), r.handler()));
  io.restart();
  io.run_for(60ms);  // the expiry passes: the timeout is queued on `handlers`
  asio::write(p.peer, asio::buffer("data", 4));
  io.restart();
  io.run_for(60ms);  // the read completes: its continuation is queued behind the timeout
  BOOST_TEST(r.calls == 0);
  handlers.restart();
  handlers.run_for(1s);
  BOOST_TEST(r.calls == 1);
  BOOST_TEST(r.ec == timeout_ec);
  BOOST_TEST(!p.client.socket().is_open());
  settle_both(io, handlers);
}

// The data first, then the timeout: the read succeeds, and its timeout, already fired and
// queued behind it, is stale: it must not close the socket.
BOOST_AUTO_TEST_CASE_TEMPLATE(completed_read_queued_before_its_timeout_wins, Stream,
                              stream_types) {
  asio::io_context handlers;
  asio::io_context io;
  pair<Stream> p(io);
  std::array<char, 16> buf{};
  result r;
  p.client.expires_after(30ms);
  p.client.async_read_some(asio::buffer(buf),
                           asio::bind_executor(handlers.get_executor(), r.handler()));
  asio::write(p.peer, asio::buffer("data", 4));
  io.restart();
  io.run_for(10ms);  // the read completes: its continuation is queued on `handlers`
  io.restart();
  io.run_for(80ms);  // the expiry passes: the timeout is queued behind it
  BOOST_TEST(r.calls == 0);
  handlers.restart();
  handlers.run_for(200ms);
  BOOST_TEST(r.calls == 1);
  BOOST_TEST(!r.ec);
  BOOST_TEST(r.n == 4u);
  BOOST_TEST(p.client.socket().is_open());
  // And the stream goes on with a new expiry.
  result r2;
  p.client.expires_after(5s);
  p.client.async_read_some(asio::buffer(buf),
                           asio::bind_executor(handlers.get_executor(), r2.handler()));
  asio::write(p.peer, asio::buffer("more", 4));
  io.restart();
  io.run_for(20ms);
  handlers.restart();
  handlers.run_for(100ms);
  BOOST_TEST(!r2.ec);
  BOOST_TEST(r2.n == 4u);
  p.client.close();
  settle_both(io, handlers);
}

// ---------------------------------------------------------------------------------------
// Connect
// ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE_TEMPLATE(connect_forms, Stream, stream_types) {
  asio::io_context ctx;
  tcp::acceptor acceptor(ctx, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  const auto ep = acceptor.local_endpoint();
  const std::vector<tcp::endpoint> eps{ep};
  Stream a(ctx), b(ctx), c(ctx), d(ctx);
  std::optional<error_code> ea, eb, ec_, ed;
  std::optional<tcp::endpoint> got_b, got_c;
  a.expires_after(5s);
  a.async_connect(ep, [&](error_code e) { ea = e; });
  b.expires_after(5s);
  b.async_connect(eps, [&](error_code e, tcp::endpoint x) {
    eb = e;
    got_b = x;
  });
  c.expires_after(5s);
  c.async_connect(
      eps, [](const error_code&, const tcp::endpoint&) { return true; },
      [&](error_code e, tcp::endpoint x) {
        ec_ = e;
        got_c = x;
      });
  d.expires_never();
  d.async_connect(eps.begin(), eps.end(),
                  [&](error_code e, std::vector<tcp::endpoint>::const_iterator) { ed = e; });
  BOOST_REQUIRE(!run_ctx(ctx).timed_out);
  BOOST_TEST(ea.has_value());
  BOOST_TEST(!ea.value_or(not_done));
  BOOST_TEST(!eb.value_or(not_done));
  BOOST_TEST(!ec_.value_or(not_done));
  BOOST_TEST(!ed.value_or(not_done));
  BOOST_TEST((got_b == ep));
  BOOST_TEST((got_c == ep));
  // A condition that refuses every endpoint: not_found, no timeout.
  Stream e(ctx);
  std::optional<error_code> ee;
  e.expires_after(5s);
  e.async_connect(
      eps, [](const error_code&, const tcp::endpoint&) { return false; },
      [&](error_code x, tcp::endpoint) { ee = x; });
  BOOST_REQUIRE(!run_ctx(ctx).timed_out);
  BOOST_TEST((ee == error_code(asio::error::not_found)));
}

// A generic lambda as the completion handler of the range and iterator forms, as Beast's
// stream takes it: it is not asked whether it is a connect condition with a resolver
// entry, which its body (an endpoint's port(), an iterator's ->) does not compile with (a
// review found twheel's stream a hard error there).
BOOST_AUTO_TEST_CASE_TEMPLATE(connect_with_a_generic_lambda_handler, Stream, stream_types) {
  asio::io_context ctx;
  tcp::acceptor acceptor(ctx, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  const auto ep = acceptor.local_endpoint();
  const auto results = tcp::resolver::results_type::create(ep, "localhost", "0");
  Stream a(ctx), b(ctx);
  std::optional<error_code> ea, eb;
  unsigned short port_a = 0, port_b = 0;
  a.expires_after(5s);
  a.async_connect(results, [&](auto e, auto endpoint) {
    ea = e;
    port_a = endpoint.port();
  });
  b.expires_after(5s);
  b.async_connect(results.begin(), results.end(), [&](auto e, auto it) {
    eb = e;
    port_b = it->endpoint().port();
  });
  BOOST_REQUIRE(!run_ctx(ctx).timed_out);
  BOOST_TEST(!ea.value_or(not_done));
  BOOST_TEST(!eb.value_or(not_done));
  BOOST_TEST(port_a == ep.port());
  BOOST_TEST(port_b == ep.port());
}

// A connect condition may take what Asio hands it, a resolver entry, as well as an
// endpoint.
BOOST_AUTO_TEST_CASE_TEMPLATE(connect_condition_on_resolver_entries, Stream, stream_types) {
  asio::io_context ctx;
  tcp::acceptor acceptor(ctx, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  const auto ep = acceptor.local_endpoint();
  const auto results = tcp::resolver::results_type::create(ep, "localhost", "0");
  using entry = tcp::resolver::results_type::value_type;
  int asked = 0;
  Stream s(ctx);
  std::optional<error_code> got;
  s.expires_after(5s);
  s.async_connect(
      results,
      [&](const error_code&, const entry& e) {
        ++asked;
        return e.endpoint() == ep;
      },
      [&](error_code e, tcp::endpoint) { got = e; });
  BOOST_REQUIRE(!run_ctx(ctx).timed_out);
  BOOST_TEST(!got.value_or(not_done));
  BOOST_TEST(asked == 1);
}

// The blocking calls of Beast's stream: forwarded to the socket, no timeout. Beast's
// synchronous algorithms (http::write, http::read) take the stream.
BOOST_AUTO_TEST_CASE_TEMPLATE(blocking_calls, Stream, stream_types) {
  asio::io_context ctx;
  tcp::acceptor acceptor(ctx, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  const auto ep = acceptor.local_endpoint();
  const std::vector<tcp::endpoint> eps{ep};
  {
    Stream a(ctx), b(ctx), c(ctx), d(ctx);
    error_code ec;
    a.connect(ep);
    BOOST_TEST((b.connect(eps) == ep));
    BOOST_TEST((c.connect(eps.begin(), eps.end(), ec) == eps.begin()));
    BOOST_TEST(!ec);
    BOOST_TEST((d.connect(eps, [](const error_code&, const tcp::endpoint&) { return true; }, ec) ==
                ep));
    BOOST_TEST(!ec);
    for (Stream* s : {&a, &b, &c, &d}) {
      tcp::socket peer = acceptor.accept();
      BOOST_TEST((peer.remote_endpoint() == s->socket().local_endpoint()));
    }
  }
  Stream s(ctx);
  s.connect(ep);
  tcp::socket peer = acceptor.accept();
  http::request<http::empty_body> req{http::verb::get, "/", 11};
  http::write(s, req);
  std::string seen(64, '\0');
  seen.resize(peer.read_some(asio::buffer(seen)));
  BOOST_TEST(seen.rfind("GET / HTTP/1.1\r\n", 0) == 0u);
  const std::string reply = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
  asio::write(peer, asio::buffer(reply));
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  http::read(s, buffer, res);
  BOOST_TEST(res.body() == "ok");
  BOOST_TEST(s.write_some(asio::buffer("x", 1)) == 1u);
  char c = 0;
  BOOST_TEST(peer.read_some(asio::buffer(&c, 1)) == 1u);
  peer.close();
  error_code ec;
  s.read_some(asio::buffer(&c, 1), ec);
  BOOST_TEST((ec == asio::error::eof));
}

// twheel::cancel_after finds the wheel through the stream's initiations (Beast's own
// stream names no executor there, and cancel_after refuses it).
BOOST_AUTO_TEST_CASE(twheel_cancel_after_on_the_streams_operations) {
  asio::io_context ctx;
  pair<twheel::beast::tcp_stream> p(ctx);  // a silent peer
  p.client.expires_never();
  char c;
  result r;
  const auto start = wall::now();
  p.client.async_read_some(asio::buffer(&c, 1), twheel::cancel_after(30ms, r.handler()));
  BOOST_REQUIRE(!run_ctx(ctx).timed_out);
  BOOST_TEST(r.calls == 1);
  BOOST_TEST((r.ec == asio::error::operation_aborted));
  BOOST_TEST((r.at - start >= 30ms));
  BOOST_TEST(p.client.socket().is_open());  // a cancelled read, not the stream's timeout
}

// A listener with a full accept queue drops SYNs, so a connect to it hangs: the timeout
// fails it with beast::error::timeout.
BOOST_AUTO_TEST_CASE_TEMPLATE(connect_timeout, Stream, stream_types) {
  asio::io_context ctx;
  tcp::acceptor acceptor(ctx);
  acceptor.open(tcp::v4());
  acceptor.bind(tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  acceptor.listen(0);
  const auto ep = acceptor.local_endpoint();
  // Fill the queue (never accepted).
  std::vector<tcp::socket> fillers;
  for (int i = 0; i < 4; ++i) {
    fillers.emplace_back(ctx);
    fillers.back().async_connect(ep, [](error_code) {});
  }
  ctx.run_for(50ms);
  Stream s(ctx);
  std::optional<error_code> got;
  const auto t0 = wall::now();
  wall::time_point at{};
  s.expires_after(100ms);
  s.async_connect(ep, [&](error_code e) {
    got = e;
    at = wall::now();
  });
  BOOST_REQUIRE(run_until(ctx, [&] { return got.has_value(); }, 10s));
  BOOST_TEST((*got == timeout_ec));
  BOOST_TEST((at - t0 >= 100ms));
  BOOST_TEST(!s.socket().is_open());
}

// ---------------------------------------------------------------------------------------
// Beast's protocols on top: HTTP, websocket, coroutines, strands
// ---------------------------------------------------------------------------------------

// A slow client that sends half a header: http::async_read fails with timeout.
BOOST_AUTO_TEST_CASE_TEMPLATE(http_read_header_timeout, Stream, stream_types) {
  asio::io_context ctx;
  pair<Stream> p(ctx);
  asio::write(p.peer, asio::buffer(std::string("GET / HTTP/1.1\r\nHost: x\r\n")));
  beast::flat_buffer buffer;
  http::request<http::string_body> req;
  std::optional<error_code> got;
  p.client.expires_after(40ms);
  http::async_read(p.client, buffer, req, [&](error_code e, std::size_t) { got = e; });
  BOOST_REQUIRE(!run_ctx(ctx).timed_out);
  BOOST_TEST((got == timeout_ec));
}

#if defined(BOOST_ASIO_HAS_CO_AWAIT)
template <class Stream>
asio::awaitable<void> http_server_once(tcp::acceptor& acceptor, std::string* body_seen) {
  auto ex = co_await asio::this_coro::executor;
  Stream s(co_await acceptor.async_accept(asio::make_strand(ex), asio::use_awaitable));
  beast::flat_buffer buffer;
  for (;;) {
    http::request<http::string_body> req;
    s.expires_after(5s);
    auto [ec, n] = co_await http::async_read(s, buffer, req, asio::as_tuple(asio::use_awaitable));
    if (ec) co_return;
    *body_seen += req.body();
    http::response<http::string_body> res{http::status::ok, req.version()};
    res.body() = "echo:" + req.body();
    res.prepare_payload();
    res.keep_alive(req.keep_alive());
    s.expires_after(5s);
    co_await http::async_write(s, res, asio::use_awaitable);
    if (!res.keep_alive()) break;
  }
  s.socket().shutdown(tcp::socket::shutdown_send);
}

template <class Stream>
asio::awaitable<void> http_client(tcp::endpoint ep, std::vector<std::string>* replies) {
  Stream s(asio::make_strand(co_await asio::this_coro::executor));
  s.expires_after(5s);
  co_await s.async_connect(ep, asio::use_awaitable);
  beast::flat_buffer buffer;
  for (int i = 0; i < 3; ++i) {
    http::request<http::string_body> req{http::verb::post, "/", 11};
    req.set(http::field::host, "localhost");
    req.body() = std::to_string(i);
    req.keep_alive(i < 2);
    req.prepare_payload();
    s.expires_after(5s);
    co_await http::async_write(s, req, asio::use_awaitable);
    http::response<http::string_body> res;
    co_await http::async_read(s, buffer, res, asio::use_awaitable);
    replies->push_back(res.body());
  }
}

// Keep-alive HTTP/1.1 with coroutines, both ends on strands.
BOOST_AUTO_TEST_CASE_TEMPLATE(http_keep_alive_with_coroutines_on_strands, Stream, stream_types) {
  asio::io_context ctx;
  tcp::acceptor acceptor(ctx, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  std::string seen;
  std::vector<std::string> replies;
  asio::co_spawn(ctx, http_server_once<Stream>(acceptor, &seen), asio::detached);
  asio::co_spawn(ctx, http_client<Stream>(acceptor.local_endpoint(), &replies),
                 [](std::exception_ptr e) { BOOST_TEST(!e); });
  // Two threads: the strands are what keeps each stream's operations apart.
  std::thread second([&] { ctx.run(); });
  BOOST_REQUIRE(!run_ctx(ctx).timed_out);
  second.join();
  BOOST_TEST(seen == "012");
  BOOST_TEST((replies == std::vector<std::string>{"echo:0", "echo:1", "echo:2"}));
}
#endif

// A websocket handshake with a timeout: a peer that never sends its upgrade request
// makes the server's accept time out; a real client completes, talks and closes (the
// close runs the stream's teardown).
BOOST_AUTO_TEST_CASE_TEMPLATE(websocket_handshake_with_timeout, Stream, stream_types) {
  asio::io_context ctx;
  {
    pair<Stream> p(ctx);  // the peer stays silent
    websocket::stream<Stream> ws(std::move(p.client));
    beast::get_lowest_layer(ws).expires_after(40ms);
    std::optional<error_code> got;
    const auto t0 = wall::now();
    wall::time_point at{};
    ws.async_accept([&](error_code e) {
      got = e;
      at = wall::now();
    });
    BOOST_REQUIRE(!run_ctx(ctx).timed_out);
    BOOST_TEST((got == timeout_ec));
    BOOST_TEST((at - t0 >= 40ms));
  }
  {
    tcp::acceptor acceptor(ctx, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    websocket::stream<Stream> server(ctx);
    websocket::stream<Stream> client(ctx);
    std::optional<error_code> accepted, handshook, read_done, closed, server_end;
    beast::flat_buffer sbuf, cbuf;
    acceptor.async_accept(beast::get_lowest_layer(server).socket(), [&](error_code e) {
      BOOST_REQUIRE(!e);
      beast::get_lowest_layer(server).expires_after(5s);
      server.async_accept([&](error_code e2) {
        accepted = e2;
        beast::get_lowest_layer(server).expires_never();  // websocket keeps its own
        server.async_read(sbuf, [&](error_code e3, std::size_t) {
          read_done = e3;
          server.async_read(sbuf, [&](error_code e4, std::size_t) { server_end = e4; });
        });
      });
    });
    beast::get_lowest_layer(client).expires_after(5s);
    beast::get_lowest_layer(client).async_connect(acceptor.local_endpoint(), [&](error_code e) {
      BOOST_REQUIRE(!e);
      client.async_handshake("localhost", "/", [&](error_code e2) {
        handshook = e2;
        beast::get_lowest_layer(client).expires_never();
        client.async_write(asio::buffer(std::string("hi")), [&](error_code e3, std::size_t) {
          BOOST_REQUIRE(!e3);
          client.async_close(websocket::close_code::normal, [&](error_code e4) { closed = e4; });
        });
      });
    });
    BOOST_REQUIRE(!run_ctx(ctx).timed_out);
    BOOST_TEST(!accepted.value_or(not_done));
    BOOST_TEST(!handshook.value_or(not_done));
    BOOST_TEST(!read_done.value_or(not_done));
    BOOST_TEST(beast::buffers_to_string(sbuf.data()) == "hi");
    BOOST_TEST(!closed.value_or(not_done));
    BOOST_TEST((server_end == error_code(websocket::error::closed)));
    BOOST_TEST(!beast::get_lowest_layer(client).socket().is_open());
  }
}

#if TWHEEL_TEST_TLS
// ---------------------------------------------------------------------------------------
// TLS: boost::beast::ssl_stream over the stream (built where OpenSSL is found)
// ---------------------------------------------------------------------------------------

namespace {

// A self-signed test certificate (P-256, valid until 2126) and its key, for the loopback
// server only; nothing verifies it.
constexpr char test_certificate[] = R"(-----BEGIN CERTIFICATE-----
MIIBgjCCASmgAwIBAgIUeTKTG0gGCAR26tdtlkXobSfKx14wCgYIKoZIzj0EAwIw
FjEUMBIGA1UEAwwLdHdoZWVsIHRlc3QwIBcNMjYxMTI5MDUzODQ2WhgPMjEyNjEx
MDUwNTM4NDZaMBYxFDASBgNVBAMMC3R3aGVlbCB0ZXN0MFkwEwYHKoZIzj0CAQYI
KoZIzj0DAQcDQgAElC4ZdOASeZbKTu6wDFzzbo4+t3RArsMmjGKb99gEPFowg5Km
3F9ZM0RoH9XDwZcYeSoawqPG1+d2uO0tmkSkd6NTMFEwHQYDVR0OBBYEFI0WJmEJ
zhoZGY+D3TEeTCHBemXQMB8GA1UdIwQYMBaAFI0WJmEJzhoZGY+D3TEeTCHBemXQ
MA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDRwAwRAIgRnVDWWhSl3WUMLEQ
BrdDip2ejVa1mK39rC81CTwXxYACIBmxXi/oUrWKVtBflgleXXm7LM+01sbYQgGG
iuX+CTmb
-----END CERTIFICATE-----
)";
constexpr char test_key[] = R"(-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgCMQ6cGenJP9xYTpR
eEk+zmMU261fTGY/BVaCWioxx4mhRANCAASULhl04BJ5lspO7rAMXPNujj63dECu
wyaMYpv32AQ8WjCDkqbcX1kzRGgf1cPBlxh5KhrCo8bX53a47S2aRKR3
-----END PRIVATE KEY-----
)";

asio::ssl::context server_tls() {
  asio::ssl::context tls(asio::ssl::context::tls_server);
  tls.use_certificate(asio::buffer(test_certificate, sizeof test_certificate - 1),
                      asio::ssl::context::pem);
  tls.use_private_key(asio::buffer(test_key, sizeof test_key - 1), asio::ssl::context::pem);
  return tls;
}

asio::ssl::context client_tls() {
  asio::ssl::context tls(asio::ssl::context::tls_client);
  tls.set_verify_mode(asio::ssl::verify_none);
  return tls;
}

}  // namespace

// A handshake and a message each way over TLS, every step with its timeout.
BOOST_AUTO_TEST_CASE_TEMPLATE(tls_handshake_and_messages, Stream, stream_types) {
  asio::io_context ctx;
  auto server_ctx = server_tls();
  auto client_ctx = client_tls();
  tcp::acceptor acceptor(ctx, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  beast::ssl_stream<Stream> client(ctx, client_ctx);
  beast::get_lowest_layer(client).connect(acceptor.local_endpoint());
  beast::ssl_stream<Stream> server(acceptor.accept(), server_ctx);
  beast::get_lowest_layer(client).expires_after(5s);
  beast::get_lowest_layer(server).expires_after(5s);
  std::optional<error_code> client_hs, server_hs, wrote, read;
  std::string got(4, '\0');
  client.async_handshake(asio::ssl::stream_base::client, [&](error_code e) {
    client_hs = e;
    if (!e) {
      asio::async_write(client, asio::buffer("ping", 4),
                        [&](error_code w, std::size_t) { wrote = w; });
    }
  });
  server.async_handshake(asio::ssl::stream_base::server, [&](error_code e) {
    server_hs = e;
    if (!e) {
      asio::async_read(server, asio::buffer(got), [&](error_code r, std::size_t) { read = r; });
    }
  });
  BOOST_REQUIRE(!run_ctx(ctx).timed_out);
  BOOST_TEST(!client_hs.value_or(not_done));
  BOOST_TEST(!server_hs.value_or(not_done));
  BOOST_TEST(!wrote.value_or(not_done));
  BOOST_TEST(!read.value_or(not_done));
  BOOST_TEST(got == "ping");
}

// A client that connects and never speaks: the server's handshake times out with
// beast::error::timeout and its socket is closed, as for a plain read.
BOOST_AUTO_TEST_CASE_TEMPLATE(tls_handshake_timeout, Stream, stream_types) {
  asio::io_context ctx;
  auto server_ctx = server_tls();
  tcp::acceptor acceptor(ctx, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  tcp::socket silent(ctx);
  silent.connect(acceptor.local_endpoint());
  beast::ssl_stream<Stream> server(acceptor.accept(), server_ctx);
  beast::get_lowest_layer(server).expires_after(50ms);
  std::optional<error_code> hs;
  const auto start = wall::now();
  wall::time_point at{};
  server.async_handshake(asio::ssl::stream_base::server, [&](error_code e) {
    hs = e;
    at = wall::now();
  });
  BOOST_REQUIRE(!run_ctx(ctx).timed_out);
  BOOST_TEST((hs == error_code(beast::error::timeout)));
  BOOST_TEST((at - start >= 50ms));
  BOOST_TEST(!beast::get_lowest_layer(server).socket().is_open());
}
#endif  // TWHEEL_TEST_TLS

// ---------------------------------------------------------------------------------------
// twheel only: where the timeouts live and what they cost
// ---------------------------------------------------------------------------------------

// The timeouts are wheel entries, at most one per direction per stream; none remain
// once the operations completed.
BOOST_AUTO_TEST_CASE(twheel_one_wheel_entry_per_direction) {
  asio::io_context ctx;
  pair<twheel::beast::tcp_stream> p(ctx);
  fill_send_buffer(p.client);
  std::vector<char> chunk(1 << 16, 'y');
  std::array<char, 16> buf{};
  result r, w;
  p.client.expires_after(10s);
  p.client.async_read_some(asio::buffer(buf), r.handler());
  p.client.async_write_some(asio::buffer(chunk), w.handler());
  BOOST_TEST(twheel::stats(ctx).pending == 2u);
  p.client.close();
  BOOST_REQUIRE(!run_ctx(ctx).timed_out);
  BOOST_TEST(r.ec == aborted);
  BOOST_TEST(w.ec == aborted);
  BOOST_TEST(twheel::stats(ctx).pending == 0u);
}

// max_pending never refuses a stream's timeout (as it never refuses cancel_after's): a
// refused timeout used to complete at once and close the connection as timed out.
BOOST_AUTO_TEST_CASE(twheel_timeouts_are_never_refused_by_max_pending) {
  asio::io_context ctx;
  twheel::wheel_options options;
  options.max_pending = 1;
  twheel::configure(ctx, options);
  twheel::steady_timer holder(ctx, 1h);  // takes the one pending wait allowed
  result held;
  holder.async_wait([&](error_code ec) { held.ec = ec; });
  pair<twheel::beast::tcp_stream> p(ctx);
  std::array<char, 16> buf{};
  {  // a read that completes within its timeout
    result r;
    p.client.expires_after(5s);
    p.client.async_read_some(asio::buffer(buf), r.handler());
    BOOST_TEST(twheel::stats(ctx).pending == 2u);  // over the limit: counted, not refused
    asio::steady_timer later(ctx, 30ms);
    later.async_wait([&](error_code) { asio::write(p.peer, asio::buffer("late", 4)); });
    BOOST_REQUIRE(run_until(ctx, [&] { return r.calls != 0; }));
    BOOST_TEST(!r.ec);
    BOOST_TEST(r.n == 4u);
    BOOST_TEST(p.client.socket().is_open());
  }
  {  // a read that times out does so at its timeout, not before
    result r;
    const auto t0 = wall::now();
    p.client.expires_after(30ms);
    p.client.async_read_some(asio::buffer(buf), r.handler());
    BOOST_REQUIRE(run_until(ctx, [&] { return r.calls != 0; }));
    BOOST_TEST(r.ec == timeout_ec);
    BOOST_TEST((r.at - t0 >= 30ms));
  }
  BOOST_TEST(twheel::stats(ctx).rejected == 0u);
  holder.cancel();
  BOOST_REQUIRE(!run_ctx(ctx).timed_out);
  BOOST_TEST(held.ec == asio::error::operation_aborted);
}

// A stream on a strand costs no more than one on the context's executor: its timers run
// on their wheel's executor (the timeout handlers carry the stream's), so they keep no
// copy of the strand (a timer on another executor keeps it in a block of its own).
BOOST_AUTO_TEST_CASE(twheel_stream_on_a_strand_allocates_no_more) {
  asio::io_context ctx;
  const asio::any_io_executor plain = ctx.get_executor();
  const asio::any_io_executor strand = asio::make_strand(ctx);
  { twheel::beast::tcp_stream warm(plain); }  // the wheel and the reactor
  auto allocations_of = [](const asio::any_io_executor& ex) {
    const std::size_t before = g_allocations.load();
    twheel::beast::tcp_stream s(ex);
    return g_allocations.load() - before;
  };
  const std::size_t on_plain = allocations_of(plain);
  const std::size_t on_strand = allocations_of(strand);
  BOOST_TEST_MESSAGE("allocations of a stream: " << on_plain << " on the context's executor, "
                                                  << on_strand << " on a strand");
  BOOST_TEST(on_strand == on_plain);

  // Its timeouts still work, and its handlers run in its strand.
  pair<twheel::beast::tcp_stream> p(ctx, strand);
  std::array<char, 16> buf{};
  error_code ec;
  bool in_strand = false;
  p.client.expires_after(20ms);
  p.client.async_read_some(asio::buffer(buf), [&](error_code e, std::size_t) {
    ec = e;
    in_strand = strand.target<asio::strand<asio::io_context::executor_type>>()
                    ->running_in_this_thread();
  });
  BOOST_REQUIRE(!run_ctx(ctx).timed_out);
  BOOST_TEST(ec == timeout_ec);
  BOOST_TEST(in_strand);
}

// Steady state: timed reads and writes allocate nothing (the operations come from
// Asio's per-thread recycling allocator, the stream's state is allocated once, and the
// blocks of settled waits' records are recycled once a first one has filled).
BOOST_AUTO_TEST_CASE(twheel_no_allocation_per_operation) {
  asio::io_context ctx(1);
  pair<twheel::beast::tcp_stream> p(ctx);
  std::array<char, 64> buf{};
  const std::string msg(64, 'm');
  int rounds = 0;
  int target = 0;
  std::size_t at_warm = 0;
  std::function<void()> round;  // allocated once, before counting
  round = [&] {
    p.client.expires_after(5s);
    p.client.async_write_some(asio::buffer(msg), [&](error_code ec, std::size_t) {
      BOOST_REQUIRE(!ec);
      asio::read(p.peer, asio::buffer(buf));
      asio::write(p.peer, asio::buffer(buf));
      p.client.expires_after(5s);
      p.client.async_read_some(asio::buffer(buf), [&](error_code ec2, std::size_t) {
        BOOST_REQUIRE(!ec2);
        if (++rounds < target) round();
      });
    });
  };
  // Warm-up: caches, the wheel's slots, and a first block of records filled (each round
  // settles two waits) so that the blocks cycle.
  const int warm_up = static_cast<int>(twheel::detail::completion_queue::per_block);
  target = warm_up;
  round();
  BOOST_REQUIRE(!run_ctx(ctx).timed_out);
  at_warm = g_allocations.load();
  target = warm_up + 1000;
  round();
  ctx.restart();
  ctx.run_for(10s);
  const std::size_t during = g_allocations.load() - at_warm;
  BOOST_TEST(rounds == warm_up + 1000);
  BOOST_TEST_MESSAGE("allocations in 1,000 timed write+read rounds: " << during);
  BOOST_TEST(during == 0u);
}
