// An echo server on 127.0.0.1 that closes every connection idle for --idle-timeout-ms:
// one twheel::idle_timer per connection, touched on every read, so recording activity
// costs a clock read and one store instead of a timer re-arm per read; a connection is
// closed one timeout after its last byte (at most one wheel tick later).
//
//   idle_echo_server --port 0 --idle-timeout-ms 300 [--verbose]
//
// Prints "listening on <port>" once it accepts, and a summary when SIGINT or SIGTERM
// stops it, with the lateness of the idle closes as the server saw them: the close minus
// (the last read's completion + T), from a clock read the example makes before touch()
// for this report (so a close is never reported early unless it was). It measures the
// wheel without the client's own delays, for the silent connections (never read) and the
// talkers (read at least once) apart, and how the talkers' closes kept pace with their
// deadlines. example/idle_echo_client.py drives it with thousands of connections.
//
// With --timer asio it does the same with a boost::asio::steady_timer per connection,
// re-armed on every read (expires_after() + async_wait(), as Beast's tcp_stream does before
// each operation): the same load's lateness with Asio's own timers, for comparison.
#include <twheel/idle_timer.hpp>
#include <twheel/steady_timer.hpp>

#include "percentiles.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using clock_type = std::chrono::steady_clock;

struct options {
  unsigned short port = 0;
  std::chrono::milliseconds idle_timeout{0};
  bool asio_timers = false;  // --timer asio
  bool verbose = false;
};

void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s --port P --idle-timeout-ms T [--timer twheel|asio] [--verbose]\n"
               "  P  port on 127.0.0.1, 0..65535 (0: any free port)\n"
               "  T  close a connection after T ms without a received byte, 1..86400000\n"
               "  --timer  twheel::idle_timer (the default) or a boost::asio::steady_timer\n"
               "           re-armed on every read\n",
               argv0);
}

// A whole non-negative decimal number no greater than `max`, or nothing.
std::optional<std::int64_t> parse_number(std::string_view text, std::int64_t max) {
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0 || value > max) {
    return std::nullopt;
  }
  return value;
}

std::optional<options> parse_options(int argc, char** argv) {
  options opts;
  bool have_port = false;
  bool have_timeout = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--verbose") {
      opts.verbose = true;
      continue;
    }
    if (arg != "--port" && arg != "--idle-timeout-ms" && arg != "--timer") return std::nullopt;
    if (i + 1 == argc) return std::nullopt;
    const std::string_view value = argv[++i];
    if (arg == "--timer") {
      if (value != "twheel" && value != "asio") return std::nullopt;
      opts.asio_timers = value == "asio";
    } else if (arg == "--port") {
      const auto port = parse_number(value, 65535);
      if (!port) return std::nullopt;
      opts.port = static_cast<unsigned short>(*port);
      have_port = true;
    } else {
      // A day at most: far below where milliseconds overflow the clock's nanoseconds.
      const auto ms = parse_number(value, 86'400'000);
      if (!ms || *ms == 0) return std::nullopt;
      opts.idle_timeout = std::chrono::milliseconds(*ms);
      have_timeout = true;
    }
  }
  if (!have_port || !have_timeout) return std::nullopt;
  return opts;
}

// Each connection is a descriptor: let the process open as many as it is allowed to.
void raise_open_file_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    std::perror("setrlimit(RLIMIT_NOFILE)");  // not fatal: we serve fewer connections
  }
}

enum class close_reason { idle, peer, shutdown };

struct counters {
  std::uint64_t accepted = 0;
  std::uint64_t closed_idle = 0;
  std::uint64_t closed_by_peer = 0;
  std::uint64_t closed_at_shutdown = 0;
  // per idle close: close - (last read + T), for connections never read and the others
  std::vector<double> silent_close_late_ms;
  std::vector<double> talker_close_late_ms;
  // the talkers' idle closes: when each came due (last read + T) and when it was closed
  std::vector<clock_type::time_point> talker_due;
  std::vector<clock_type::time_point> talker_closed;
};

