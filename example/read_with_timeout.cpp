// Reads with a timeout through twheel::cancel_after: the read is cancelled when no reply
// arrives in time, with no timer object to own, arm or cancel.
//
//   read_with_timeout            ask a server in this process, on 127.0.0.1
//   read_with_timeout --port P   ask idle_echo_server on 127.0.0.1:P
//   read_with_timeout --scale N  every duration times N (the sanitizer builds of the tests
//                                run it at 4, so that a slowed process keeps the margins)
//
// The in-process server answers each request as it says: "fast" at once, "slow" in
// 40 ms, "late" in 250 ms (after the client's 100 ms timeout), "never" not at all. With
// --port, half of the requests send a line (the echo must come back in time) and half
// send nothing (the read must time out). Exits 0 when every outcome is the expected one
// and no read timed out before its 100 ms, 1 otherwise.
#include <twheel/cancel_after.hpp>
#include <twheel/steady_timer.hpp>

#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

// Multiplied by --scale in main().
clock_type::duration read_timeout = 100ms;
clock_type::duration io_timeout = 1s;      // connect and write: loopback, so only if stuck
clock_type::duration give_up_after = 10s;  // the whole program
int time_scale = 1;

double timeout_ms() { return std::chrono::duration<double, std::milli>(read_timeout).count(); }

double ms_since(clock_type::time_point start) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - start).count();
}

// ---- the in-process server ---------------------------------------------------------

std::optional<clock_type::duration> reply_delay(std::string_view kind) {
  if (kind == "fast") return 0ms;
  if (kind == "slow") return 40ms * time_scale;
  if (kind == "late") return 250ms * time_scale;
  return std::nullopt;  // "never"
}

std::string reply_to(std::string_view kind) { return "reply to " + std::string(kind) + "\n"; }

class server_session : public std::enable_shared_from_this<server_session> {
 public:
  explicit server_session(tcp::socket socket)
      : socket_(std::move(socket)), delay_timer_(socket_.get_executor()) {}

  void start() {
    asio::async_read_until(socket_, asio::dynamic_buffer(request_), '\n',
                           [self = shared_from_this()](const error_code& ec, std::size_t n) {
                             if (!ec) self->answer(self->request_.substr(0, n - 1));
                           });
  }

 private:
  void answer(const std::string& kind) {
    const auto delay = reply_delay(kind);
    if (!delay) {
      wait_for_close();  // the client gives up; we only notice when it closes
      return;
    }
    reply_ = reply_to(kind);
    if (*delay == clock_type::duration::zero()) return write_reply();
    delay_timer_.expires_after(*delay);
    delay_timer_.async_wait([self = shared_from_this()](const error_code& ec) {
      if (!ec) self->write_reply();
    });
  }

  // A late reply finds the socket closed by the client: the write fails, harmlessly.
  void write_reply() {
    asio::async_write(socket_, asio::buffer(reply_),
                      [self = shared_from_this()](const error_code& ec, std::size_t) {
                        if (!ec) self->wait_for_close();
                      });
  }

  void wait_for_close() {
    socket_.async_read_some(asio::buffer(scratch_),
                            [self = shared_from_this()](const error_code& ec, std::size_t) {
                              if (!ec) self->wait_for_close();
                            });
  }

  tcp::socket socket_;
  twheel::steady_timer delay_timer_;
  std::string request_;
  std::string reply_;
  std::array<char, 64> scratch_{};
};

void accept_requests(tcp::acceptor& acceptor, int remaining) {
  if (remaining == 0) return;
  acceptor.async_accept([&acceptor, remaining](const error_code& ec, tcp::socket socket) {
    if (ec) return;
    std::make_shared<server_session>(std::move(socket))->start();
    accept_requests(acceptor, remaining - 1);
  });
}

// ---- the client --------------------------------------------------------------------

struct request {
  std::string kind;   // what the reply should be like, for the report
  std::string line;   // sent before reading; empty: nothing is sent
  std::string reply;  // expected within the timeout; empty: a timeout is expected
};

struct tally {
  int pending = 0;
  int as_expected = 0;
  int unexpected = 0;
};

class exchange : public std::enable_shared_from_this<exchange> {
 public:
  exchange(asio::io_context& ctx, tcp::endpoint server, int number, request req, tally& t,
           std::function<void()> on_last)
      : socket_(ctx), server_(server), number_(number), req_(std::move(req)), tally_(t),
        on_last_(std::move(on_last)) {}

  void start() {
    auto on_connect = [self = shared_from_this()](error_code ec) {
      if (ec) {
        self->report_failure("connect", ec);
      } else {
        self->send();
      }
    };
    socket_.async_connect(server_, twheel::cancel_after(io_timeout, std::move(on_connect)));
  }

 private:
  void send() {
    if (req_.line.empty()) return read();
    auto on_sent = [self = shared_from_this()](error_code ec, std::size_t) {
      if (ec) {
        self->report_failure("write", ec);
      } else {
        self->read();
      }
    };
    asio::async_write(socket_, asio::buffer(req_.line),
                      twheel::cancel_after(io_timeout, std::move(on_sent)));
  }

