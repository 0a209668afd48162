// Heartbeats and lease renewal, the pattern of distributed locks, on twheel timers:
//
//   * a job holds a lease with a TTL and may only do work while the lease is valid;
//   * a twheel::periodic_timer (fixed rate, every TTL / 3) renews the lease;
//   * a watchdog (twheel::steady_timer) set to the lease's expiry aborts the job if the
//     lease runs out, whatever the renewer is doing;
//   * another periodic_timer sends a heartbeat every 50 ms, on a fixed grid.
//
// Scenario 1: the renewals succeed and the job completes. Scenario 2: the lock service
// stops answering after 250 ms, the renewals fail, and the job is aborted when the lease
// expires: by the watchdog, or by a step that finds the lease expired before it commits. Prints the timeline of both; exits 0 when both behave as expected.
// Everything is in this process.
//
// Usage: heartbeat [scale]. Every duration is multiplied by scale (default 1); the sanitizer
// builds of the tests run it at 4, so that a slowed process keeps the margins.
#include <twheel/periodic_timer.hpp>
#include <twheel/steady_timer.hpp>

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <optional>

namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using clock_type = std::chrono::steady_clock;

// Multiplied by the scale in main().
auto lease_ttl = std::chrono::milliseconds(300);
auto heartbeat_every = std::chrono::milliseconds(50);
auto step_time = std::chrono::milliseconds(75);
auto lock_service_down_at = std::chrono::milliseconds(250);  // in scenario 2
constexpr int job_steps = 10;  // 10 steps: the job outlives the lease's first TTL twice

struct scenario {
  const char* title;
  std::optional<clock_type::duration> lock_service_down_at;  // renewals fail from then
  bool expect_completed;
};

struct result {
  bool completed = false;
  bool watchdog_fired = false;
  bool fenced = false;  // a step found the lease expired and was not committed
  int steps_done = 0;
  int early_timers = 0;        // waits that completed before their deadline: must stay 0
  int heartbeats = 0;
  int renewals = 0;
};

class leased_job {
 public:
  leased_job(asio::io_context& ctx, const scenario& s)
      : scenario_(s),
        heartbeat_(ctx, heartbeat_every, twheel::tick_mode::fixed_rate),
        renewer_(ctx, lease_ttl / 3, twheel::tick_mode::fixed_rate),
        watchdog_(ctx),
        step_timer_(ctx) {}

  void start() {
    lease_expiry_ = start_ + lease_ttl;
    log("lease acquired, valid until %.0f ms", at(lease_expiry_));
    arm_watchdog();
    wait_heartbeat();
    wait_renewal();
    next_step();
  }

  const result& outcome() const { return result_; }

 private:
  double at(clock_type::time_point t) const {
    return std::chrono::duration<double, std::milli>(t - start_).count();
  }

  __attribute__((format(printf, 2, 3))) void log(const char* format, ...) const {
    std::printf("  %6.1f ms  ", at(clock_type::now()));
    va_list args;
    va_start(args, format);
    std::vprintf(format, args);
    va_end(args);
    std::printf("\n");
  }

  void check_not_early(clock_type::time_point deadline) {
    if (clock_type::now() < deadline) ++result_.early_timers;
  }

  // ---- heartbeats: on the grid start + k * 50 ms, whatever else is going on ----------

  // [snippet: heartbeat-wait]
  void wait_heartbeat() {
    heartbeat_.async_wait([this](const error_code& ec) {
      if (ec || finished_) return;
      const auto due = heartbeat_due_;
      check_not_early(due);
      ++result_.heartbeats;
      log("heartbeat %d (due at %.0f ms), at step %d", result_.heartbeats, at(due),
          result_.steps_done + 1);
      wait_heartbeat();
    });
    heartbeat_due_ = heartbeat_.next_tick();
  }
  // [snippet-end]

  // ---- lease renewal every TTL / 3 ----------------------------------------------------

  void wait_renewal() {
    renewer_.async_wait([this](const error_code& ec) {
      if (ec || finished_) return;
      const auto now = clock_type::now();
      if (scenario_.lock_service_down_at && now - start_ >= *scenario_.lock_service_down_at) {
        log("renewal failed: the lock service does not answer (lease ends at %.0f ms)",
            at(lease_expiry_));
      } else if (now >= lease_expiry_) {
        // Too late: someone else may hold the lock by now. The watchdog is on its way.
        log("renewal refused: the lease already expired");
      } else {
        lease_expiry_ = now + lease_ttl;
        ++result_.renewals;
        log("renewal %d: lease valid until %.0f ms", result_.renewals, at(lease_expiry_));
        arm_watchdog();
      }
      wait_renewal();
    });
  }

