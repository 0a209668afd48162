// twheel/detail/tracked_work.hpp: the executor a wait or a held upcall completes on,
// keeping its context's work outstanding meanwhile.
#ifndef TWHEEL_DETAIL_TRACKED_WORK_HPP
#define TWHEEL_DETAIL_TRACKED_WORK_HPP

#include <boost/asio/execution/executor.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/strand.hpp>

#include <type_traits>
#include <utility>

namespace twheel::detail {

// Keeps the context of a handler's executor busy while its wait is pending (as Asio's
// handler_work does) and gives the executor to complete on.
template <class Executor, class = void>
class tracked_work {
 public:
  explicit tracked_work(const Executor& ex)
      : ex_(boost::asio::prefer(ex, boost::asio::execution::outstanding_work.tracked)) {}
  const auto& executor() const noexcept { return ex_; }

 private:
  std::decay_t<decltype(boost::asio::prefer(
      std::declval<const Executor&>(), boost::asio::execution::outstanding_work.tracked))>
      ex_;
};

// A strand counts its work on its inner executor, and is kept untracked: preferring
// outstanding_work.tracked on a strand copies it, one more count of its shared state (an
// atomic on a line the threads share) on top of the inner executor's work count.
template <class Inner>
class tracked_work<boost::asio::strand<Inner>,
                   std::enable_if_t<boost::asio::execution::is_executor<Inner>::value>> {
 public:
  explicit tracked_work(boost::asio::strand<Inner> ex)
      : work_(boost::asio::prefer(ex.get_inner_executor(),
                                  boost::asio::execution::outstanding_work.tracked)),
        ex_(std::move(ex)) {}
  const boost::asio::strand<Inner>& executor() const noexcept { return ex_; }

 private:
  std::decay_t<decltype(boost::asio::prefer(
      std::declval<const Inner&>(), boost::asio::execution::outstanding_work.tracked))>
      work_;
  boost::asio::strand<Inner> ex_;
};

// Networking-TS style executors (e.g. io_context::strand) count work with a guard.
template <class Executor>
class tracked_work<Executor,
                   std::enable_if_t<!boost::asio::execution::is_executor<Executor>::value>> {
 public:
  explicit tracked_work(const Executor& ex) : guard_(ex) {}
  Executor executor() const noexcept { return guard_.get_executor(); }

 private:
  boost::asio::executor_work_guard<Executor> guard_;
};

}  // namespace twheel::detail

#endif  // TWHEEL_DETAIL_TRACKED_WORK_HPP
