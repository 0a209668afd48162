// example/percentiles.hpp: the servers' one-line summary of a set of lateness samples.
#ifndef TWHEEL_EXAMPLE_PERCENTILES_HPP
#define TWHEEL_EXAMPLE_PERCENTILES_HPP

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

// "min .. p50 .. p99 .. max .. ms (n=..)" of `values` (sorted here), or "none".
inline std::string percentiles(std::vector<double> values) {
  if (values.empty()) return "none";
  std::sort(values.begin(), values.end());
  auto at = [&](double p) {
    return values[std::min(values.size() - 1, static_cast<std::size_t>(p / 100 * values.size()))];
  };
  char text[160];
  std::snprintf(text, sizeof text, "min %.3f p50 %.3f p99 %.3f max %.3f ms (n=%zu)",
                values.front(), at(50), at(99), values.back(), values.size());
  return text;
}

#endif  // TWHEEL_EXAMPLE_PERCENTILES_HPP
