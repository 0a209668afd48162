// A C++20 coroutine client whose connect, write and read each have a timeout, given by
// twheel::cancel_after around Asio's as_tuple(use_awaitable): a timed-out operation
// returns operation_aborted in the tuple instead of throwing, so the coroutine reads
// like blocking code with error codes.
//
// Both orders compose:
//   twheel::cancel_after(t, asio::as_tuple(asio::use_awaitable))   (connect, read)
//   asio::as_tuple(twheel::cancel_after(t, asio::use_awaitable))   (write)
//
// Everything runs in this process on 127.0.0.1: an echo server that holds each line back
// for the milliseconds the line starts with, and a listener that never accepts, whose
// full backlog makes a connect hang. Exits 0 when every outcome is the expected one.
//
// Usage: coro_client [scale]. Every duration is multiplied by scale (default 1); the
// sanitizer builds of the tests run it at 4, so that a slowed process keeps the margins.
#include <twheel/cancel_after.hpp>
#include <twheel/steady_timer.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <utility>
#include <vector>

namespace {

namespace asio = boost::asio;
using asio::awaitable;
using asio::ip::tcp;
using boost::system::error_code;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

constexpr auto as_tuple_awaitable = asio::as_tuple(asio::use_awaitable);
// Multiplied by the scale in main().
auto read_timeout = std::chrono::milliseconds(100);
auto connect_timeout = std::chrono::milliseconds(100);
int time_scale = 1;
constexpr auto write_timeout = 1s;  // loopback: a write only waits if the peer stops reading

double ms_of(clock_type::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}
double ms_since(clock_type::time_point start) { return ms_of(clock_type::now() - start); }

// ---- the in-process echo server ------------------------------------------------------

// Echoes each line after the delay in milliseconds it starts with ("250 hello").
awaitable<void> echo_session(tcp::socket socket) {
  twheel::steady_timer hold(socket.get_executor());
  std::string buffer;
  for (;;) {  // until the client closes
    auto [ec, n] = co_await asio::async_read_until(socket, asio::dynamic_buffer(buffer), '\n',
                                                   as_tuple_awaitable);
    if (ec) co_return;
    const std::string line = buffer.substr(0, n);
    buffer.erase(0, n);
    hold.expires_after(std::chrono::milliseconds(std::atoi(line.c_str())));
    co_await hold.async_wait(as_tuple_awaitable);
    // After a late echo the client has given up and closed: the write fails.
    auto [write_ec, written] = co_await asio::async_write(socket, asio::buffer(line),
                                                          as_tuple_awaitable);
    if (write_ec) co_return;
  }
}

awaitable<void> echo_server(tcp::acceptor& acceptor) {
  for (;;) {  // until the acceptor is closed
    auto [ec, socket] = co_await acceptor.async_accept(as_tuple_awaitable);
    if (ec) co_return;
    asio::co_spawn(acceptor.get_executor(), echo_session(std::move(socket)), asio::detached);
  }
}

// ---- the client ----------------------------------------------------------------------

struct exchange {
  int hold_ms;       // how long the server holds the echo back
  bool expect_echo;  // within read_timeout
};

// Sends each line and waits at most read_timeout for its echo. A timed-out read was
// cancelled mid-way, which leaves the connection unusable: reconnect for the next.
awaitable<bool> echo_exchanges(tcp::endpoint server) {
  const exchange plan[] = {{0, true}, {30, true}, {250, false}, {0, true}, {150, false},
                           {60, true}};
  bool all_expected = true;
  auto executor = co_await asio::this_coro::executor;
  tcp::socket socket(executor);
  int number = 0;
  for (const exchange& x : plan) {
    ++number;
    if (!socket.is_open()) {
      auto [ec] = co_await socket.async_connect(
          server, twheel::cancel_after(connect_timeout, as_tuple_awaitable));
      if (ec) {
        std::printf("connect to the echo server: %s  <- UNEXPECTED\n", ec.message().c_str());
        co_return false;
      }
      std::printf("connected to the echo server\n");
    }

    const int hold_ms = x.hold_ms * time_scale;
    const std::string line = std::to_string(hold_ms) + " line " + std::to_string(number) + "\n";
    auto [write_ec, written] = co_await asio::async_write(
        socket, asio::buffer(line), asio::as_tuple(twheel::cancel_after(write_timeout,
                                                                        asio::use_awaitable)));
    if (write_ec) {
      std::printf("line %d: write: %s  <- UNEXPECTED\n", number, write_ec.message().c_str());
      co_return false;
    }

    const auto start = clock_type::now();
    // [snippet: coro-read-timeout]
    std::string echo;
    auto [read_ec, n] = co_await asio::async_read_until(
        socket, asio::dynamic_buffer(echo), '\n',
        twheel::cancel_after(read_timeout, as_tuple_awaitable));
    // [snippet-end]
    const double ms = ms_since(start);

    bool expected;
    if (!read_ec) {
      expected = x.expect_echo && echo == line;
      std::printf("line %d (held %d ms): echoed in %.1f ms%s\n", number, hold_ms, ms,
                  echo == line ? "" : ", but garbled");
    } else if (read_ec == asio::error::operation_aborted) {
      expected = !x.expect_echo && ms >= ms_of(read_timeout);
      std::printf("line %d (held %d ms): no echo, timed out after %.1f ms; reconnecting\n",
                  number, hold_ms, ms);
      socket.close();
    } else {
      expected = false;
      std::printf("line %d (held %d ms): %s after %.1f ms\n", number, hold_ms,
                  read_ec.message().c_str(), ms);
      socket.close();
    }
    if (!expected) std::printf("  <- UNEXPECTED\n");
    all_expected = all_expected && expected;
  }
  co_return all_expected;
}

// A listener that never accepts takes backlog + 1 connections on Linux; after that it
// drops SYNs and a connect would hang for seconds (SYN retries) without a timeout.
// Expected: the first connects succeed, then one times out after connect_timeout.
awaitable<bool> connect_to_full_backlog() {
  auto executor = co_await asio::this_coro::executor;
  tcp::acceptor never_accepts(executor);
  never_accepts.open(tcp::v4());
  never_accepts.bind({asio::ip::address_v4::loopback(), 0});
  never_accepts.listen(1);
  const tcp::endpoint target = never_accepts.local_endpoint();

  std::vector<tcp::socket> queued;  // kept open: they fill the backlog
  for (int attempt = 1; attempt <= 8; ++attempt) {
    tcp::socket socket(executor);
    const auto start = clock_type::now();
    auto [ec] = co_await socket.async_connect(
        target, twheel::cancel_after(connect_timeout, as_tuple_awaitable));
    const double ms = ms_since(start);
    if (!ec) {
      std::printf("backlog connect %d: connected in %.1f ms (queued, never accepted)\n",
                  attempt, ms);
      queued.push_back(std::move(socket));
      continue;
    }
    const bool expected = ec == asio::error::operation_aborted && attempt > 1 &&
                          ms >= ms_of(connect_timeout);
    std::printf("backlog connect %d: %s after %.1f ms%s\n", attempt,
                ec == asio::error::operation_aborted ? "timed out" : ec.message().c_str(), ms,
                expected ? "" : "  <- UNEXPECTED");
    co_return expected;
  }
  std::printf("8 connects to a listener with backlog 1 all succeeded  <- UNEXPECTED\n");
  co_return false;
}

awaitable<bool> run_client(tcp::endpoint echo_server) {
  const bool echoes_ok = co_await echo_exchanges(echo_server);
  const bool backlog_ok = co_await connect_to_full_backlog();
  co_return echoes_ok && backlog_ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2 || (argc == 2 && (std::atoi(argv[1]) < 1 || std::atoi(argv[1]) > 100))) {
    std::fprintf(stderr, "usage: coro_client [scale: 1 to 100, default 1]\n");
    return 2;
  }
  if (argc == 2) time_scale = std::atoi(argv[1]);
  read_timeout *= time_scale;
  connect_timeout *= time_scale;

  asio::io_context ctx;
  tcp::acceptor acceptor(ctx, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  asio::co_spawn(ctx, echo_server(acceptor), asio::detached);

  // Only if something hangs.
  twheel::steady_timer give_up(ctx, 10s * time_scale);
  bool gave_up = false;
  give_up.async_wait([&](const error_code& ec) {
    if (ec) return;
    gave_up = true;
    ctx.stop();
  });

  bool ok = false;
  asio::co_spawn(ctx, run_client(acceptor.local_endpoint()),
                 [&](std::exception_ptr e, bool result) {
                   if (e) {
                     try {
                       std::rethrow_exception(e);
                     } catch (const std::exception& what) {
                       std::printf("client failed: %s\n", what.what());
                     }
                   }
                   ok = !e && result;
                   give_up.cancel();
                   acceptor.close();  // the echo server's loop ends; its sessions follow
                 });

  const auto start = clock_type::now();
  ctx.run();
  if (gave_up) {
    std::printf("gave up after %d s\n", 10 * time_scale);
    return 1;
  }
  std::printf("%s, %.0f ms in all\n", ok ? "all as expected" : "SOME UNEXPECTED",
              ms_since(start));
  return ok ? 0 : 1;
}
