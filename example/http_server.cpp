// An HTTP/1.1 keep-alive server on Beast whose every connection is a
// twheel::beast::tcp_stream: the read and write timeouts of all connections live in the
// timing wheel instead of Asio's timer heap. Three timeouts per connection:
//
//   idle     waiting for the first byte of a request (a new connection, or keep-alive
//            between requests): --idle-timeout-ms;
//   header   from that first byte until the whole request is read (slowloris):
//            --header-timeout-ms;
//   write    sending a response to a client that does not read: --write-timeout-ms.
//
//   http_server --port 0 [--threads N] [--idle-timeout-ms T] [--header-timeout-ms H]
//               [--write-timeout-ms W] [--address A]
//
// Every target answers "ok\n", except /bytes/<n>, which answers n bytes. Prints
// "listening on <port>" once it accepts and, when SIGINT or SIGTERM stops it, the lateness
// of its idle closes as it saw them (the close minus (a clock read made just before the
// idle wait's expires_after() + T): never early unless the close was) and a summary.
// Built with TWHEEL_HTTP_SERVER_BEAST_STREAM defined (the target http_server_beast) it is
// the same server on boost::beast::tcp_stream, for comparison.
#ifdef TWHEEL_HTTP_SERVER_BEAST_STREAM
#include <boost/beast/core/tcp_stream.hpp>
#else
#include <twheel/beast/tcp_stream.hpp>
#endif

#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "percentiles.hpp"

#include <sys/resource.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using boost::system::error_code;

#ifdef TWHEEL_HTTP_SERVER_BEAST_STREAM
using stream_type = beast::tcp_stream;
constexpr const char* stream_name = "boost::beast::tcp_stream";
#else
using stream_type = twheel::beast::tcp_stream;
constexpr const char* stream_name = "twheel::beast::tcp_stream";
#endif

struct options {
  std::string address = "127.0.0.1";
  unsigned short port = 0;
  int threads = 1;
  std::chrono::milliseconds idle_timeout{30'000};
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds write_timeout{10'000};
};

void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s --port P [--threads N] [--idle-timeout-ms T] [--header-timeout-ms H]\n"
               "          [--write-timeout-ms W] [--address A]\n"
               "  P  TCP port, 0..65535 (0: any free port)\n"
               "  N  threads running the io_context, 1..256 (default 1)\n"
               "  T  close a connection waiting T ms for a request (default 30000)\n"
               "  H  close a connection whose request is not read within H ms (default 10000)\n"
               "  W  close a connection whose response is not sent within W ms (default 10000)\n"
               "  A  IPv4 address to listen on (default 127.0.0.1)\n",
               argv0);
}

std::optional<std::int64_t> parse_number(std::string_view text, std::int64_t min,
                                         std::int64_t max) {
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < min || value > max) {
    return std::nullopt;
  }
  return value;
}

std::optional<options> parse_options(int argc, char** argv) {
  options opts;
  bool have_port = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (i + 1 == argc) return std::nullopt;
    const std::string_view value = argv[++i];
    // A day at most: far below where milliseconds overflow the clock's nanoseconds.
    constexpr std::int64_t day_ms = 86'400'000;
    if (arg == "--port") {
      const auto v = parse_number(value, 0, 65535);
      if (!v) return std::nullopt;
      opts.port = static_cast<unsigned short>(*v);
      have_port = true;
    } else if (arg == "--threads") {
      const auto v = parse_number(value, 1, 256);
      if (!v) return std::nullopt;
      opts.threads = static_cast<int>(*v);
    } else if (arg == "--address") {
      opts.address = std::string(value);
    } else {
      const auto v = parse_number(value, 1, day_ms);
      if (!v) return std::nullopt;
      if (arg == "--idle-timeout-ms") {
        opts.idle_timeout = std::chrono::milliseconds(*v);
      } else if (arg == "--header-timeout-ms") {
        opts.header_timeout = std::chrono::milliseconds(*v);
      } else if (arg == "--write-timeout-ms") {
        opts.write_timeout = std::chrono::milliseconds(*v);
      } else {
        return std::nullopt;
      }
    }
  }
  if (!have_port) return std::nullopt;
  return opts;
}

// Each connection is a descriptor: let the process open as many as it is allowed to.
void raise_open_file_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) std::perror("setrlimit(RLIMIT_NOFILE)");
}