  // ---- the watchdog: fires at the lease's expiry unless a renewal moves it ------------

  void arm_watchdog() {
    watchdog_.expires_at(lease_expiry_);  // aborts the wait for the previous expiry
    watchdog_.async_wait([this, deadline = lease_expiry_](const error_code& ec) {
      if (ec || finished_) return;
      check_not_early(deadline);
      // A renewal moved the expiry after this wait completed: the newer wait decides.
      if (lease_expiry_ != deadline) return;
      result_.watchdog_fired = true;
      log("WATCHDOG: lease expired at %.0f ms; aborting the job during step %d",
          at(lease_expiry_), result_.steps_done + 1);
      finish();
    });
  }

  // ---- the job: a sequence of steps, each committed only under a valid lease ---------

  void next_step() {
    step_timer_.expires_after(step_time);
    step_timer_.async_wait([this](const error_code& ec) {
      if (ec || finished_) return;
      check_not_early(step_timer_.expiry());
      // The watchdog alone is not enough: after a stall, the step's completion and the
      // watchdog's can both be due, and the step's runs first. So a step checks the lease
      // itself before it commits (a fence).
      if (clock_type::now() >= lease_expiry_) {
        result_.fenced = true;
        log("FENCE: step %d not committed, the lease expired at %.0f ms; aborting the job",
            result_.steps_done + 1, at(lease_expiry_));
        finish();
        return;
      }
      ++result_.steps_done;
      log("step %d of %d done", result_.steps_done, job_steps);
      if (result_.steps_done == job_steps) {
        result_.completed = true;
        log("job completed; lease released");
        finish();
        return;
      }
      next_step();
    });
  }

  // Every pending wait completes with operation_aborted, so run() returns.
  void finish() {
    finished_ = true;
    heartbeat_.cancel();
    renewer_.cancel();
    watchdog_.cancel();
    step_timer_.cancel();
  }

  scenario scenario_;
  twheel::periodic_timer heartbeat_;
  twheel::periodic_timer renewer_;
  twheel::steady_timer watchdog_;
  twheel::steady_timer step_timer_;
  const clock_type::time_point start_ = clock_type::now();
  clock_type::time_point lease_expiry_{};
  clock_type::time_point heartbeat_due_{};
  bool finished_ = false;
  result result_;
};

bool run_scenario(int number, const scenario& s) {
  std::printf("scenario %d: %s\n", number, s.title);
  asio::io_context ctx;
  leased_job job(ctx, s);
  job.start();
  ctx.run_for(lease_ttl * 20);  // bounded even if something were wrong
  const result& r = job.outcome();

  const bool aborted = r.watchdog_fired || r.fenced;
  const bool as_expected = r.completed == s.expect_completed && aborted == !s.expect_completed &&
                           r.early_timers == 0 && r.heartbeats > 0 && r.renewals > 0;
  std::printf("  => %s after %d of %d steps; %d renewals, %d heartbeats, %d early waits: %s\n\n",
              r.completed ? "completed"
              : r.fenced  ? "aborted by the fence"
              : aborted   ? "aborted by the watchdog"
                          : "neither completed nor aborted",
              r.steps_done, job_steps, r.renewals, r.heartbeats, r.early_timers,
              as_expected ? "as expected" : "UNEXPECTED");
  return as_expected;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2 || (argc == 2 && (std::atoi(argv[1]) < 1 || std::atoi(argv[1]) > 100))) {
    std::fprintf(stderr, "usage: heartbeat [scale: 1 to 100, default 1]\n");
    return 2;
  }
  const int scale = argc == 2 ? std::atoi(argv[1]) : 1;
  lease_ttl *= scale;
  heartbeat_every *= scale;
  step_time *= scale;
  lock_service_down_at *= scale;

  const bool healthy = run_scenario(1, {"the renewals keep the lease alive", std::nullopt, true});
  char title[64];
  std::snprintf(title, sizeof title, "the lock service stops answering at %lld ms",
                static_cast<long long>(lock_service_down_at.count()));
  const bool stalled = run_scenario(2, {title, lock_service_down_at, false});
  return healthy && stalled ? 0 : 1;
}
