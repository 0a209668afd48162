// The code blocks of README.md and docs/*.md that no other example holds, compiled and run.
//
// Each block sits between "// [snippet: NAME]" and "// [snippet-end]"; the markdown names
// it with "<!-- snippet: NAME -->", and scripts/check_snippets.py (CTest docs_snippets)
// fails when the two texts differ. The program runs every snippet once, with short
// durations and a loopback peer where a socket is needed, and exits 1 if one of them does
// not do what its page says.
#include <twheel/cancel_after.hpp>
#include <twheel/idle_timer.hpp>
#include <twheel/periodic_timer.hpp>
#include <twheel/steady_timer.hpp>
#include <twheel/timing_wheel.hpp>
#include <twheel/wheel_service.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <deque>
#include <string>
#include <thread>
#include <vector>

// docs/migration.md: the whole switch (both lines are also valid here, at file scope).
// [snippet: migration-switch]
#include <twheel/steady_timer.hpp>  // was #include <boost/asio/steady_timer.hpp>

using session_timer = twheel::steady_timer;  // was boost::asio::steady_timer
// [snippet-end]

namespace {

namespace asio = boost::asio;
using asio::awaitable;
using asio::ip::tcp;
using boost::system::error_code;
using namespace std::chrono_literals;

int failures = 0;

void check(bool ok, const char* what) {
  std::printf("%-48s %s\n", what, ok ? "ok" : "FAILED");
  if (!ok) ++failures;
}

// A connected pair of sockets on 127.0.0.1.
struct loopback {
  explicit loopback(asio::io_context& ctx)
      : acceptor(ctx, tcp::endpoint(asio::ip::address_v4::loopback(), 0)),
        client(asio::make_strand(ctx)),
        server(ctx) {
    client.connect(acceptor.local_endpoint());
    acceptor.accept(server);
  }
  tcp::acceptor acceptor;
  tcp::socket client;  // on a strand, as docs/faq.md recommends with several threads
  tcp::socket server;
};

// ---- README.md, "Using it" ------------------------------------------------------------

void readme_drop_in(asio::io_context& io_context) {
  // The #include is legal inside a function: the header was included above, so its include
  // guard leaves nothing to paste here.
  // [snippet: readme-drop-in]
  #include <twheel/steady_timer.hpp>          // was <boost/asio/steady_timer.hpp>

  twheel::steady_timer timer(io_context);    // was boost::asio::steady_timer
  timer.expires_after(std::chrono::seconds(5));
  timer.async_wait([](boost::system::error_code ec) { if (!ec) { /* expired */ } });
  // [snippet-end]
  // Leaving the function destroys the timer, which aborts the wait (as Asio's does).
}

// The README's two forms, one read at a time: a socket takes one read at once.
void readme_cancel_after(tcp::socket& socket, asio::mutable_buffer buffer, std::size_t& total) {
  auto handler = [&total](boost::system::error_code ec, std::size_t n) {
    if (!ec) total += n;
  };
  // [snippet: readme-cancel-after]
  socket.async_read_some(buffer, twheel::cancel_after(std::chrono::seconds(30), handler));
  // [snippet-end]
}

awaitable<void> readme_cancel_after_coro(tcp::socket& socket, asio::mutable_buffer buffer,
                                         std::size_t& total) {
  // [snippet: readme-cancel-after-coro]
  auto [ec, n] = co_await socket.async_read_some(
      buffer, twheel::cancel_after(30s, boost::asio::as_tuple(boost::asio::use_awaitable)));
  // [snippet-end]
  if (!ec) total += n;
}

void readme_idle_timer(asio::io_context& io_context, tcp::socket& socket) {
  // [snippet: readme-idle-timer]
  twheel::idle_timer idle(io_context, std::chrono::seconds(30));
  idle.async_wait([&](boost::system::error_code ec) { if (!ec) socket.close(); });
  // on every read:
  idle.touch();
  // [snippet-end]
  // Leaving the function destroys `idle`: its wait completes with operation_aborted.
}

void readme_configure() {
  asio::io_context io_context;
  // [snippet: readme-configure]
  twheel::configure(io_context, twheel::wheel_options{.max_pending = 1'000'000,
                                                      .slack = std::chrono::microseconds(50)});
  auto s = twheel::stats(io_context);  // pending, timers, fired, cancelled, rejected, ...
  // [snippet-end]
  check(s.pending == 0 && s.timers == 0 && s.fired == 0,
        "readme-configure: a fresh wheel has zero stats");
}

// ---- docs/design.md -------------------------------------------------------------------

void design_core_wheel() {
  // [snippet: design-core-wheel]
  struct job : twheel::wheel_entry {};

  twheel::timing_wheel wheel;                  // tick 1 ms, 6 levels, time 0
  job j;
  wheel.insert(j, 2500us);                     // deadline rounded up: tick 3
  auto next = wheel.next_expiry();             // 3 ms: where the driver would sleep to
  twheel::wheel_entry_list due;
  auto early = wheel.advance(2999us, due);     // now rounded down: tick 2, nothing is due
  auto on_time = wheel.advance(3ms, due);      // tick 3: j is detached into `due`
  // [snippet-end]
  check(next == 3ms && early == 0 && on_time == 1 && &due.front() == &j,
        "design-core-wheel: due at tick 3, not before");
  check(wheel.empty(), "design-core-wheel: the wheel is empty after");
}

// ---- docs/timeouts.md -----------------------------------------------------------------

awaitable<void> timeouts_cancel_at(tcp::socket& socket, std::string request_line,
                                   std::string& reply_out) {
  // [snippet: timeouts-cancel-at]
  // One deadline for the whole exchange, however many operations it takes.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  auto token = twheel::cancel_at(deadline, asio::as_tuple(asio::use_awaitable));

  auto [write_ec, written] =
      co_await asio::async_write(socket, asio::buffer(request_line), token);
  std::string reply;
  auto [read_ec, n] =
      co_await asio::async_read_until(socket, asio::dynamic_buffer(reply), '\n', token);
  // [snippet-end]
  if (!write_ec && written == request_line.size() && !read_ec) reply_out = reply.substr(0, n);
}

void timeouts_partial(tcp::socket& socket, asio::mutable_buffer buffer, error_code& result) {
  auto handler = [&result](error_code ec, std::size_t) { result = ec; };
  // [snippet: timeouts-partial]
  socket.async_read_some(
      buffer, twheel::cancel_after(50ms, boost::asio::cancellation_type::partial, handler));
  // [snippet-end]
}

// ---- docs/idle_reaping.md -------------------------------------------------------------

// [snippet: idle-coroutine]
awaitable<void> close_when_idle(twheel::idle_timer& idle, tcp::socket& socket) {
  auto [ec] = co_await idle.async_wait(asio::as_tuple(asio::use_awaitable));
  if (!ec) socket.close();  // no touch() for a whole period
}
// [snippet-end]

// ---- docs/periodic.md -----------------------------------------------------------------

awaitable<void> periodic_loop(std::chrono::milliseconds period, int times, int& flushed) {
  // [snippet: periodic-loop]
  twheel::periodic_timer timer(co_await asio::this_coro::executor, period);
  for (int i = 0; i < times; ++i) {
    co_await timer.async_wait(asio::use_awaitable);  // start + (i + 1) * period, never earlier
    ++flushed;
  }
  // [snippet-end]
}

void periodic_modes(asio::io_context& io_context) {
  // [snippet: periodic-modes]
  // Fixed rate on the grid start + k * period; missed ticks complete back to back.
  twheel::periodic_timer heartbeat(io_context, 50ms);
  // One period after each async_wait(): a pause after every poll, however long it took.
  twheel::periodic_timer poll(io_context, 1s, twheel::tick_mode::fixed_delay);
  // On the grid, but a tick that is a whole period late drops the missed ones.
  twheel::periodic_timer report(io_context, 10s, twheel::tick_mode::fixed_rate,
                                twheel::missed_tick_policy::skip);
  // [snippet-end]
  check(heartbeat.mode() == twheel::tick_mode::fixed_rate &&
            heartbeat.policy() == twheel::missed_tick_policy::burst &&
            poll.mode() == twheel::tick_mode::fixed_delay &&
            report.policy() == twheel::missed_tick_policy::skip,
        "periodic-modes: defaults are fixed_rate + burst");
}

// ---- docs/faq.md ----------------------------------------------------------------------

void faq_tick() {
  asio::io_context io_context;
  // [snippet: faq-tick]
  boost::system::error_code ec;
  twheel::configure(io_context, twheel::wheel_options{.tick = std::chrono::milliseconds(10)}, ec);
  // ec: invalid_argument for a bad option, already_started once the wheel is in use
  // [snippet-end]
  check(!ec, "faq-tick: configure before the first timer");
  twheel::steady_timer timer(io_context);
  twheel::configure(io_context, twheel::wheel_options{}, ec);
  check(ec == asio::error::already_started, "faq-tick: configure after it is refused");
}

void faq_strand(asio::io_context& io_context, tcp::endpoint server, error_code& result) {
  auto handler = [&result](error_code ec, std::size_t) { result = ec; };
  static std::array<char, 16> data;
  // [snippet: faq-strand]
  tcp::socket socket(boost::asio::make_strand(io_context));  // handlers run on the strand
  socket.connect(server);
  // The read's handler and the timeout's cancellation both run on the socket's strand.
  socket.async_read_some(boost::asio::buffer(data), twheel::cancel_after(20ms, handler));
  // [snippet-end]
  io_context.run();
  io_context.restart();
}

void faq_context_per_thread() {
  std::atomic<int> fired{0};
  // [snippet: faq-context-per-thread]
  std::vector<boost::asio::io_context> contexts(2);  // one per thread, each with its own wheel
  std::deque<twheel::steady_timer> timers;
  for (auto& ctx : contexts) {
    auto& timer = timers.emplace_back(ctx, 10ms);    // filed in the wheel of `ctx`
    timer.async_wait([&fired](boost::system::error_code ec) { if (!ec) ++fired; });
  }
  std::vector<std::thread> threads;
  for (auto& ctx : contexts) threads.emplace_back([&ctx] { ctx.run(); });
  for (auto& t : threads) t.join();
  // [snippet-end]
  check(fired == 2, "faq-context-per-thread: both waits fired");
  check(twheel::stats(contexts[0]).fired == 1 && twheel::stats(contexts[1]).fired == 1,
        "faq-context-per-thread: one wait per wheel");
}

void faq_stats() {
  asio::io_context io_context;
  twheel::steady_timer timer(io_context, 1ms);
  timer.async_wait([](error_code) {});
  twheel::steady_timer never(io_context, 1h);
  never.async_wait([](error_code) {});
  never.cancel();
  io_context.run();
  // [snippet: faq-stats]
  const twheel::wheel_stats s = twheel::stats(io_context);
  std::printf("pending %zu, timers %zu, fired %llu, cancelled %llu, rejected %llu, "
              "cascaded %llu, wakeups %llu\n",
              s.pending, s.timers, static_cast<unsigned long long>(s.fired),
              static_cast<unsigned long long>(s.cancelled),
              static_cast<unsigned long long>(s.rejected),
              static_cast<unsigned long long>(s.cascaded),
              static_cast<unsigned long long>(s.wakeups));
  // [snippet-end]
  // `never` was cancelled, not destroyed: its entry stays filed, nothing armed for it.
  check(s.pending == 0 && s.timers == 1 && s.fired == 1 && s.cancelled == 1 &&
            s.rejected == 0 && s.wakeups >= 1,
        "faq-stats: one fired, one cancelled, none pending");
}

}  // namespace

