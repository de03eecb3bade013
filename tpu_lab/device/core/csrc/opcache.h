// The eager compile cache's counts for the ops the compiled core runs in DEFER_NEVER (and
// DEFER_NEVER_AND_LAUNCH_BLOCKING): TorchTPU compiles every eager op as a graph of its own and
// caches the executable under the op, its tensors' shapes and dtypes and its other arguments'
// values. No executable exists here: an entry is a 64-bit hash of that key, its reads and its
// last read. Python adds these counts to torch.tpu._get_cache_stats() (tpu_lab/device/compile_cache.py).
#pragma once

#include <ATen/core/ivalue.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tpu_lab {

// Count one op. `name` identifies it (its address is part of the key, so it must outlive the
// process: a plan's name or a literal); `dot`: an MXU op, whose precision is part of the key.
// Throws in cache-only mode when the key is new.
void count_op(const char* name, bool dot, c10::ArrayRef<c10::IValue> args);

// Whether an op of this name (with or without its overload) runs on the MXU.
bool is_dot_op(const std::string& name);

struct OpCacheStats {
  int64_t requests = 0;
  int64_t hits = 0;
  std::vector<std::pair<int64_t, int64_t>> entries;  // (reads, last read in ns since the epoch)
};

// `with_entries`: also each entry's reads and last read (else only the two counts).
OpCacheStats op_cache_stats(bool with_entries);
void op_cache_clear();
// The process's settings that are part of every key: cache-only mode, the MXU precision of
// float32 matmuls (torch.set_float32_matmul_precision's) and allow_excess_precision.
void op_cache_configure(bool cache_only, int64_t precision, bool excess_precision);
// This thread's precision while a torch.tpu.precision block runs in it (-1: the process's).
void set_thread_precision(int64_t precision);
void op_cache_dot_ops(const std::vector<std::string>& names);

}  // namespace tpu_lab
