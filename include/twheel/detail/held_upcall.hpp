// twheel/detail/held_upcall.hpp: a completion handler and its arguments, held in memory
// from the handler's associated allocator until the upcall may be made.
#ifndef TWHEEL_DETAIL_HELD_UPCALL_HPP
#define TWHEEL_DETAIL_HELD_UPCALL_HPP

#include <twheel/detail/tracked_work.hpp>
#include <twheel/detail/wait_ops.hpp>

#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

namespace twheel::detail {

// Type-erased: its owner knows neither the handler nor the arguments.
class held_upcall {
 public:
  held_upcall(const held_upcall&) = delete;
  held_upcall& operator=(const held_upcall&) = delete;

  // Frees this memory, then calls the handler with the arguments (invoke) or destroys
  // them. What the handler throws leaves here.
  void complete(bool invoke) { complete_(this, invoke); }

 protected:
  using complete_fn = void (*)(held_upcall*, bool);
  explicit held_upcall(complete_fn f) noexcept : complete_(f) {}
  ~held_upcall() = default;

 private:
  complete_fn complete_;
};

// Keeps work outstanding on the handler's executor while held, as Asio's operations do:
// a context whose only work is the held upcall does not run out of work and stop before
// the upcall is posted to it.
template <class Handler, class Executor, class... Args>
class held_upcall_for final : public held_upcall {
  using work_guard = tracked_work<Executor>;  // as a wait's

 public:
  // Whether a handler and its arguments can be held without a throw once the memory is
  // had. Asio requires a handler's move not to throw (its binders do not say noexcept);
  // the arguments' must say so.
  static constexpr bool holdable =
      (std::is_nothrow_constructible_v<std::decay_t<Args>, Args&&> && ...) &&
      (std::is_nothrow_move_constructible_v<std::decay_t<Args>> && ...);

  // Takes the handler and the arguments. Throws (the allocator's exception, or what
  // tracking the work throws) with `handler` untouched.
  template <class... A>
  static held_upcall* make(Handler& handler, const Executor& ex, A&&... args) {
    static_assert(holdable);
    return make_op<held_upcall_for>(handler, ex, std::forward<A>(args)...);
  }

  // The work is tracked first: if that throws, the handler has not moved.
  template <class... A>
  held_upcall_for(Handler&& handler, const Executor& ex, A&&... args)
      : held_upcall(&held_upcall_for::do_complete),
        work_(ex),
        handler_(std::move(handler)),
        args_(std::forward<A>(args)...) {}

 private:
  // The work is let go of after the upcall, as Asio's handler_work does.
  static void do_complete(held_upcall* base, bool invoke) {
    auto* self = static_cast<held_upcall_for*>(base);
    [[maybe_unused]] work_guard work(std::move(self->work_));  // held until the end
    Handler handler(std::move(self->handler_));
    std::tuple<std::decay_t<Args>...> args(std::move(self->args_));
    free_op(self, handler);
    if (invoke) std::apply(std::move(handler), std::move(args));
  }

  work_guard work_;
  Handler handler_;
  std::tuple<std::decay_t<Args>...> args_;
};

}  // namespace twheel::detail

#endif  // TWHEEL_DETAIL_HELD_UPCALL_HPP
