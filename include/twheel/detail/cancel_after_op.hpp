// twheel/detail/cancel_after_op.hpp: the state of one operation started through
// cancel_after: one block of memory holding the wheel entry, the timeout's wait operation
// and the cancellation signal the wrapped operation listens to.
#ifndef TWHEEL_DETAIL_CANCEL_AFTER_OP_HPP
#define TWHEEL_DETAIL_CANCEL_AFTER_OP_HPP

#include <twheel/detail/held_upcall.hpp>
#include <twheel/detail/process_threads.hpp>
#include <twheel/detail/timer_state.hpp>
#include <twheel/detail/wait_ops.hpp>
#include <twheel/wheel_service.hpp>

#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#if __has_include(<boost/asio/associated_immediate_executor.hpp>)
#include <boost/asio/associated_immediate_executor.hpp>
#endif
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/execution/blocking.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/execution/executor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/recycling_allocator.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace twheel::detail {

// Where a state keeps the upcall it holds: only a state from the handler's own
// allocator holds one (see cancel_after_state::hold_upcall).
template <bool Holds>
struct upcall_holder {};
template <>
struct upcall_holder<true> {
  held_upcall* held_ = nullptr;
};

// The post of a held upcall under way on this thread (post_upcall()), if any: an
// emit_timeout of `state` destroyed unrun meanwhile is a post that failed.
struct upcall_posting {
  const void* state;
  bool handed_back;
};
inline thread_local upcall_posting* upcall_posting_here = nullptr;

// Shared by the wrapped operation's handler and the wheel; freed by whichever of the two
// lets go last. The timeout runs on the handler's executor (Executor), where it emits.
template <class Executor, class ProtoAllocator>
class cancel_after_state
    : public wait_op,
      private upcall_holder<!std::is_same_v<ProtoAllocator, boost::asio::recycling_allocator<void>>> {
  using Allocator =
      typename std::allocator_traits<ProtoAllocator>::template rebind_alloc<cancel_after_state>;

 public:
  // The state's memory is the handler's associated allocator's, which Asio lets a handler
  // end once it has been called (a session's arena that goes with its last handler): it
  // must be freed before the upcall. When the operation completes while the wheel still
  // holds the state (the timeout fired and its emission, or its record, is queued), the
  // upcall is held until the wheel lets go, as Asio's own cancel_after waits for its
  // timer's handler. Memory from Asio's recycling allocator or the wheel's pool has no
  // such owner: the upcall is made at once, and the state freed when the wheel lets go.
  static constexpr bool holds_upcalls =
      !std::is_same_v<ProtoAllocator, boost::asio::recycling_allocator<void>>;

  using handler_executor_type = Executor;
  const Executor& handler_executor() const noexcept { return executor_; }

  cancel_after_state(wheel_service& service, Executor ex, Allocator alloc,
                     boost::asio::cancellation_type_t type)
      : wait_op(&cancel_after_state::on_timeout),
        service_(service),
        filed_{&service},
        executor_(std::move(ex)),
        allocator_(std::move(alloc)),
        type_(type) {
    set_link(&filed_);
  }

  // Makes the state and files the timeout, before the operation is initiated: filing may
  // throw (bad_alloc), and the initiating call may only throw while nothing has started.
  // Throws with nothing made or filed. Without an allocator of the handler's own, and
  // with a handler that runs in the wheel's context, the state lives in a block the
  // service recycles, taken under the lock that files it: a malloc and a free fewer per
  // operation.
  template <class Handler>
  static cancel_after_state* create_filed(wheel_service& service, const Handler& handler,
                                          const Executor& ex,
                                          boost::asio::cancellation_type_t type,
                                          std::chrono::nanoseconds deadline) {
    Allocator alloc(op_allocator(handler));
    if constexpr (poolable()) {
      // The pool's memory goes with the wheel: only a state whose emission is queued (if
      // at all) in the wheel's own context, and so destroyed by that context's shutdown
      // before the wheel (an io_context's or a thread_pool's), may live there. A handler
      // bound to another context's executor could hold the state in that context's queue
      // after the wheel is gone.
      if (service.context_queue_goes_first() && in_context_of(service, ex)) {
        return service.schedule_new<cancel_after_state>(
            deadline,
            [&](void* block) noexcept {
              auto* state = ::new (block) cancel_after_state(service, ex, alloc, type);
              state->pooled_ = true;
              return state;
            },
            [](cancel_after_state* state) noexcept { state->discard(); });
      }
    }
    using traits = std::allocator_traits<Allocator>;
    cancel_after_state* p = traits::allocate(alloc, 1);
    try {
      ::new (static_cast<void*>(p)) cancel_after_state(service, ex, alloc, type);
    } catch (...) {
      traits::deallocate(alloc, p, 1);
      throw;
    }
    try {
      service.schedule(p->entry_, deadline, p);
    } catch (...) {
      p->discard();
      throw;
    }
    return p;
  }

  // The timer_state the timeout is filed under (wheel_service::schedule_new()).
  timer_state& entry() noexcept { return entry_; }

  // The operation was initiated: its cancellation handler is installed, so the timeout
  // may emit. If it fired on another thread while the initiation was still running, it
  // left the emission to us (emit_late()). The initiating call holds its own share until
  // here: the operation may complete on another thread, and the timeout fire, before this
  // (TSan found it).
  void start() {
    int expected = initiating;
    const bool fired = !compare_exchange_if_threaded(phase_, expected, int{initiated},
                                                     std::memory_order_acq_rel);
    if (forward_failed_ && !done_.load(std::memory_order_acquire)) {
      signal().emit(boost::asio::cancellation_type::terminal);
    }
    if (fired && !done_.load(std::memory_order_acquire)) {
      emit_late();
      return;
    }
    release();
  }

  // A caller's slot met during the initiation could not be forwarded into ours (no memory
  // for the forwarder, from a noexcept path): the operation could not be cancelled through
  // it, so it is cancelled at once instead, by start(): it completes with its cancelled
  // result (operation_aborted) rather than run on deaf to its caller.
  void cancel_when_started() noexcept { forward_failed_ = true; }

  // The operation could not be initiated: the handler it was given is gone, and its
  // destruction took the timeout back (finish()). Drops the initiating call's share.
  void abandon() noexcept { release_noexcept(); }

  boost::asio::cancellation_slot slot() noexcept { return signal().slot(); }
  void emit(boost::asio::cancellation_type_t type) { signal().emit(type); }

  // The wrapped operation completed or its handler was destroyed: take the timeout out
  // of the wheel (it then never fires) and let go.
  void finish() noexcept {
    withdraw();
    release_noexcept();
  }

  // The wrapped operation completed, on the handler's executor: withdraw() and tell
  // whether anything else still holds the state (the wheel's settled timeout, or an
  // initiating call that has not returned yet). If so, the caller holds its upcall in the
  // state (hold_upcall); if not, it lets go (release_here()) and makes it.
  bool finish_shared() noexcept {
    withdraw();
    return refs_.load(std::memory_order_acquire) != 1;
  }

  // Hands the upcall to whichever share is let go of last, which makes it once the state
  // is freed, on the handler's executor (post_upcall()). Lets go of the handler's share:
  // if that is the last, the upcall is made here, now.
  void hold_upcall(held_upcall* held) {
    static_assert(holds_upcalls);
    this->held_ = held;
    release_here();
  }

  // Lets go of a share on the handler's executor: if it is the last, the state is freed
  // and the upcall it holds, if any, made here.
  void release_here() {
    if (fetch_sub_if_threaded(refs_, 1, std::memory_order_acq_rel) == 1) discard_then_upcall(true);
  }

  // The handler's associated allocator is Asio's default, and the state fits a block.
  // Public for cancel_after_test, which checks that the usual executors' states fit: one
  // that grew past the block would silently lose the pool (a malloc per operation).
  static constexpr bool poolable() noexcept {
    return std::is_same_v<ProtoAllocator, boost::asio::recycling_allocator<void>> &&
           sizeof(cancel_after_state) <= wheel_service::state_block_size &&
           alignof(cancel_after_state) <= alignof(std::max_align_t);
  }

 private:
  ~cancel_after_state() = default;

  // Takes the timeout out of the wheel, if it is still there (it then never fires).
  //
  // Once the wheel has settled the timeout (filed_ cut), there is nothing to take out,
  // and the wheel may be gone: a context of the user's own may destroy the wrapped
  // operation's handler, queued, after its services.
  void withdraw() noexcept {
    done_.store(true, std::memory_order_release);
    if (filed_.service_.load(std::memory_order_acquire) != nullptr &&
        service_.unschedule(entry_, this)) {
      release_noexcept();  // the wheel's share; not the last, the caller holds one
    }
  }

  // `ex` runs work in the wheel's own execution context (its strands included).
  static bool in_context_of(wheel_service& service, const Executor& ex) {
    if constexpr (boost::asio::execution::is_executor<Executor>::value) {
      return &boost::asio::query(ex, boost::asio::execution::context) == &service.context();
    } else {
      return false;  // an executor of the older model: not pooled
    }
  }

  // Lets go of a share off the handler's executor: if it is the last and the state holds
  // an upcall, the upcall is posted there (not made here: this may be the initiating
  // call, or the wheel's context). Throws only what the handler throws when it is made
  // here after all, or the post's bad_alloc when the upcall is stuck in what it reached
  // (post_upcall()).
  void release() { let_go(true); }

  // release() from a path that may not throw: the wheel's record destroyed unrun (its
  // context shuts down; the handler's executor may live on), or an initiation that
  // completed its handler and then threw. A held upcall is posted, never made here after
  // a failed post: it is then destroyed, as Asio destroys the handlers of a context that
  // goes away. (Only an executor that runs it at once, during the post, makes it here; a
  // throw from it is not let out.)
  void release_noexcept() noexcept { let_go(false); }

  // Throws only if `may_make_here` (post_upcall()).
  void let_go(bool may_make_here) {
    if (fetch_sub_if_threaded(refs_, 1, std::memory_order_acq_rel) != 1) return;
    if constexpr (holds_upcalls) {
      if (this->held_) {
        post_upcall(may_make_here);
        return;
      }
    }
    discard();
  }

  // Lets go of the share of an emit_timeout destroyed unrun: the handler's executor shut
  // down (or refused it): an upcall the state holds is destroyed with the handler, never
  // made, as Asio destroys the handlers a context still holds. While this thread posts
  // the held upcall, that is a post that failed: the share is handed back instead.
  void release_unrun() noexcept {
    if constexpr (holds_upcalls) {
      if (upcall_posting_here && upcall_posting_here->state == this) {
        upcall_posting_here->handed_back = true;
        return;
      }
    }
    if (fetch_sub_if_threaded(refs_, 1, std::memory_order_acq_rel) == 1) discard_then_upcall(false);
  }

  // Frees the state, then makes (invoke) or destroys the upcall it holds.
  void discard_then_upcall(bool invoke) {
    if constexpr (holds_upcalls) {
      held_upcall* held = std::exchange(this->held_, nullptr);
      discard();
      if (held) held->complete(invoke);
    } else {
      discard();
    }
  }

  // The last share was let go of off the handler's executor, with an upcall held: the
  // state is taken back (a share for the upcall) and the upcall posted to the executor
  // (emit_timeout, which finds the operation done and only lets go, there). If the post
  // fails, before or after it took the function (an executor that allocates its own
  // wrapper destroys it then: release_unrun() hands the share back), the upcall is made
  // here rather than lost. An executor that runs the function at once (it cannot promise
  // never to block) makes the upcall here too; what the handler throws leaves. Unless
  // `may_make_here` is false (release_noexcept()): nothing leaves, and the upcall is
  // destroyed if the post fails.
  [[gnu::cold, gnu::noinline]] void post_upcall(bool may_make_here) {
    refs_.store(1, std::memory_order_relaxed);
    emit_timeout upcall(this);
    upcall_posting posting{this, false};
    upcall_posting* const outer = std::exchange(upcall_posting_here, &posting);
    try {
      if constexpr (boost::asio::execution::is_executor<Executor>::value) {
        // prefer, not require: an executor that only runs work at once runs it here.
        boost::asio::prefer(executor_, boost::asio::execution::blocking.never)
            .execute(std::move(upcall));
      } else {
        boost::asio::post(executor_, std::move(upcall));  // an executor of the older model
      }
    } catch (...) {
      upcall_posting_here = outer;
      // Taken: made here, and it threw; or queued where it is stuck (a strand whose
      // invoker could not be scheduled, Asio's), which the bad_alloc reports.
      if (!upcall.holds() && !posting.handed_back) {
        if (may_make_here) throw;
        return;
      }
    }
    upcall_posting_here = outer;
    // Posted, or made here (the state is freed then): nothing more to do.
    if (!upcall.holds() && !posting.handed_back) return;
    upcall.forget();
    refs_.store(0, std::memory_order_relaxed);
    discard_then_upcall(may_make_here);
  }

  // Destroys the state and frees its memory: nothing holds it any more (or the timeout
  // could not be filed, and nothing else ever did).
  void discard() noexcept {
    if constexpr (poolable()) {
      if (pooled_) {
        wheel_service& service = service_;
        park_handler(signal().slot());
        this->~cancel_after_state();
        service.free_state_block(this);
        return;
      }
    }
    Allocator alloc(allocator_);
    this->~cancel_after_state();
    std::allocator_traits<Allocator>::deallocate(alloc, this, 1);
  }

  // What the wrapped operation listens to: the block's own signal when pooled (see
  // wheel_service::state_block_signal), else the state's.
  boost::asio::cancellation_signal& signal() noexcept {
    if constexpr (poolable()) {
      if (pooled_) return wheel_service::state_block_signal(this);
    }
    return own_signal_;
  }

  // Destroys the cancellation handler the operation installed, as destroying the signal
  // would, but keeps its memory in the signal for the block's next operation: a no-op
  // handler takes its place in that memory (Asio's slot reuses a handler's memory that is
  // big enough; this one needs the least any handler has). Were memory needed after all,
  // the handler is cleared instead, as before.
  struct parked_handler {
    void operator()(boost::asio::cancellation_type_t) const noexcept {}
  };
  static void park_handler(boost::asio::cancellation_slot slot) noexcept {
    if (!slot.has_handler()) return;
    try {
      slot.template emplace<parked_handler>();
    } catch (...) {
      slot.clear();
    }
  }

  // Whether what dispatch() threw came from the emission itself: dispatch() ran it on this
  // thread (the handler's strand was here, or its executor runs work at once) and the
  // operation's cancellation handler threw. That is the caller's exception, as an
  // emission's always is: not a dispatch that failed, so not emitted again.
  bool emission_threw() const noexcept {
    return phase_.load(std::memory_order_relaxed) == emitted;
  }

  // Emits a timeout that fired during the initiation, on the handler's executor as every
  // emission: the initiating thread may be outside the handler's strand. dispatch() emits
  // at once if this thread is already there. Takes over the initiating call's share.
  [[gnu::cold, gnu::noinline]] void emit_late() {
    fetch_add_if_threaded(refs_, 1, std::memory_order_relaxed);  // kept if dispatch() throws
    try {
      boost::asio::dispatch(executor_, emit_timeout{this});
    } catch (...) {
      if (emission_threw()) {
        release();
        throw;
      }
      // It cannot get there (no memory): emitted here rather than lost.
      if (!done_.load(std::memory_order_acquire)) signal().emit(type_);
    }
    release();
  }

  static void on_timeout(wait_op* base, bool invoke) {
    auto* self = static_cast<cancel_after_state*>(base);
    if (!invoke) {
      // Destroyed unrun: the wheel shut down, or the context destroyed the timeout's
      // record, or it was filed after shutdown (and never settled): finish() must not
      // reach for the wheel, which may be gone before the handler.
      // An upcall held here goes to the handler's executor, which may live on.
      self->filed_.service_.store(nullptr, std::memory_order_release);
      self->release_noexcept();
      return;
    }
    if (self->done_.load(std::memory_order_acquire)) {
      // The operation completed; its upcall may be held here (hold_upcall).
      if (self->service_.runs_inline(self->executor_)) {
        self->release_here();
      } else {
        self->release();
      }
      return;
    }
    // Emit on the operation's executor: cancellation slots are not thread-safe. If it is
    // the executor the wheel's records run on (runs_inline, as for inline waits), we are
    // there: emit now. That is what dispatch() would do, without the memory it takes
    // through a type-erased executor, whose failure would lose the timeout.
    if (self->service_.runs_inline(self->executor_)) {
      emit_timeout{self}();
      return;
    }
    // Elsewhere (a strand, another context): dispatch, which allocates. If it cannot,
    // the timeout is filed again a millisecond later rather than lost; if even that
    // cannot allocate, run() throws bad_alloc and the operation runs on without its
    // timeout (Asio's own timers lose their handler there too).
    fetch_add_if_threaded(self->refs_, 1, std::memory_order_relaxed);  // the retry's share
    try {
      boost::asio::dispatch(self->executor_, emit_timeout{self});
    } catch (const std::bad_alloc&) {
      // The wheel's share went with the emit_timeout given to dispatch(): let go of,
      // or held by what dispatch() queued before it failed (a strand's queue).
      if (self->emission_threw()) {
        self->release();
        throw;
      }
      self->retry_timeout();
      return;
    } catch (...) {
      // The emission, run here, threw (the caller's exception), or the executor refused
      // the work: the retry's share is not needed.
      self->release();
      throw;
    }
    self->release();
  }

  // Files the timeout again, a millisecond later, under the retry's share (which takes
  // the place of the wheel's). Linked again, so that finish() takes the retry out.
  void retry_timeout() {
    filed_.service_.store(&service_, std::memory_order_relaxed);
    set_link(&filed_);
    try {
      service_.schedule(entry_,
                        service_.wheel_time(std::chrono::steady_clock::now() +
                                            std::chrono::milliseconds(1)),
                        this);
    } catch (...) {
      // Not filed: finish() has nothing to take out, and must not reach for the wheel,
      // which a context of the user's own may destroy before the operation's handler.
      filed_.service_.store(nullptr, std::memory_order_release);
      release();
      throw;
    }
  }

  // Holds a share of the state (the wheel's, or a held upcall's) on the handler's
  // executor until it has emitted, or until it is destroyed unrun (its executor's context
  // shut down first, or the executor refused it).
  class emit_timeout {
   public:
    explicit emit_timeout(cancel_after_state* self) noexcept : self_(self) {}
    emit_timeout(emit_timeout&& other) noexcept : self_(std::exchange(other.self_, nullptr)) {}
    emit_timeout& operator=(emit_timeout&&) = delete;
    ~emit_timeout() {
      if (self_) self_->release_unrun();
    }
    bool holds() const noexcept { return self_ != nullptr; }
    void forget() noexcept { self_ = nullptr; }

    // Emits unless the operation is done, then lets go here: if that is the last share,
    // the upcall the state holds is made.
    void operator()() {
      cancel_after_state* self = std::exchange(self_, nullptr);
      if constexpr (holds_upcalls) {
        // Run by the executor inside the post: not a post that failed, whatever an
        // emit_timeout of a state at this address does during the upcall.
        if (upcall_posting_here && upcall_posting_here->state == self) {
          upcall_posting_here->state = nullptr;
        }
      }
      int expected = initiating;
      // Still initiating (on another thread): the operation may not listen yet; start()
      // emits instead.
      if (!self->done_.load(std::memory_order_acquire) &&
          !compare_exchange_if_threaded(self->phase_, expected, int{fired_early},
                                        std::memory_order_acq_rel)) {
        self->phase_.store(emitted, std::memory_order_relaxed);
        try {
          self->signal().emit(self->type_);
        } catch (...) {
          self->release();  // the operation's cancellation handler threw
          throw;
        }
      }
      self->release_here();
    }

   private:
    cancel_after_state* self_;
  };

  wheel_service& service_;
  wait_link filed_;  // cut by the wheel when it settles the timeout's wait
  timer_state entry_;
  boost::asio::cancellation_signal own_signal_;  // unused when pooled_
  Executor executor_;
  Allocator allocator_;
  boost::asio::cancellation_type_t type_;
  std::atomic<int> refs_{3};  // the wrapped handler, the wheel's wait, the initiating call
  std::atomic<bool> done_{false};
  // emitted: an emit_timeout has called the operation's cancellation handler.
  enum : int { initiating, initiated, fired_early, emitted };
  std::atomic<int> phase_{initiating};
  bool forward_failed_ = false;  // set and read on the initiating thread
  bool pooled_ = false;          // in a block of the wheel's pool, not from allocator_
};

// Installed in a caller's cancellation slot: forwards what the caller emits into the
// slot the operation listens to.
template <class State>
struct cancel_forwarder {
  explicit cancel_forwarder(State* s) noexcept : state(s) {}  // C++17: no paren aggregate init
  State* state;
  void operator()(boost::asio::cancellation_type_t type) { state->emit(type); }
};

// The handler the wrapped operation sees: the caller's handler, with our signal's slot as
// its cancellation slot. Forwards the caller's slot into ours, so both can cancel.
template <class Handler, class State>
class cancel_after_handler {
 public:
  using cancellation_slot_type = boost::asio::cancellation_slot;

  // The handler's own slot, if any, was forwarded into the state's by the initiation
  // (cancel_after_initiation): emplacing allocates, which this constructor may not.
  cancel_after_handler(Handler&& handler, State* state) noexcept
      : handler_(std::move(handler)), state_(state) {}

  cancel_after_handler(cancel_after_handler&& other) noexcept
      : handler_(std::move(other.handler_)),
        state_(std::exchange(other.state_, nullptr)),
        bound_(std::exchange(other.bound_, boost::asio::cancellation_slot())) {}

  cancel_after_handler(const cancel_after_handler&) = delete;
  cancel_after_handler& operator=(const cancel_after_handler&) = delete;
  cancel_after_handler& operator=(cancel_after_handler&&) = delete;

  ~cancel_after_handler() {
    if (state_) release_state();
  }

  cancellation_slot_type get_cancellation_slot() const noexcept {
    return state_ ? state_->slot() : cancellation_slot_type();
  }

  // The operation sees this handler through a cancellation_slot_binder that binds the
  // caller's `slot` to it (bind_cancellation_slot(slot, cancel_after(...)): the binder is
  // made by Asio's adapter around our initiation, in every Asio version). Forwards `slot`
  // into ours (until this operation completes) and returns ours, so that both the caller
  // and the timeout reach the operation. Called through associated_cancellation_slot.
  //
  // Forwarding allocates the forwarder (in Asio's recycling allocator) the first time a
  // slot is met, from this noexcept path: asked again for the same slot, nothing is
  // done. If it cannot allocate, the operation is cancelled as soon as its initiation
  // returns (cancel_when_started): it ends with its cancelled result instead of running
  // unreachable by its caller, and nothing calls std::terminate.
  cancellation_slot_type bind_outer_slot(boost::asio::cancellation_slot slot) const noexcept {
    if (!state_) return slot;
    if (slot.is_connected() && slot != state_->slot() && slot != bound_) {
      if (bound_.is_connected()) bound_.clear();
      bound_ = boost::asio::cancellation_slot();
      try {
        slot.template emplace<cancel_forwarder<State>>(state_);
        bound_ = slot;
      } catch (const std::bad_alloc&) {
        state_->cancel_when_started();
      }
    }
    return state_->slot();
  }

  // The state is freed before the upcall (see cancel_after_state::holds_upcalls): if the
  // wheel still holds it, the upcall waits in it for the wheel to let go. Without the
  // memory to hold the upcall, it is made now and the state freed after it, as before.
  template <class... Args>
  void operator()(Args&&... args) {
    using held_type =
        held_upcall_for<Handler, typename State::handler_executor_type, Args&&...>;
    if constexpr (State::holds_upcalls && held_type::holdable) {
      State* state = take_state();
      if (state->finish_shared()) {
        held_upcall* held = nullptr;
        try {
          held = held_type::make(handler_, state->handler_executor(),
                                 std::forward<Args>(args)...);
        } catch (...) {  // the allocator's exception: the upcall is made now
        }
        if (held) {
          state->hold_upcall(held);
          return;
        }
      }
      state->release_here();
    } else {
      release_state();
    }
    std::move(handler_)(std::forward<Args>(args)...);
  }

  Handler handler_;

 private:
  State* take_state() noexcept {
    auto outer = boost::asio::get_associated_cancellation_slot(handler_);
    if (outer.is_connected()) outer.clear();
    if (bound_.is_connected()) bound_.clear();
    return std::exchange(state_, nullptr);
  }
  void release_state() noexcept { take_state()->finish(); }

  State* state_;
  // A caller's slot bound around this handler, forwarded into ours (see bind_outer_slot).
  mutable boost::asio::cancellation_slot bound_;
};

}  // namespace twheel::detail