  // The point of the example: the timeout is part of the completion token, so there is
  // no timer to own, arm, or cancel when the reply comes first.
  // [snippet: read-with-timeout]
  void read() {
    const auto start = clock_type::now();
    auto on_read = [self = shared_from_this(), start](error_code ec, std::size_t n) {
      self->report_read(ec, n, ms_since(start));
    };
    socket_.async_read_some(asio::buffer(reply_),
                            twheel::cancel_after(read_timeout, std::move(on_read)));
  }
  // [snippet-end]

  void report_read(const error_code& ec, std::size_t n, double ms) {
    const bool timed_out = ec == asio::error::operation_aborted;
    bool ok;
    if (!ec) {
      std::printf("request %2d (%s): ok %zu bytes in %.1f ms", number_, req_.kind.c_str(), n, ms);
      // A short reply arrives in one piece on loopback.
      ok = !req_.reply.empty() && std::string_view(reply_.data(), n) == req_.reply;
    } else if (timed_out) {
      std::printf("request %2d (%s): timed out after %.1f ms", number_, req_.kind.c_str(), ms);
      ok = req_.reply.empty() && ms >= timeout_ms();
    } else {
      std::printf("request %2d (%s): %s after %.1f ms", number_, req_.kind.c_str(),
                  ec.message().c_str(), ms);
      ok = false;
    }
    std::printf("%s\n", ok ? "" : "  <- UNEXPECTED");
    finish(ok);
  }

  void report_failure(const char* what, const error_code& ec) {
    std::printf("request %2d (%s): %s failed: %s  <- UNEXPECTED\n", number_, req_.kind.c_str(),
                what, ec.message().c_str());
    finish(false);
  }

  void finish(bool ok) {
    ++(ok ? tally_.as_expected : tally_.unexpected);
    error_code ignored;
    socket_.close(ignored);
    if (--tally_.pending == 0) on_last_();
  }

  tcp::socket socket_;
  tcp::endpoint server_;
  int number_;
  request req_;
  tally& tally_;
  std::function<void()> on_last_;
  std::array<char, 256> reply_{};
};

std::vector<request> in_process_requests() {
  std::vector<request> out;
  for (const char* kind : {"fast", "slow", "never", "fast", "late", "never", "slow", "fast",
                           "late", "never"}) {
    const auto delay = reply_delay(kind);
    const bool in_time = delay && *delay < read_timeout;
    out.push_back({kind, std::string(kind) + "\n", in_time ? reply_to(kind) : ""});
  }
  return out;
}

std::vector<request> echo_server_requests() {
  std::vector<request> out;
  for (int i = 0; i < 10; ++i) {
    if (i % 2 == 0) {
      const std::string line = "hello " + std::to_string(i) + "\n";
      out.push_back({"echo", line, line});
    } else {
      out.push_back({"silent", "", ""});
    }
  }
  return out;
}

std::optional<unsigned> parse_number(std::string_view text, unsigned low, unsigned high) {
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < low || value > high) {
    return std::nullopt;
  }
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<unsigned short> external_port;
  for (int i = 1; i < argc; i += 2) {
    const std::string_view option = argv[i];
    const auto value = i + 1 < argc ? parse_number(argv[i + 1], 1, option == "--port" ? 65535 : 100)
                                    : std::nullopt;
    if (value && option == "--port") {
      external_port = static_cast<unsigned short>(*value);
    } else if (value && option == "--scale") {
      time_scale = static_cast<int>(*value);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--port P] [--scale N]   (P: an idle_echo_server on 127.0.0.1; "
                   "N: 1 to 100)\n",
                   argv[0]);
      return 2;
    }
  }
  read_timeout *= time_scale;
  io_timeout *= time_scale;
  give_up_after *= time_scale;

  asio::io_context ctx;
  const auto loopback = asio::ip::address_v4::loopback();
  const std::vector<request> requests =
      external_port ? echo_server_requests() : in_process_requests();

  tcp::acceptor acceptor(ctx);
  tcp::endpoint server(loopback, external_port.value_or(0));
  if (!external_port) {
    acceptor = tcp::acceptor(ctx, tcp::endpoint(loopback, 0));
    server = acceptor.local_endpoint();
    accept_requests(acceptor, static_cast<int>(requests.size()));
  }

  // Only if something hangs: no outcome at all is also a failure.
  twheel::steady_timer give_up(ctx, give_up_after);
  bool gave_up = false;
  give_up.async_wait([&](const error_code& ec) {
    if (ec) return;
    gave_up = true;
    ctx.stop();
  });

  tally t;
  t.pending = static_cast<int>(requests.size());
  auto all_done = [&] {
    give_up.cancel();
    error_code ignored;
    acceptor.close(ignored);
  };
  for (std::size_t i = 0; i < requests.size(); ++i) {
    std::make_shared<exchange>(ctx, server, static_cast<int>(i + 1), requests[i], t, all_done)
        ->start();
  }

  const auto start = clock_type::now();
  ctx.run();
  if (gave_up) {
    std::printf("gave up: %d of %zu requests still pending\n", t.pending, requests.size());
    return 1;
  }
  std::printf("%zu requests against %s:%u: %d as expected, %d unexpected, %.0f ms in all\n",
              requests.size(), external_port ? "idle_echo_server" : "the in-process server",
              unsigned{server.port()}, t.as_expected, t.unexpected, ms_since(start));
  return t.unexpected == 0 ? 0 : 1;
}
