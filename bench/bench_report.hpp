// bench_report.hpp: what the comparison benchmarks (bench_timers, bench_threads,
// bench_adapters) share: medians of repetitions, the table row with its ratio, the sizes and repetitions
// of a run, and the "csv," lines that scripts/bench.sh collects into out/bench.csv.
//
// A row compares boost::asio::steady_timer ("asio") with twheel on one workload at one
// size. The ratio is oriented so that > 1 means twheel is better (asio/twheel for times
// and sizes, twheel/asio for rates). A value that does not exist for one side (a twheel
// counter with no Asio counterpart) is NaN: "-" in the table, empty in the CSV.
#ifndef TWHEEL_BENCH_REPORT_HPP
#define TWHEEL_BENCH_REPORT_HPP

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace bench {

inline constexpr double na = std::numeric_limits<double>::quiet_NaN();

inline double median(std::vector<double> v) {
  if (v.empty()) return na;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// Half the range relative to the median, in percent: a rough spread of repetitions.
inline double spread_pct(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  const double med = median(v);
  return med == 0 ? 0 : 50.0 * (*hi - *lo) / med;
}

inline std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

enum class better { lower, higher, none };

struct row {
  std::string workload;
  std::size_t n = 0;
  double asio = na;
  double twheel = na;
  double ratio = na;
  std::string unit;  // short, for the CSV
  std::string note;  // longer, for the table
  double asio_spread = na;  // NaN: not from repetitions
  double twheel_spread = na;
};

inline void print_header() {
  std::printf("%-17s %9s %19s %19s %9s  %s\n", "workload", "N", "asio", "twheel", "ratio",
              "unit");
}

inline void print_value(double v, double spread) {
  if (std::isnan(v)) {
    std::printf(" %12s %6s", "-", "");
  } else {
    std::printf(std::fabs(v) < 10 ? " %12.2f" : " %12.1f", v);
    if (std::isnan(spread)) {
      std::printf(" %6s", "");
    } else {
      std::printf(" ±%4.1f%%", spread);
    }
  }
}

// Collects rows, prints each as it comes (so that a long run shows progress) and all of
// them again as CSV at the end.
class report {
 public:
  const row& add(row r, better b) {
    if (!std::isnan(r.asio) && !std::isnan(r.twheel) && r.asio > 0 && r.twheel > 0) {
      if (b == better::lower) r.ratio = r.asio / r.twheel;
      if (b == better::higher) r.ratio = r.twheel / r.asio;
    }
    std::printf("%-17s %9zu", r.workload.c_str(), r.n);
    print_value(r.asio, r.asio_spread);
    print_value(r.twheel, r.twheel_spread);
    if (std::isnan(r.ratio)) {
      std::printf(" %9s", "-");
    } else {
      std::printf(" %8.2fx", r.ratio);
    }
    std::printf("  %s %s\n", r.unit.c_str(), r.note.c_str());
    std::fflush(stdout);
    rows_.push_back(std::move(r));
    return rows_.back();
  }

  // From the samples of the repetitions: medians, with their spread.
  const row& add(const std::string& workload, std::size_t n, const std::vector<double>& a,
                 const std::vector<double>& t, const std::string& unit, const std::string& note,
                 better b) {
    return add(row{workload, n, median(a), median(t), na, unit, note,
                   a.size() < 2 ? na : spread_pct(a), t.size() < 2 ? na : spread_pct(t)},
               b);
  }

  // csv,workload,n,asio,twheel,ratio,unit
  void print_csv() const {
    for (const auto& r : rows_) {
      std::printf("csv,%s,%zu,%s,%s,%s,%s\n", r.workload.c_str(), r.n, csv(r.asio).c_str(),
                  csv(r.twheel).c_str(), csv(r.ratio).c_str(), r.unit.c_str());
    }
  }

 private:
  static std::string csv(double v) {
    if (std::isnan(v)) return "";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.4f", v);
    return buf;
  }

  std::vector<row> rows_;
};

// --sizes n1,n2,...: the numbers of pending timers to run at.
inline std::vector<std::size_t> parse_sizes(const std::string& s) {
  std::vector<std::size_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(std::strtoull(item.c_str(), nullptr, 10));
  }
  return out;
}

// --workloads w1,w2,...: the names in a comma-separated list (empty items dropped).
inline std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

inline bool wants(const std::vector<std::string>& list, const char* w) {
  return std::find(list.begin(), list.end(), w) != list.end();
}

// What was not given on the command line: 10,000 / 100,000 (quick) or up to 1,000,000
// timers, medians of 3 (quick) or 5 repetitions.
inline void default_run_shape(bool quick, std::vector<std::size_t>& sizes, int& reps) {
  if (sizes.empty()) {
    sizes = quick ? std::vector<std::size_t>{10'000, 100'000}
                  : std::vector<std::size_t>{10'000, 100'000, 1'000'000};
  }
  if (reps <= 0) reps = quick ? 3 : 5;
}

}  // namespace bench

#endif  // TWHEEL_BENCH_REPORT_HPP
