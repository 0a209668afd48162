// An ordinary Asio program that keeps an idle timeout per session, switched to twheel by
// the two-line change:
//
//   -#include <boost/asio/steady_timer.hpp>
//   +#include <twheel/steady_timer.hpp>
//   -using session_timer = boost::asio::steady_timer;
//   +using session_timer = twheel::steady_timer;
//
// The build also compiles the original (example/CMakeLists.txt reverts the two lines into
// steady_timer_dropin_asio), so both versions can be run side by side.
#include <twheel/steady_timer.hpp>

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <vector>

using session_timer = twheel::steady_timer;

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

struct stats {
  long timeouts = 0;
  long rearms = 0;
  long early = 0;  // timeouts that fired before their deadline: must stay 0
};

// A session that times out after `idle` without activity.
class session {
 public:
  session(boost::asio::io_context& ctx, clock_type::duration idle, stats& s)
      : timer_(ctx), idle_(idle), stats_(s) {}

  void start() { arm(); }

  void activity() {
    if (done_) return;
    ++stats_.rearms;
    arm();  // expires_after aborts the pending wait; a new one starts
  }

 private:
  void arm() {
    timer_.expires_after(idle_);
    const auto deadline = timer_.expiry();
    timer_.async_wait([this, deadline](boost::system::error_code ec) {
      if (ec) return;  // operation_aborted: re-armed or shut down
      if (clock_type::now() < deadline) ++stats_.early;
      // Fired just before a re-arm could cancel it: the newer wait decides.
      if (timer_.expiry() != deadline) return;
      ++stats_.timeouts;
      done_ = true;
    });
  }

  session_timer timer_;
  clock_type::duration idle_;
  stats& stats_;
  bool done_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  const int sessions = argc > 1 ? std::atoi(argv[1]) : 20000;
  boost::asio::io_context ctx;
  stats st;
  std::vector<std::unique_ptr<session>> all;
  for (int i = 0; i < sessions; ++i) {
    all.push_back(std::make_unique<session>(ctx, 200ms, st));
    all.back()->start();
  }

  // Traffic for 500 ms: every 5 ms a random tenth of the sessions see activity.
  std::mt19937 rng(42);
  session_timer traffic(ctx);
  int rounds = 0;
  std::function<void(boost::system::error_code)> tick = [&](boost::system::error_code ec) {
    if (ec || ++rounds > 100) return;
    std::uniform_int_distribution<int> pick(0, sessions - 1);
    for (int i = 0; i < sessions / 10; ++i) all[pick(rng)]->activity();
    traffic.expires_after(5ms);
    traffic.async_wait(tick);
  };
  traffic.expires_after(5ms);
  traffic.async_wait(tick);

  const auto start = clock_type::now();
  ctx.run();  // returns when every session has timed out
  const double ms = std::chrono::duration<double, std::milli>(clock_type::now() - start).count();

  std::printf("%d sessions: %ld timed out, %ld re-arms, %ld early, run() returned after %.0f ms\n",
              sessions, st.timeouts, st.rearms, st.early, ms);
  return st.timeouts == sessions && st.early == 0 ? 0 : 1;
}