struct counters {
  std::atomic<std::uint64_t> accepted{0};
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> closed_idle{0};
  std::atomic<std::uint64_t> closed_header{0};
  std::atomic<std::uint64_t> closed_write{0};
  std::atomic<std::uint64_t> closed_served{0};  // after a response without keep-alive
  std::atomic<std::uint64_t> closed_by_peer{0};
  std::atomic<std::uint64_t> closed_other{0};
  std::mutex late_mutex;                   // sessions close on several threads
  std::vector<double> idle_close_late_ms;  // per idle close: close - (idle start + T)
};

// One connection. Its handlers run on its strand (the stream's executor), so the session
// needs no lock even with several threads.
class session : public std::enable_shared_from_this<session> {
 public:
  session(tcp::socket&& socket, const options& opts, counters& stats)
      : stream_(std::move(socket)), opts_(opts), stats_(stats) {}

  void start() {
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->wait_request(); });
  }

 private:
  // Idle: wait for the first byte of the next request (unless pipelined bytes are here).
  void wait_request() {
    if (buffer_.size() > 0) return read_request();
    idle_since_ = std::chrono::steady_clock::now();  // no later than the stream's own read
    stream_.expires_after(opts_.idle_timeout);
    stream_.async_read_some(buffer_.prepare(read_chunk),
                            [self = shared_from_this()](error_code ec, std::size_t n) {
                              self->on_first_bytes(ec, n);
                            });
  }

  void on_first_bytes(error_code ec, std::size_t n) {
    if (ec == beast::error::timeout) record_idle_close();
    if (ec) return fail(ec, stats_.closed_idle);
    buffer_.commit(n);
    read_request();
  }

  // Header: the rest of the request, within one timeout counted from its first byte.
  void read_request() {
    parser_.emplace();
    parser_->body_limit(64 * 1024);
    stream_.expires_after(opts_.header_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](error_code ec, std::size_t) {
                       self->on_request(ec);
                     });
  }

  void on_request(error_code ec) {
    if (ec) return fail(ec, stats_.closed_header);
    stats_.requests.fetch_add(1, std::memory_order_relaxed);
    const auto& req = parser_->get();
    response_.emplace(http::status::ok, req.version());
    response_->set(http::field::server, "twheel-example");
    response_->set(http::field::content_type, "text/plain");
    response_->keep_alive(req.keep_alive());
    response_->body() = body_for(req.target());
    response_->prepare_payload();
    parser_.reset();
    stream_.expires_after(opts_.write_timeout);
    http::async_write(stream_, *response_,
                      [self = shared_from_this()](error_code ec2, std::size_t) {
                        self->on_written(ec2);
                      });
  }

  void on_written(error_code ec) {
    if (ec) return fail(ec, stats_.closed_write);
    const bool keep_alive = response_->keep_alive();
    response_.reset();  // an idle connection keeps no response
    if (!keep_alive) {
      error_code ignored;
      stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
      stats_.closed_served.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    wait_request();
  }

  void fail(error_code ec, std::atomic<std::uint64_t>& on_timeout) {
    if (ec == beast::error::timeout) {
      on_timeout.fetch_add(1, std::memory_order_relaxed);  // the stream closed the socket
    } else if (ec == http::error::end_of_stream || ec == http::error::partial_message ||
               ec == asio::error::eof || ec == asio::error::connection_reset) {
      // partial_message: the peer closed in the middle of a request.
      stats_.closed_by_peer.fetch_add(1, std::memory_order_relaxed);
    } else {
      stats_.closed_other.fetch_add(1, std::memory_order_relaxed);
    }
    stream_.close();
  }

  void record_idle_close() {
    const std::chrono::duration<double, std::milli> idle =
        std::chrono::steady_clock::now() - idle_since_;
    const std::chrono::duration<double, std::milli> timeout = opts_.idle_timeout;
    const double late = (idle - timeout).count();
    std::lock_guard<std::mutex> lock(stats_.late_mutex);
    stats_.idle_close_late_ms.push_back(late);
  }

  static std::string body_for(std::string_view target) {
    constexpr std::string_view prefix = "/bytes/";
    if (target.substr(0, prefix.size()) == prefix) {
      if (const auto n = parse_number(target.substr(prefix.size()), 0, 64 << 20)) {
        return std::string(static_cast<std::size_t>(*n), 'x');
      }
    }
    return "ok\n";
  }

  static constexpr std::size_t read_chunk = 1024;

  stream_type stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::response<http::string_body>> response_;
  const options& opts_;
  counters& stats_;
  std::chrono::steady_clock::time_point idle_since_{};  // for the lateness report
};

