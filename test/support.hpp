// support.hpp: helpers shared by the test suites (test/*_test.cpp), so that each suite
// runs contexts, measures time and counts allocations the same way.
//
// Header-only and included by test sources only: everything is in namespace twheel_test,
// non-template functions are inline (several suites include it), and nothing here depends
// on a suite's own aliases (asio, wall, ...). Nothing twheel-specific either:
// steady_timer_test.cpp also runs against Asio alone.
#ifndef TWHEEL_TEST_SUPPORT_HPP
#define TWHEEL_TEST_SUPPORT_HPP

#include <boost/asio/deferred.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/execution.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/version.hpp>
#include <boost/system/error_code.hpp>
#if BOOST_ASIO_VERSION >= 103200 && __has_include(<boost/asio/cancel_after.hpp>)
#include <boost/asio/cancel_after.hpp>
#define TWHEEL_TEST_HAS_ASIO_CANCEL_AFTER 1
#endif

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace twheel_test {

// What async_wait() with no token did on a Timer rebound to an executor that names
// deferred as its default token (as_default_on_t, through Timer's rebind_executor),
// constructed on a fresh context with `args`: the waits `pending(ctx)` counted before and
// after the operation was launched, and its result once the context ran.
struct deferred_wait_result {
  std::size_t pending_before_launch = 0;
  std::size_t pending_after_launch = 0;
  std::optional<boost::system::error_code> ec;
};

template <class Timer, class Pending, class... Args>
deferred_wait_result run_deferred_wait(Pending pending, const Args&... args) {
  using deferred_timer = typename boost::asio::deferred_t::template as_default_on_t<Timer>;
  static_assert(std::is_same_v<typename deferred_timer::template rebind_executor<
                                   typename Timer::executor_type>::other,
                               Timer>);
  boost::asio::io_context ctx;
  deferred_timer timer(ctx, args...);
  deferred_wait_result r;
  auto wait = timer.async_wait();
  r.pending_before_launch = pending(ctx);
  std::move(wait)([&r](boost::system::error_code ec) { r.ec = ec; });
  r.pending_after_launch = pending(ctx);
  ctx.run();
  return r;
}

// A duration as a whole number of milliseconds, for messages and coarse bounds.
template <class D>
long long ms(D d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

// ---------------------------------------------------------------------------------------
// Running a context
// ---------------------------------------------------------------------------------------

// Stops `ctx` if it is still running after `limit`, so that a broken implementation fails
// a test instead of hanging the suite.
class watchdog {
 public:
  watchdog(boost::asio::io_context& ctx, std::chrono::nanoseconds limit)
      : thread_([this, &ctx, limit] {
          std::unique_lock<std::mutex> lk(m_);
          if (!cv_.wait_for(lk, limit, [this] { return done_; })) {
            fired_ = true;
            ctx.stop();
          }
        }) {}
  watchdog(const watchdog&) = delete;
  watchdog& operator=(const watchdog&) = delete;
  ~watchdog() { finish(); }

  // Stops the watchdog; true if it had fired.
  bool finish() {
    if (thread_.joinable()) {
      {
        std::lock_guard<std::mutex> lk(m_);
        done_ = true;
      }
      cv_.notify_one();
      thread_.join();
    }
    return fired_;
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false;
  bool fired_ = false;
  std::thread thread_;  // last: started once the rest is initialised
};

struct run_result {
  std::chrono::steady_clock::duration elapsed{};
  std::size_t handlers = 0;  // run()'s count, on the calling thread
  bool timed_out = false;    // the watchdog had to stop the context
};

// ctx.restart(), then ctx.run() on the calling thread and `threads - 1` more, under a
// watchdog that stops the context after `limit` (suites with another budget pass theirs).
// Exceptions from run() on the calling thread propagate (single thread only).
inline run_result run_ctx(boost::asio::io_context& ctx,
                          std::chrono::nanoseconds limit = std::chrono::seconds(10),
                          int threads = 1) {
  using clock = std::chrono::steady_clock;
  ctx.restart();
  watchdog dog(ctx, limit);
  std::vector<std::thread> extra;
  for (int i = 1; i < threads; ++i) extra.emplace_back([&ctx] { ctx.run(); });
  run_result r;
  const auto t0 = clock::now();
  r.handlers = ctx.run();
  for (auto& t : extra) t.join();
  r.elapsed = clock::now() - t0;
  r.timed_out = dog.finish();
  return r;
}

// Runs handlers one at a time until pred() holds; false if it did not within `limit`.
template <class Pred>
bool run_until(boost::asio::io_context& ctx, Pred pred,
               std::chrono::nanoseconds limit = std::chrono::seconds(5)) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + limit;
  while (!pred()) {
    if (clock::now() >= deadline) return false;
    if (ctx.stopped()) ctx.restart();
    if (ctx.run_one_for(std::chrono::milliseconds(2)) == 0) std::this_thread::yield();
  }
  return true;
}

// ---------------------------------------------------------------------------------------
// Recording completions
// ---------------------------------------------------------------------------------------

// Records completions of single-threaded waits: order and error codes per id.
struct wait_log {
  std::vector<int> order;
  std::map<int, std::vector<boost::system::error_code>> results;

  auto handler(int id) {
    return [this, id](boost::system::error_code ec) {
      order.push_back(id);
      results[id].push_back(ec);
    };
  }
  std::size_t count(int id) const {
    auto it = results.find(id);
    return it == results.end() ? 0 : it->second.size();
  }
  // The error code of id's last completion; would_block ("did not complete") if none.
  boost::system::error_code ec(int id) const {
    auto it = results.find(id);
    if (it == results.end() || it->second.empty()) return boost::asio::error::would_block;
    return it->second.back();
  }
  std::size_t total() const { return order.size(); }
};

// ---------------------------------------------------------------------------------------
// Counting allocator
// ---------------------------------------------------------------------------------------

// What a counting_allocator handed out: twheel (and Asio) allocate an operation's state
// through the handler's associated allocator, so outstanding() tells whether everything
// was freed. Blocks still live when the counters go away are parked in a process-lifetime
// list (reachable, so LeakSanitizer stays quiet; the test that saw them has already failed
// by name).
struct alloc_counters {
  std::atomic<std::size_t> allocs{0};
  std::atomic<std::size_t> deallocs{0};
  std::atomic<long long> bytes{0};  // currently allocated
  std::mutex m;
  std::set<void*> blocks;  // currently allocated, under m

  alloc_counters() = default;
  alloc_counters(const alloc_counters&) = delete;
  alloc_counters& operator=(const alloc_counters&) = delete;
  ~alloc_counters() {
    static std::vector<void*>* graveyard = new std::vector<void*>;
    std::lock_guard<std::mutex> lk(m);
    graveyard->insert(graveyard->end(), blocks.begin(), blocks.end());
  }

  std::size_t outstanding() const { return allocs.load() - deallocs.load(); }
};

template <class T>
struct counting_allocator {
  using value_type = T;
  alloc_counters* c;

  explicit counting_allocator(alloc_counters* counters) noexcept : c(counters) {}
  template <class U>
  counting_allocator(const counting_allocator<U>& other) noexcept : c(other.c) {}

  T* allocate(std::size_t n) {
    T* p = std::allocator<T>{}.allocate(n);
    {
      std::lock_guard<std::mutex> lk(c->m);
      c->blocks.insert(p);
    }
    c->allocs.fetch_add(1);
    c->bytes.fetch_add(static_cast<long long>(n * sizeof(T)));
    return p;
  }
  void deallocate(T* p, std::size_t n) noexcept {
    {
      std::lock_guard<std::mutex> lk(c->m);
      c->blocks.erase(p);
    }
    c->deallocs.fetch_add(1);
    c->bytes.fetch_sub(static_cast<long long>(n * sizeof(T)));
    std::allocator<T>{}.deallocate(p, n);
  }
  template <class U>
  bool operator==(const counting_allocator<U>& o) const noexcept {
    return c == o.c;
  }
  template <class U>
  bool operator!=(const counting_allocator<U>& o) const noexcept {
    return c != o.c;
  }
};

// ---------------------------------------------------------------------------------------
// A context of the user's own
// ---------------------------------------------------------------------------------------

// An execution context with a standard executor and a queue of its own, not Asio's
// scheduler. Like Asio's priority_scheduler example, its destructor shuts down and
// destroys its services before its queue (a member) is destroyed: what is still queued
// then is destroyed after the wheel is gone. poll() runs what is queued until the queue is
// empty, and poll_one() the oldest; nothing here waits for time to pass.
class queue_context : public boost::asio::execution_context {
  struct item_base {
    virtual ~item_base() = default;
    virtual void run() = 0;
  };
  template <class F>
  struct item final : item_base {
    F f;
    explicit item(F&& g) : f(std::move(g)) {}
    void run() override { std::move(f)(); }
  };

 public:
  class executor_type {
   public:
    explicit executor_type(queue_context& c) noexcept : ctx_(&c) {}
    queue_context& query(boost::asio::execution::context_t) const noexcept { return *ctx_; }
    static constexpr boost::asio::execution::blocking_t query(
        boost::asio::execution::blocking_t) noexcept {
      return boost::asio::execution::blocking.never;
    }
    executor_type require(boost::asio::execution::blocking_t::never_t) const noexcept {
      return *this;
    }
    template <class F>
    void execute(F f) const {
      std::lock_guard<std::mutex> lk(ctx_->m_);
      ctx_->queue_.push_back(std::make_unique<item<F>>(std::move(f)));
    }
    friend bool operator==(const executor_type& a, const executor_type& b) noexcept {
      return a.ctx_ == b.ctx_;
    }
    friend bool operator!=(const executor_type& a, const executor_type& b) noexcept {
      return a.ctx_ != b.ctx_;
    }

   private:
    queue_context* ctx_;
  };

  queue_context() = default;
  ~queue_context() {
    shutdown();
    destroy();
  }
  executor_type get_executor() noexcept { return executor_type(*this); }

  // Runs what is queued, and what that queues, until the queue is empty.
  std::size_t poll() {
    std::size_t n = 0;
    while (poll_one() != 0) ++n;
    return n;
  }
  // Runs the oldest queued item, if any.
  std::size_t poll_one() {
    std::unique_ptr<item_base> next;
    {
      std::lock_guard<std::mutex> lk(m_);
      if (queue_.empty()) return 0;
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    next->run();
    return 1;
  }
  std::size_t queued() {
    std::lock_guard<std::mutex> lk(m_);
    return queue_.size();
  }

 private:
  std::mutex m_;
  std::deque<std::unique_ptr<item_base>> queue_;
};

// ---------------------------------------------------------------------------------------
// Loopback sockets
// ---------------------------------------------------------------------------------------

// A connected TCP pair on 127.0.0.1: `server` is the accepted side.
struct socket_pair {
  boost::asio::ip::tcp::socket server;
  boost::asio::ip::tcp::socket client;
};

// A listener on 127.0.0.1, ephemeral port; connect() makes pairs synchronously (the
// kernel completes the handshake through the backlog before accept()).
class loopback {
 public:
  using tcp = boost::asio::ip::tcp;

  explicit loopback(boost::asio::io_context& ctx)
      : ctx_(ctx), acceptor_(ctx, tcp::endpoint(boost::asio::ip::address_v4::loopback(), 0)) {}

  socket_pair connect() {
    tcp::socket client(ctx_);
    client.connect(acceptor_.local_endpoint());
    tcp::socket server = acceptor_.accept();
    return socket_pair{std::move(server), std::move(client)};
  }

  tcp::acceptor& acceptor() { return acceptor_; }

 private:
  boost::asio::io_context& ctx_;
  tcp::acceptor acceptor_;
};

// ---------------------------------------------------------------------------------------
// Strands
// ---------------------------------------------------------------------------------------

// The handlers of waits bound to `strand`: how many ran, how many outside the strand, how
// many while another of them was running, how many with an error. Each stays 20 us, so
// that two running at once would overlap.
template <class Strand>
struct strand_log {
  explicit strand_log(Strand s) : strand(std::move(s)) {}

  auto handler() {
    return [this](const boost::system::error_code& ec) {
      if (inside.fetch_add(1) != 0) ++concurrent;
      if (!strand.running_in_this_thread()) ++off_strand;
      if (ec) ++failed;
      std::this_thread::sleep_for(std::chrono::microseconds(20));
      inside.fetch_sub(1);
      ++calls;
    };
  }

  Strand strand;
  std::atomic<int> calls{0}, off_strand{0}, concurrent{0}, failed{0};

 private:
  std::atomic<int> inside{0};
};

#if defined(TWHEEL_TEST_HAS_ASIO_CANCEL_AFTER)
// ---------------------------------------------------------------------------------------
// Asio's own cancel_after (Boost 1.86 and later)
// ---------------------------------------------------------------------------------------

struct cancelled_wait {
  bool timed_out = false;  // run_ctx() gave up
  int calls = 0;
  boost::system::error_code ec;
  std::chrono::steady_clock::duration elapsed{};
};

// Runs `timer.async_wait()` under boost::asio::cancel_after(after) on `ctx`.
template <class Timer>
cancelled_wait wait_under_asio_cancel_after(boost::asio::io_context& ctx, Timer& timer,
                                            std::chrono::steady_clock::duration after) {
  cancelled_wait w;
  const auto t0 = std::chrono::steady_clock::now();
  timer.async_wait(boost::asio::cancel_after(after, [&](boost::system::error_code ec) {
    ++w.calls;
    w.ec = ec;
    w.elapsed = std::chrono::steady_clock::now() - t0;
  }));
  w.timed_out = run_ctx(ctx).timed_out;
  return w;
}
#endif

}  // namespace twheel_test

#endif  // TWHEEL_TEST_SUPPORT_HPP