int main() {
  {
    asio::io_context ctx;
    readme_drop_in(ctx);
    ctx.run();
    check(twheel::stats(ctx).cancelled == 1, "readme-drop-in: destroying the timer aborts");
  }
  {
    asio::io_context ctx;
    loopback pair(ctx);
    std::array<char, 64> data{};
    std::size_t total = 0;
    readme_cancel_after(pair.client, asio::buffer(data), total);
    asio::write(pair.server, asio::buffer(std::string("hello")));
    ctx.run();
    check(total == 5, "readme-cancel-after: the callback's read completed");
    ctx.restart();
    asio::co_spawn(ctx, readme_cancel_after_coro(pair.client, asio::buffer(data), total),
                   asio::detached);
    asio::write(pair.server, asio::buffer(std::string("world!")));
    ctx.run();
    check(total == 11, "readme-cancel-after: the coroutine's read completed");
    check(twheel::stats(ctx).pending == 0, "readme-cancel-after: timeouts left the wheel");
  }
  {
    asio::io_context ctx;
    loopback pair(ctx);
    readme_idle_timer(ctx, pair.server);
    ctx.run();
    check(pair.server.is_open(), "readme-idle-timer: aborted wait closes nothing");
  }
  readme_configure();
  design_core_wheel();
  {
    asio::io_context ctx;
    loopback pair(ctx);
    std::string reply;
    asio::co_spawn(ctx, timeouts_cancel_at(pair.client, "ping\n", reply), asio::detached);
    asio::co_spawn(
        ctx,
        [&]() -> awaitable<void> {
          std::string line;
          co_await asio::async_read_until(pair.server, asio::dynamic_buffer(line), '\n',
                                          asio::use_awaitable);
          co_await asio::async_write(pair.server, asio::buffer(std::string("pong\n")),
                                     asio::use_awaitable);
        },
        asio::detached);
    ctx.run();
    check(reply == "pong\n", "timeouts-cancel-at: exchange within the deadline");
  }
  {
    asio::io_context ctx;
    loopback pair(ctx);  // the peer never writes
    std::array<char, 16> data{};
    error_code result;
    const auto start = std::chrono::steady_clock::now();
    timeouts_partial(pair.client, asio::buffer(data), result);
    ctx.run();
    check(result == asio::error::operation_aborted &&
              std::chrono::steady_clock::now() - start >= 50ms,
          "timeouts-partial: silent peer times out, not early");
  }
  {
    asio::io_context ctx;
    loopback pair(ctx);
    twheel::idle_timer idle(ctx, 20ms);
    asio::co_spawn(ctx, close_when_idle(idle, pair.server), asio::detached);
    ctx.run();
    check(!pair.server.is_open(), "idle-coroutine: idle socket closed");
  }
  {
    asio::io_context ctx;
    int flushed = 0;
    asio::co_spawn(ctx, periodic_loop(5ms, 3, flushed), asio::detached);
    ctx.run();
    check(flushed == 3, "periodic-loop: three ticks");
  }
  {
    asio::io_context ctx;
    periodic_modes(ctx);
  }
  faq_tick();
  {
    asio::io_context ctx;
    tcp::acceptor acceptor(ctx, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    tcp::socket peer(ctx);
    acceptor.async_accept(peer, [](error_code) {});  // accepted, then silent
    error_code result;
    faq_strand(ctx, acceptor.local_endpoint(), result);
    check(result == asio::error::operation_aborted, "faq-strand: read timed out");
  }
  faq_context_per_thread();
  faq_stats();
  if (failures != 0) {
    std::printf("%d snippet check(s) failed\n", failures);
    return 1;
  }
  std::printf("all snippets ran as documented\n");
  return 0;
}