class server {
 public:
  server(asio::io_context& ctx, const options& opts)
      : ctx_(ctx),
        opts_(opts),
        // The acceptor, its retry timer and the signals share a strand: with several
        // threads, the signal's close() would otherwise race an accept being started.
        acceptor_(asio::make_strand(ctx),
                  tcp::endpoint(asio::ip::make_address_v4(opts.address), opts.port)),
        signals_(acceptor_.get_executor(), SIGINT, SIGTERM),
        accept_retry_(acceptor_.get_executor()) {}

  unsigned short port() const { return acceptor_.local_endpoint().port(); }
  counters& stats() { return stats_; }

  void start() {
    signals_.async_wait([this](error_code ec, int) {
      if (ec) return;
      // Stop accepting, then stop the context: the sessions' handlers are destroyed
      // with it, which closes their sockets.
      error_code ignored;
      acceptor_.close(ignored);
      accept_retry_.cancel();
      ctx_.stop();
    });
    accept();
  }

 private:
  void accept() {
    acceptor_.async_accept(asio::make_strand(ctx_), [this](error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
      if (ec) {
        // Out of descriptors (EMFILE) and the like: the connection stays queued, so
        // accepting again at once would spin. Pause and let connections close.
        std::fprintf(stderr, "accept: %s; retrying in 100 ms\n", ec.message().c_str());
        accept_retry_.expires_after(std::chrono::milliseconds(100));
        accept_retry_.async_wait([this](error_code wait_ec) {
          if (!wait_ec) accept();
        });
        return;
      }
      stats_.accepted.fetch_add(1, std::memory_order_relaxed);
      std::make_shared<session>(std::move(socket), opts_, stats_)->start();
      accept();
    });
  }

  asio::io_context& ctx_;
  const options& opts_;
  tcp::acceptor acceptor_;
  asio::signal_set signals_;
  asio::steady_timer accept_retry_;  // one timer, not a timeout per connection
  counters stats_;
};

}  // namespace

int main(int argc, char** argv) {
  const auto opts = parse_options(argc, argv);
  if (!opts) {
    usage(argv[0]);
    return 2;
  }
  raise_open_file_limit();

  asio::io_context ctx(opts->threads);
  std::optional<server> srv;
  try {
    srv.emplace(ctx, *opts);
  } catch (const boost::system::system_error& e) {
    std::fprintf(stderr, "cannot listen on %s:%u: %s\n", opts->address.c_str(),
                 unsigned{opts->port}, e.code().message().c_str());
    return 1;
  }
  srv->start();
  std::printf("listening on %u\n", unsigned{srv->port()});
  std::printf("stream %s, %d thread(s), timeouts idle %lld ms, header %lld ms, write %lld ms\n",
              stream_name, opts->threads, static_cast<long long>(opts->idle_timeout.count()),
              static_cast<long long>(opts->header_timeout.count()),
              static_cast<long long>(opts->write_timeout.count()));
  std::fflush(stdout);

  std::vector<std::thread> threads;
  for (int i = 1; i < opts->threads; ++i) threads.emplace_back([&ctx] { ctx.run(); });
  ctx.run();
  for (auto& t : threads) t.join();

  counters& s = srv->stats();
  std::printf("idle-close lateness after the idle wait's start + T, server side: %s\n",
              percentiles(s.idle_close_late_ms).c_str());
  auto n = [](const std::atomic<std::uint64_t>& c) {
    return static_cast<unsigned long long>(c.load());
  };
  std::printf(
      "accepted %llu connections, served %llu requests; closed: %llu idle, %llu header "
      "timeout, %llu write timeout, %llu after a last response, %llu by peer, %llu other\n",
      n(s.accepted), n(s.requests), n(s.closed_idle), n(s.closed_header), n(s.closed_write),
      n(s.closed_served), n(s.closed_by_peer), n(s.closed_other));
  return 0;
}
