// libFuzzer target for the core wheel: the input is a program of insert / remove /
// reschedule / advance steps, checked against a reference model after every step.
#include <twheel/timing_wheel.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

namespace {

struct item : twheel::wheel_entry {
  int id = 0;
  bool overdue = false;  // already due when filed: detached in filing order, not by tick
};

constexpr int pool_size = 64;

// advance()'s visitor: records each entry, in order, with whether it is done with it (ids
// with bit 0 set are left in the batch).
struct visit_log {
  std::vector<std::pair<item*, bool>> seen;
  bool all_detached = true;
  static bool visit(void* log, twheel::wheel_entry& entry) noexcept {
    auto& l = *static_cast<visit_log*>(log);
    auto& e = static_cast<item&>(entry);
    if (!e.is_detached() || e.is_pending()) l.all_detached = false;
    const bool done = (e.id & 1) == 0;
    l.seen.emplace_back(&e, done);
    return done;
  }
};

// Pulls little-endian integers from the input; zeros once it runs out.
class reader {
 public:
  reader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  std::uint64_t take(int bytes) {
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) {
      v |= static_cast<std::uint64_t>(pos_ < size_ ? data_[pos_] : 0) << (8 * i);
      ++pos_;
    }
    return v;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

void fail(const char* what, int line) {
  std::fprintf(stderr, "fuzz_timing_wheel: check failed at line %d: %s\n", line, what);
  std::abort();
}

#define check(cond) ((cond) ? void(0) : fail(#cond, __LINE__))

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  reader in(data, size);
  // The first bytes pick the geometry: few levels and odd ticks reach the edge cases.
  const unsigned levels = 1 + static_cast<unsigned>(in.take(1) % 4);
  const std::int64_t tick_ns = 1 + static_cast<std::int64_t>(in.take(1) % 7);
  twheel::timing_wheel wheel(twheel::wheel_config{std::chrono::nanoseconds(tick_ns), levels});
  const auto ceil_tick = [&](std::int64_t ns) -> std::uint64_t {
    return ns <= 0 ? 0 : static_cast<std::uint64_t>((ns - 1) / tick_ns) + 1;
  };

  std::vector<item> items(pool_size);
  std::map<int, std::uint64_t> model;  // pending item -> deadline tick
  for (int i = 0; i < pool_size; ++i) items[i].id = i;
  std::int64_t now = 0;
  const std::int64_t span = tick_ns << (6 * levels);

  while (!in.empty()) {
    const auto op = in.take(1);
    item& it = items[in.take(1) % pool_size];
    // Deadlines: mostly near, sometimes around the top level's span, sometimes far.
    const auto raw = static_cast<std::int64_t>(in.take(2));
    std::int64_t delta = raw % (4 * tick_ns * 64);
    if (op & 0x40) delta = span - 2 * tick_ns + raw % (4 * tick_ns);
    if (op & 0x80) delta = raw * 977 * tick_ns;
    switch (op % 5) {
      case 0:
        if (!model.count(it.id)) {
          const auto before = wheel.next_expiry();
          const auto floor = wheel.insert(it, std::chrono::nanoseconds(now + delta - tick_ns));
          // next_expiry() was not lowered below what insert() reports (or was already).
          const auto after = wheel.next_expiry();
          check(after && (*after >= floor || (before && *after >= *before)));
          model[it.id] = ceil_tick(now + delta - tick_ns);
          it.overdue = model[it.id] <= wheel.current_tick();
        }
        break;
      case 1:
        check(wheel.remove(it) == (model.erase(it.id) == 1));
        break;
      case 2:
        if (!model.count(it.id) || ceil_tick(now + delta) < model[it.id]) {
          it.overdue = ceil_tick(now + delta) <= wheel.current_tick();
        }
        {
          const auto before = wheel.next_expiry();
          const auto floor = wheel.reschedule(it, std::chrono::nanoseconds(now + delta));
          const auto after = wheel.next_expiry();
          check(after && (*after >= floor || (before && *after >= *before)));
        }
        model[it.id] = ceil_tick(now + delta);
        break;
      default: {
        // Big jumps cross many slots; with few levels every parked entry re-files on the
        // way, so keep them rare enough for the fuzzer to stay fast.
        const std::int64_t step = (op & 0x80) ? (raw % 2048) * tick_ns * 61
                                               : raw % (3 * tick_ns * 64);
        now += step;
        const auto bound = (op & 0x20) ? 1 + in.take(1) % 8 : static_cast<std::size_t>(-1);
        const std::uint64_t now_tick = static_cast<std::uint64_t>(now / tick_ns);
        std::vector<int> expected;
        for (auto& [id, t] : model) {
          if (t <= now_tick) expected.push_back(id);
        }
        twheel::wheel_entry_list out;
        std::vector<int> got;
        std::uint64_t last_tick = 0;
        // With bit 0x10, each due entry goes to a visitor first (as in the service's pass).
        const bool visiting = (op & 0x10) != 0;
        for (;;) {
          // A bounded call bounds the early cascade's walk too, as the service does.
          visit_log log;
          const std::size_t n =
              visiting ? wheel.advance(std::chrono::nanoseconds(now), out, &visit_log::visit,
                                       &log, bound, bound)
                       : wheel.advance(std::chrono::nanoseconds(now), out, bound, bound);
          std::vector<item*> detached;
          if (visiting) {
            check(log.all_detached);
            auto kept = out.begin();
            for (const auto& [e, done] : log.seen) {
              detached.push_back(e);
              if (done) {
                check(!e->is_detached() && !e->is_pending());  // idle
              } else {
                check(kept != out.end() && &*kept == e);  // in the batch, in visit order
                ++kept;
              }
            }
            check(kept == out.end());
          } else {
            for (auto& e : out) detached.push_back(&static_cast<item&>(e));
          }
          std::size_t seen = 0;
          for (item* p : detached) {
            item& e = *p;
            if (e.is_detached()) check(wheel.remove(e) == false);  // unlinks it from `out`
            check(e.deadline_tick() <= now_tick);        // never early
            if (!e.overdue) {
              check(e.deadline_tick() >= last_tick);  // in deadline order
              last_tick = e.deadline_tick();
            }
            got.push_back(e.id);
            ++seen;
          }
          check(out.empty());
          check(seen == n);
          if (n == 0 && wheel.next_expiry().value_or(std::chrono::nanoseconds::max()) >
                            std::chrono::nanoseconds(now)) {
            break;
          }
        }
        std::sort(got.begin(), got.end());
        check(got == expected);  // nothing lost, nothing extra
        for (int id : got) model.erase(id);
        break;
      }
    }
    check(wheel.size() == model.size());
    if (!model.empty()) {
      std::uint64_t earliest = static_cast<std::uint64_t>(-1);
      for (auto& [id, t] : model) earliest = std::min(earliest, t);
      const auto next = wheel.next_expiry();
      check(next.has_value());
      // The driver may wake early (coarse slots) but never after the earliest deadline.
      check(static_cast<std::uint64_t>(next->count()) <= std::max<std::uint64_t>(
                                                             earliest, wheel.current_tick()) *
                                                             static_cast<std::uint64_t>(tick_ns));
    } else {
      check(!wheel.next_expiry().has_value());
    }
  }
  // Leave nothing linked into a destroyed wheel's lists.
  for (auto& it : items) wheel.remove(it);
  return 0;
}