// How the server's thread kept up with the talkers' closes: they stop talking together, so
// their deadlines come due within the few milliseconds their last lines took to echo, and
// the closes follow one at a time. When the closes span more than the deadlines, the thread
// was slower to close than it had been to read (or was stalled: the longest pause).
std::string close_pace(std::vector<clock_type::time_point> due,
                       std::vector<clock_type::time_point> closed) {
  if (closed.size() < 2) return "none";
  std::sort(due.begin(), due.end());
  std::sort(closed.begin(), closed.end());
  std::vector<double> gaps_us;
  for (std::size_t i = 1; i < closed.size(); ++i) {
    gaps_us.push_back(std::chrono::duration<double, std::micro>(closed[i] - closed[i - 1]).count());
  }
  std::sort(gaps_us.begin(), gaps_us.end());
  using ms = std::chrono::duration<double, std::milli>;
  char text[200];
  std::snprintf(text, sizeof text,
                "deadlines over %.2f ms, closes over %.2f ms, %.1f us apart at the median, "
                "longest pause %.2f ms",
                ms(due.back() - due.front()).count(), ms(closed.back() - closed.front()).count(),
                gaps_us[gaps_us.size() / 2], gaps_us.back() / 1000);
  return text;
}

class server;

class connection : public std::enable_shared_from_this<connection> {
 public:
  connection(tcp::socket socket, server& owner);
  void start();
  void start_with_asio_timer();  // --timer asio
  void close(close_reason why);

 private:
  void read();
  void on_read(const error_code& ec, std::size_t n);
  void on_read_with_asio_timer(const error_code& ec, std::size_t n);
  void echo(std::size_t n);
  void arm_asio_timer();

  tcp::socket socket_;
  twheel::idle_timer idle_;
  std::optional<asio::steady_timer> asio_idle_;  // --timer asio: used instead of idle_
  server& server_;
  tcp::endpoint peer_;
  clock_type::time_point last_read_{};  // for the lateness report: set by start(), reads
  bool closed_ = false;
  std::uint64_t reads_ = 0;  // reads started: more than one once a read has completed
  std::array<char, 4096> buffer_{};
};

class server {
 public:
  server(asio::io_context& ctx, const options& opts)
      : opts_(opts),
        acceptor_(ctx, tcp::endpoint(asio::ip::address_v4::loopback(), opts.port)),
        signals_(ctx, SIGINT, SIGTERM),
        accept_retry_(ctx) {}

  unsigned short port() const { return acceptor_.local_endpoint().port(); }
  const options& opts() const { return opts_; }
  counters& stats() { return stats_; }

  void start() {
    signals_.async_wait([this](const error_code& ec, int) {
      if (!ec) stop();
    });
    accept();
  }

  void add(connection* c) { open_.insert(c); }
  void remove(connection* c) { open_.erase(c); }

 private:
  void accept() {
    acceptor_.async_accept([this](const error_code& ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
      if (ec) {
        // Out of descriptors (EMFILE) and the like: retrying at once would spin, so
        // pause and let connections close.
        std::fprintf(stderr, "accept: %s; retrying in 100 ms\n", ec.message().c_str());
        accept_retry_.expires_after(std::chrono::milliseconds(100));
        accept_retry_.async_wait([this](const error_code& wait_ec) {
          if (!wait_ec) accept();
        });
        return;
      }
      ++stats_.accepted;
      const auto c = std::make_shared<connection>(std::move(socket), *this);
      if (opts_.asio_timers) {
        c->start_with_asio_timer();
      } else {
        c->start();
      }
      accept();
    });
  }

  // Everything pending completes with operation_aborted, so run() returns.
  void stop() {
    error_code ignored;
    acceptor_.close(ignored);
    accept_retry_.cancel();
    const std::vector<connection*> open(open_.begin(), open_.end());
    for (connection* c : open) c->close(close_reason::shutdown);
  }

  options opts_;
  tcp::acceptor acceptor_;
  asio::signal_set signals_;
  twheel::steady_timer accept_retry_;
  std::unordered_set<connection*> open_;  // each removes itself in close()
  counters stats_;
};

connection::connection(tcp::socket socket, server& owner)
    : socket_(std::move(socket)), idle_(socket_.get_executor(), owner.opts().idle_timeout),
      server_(owner) {
  if (owner.opts().asio_timers) asio_idle_.emplace(socket_.get_executor());
  error_code ignored;
  peer_ = socket_.remote_endpoint(ignored);
}

// [snippet: idle-echo-start]
void connection::start() {
  server_.add(this);
  last_read_ = clock_type::now();  // before the wait starts: its idle period starts later
  // The wait and the read each hold the connection; it goes when both have finished.
  idle_.async_wait([self = shared_from_this()](const error_code& ec) {
    if (!ec) self->close(close_reason::idle);
  });
  read();
}
// [snippet-end]

// --timer asio: the same with Asio's timer, re-armed on every read.
void connection::start_with_asio_timer() {
  server_.add(this);
  last_read_ = clock_type::now();
  arm_asio_timer();
  read();
}

// Each arm aborts the previous wait, whose handler then does nothing.
void connection::arm_asio_timer() {
  asio_idle_->expires_after(server_.opts().idle_timeout);
  asio_idle_->async_wait([self = shared_from_this()](const error_code& ec) {
    if (!ec) self->close(close_reason::idle);
  });
}

