// DEFER_NEVER's compile-cache counts (see opcache.h). Kept cheap: a hash of the arguments' shapes,
// dtypes and values and one map lookup per op, no allocation on a hit.
#include "opcache.h"

#include "hashing.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

namespace tpu_lab {

namespace {

struct Entry {
  int64_t reads = 0;
  int64_t last_read = 0;
};

std::mutex cache_mutex;
std::unordered_map<uint64_t, Entry> entries;
int64_t requests = 0;
int64_t hits = 0;
bool cache_only = false;
std::atomic<int64_t> precision{0};
thread_local int64_t precision_here = -1;
std::atomic<bool> excess_precision{false};
std::unordered_set<std::string> dot_ops;

void hash_tensor(uint64_t& h, const at::Tensor& t) {
  if (!t.defined()) {
    mix(h, 1);
    return;
  }
  mix(h, 2);
  mix(h, static_cast<uint64_t>(t.scalar_type()));
  mix(h, static_cast<uint64_t>(t.device().type()));
  mix(h, static_cast<uint64_t>(t.dim()));
  for (int64_t size : t.sizes()) {
    mix(h, static_cast<uint64_t>(size));
  }
  if (t.unsafeGetTensorImpl()->is_wrapped_number()) {  // a Python number: baked into the graph
    uint64_t bits = 0;
    std::memcpy(&bits, t.const_data_ptr(), std::min<size_t>(sizeof(bits), t.element_size()));
    mix(h, bits);
  }
}

void hash_value(uint64_t& h, const c10::IValue& v) {
  if (v.isTensorList()) {
    mix(h, 3);
    for (const at::Tensor& t : v.toTensorList()) {
      hash_tensor(h, t);
    }
  } else {
    hash_argument(h, v, hash_tensor);
  }
}

}  // namespace

bool is_dot_op(const std::string& name) {
  std::lock_guard<std::mutex> lock(cache_mutex);
  return dot_ops.count(name.substr(0, name.find('.'))) > 0;
}

void count_op(const char* name, bool dot, c10::ArrayRef<c10::IValue> args) {
  uint64_t h = reinterpret_cast<uintptr_t>(name);
  mix(h, excess_precision.load(std::memory_order_relaxed) ? 1 : 0);
  if (dot) {
    const int64_t p =
        precision_here >= 0 ? precision_here : precision.load(std::memory_order_relaxed);
    mix(h, static_cast<uint64_t>(p) + 1);
  }
  for (const c10::IValue& value : args) {
    hash_value(h, value);
  }
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  std::lock_guard<std::mutex> lock(cache_mutex);
  ++requests;
  auto found = entries.find(h);
  if (found != entries.end()) {
    ++hits;
    ++found->second.reads;
    found->second.last_read = now;
    return;
  }
  TORCH_CHECK(!cache_only, "Compilation cache miss in cache-only mode (the op aten.", name,
              " with new arguments). Call torch.tpu._set_cache_only(False), or warm up this "
              "shape first.");
  entries.emplace(h, Entry{0, now});
}

OpCacheStats op_cache_stats(bool with_entries) {
  std::lock_guard<std::mutex> lock(cache_mutex);
  OpCacheStats stats;
  stats.requests = requests;
  stats.hits = hits;
  if (with_entries) {
    stats.entries.reserve(entries.size());
    for (const auto& [key, entry] : entries) {
      stats.entries.emplace_back(entry.reads, entry.last_read);
    }
  }
  return stats;
}

void op_cache_clear() {
  std::lock_guard<std::mutex> lock(cache_mutex);
  entries.clear();
  requests = hits = 0;
}

void op_cache_configure(bool only, int64_t mxu_precision, bool excess) {
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    cache_only = only;
  }
  precision.store(mxu_precision);
  excess_precision.store(excess);
}

void set_thread_precision(int64_t mxu_precision) { precision_here = mxu_precision; }

void op_cache_dot_ops(const std::vector<std::string>& names) {
  std::lock_guard<std::mutex> lock(cache_mutex);
  dot_ops = std::unordered_set<std::string>(names.begin(), names.end());
}

}  // namespace tpu_lab
