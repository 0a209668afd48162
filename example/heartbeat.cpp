// Heartbeats and lease renewal, the pattern of distributed locks, on twheel timers:
//
//   * a job holds a lease with a TTL and may only do work while the lease is valid;
//   * a twheel::periodic_timer (fixed rate, every TTL / 3) renews the lease;
//   * a watchdog (twheel::steady_timer) set to the lease's expiry aborts the job if the
//     lease runs out, whatever the renewer is doing;
//   * another periodic_timer sends a heartbeat every 50 ms, on a fixed grid.
//
// Scenario 1: the renewals succeed and the job completes. Scenario 2: the lock service
// stops answering after 250 ms, the renewals fail, and the watchdog aborts the job when
// the lease expires. Prints the timeline of both; exits 0 when both behave as expected.
// Everything is in this process.
#include <twheel/periodic_timer.hpp>
#include <twheel/steady_timer.hpp>

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <optional>

namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

constexpr auto lease_ttl = 300ms;
constexpr auto renew_every = lease_ttl / 3;
constexpr auto heartbeat_every = 50ms;
constexpr auto step_time = 75ms;
constexpr int job_steps = 10;  // 750 ms: the job outlives the lease's first TTL twice

struct scenario {
  const char* title;
  std::optional<clock_type::duration> lock_service_down_at;  // renewals fail from then
  bool expect_completed;
};

struct result {
  bool completed = false;
  bool watchdog_fired = false;
  int steps_done = 0;
  int steps_after_expiry = 0;  // work done without a valid lease: must stay 0
  int early_timers = 0;        // waits that completed before their deadline: must stay 0
  int heartbeats = 0;
  int renewals = 0;
};

class leased_job {
 public:
  leased_job(asio::io_context& ctx, const scenario& s)
      : scenario_(s),
        heartbeat_(ctx, heartbeat_every, twheel::tick_mode::fixed_rate),
        renewer_(ctx, renew_every, twheel::tick_mode::fixed_rate),
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
      if (clock_type::now() >= lease_expiry_) ++result_.steps_after_expiry;
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
  ctx.run_for(5s);  // bounded even if something were wrong
  const result& r = job.outcome();

  const bool as_expected = r.completed == s.expect_completed &&
                           r.watchdog_fired == !s.expect_completed &&
                           r.steps_after_expiry == 0 && r.early_timers == 0 &&
                           r.heartbeats > 0 && r.renewals > 0;
  std::printf("  => %s after %d of %d steps; %d renewals, %d heartbeats, %d steps without a "
              "lease, %d early waits: %s\n\n",
              r.completed ? "completed" : "aborted", r.steps_done, job_steps, r.renewals,
              r.heartbeats, r.steps_after_expiry, r.early_timers,
              as_expected ? "as expected" : "UNEXPECTED");
  return as_expected;
}

}  // namespace

int main() {
  const bool healthy = run_scenario(1, {"the renewals keep the lease alive", std::nullopt, true});
  const bool stalled =
      run_scenario(2, {"the lock service stops answering at 250 ms", 250ms, false});
  return healthy && stalled ? 0 : 1;
}