namespace boost::asio {

template <class Handler, class State, class Executor>
struct associated_executor<twheel::detail::cancel_after_handler<Handler, State>, Executor> {
  using type = associated_executor_t<Handler, Executor>;
  static type get(const twheel::detail::cancel_after_handler<Handler, State>& h,
                  const Executor& ex = Executor()) noexcept {
    return get_associated_executor(h.handler_, ex);
  }
};

template <class Handler, class State, class Allocator>
struct associated_allocator<twheel::detail::cancel_after_handler<Handler, State>, Allocator> {
  using type = associated_allocator_t<Handler, Allocator>;
  static type get(const twheel::detail::cancel_after_handler<Handler, State>& h,
                  const Allocator& a = Allocator()) noexcept {
    return get_associated_allocator(h.handler_, a);
  }
};

#if __has_include(<boost/asio/associated_immediate_executor.hpp>)
// Asio 1.28 (Boost 1.82) on: an operation that completes within its initiation runs the
// handler on its immediate executor. The caller's (bind_immediate_executor) is seen
// through the wrapper, as Asio's own cancel_after lets the operation see it.
template <class Handler, class State, class Executor>
struct associated_immediate_executor<twheel::detail::cancel_after_handler<Handler, State>,
                                     Executor> {
  using type = typename associated_immediate_executor<Handler, Executor>::type;
  static decltype(auto) get(const twheel::detail::cancel_after_handler<Handler, State>& h,
                            const Executor& ex) noexcept {
    return associated_immediate_executor<Handler, Executor>::get(h.handler_, ex);
  }
};
#endif

// bind_cancellation_slot(slot, twheel::cancel_after(...)): the operation is handed
// cancellation_slot_binder<cancel_after_handler, Slot>, whose own associated slot (the
// caller's) would hide the timeout's. This more specialized association answers the
// timeout's slot instead, with the caller's forwarded into it. Public interface only
// (cancellation_slot_binder and associated_cancellation_slot are unchanged from Asio 1.26
// to 1.36), so it is not in asio_compat.hpp.
template <class Handler, class State, class CancellationSlot, class CancellationSlot1>
struct associated_cancellation_slot<
    cancellation_slot_binder<twheel::detail::cancel_after_handler<Handler, State>,
                             CancellationSlot>,
    CancellationSlot1> {
  using type = cancellation_slot;
  static type get(const cancellation_slot_binder<
                      twheel::detail::cancel_after_handler<Handler, State>, CancellationSlot>& b,
                  const CancellationSlot1& = CancellationSlot1()) noexcept {
    return b.get().bind_outer_slot(b.get_cancellation_slot());
  }
};

}  // namespace boost::asio

#endif  // TWHEEL_DETAIL_CANCEL_AFTER_OP_HPP
