// Retries a failing connect with exponential backoff and full jitter: before attempt
// n + 1 it sleeps a uniformly random time in [0, min(cap, base * 2^(n-1))], so that many
// clients retrying after the same outage spread out instead of retrying in lock step.
// Each backoff is a twheel::steady_timer wait; each connect gets its timeout from
// twheel::cancel_after.
//
// The target is 127.0.0.1 on a port where nothing listens (found by binding to port 0
// and closing again); after attempt 4 fails the program starts a listener there, so a
// later attempt succeeds. Exits 0 on that success, 1 if all attempts fail.
#include <twheel/cancel_after.hpp>
#include <twheel/steady_timer.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <utility>

namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using ms_double = std::chrono::duration<double, std::milli>;

constexpr auto backoff_base = 10ms;
constexpr auto backoff_cap = 200ms;
constexpr int max_attempts = 6;
constexpr auto connect_timeout = 100ms;
constexpr int listen_after_attempt = 4;

double ms_since(clock_type::time_point start) {
  return ms_double(clock_type::now() - start).count();
}

// A port on 127.0.0.1 that nothing listens on, as long as nobody else takes it meanwhile.
unsigned short unused_port(asio::io_context& ctx) {
  tcp::acceptor probe(ctx, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  return probe.local_endpoint().port();
}

class retrying_connect {
 public:
  retrying_connect(asio::io_context& ctx, tcp::endpoint target)
      : ctx_(ctx), target_(target), socket_(ctx), backoff_timer_(ctx), listener_(ctx),
        rng_(std::random_device{}()) {}

  void start() { attempt(); }

  bool connected() const { return connected_; }
  int attempts() const { return attempt_; }
  int early_wakeups() const { return early_wakeups_; }

 private:
  void attempt() {
    ++attempt_;
    socket_ = tcp::socket(ctx_);  // a failed connect leaves its socket unusable
    const auto start = clock_type::now();
    auto on_connect = [this, start](error_code ec) { on_attempt_done(ec, ms_since(start)); };
    socket_.async_connect(target_, twheel::cancel_after(connect_timeout, std::move(on_connect)));
  }

  void on_attempt_done(const error_code& ec, double ms) {
    if (!ec) {
      connected_ = true;
      std::printf("attempt %d: connected after %.1f ms\n", attempt_, ms);
      return;  // the listener's accept completes too; then run() returns
    }
    std::printf("attempt %d: %s after %.1f ms\n", attempt_,
                ec == asio::error::operation_aborted ? "timed out" : ec.message().c_str(), ms);
    if (attempt_ == listen_after_attempt) start_listener();
    if (attempt_ == max_attempts) {
      std::printf("giving up after %d attempts\n", attempt_);
      stop_listener();
      return;
    }
    back_off();
  }

  // Full jitter: anywhere between no wait and the exponential ceiling.
  void back_off() {
    const auto ceiling = std::min<clock_type::duration>(backoff_cap,
                                                        backoff_base * (1 << (attempt_ - 1)));
    std::uniform_real_distribution<double> pick(0.0, ms_double(ceiling).count());
    const auto delay = std::chrono::duration_cast<clock_type::duration>(ms_double(pick(rng_)));
    const auto start = clock_type::now();
    backoff_timer_.expires_after(delay);
    backoff_timer_.async_wait([this, delay, ceiling, start](const error_code& ec) {
      if (ec) return;
      const double waited = ms_since(start);
      if (waited < ms_double(delay).count()) ++early_wakeups_;
      std::printf("  backoff %d: %.1f ms drawn from [0, %.0f] ms, waited %.1f ms\n", attempt_,
                  ms_double(delay).count(), ms_double(ceiling).count(), waited);
      attempt();
    });
  }

  void start_listener() {
    std::printf("  (starting a listener on port %u)\n", unsigned{target_.port()});
    error_code ec;
    listener_.open(target_.protocol(), ec);
    if (!ec) listener_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) listener_.bind(target_, ec);  // fails if another program took the port
    if (!ec) listener_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      std::printf("  cannot listen on port %u: %s\n", unsigned{target_.port()},
                  ec.message().c_str());
      return;
    }
    listener_.async_accept([this](const error_code& accept_ec, tcp::socket peer) {
      if (accept_ec) return;
      error_code ignored;
      std::printf("listener: accepted the connection from port %u\n",
                  unsigned{peer.remote_endpoint(ignored).port()});
      stop_listener();
    });
  }

  void stop_listener() {
    error_code ignored;
    listener_.close(ignored);
  }

  asio::io_context& ctx_;
  tcp::endpoint target_;
  tcp::socket socket_;
  twheel::steady_timer backoff_timer_;
  tcp::acceptor listener_;
  std::mt19937 rng_;
  int attempt_ = 0;
  int early_wakeups_ = 0;
  bool connected_ = false;
};

}  // namespace

int main() {
  asio::io_context ctx;
  const tcp::endpoint target(asio::ip::address_v4::loopback(), unused_port(ctx));
  std::printf("connecting to %s:%u, where nothing listens yet: up to %d attempts of %lld ms, "
              "backoff base %lld ms, cap %lld ms, full jitter\n",
              target.address().to_string().c_str(), unsigned{target.port()}, max_attempts,
              static_cast<long long>(connect_timeout.count()),
              static_cast<long long>(backoff_base.count()),
              static_cast<long long>(backoff_cap.count()));

  retrying_connect client(ctx, target);
  client.start();
  const auto start = clock_type::now();
  ctx.run_for(10s);  // bounded: the attempts and backoffs add up to well under a second

  std::printf("%s on attempt %d of %d, %.0f ms in all, %d backoffs ended early\n",
              client.connected() ? "connected" : "FAILED", client.attempts(), max_attempts,
              ms_since(start), client.early_wakeups());
  return client.connected() && client.early_wakeups() == 0 ? 0 : 1;
}
