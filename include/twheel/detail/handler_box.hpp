// twheel/detail/handler_box.hpp: a wait's handler stored by value in a fixed 16 bytes,
// inside the timer while it waits and inside the completion queue once it is settled.
//
// Why: allocating an operation per wait costs a malloc and a free, and completing it
// touches one more cold cache line per handler. Small handlers (a lambda capturing a
// pointer or two, a shared_ptr) fit here, so a re-arm moves 16 bytes from the timer's own
// cache line into the contiguous queue and nothing is allocated. So do small handlers
// bound to the executor the wheel runs on (bind_executor(ctx.get_executor(), h), a
// coroutine's): the wheel's drain runs there already. Larger handlers, handlers with an
// allocator or cancellation slot of their own, and handlers bound to any other executor
// (a strand) still get an operation allocated through their associated allocator
// (wait_ops.hpp); the box then holds the pointer to it.
#ifndef TWHEEL_DETAIL_HANDLER_BOX_HPP
#define TWHEEL_DETAIL_HANDLER_BOX_HPP

#include <twheel/detail/executor_traits.hpp>
#include <twheel/detail/op_queue.hpp>

#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/system/error_code.hpp>

#include <cstddef>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

namespace twheel::detail {

inline boost::system::error_code error_of(wait_result result) noexcept {
  switch (result) {
    case wait_result::success: return {};
    case wait_result::aborted: return boost::asio::error::operation_aborted;
    case wait_result::no_buffer_space: return boost::asio::error::no_buffer_space;
  }
  return {};
}

// What a box knows about the type it holds.
struct box_vtable {
  // Move-constructs the content at `to` and destroys it at `from`.
  void (*relocate)(unsigned char* from, unsigned char* to) noexcept;
  // Consumes the content: invokes the handler with `result` if `invoke`, and destroys it.
  void (*complete)(unsigned char* storage, wait_result result, bool invoke);
  // The content may be moved as bytes (a lambda capturing pointers): take() then copies
  // the storage instead of calling relocate, twice per re-arm.
  bool trivial;
};

class handler_box {
 public:
  static constexpr std::size_t capacity = 16;

  handler_box() noexcept = default;
  handler_box(const handler_box&) = delete;
  handler_box& operator=(const handler_box&) = delete;

  bool empty() const noexcept { return vt_ == nullptr; }

  // Takes the content of `other` (this box must be empty); `other` ends up empty.
  void take(handler_box& other) noexcept {
    vt_ = std::exchange(other.vt_, nullptr);
    if (vt_ == nullptr) return;
    if (vt_->trivial) {
      std::memcpy(storage_, other.storage_, capacity);
    } else {
      vt_->relocate(other.storage_, storage_);
    }
  }

  template <class Handler>
  void emplace(Handler&& handler) noexcept;
  // Holds an allocated operation (wait_ops.hpp), already settled with its result.
  void emplace_op(wait_op* op) noexcept;

  // Moves the content, a Handler, out (the box ends up empty).
  template <class Handler>
  Handler release() noexcept;

  // Consumes the content (the box ends up empty): invokes it with `result` if `invoke`.
  void complete(wait_result result, bool invoke) {
    const box_vtable* vt = std::exchange(vt_, nullptr);
    vt->complete(storage_, result, invoke);
  }

 private:
  const box_vtable* vt_ = nullptr;
  alignas(8) unsigned char storage_[capacity];
};

struct no_executor_association {};
struct no_allocator_association {};

template <class Handler>
inline constexpr bool has_own_executor =
    !std::is_same_v<boost::asio::associated_executor_t<Handler, no_executor_association>,
                    no_executor_association>;

// Small, nothrow-movable, and with no associated allocator (nothing of theirs to allocate
// with).
template <class Handler>
inline constexpr bool box_sized =
    sizeof(Handler) <= handler_box::capacity && alignof(Handler) <= 8 &&
    std::is_nothrow_move_constructible_v<Handler> &&
    std::is_same_v<boost::asio::associated_allocator_t<Handler, no_allocator_association>,
                   no_allocator_association>;

// Handlers that may live in a box whenever their timer's executor is the wheel's: box-sized,
// with no associated executor of their own (they run on the timer's executor).
template <class Handler>
inline constexpr bool fits_in_box = box_sized<Handler> && !has_own_executor<Handler>;

// Box-sized handlers with an executor of their own (use_awaitable's, for one): boxed when
// that executor is, at the wait's start, the one the wheel runs on.
template <class Handler>
inline constexpr bool fits_in_box_if_inline = box_sized<Handler> && has_own_executor<Handler>;

// bind_executor(ex, h) with h fits_in_box: when `ex` is the wheel's, h alone is boxed (the
// binder, h plus an executor, is too big for the box), which is what running it on `ex`
// from the wheel's drain means. Never a strand (the wheel runs on none): not compared.
template <class Handler>
struct boxable_binder : std::false_type {};
template <class T, class Executor>
struct boxable_binder<boost::asio::executor_binder<T, Executor>>
    : std::bool_constant<fits_in_box<T> && !is_strand<Executor>::value> {};

template <class Handler>
struct boxed_handler {
  static Handler* get(unsigned char* storage) noexcept {
    return std::launder(reinterpret_cast<Handler*>(storage));
  }
  static void relocate(unsigned char* from, unsigned char* to) noexcept {
    Handler* h = get(from);
    ::new (static_cast<void*>(to)) Handler(std::move(*h));
    h->~Handler();
  }
  static void complete(unsigned char* storage, wait_result result, bool invoke) {
    Handler* h = get(storage);
    // The storage is released before the upcall (Asio's rule): move the handler out.
    Handler handler(std::move(*h));
    h->~Handler();
    if (invoke) std::move(handler)(error_of(result));
  }
  static constexpr box_vtable vtable{
      &relocate, &complete,
      std::is_trivially_copyable_v<Handler> && std::is_trivially_destructible_v<Handler>};
};

template <class Handler>
void handler_box::emplace(Handler&& handler) noexcept {
  using H = std::decay_t<Handler>;
  static_assert(box_sized<H>);
  ::new (static_cast<void*>(storage_)) H(std::move(handler));
  vt_ = &boxed_handler<H>::vtable;
}

template <class Handler>
Handler handler_box::release() noexcept {
  Handler* h = boxed_handler<Handler>::get(storage_);
  Handler out(std::move(*h));
  h->~Handler();
  vt_ = nullptr;
  return out;
}

struct boxed_op {
  static wait_op* get(unsigned char* storage) noexcept {
    wait_op* op;
    std::memcpy(&op, storage, sizeof op);
    return op;
  }
  static void relocate(unsigned char* from, unsigned char* to) noexcept {
    std::memcpy(to, from, sizeof(wait_op*));
  }
  static void complete(unsigned char* storage, wait_result, bool invoke) {
    wait_op* op = get(storage);  // its result was recorded when it settled
    if (invoke) {
      op->complete();
    } else {
      op->destroy();
    }
  }
  static constexpr box_vtable vtable{&relocate, &complete, true};
};

inline void handler_box::emplace_op(wait_op* op) noexcept {
  std::memcpy(storage_, &op, sizeof op);
  vt_ = &boxed_op::vtable;
}

}  // namespace twheel::detail

#endif  // TWHEEL_DETAIL_HANDLER_BOX_HPP
