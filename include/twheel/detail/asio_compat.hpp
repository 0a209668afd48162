// twheel/detail/asio_compat.hpp: the one place where twheel reads Asio internals that
// differ between the Asio versions it supports (Boost 1.81 to 1.89, Asio 1.26 to 1.36).
// Everything else in twheel uses Asio's public interface only.
//
// io_executor_of(initiation, args...) finds the I/O executor of an operation started with
// twheel::cancel_after(...) as its completion token, also when other token adapters are
// wrapped around cancel_after (as_tuple, redirect_error, bind_executor, bind_allocator,
// bind_cancellation_slot, bind_immediate_executor, append, prepend, consign). Each of
// those adapters hands cancel_after's async_result an initiation of its own, and whether
// that initiation shows the operation's I/O executor depends on the Asio version:
//
//   Asio 1.32 (Boost 1.86) and later: the adapters' initiations derive from
//     detail::initiation_base<Initiation>, that is from the wrapped initiation itself, so
//     its public get_executor() is seen through them. Nothing internal is read.
//   Asio 1.26 to 1.31 (Boost 1.81 to 1.85): the adapters' initiations do not forward
//     get_executor(). They keep the wrapped initiation in a data member `initiation_`
//     (every adapter of 1.26; every adapter but redirect_error in 1.28), or, like
//     redirect_error from Asio 1.28 (Boost 1.82), receive it as their first argument,
//     before the operation's own arguments. Both shapes are unwrapped here, only on these
//     versions.
//
// cancel_after_test's `asio_compat` suite checks io_executor_of through every adapter on
// the Asio it is built with, so the matrix (scripts/asio_matrix.sh) fails by name on the
// version where one of these shapes changes. Boost 1.84 and 1.85 are not in the matrix.
//
// Where no executor can be seen, io_executor_of returns boost::asio::system_executor, and
// cancel_after falls back to the handler's associated executor (see cancel_after.hpp).
#ifndef TWHEEL_DETAIL_ASIO_COMPAT_HPP
#define TWHEEL_DETAIL_ASIO_COMPAT_HPP

#include <boost/asio/system_executor.hpp>
#include <boost/asio/version.hpp>

#include <type_traits>
#include <utility>

namespace twheel::detail::compat {

template <class T, class = void>
struct has_get_executor : std::false_type {};
template <class T>
struct has_get_executor<T, std::void_t<decltype(std::declval<const T&>().get_executor())>>
    : std::true_type {};

#if BOOST_ASIO_VERSION >= 103200

/// True where io_executor_of() reads adapter internals.
inline constexpr bool reads_adapter_internals = false;

// Asio 1.32 and later: public get_executor() only.
template <class Initiation, class... Args>
auto io_executor_of(const Initiation& init, const Args&...) {
  if constexpr (has_get_executor<Initiation>::value) {
    return init.get_executor();
  } else {
    return boost::asio::system_executor();
  }
}

#else  // BOOST_ASIO_VERSION < 103200

/// True where io_executor_of() reads adapter internals.
inline constexpr bool reads_adapter_internals = true;

// Asio 1.26 to 1.31: an adapter's initiation wrapper that keeps the wrapped initiation
// in a member `initiation_`.
template <class T, class = void>
struct has_inner_initiation : std::false_type {};
template <class T>
struct has_inner_initiation<T, std::void_t<decltype(std::declval<const T&>().initiation_)>>
    : std::true_type {};

// Asio 1.28 to 1.31: redirect_error's wrapper receives the wrapped initiation as its
// first argument; that argument is itself an initiation (it shows an executor, or is
// another adapter's wrapper).
template <class T>
inline constexpr bool is_wrapped_initiation_v =
    has_get_executor<T>::value || has_inner_initiation<T>::value;

template <class Initiation, class... Args>
auto io_executor_of(const Initiation& init, const Args&... args);

template <class First, class... Rest>
auto io_executor_of_first_arg(const First& first, const Rest&... rest) {
  if constexpr (is_wrapped_initiation_v<First>) {
    return io_executor_of(first, rest...);
  } else {
    return boost::asio::system_executor();
  }
}

template <class Initiation, class... Args>
auto io_executor_of(const Initiation& init, const Args&... args) {
  if constexpr (has_get_executor<Initiation>::value) {
    return init.get_executor();
  } else if constexpr (has_inner_initiation<Initiation>::value) {
    return io_executor_of(init.initiation_, args...);
  } else if constexpr (BOOST_ASIO_VERSION >= 102800 && sizeof...(Args) > 0) {
    return io_executor_of_first_arg(args...);
  } else {
    return boost::asio::system_executor();
  }
}

#endif  // BOOST_ASIO_VERSION >= 103200

}  // namespace twheel::detail::compat

#endif  // TWHEEL_DETAIL_ASIO_COMPAT_HPP
