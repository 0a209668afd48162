// twheel/detail/forwarding_handler.hpp: associators for composed operations whose
// intermediate handler wraps the caller's handler in a member named `handler_`.
#ifndef TWHEEL_DETAIL_FORWARDING_HANDLER_HPP
#define TWHEEL_DETAIL_FORWARDING_HANDLER_HPP

#include <boost/asio/associator.hpp>

// Makes every associator of the intermediate handler Op<Handler, ...> that of its
// `handler_`: executor, allocator and cancellation slot follow the caller's handler.
#define TWHEEL_FORWARD_ASSOCIATORS(op_template)                                       \
  namespace boost::asio {                                                           \
  template <template <class, class> class Associator, class Handler, class State,   \
            class DefaultCandidate>                                                 \
  struct associator<Associator, op_template<Handler, State>, DefaultCandidate>      \
      : Associator<Handler, DefaultCandidate> {                                     \
    static typename Associator<Handler, DefaultCandidate>::type get(                \
        const op_template<Handler, State>& h) noexcept {                            \
      return Associator<Handler, DefaultCandidate>::get(h.handler_);                \
    }                                                                               \
    static auto get(const op_template<Handler, State>& h,                           \
                    const DefaultCandidate& c) noexcept {                           \
      return Associator<Handler, DefaultCandidate>::get(h.handler_, c);             \
    }                                                                               \
  };                                                                                \
  }

#endif  // TWHEEL_DETAIL_FORWARDING_HANDLER_HPP