void connection::read() {
  ++reads_;
  socket_.async_read_some(asio::buffer(buffer_),
                          [self = shared_from_this()](const error_code& ec, std::size_t n) {
                            if (self->asio_idle_) {
                              self->on_read_with_asio_timer(ec, n);
                            } else {
                              self->on_read(ec, n);
                            }
                          });
}

// [snippet: idle-echo-on-read]
void connection::on_read(const error_code& ec, std::size_t n) {
  if (closed_) return;
  if (ec) {
    close(close_reason::peer);  // end of stream, reset, or any other failure of the peer's
    return;
  }
  last_read_ = clock_type::now();  // the report's stamp, no later than touch()'s
  idle_.touch();
  echo(n);  // writes the bytes back, then reads again
}
// [snippet-end]

void connection::on_read_with_asio_timer(const error_code& ec, std::size_t n) {
  if (closed_) return;
  if (ec) {
    close(close_reason::peer);
    return;
  }
  last_read_ = clock_type::now();
  arm_asio_timer();
  echo(n);
}

// Writes back the n bytes read, then reads again.
void connection::echo(std::size_t n) {
  asio::async_write(socket_, asio::buffer(buffer_, n),
                    [self = shared_from_this()](const error_code& write_ec, std::size_t) {
                      if (self->closed_) return;
                      if (write_ec) {
                        self->close(close_reason::peer);
                        return;
                      }
                      self->read();
                    });
}

void connection::close(close_reason why) {
  if (closed_) return;
  closed_ = true;
  server_.remove(this);
  counters& stats = server_.stats();
  switch (why) {
    case close_reason::idle: {
      ++stats.closed_idle;
      const clock_type::time_point closed_at = clock_type::now();
      const std::chrono::duration<double, std::milli> idle = closed_at - last_read_;
      (reads_ > 1 ? stats.talker_close_late_ms : stats.silent_close_late_ms)
          .push_back(
              (idle - std::chrono::duration<double, std::milli>(server_.opts().idle_timeout))
                  .count());
      if (reads_ > 1) {
        stats.talker_due.push_back(last_read_ + server_.opts().idle_timeout);
        stats.talker_closed.push_back(closed_at);
      }
      if (server_.opts().verbose) {
        std::printf("closed idle connection from %s:%u: no byte for %.1f ms\n",
                    peer_.address().to_string().c_str(), unsigned{peer_.port()}, idle.count());
      }
      break;
    }
    case close_reason::peer:
      ++stats.closed_by_peer;
      break;
    case close_reason::shutdown:
      ++stats.closed_at_shutdown;
      break;
  }
  idle_.cancel();
  if (asio_idle_) asio_idle_->cancel();
  error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
}

}  // namespace

int main(int argc, char** argv) {
  const auto opts = parse_options(argc, argv);
  if (!opts) {
    usage(argv[0]);
    return 2;
  }
  raise_open_file_limit();

  asio::io_context ctx(1);  // one thread: no locking needed anywhere
  std::optional<server> srv;
  try {
    srv.emplace(ctx, *opts);
  } catch (const boost::system::system_error& e) {
    std::fprintf(stderr, "cannot listen on 127.0.0.1:%u: %s\n", unsigned{opts->port},
                 e.code().message().c_str());
    return 1;
  }
  srv->start();
  std::printf("listening on %u\n", unsigned{srv->port()});
  std::fflush(stdout);

  ctx.run();

  const counters& s = srv->stats();
  std::printf(
      "accepted %llu connections: %llu closed idle, %llu closed by peer, %llu closed at "
      "shutdown\n",
      static_cast<unsigned long long>(s.accepted), static_cast<unsigned long long>(s.closed_idle),
      static_cast<unsigned long long>(s.closed_by_peer),
      static_cast<unsigned long long>(s.closed_at_shutdown));
  std::vector<double> all = s.silent_close_late_ms;
  all.insert(all.end(), s.talker_close_late_ms.begin(), s.talker_close_late_ms.end());
  std::printf("idle-close lateness after the last read + T, server side (%s timers): %s\n",
              opts->asio_timers ? "asio" : "twheel", percentiles(all).c_str());
  std::printf("  silent: %s\n", percentiles(s.silent_close_late_ms).c_str());
  std::printf("  talkers: %s\n", percentiles(s.talker_close_late_ms).c_str());
  std::printf("  talkers' closes: %s\n", close_pace(s.talker_due, s.talker_closed).c_str());
  return 0;
}
