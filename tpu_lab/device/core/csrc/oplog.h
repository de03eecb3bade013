// The op log (oplog.cpp): the ops a thread runs while an estimate asks, recorded cheaply and
// handed to Python when the block ends.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <pybind11/pybind11.h>

#include <atomic>
#include <cstdint>
#include <initializer_list>

namespace tpu_lab {

// Whether this thread has a block of its own open.
inline bool& op_logging() {
  static thread_local bool on = false;
  return on;
}

// Open outermost blocks in the process; whether this thread is one of autograd's device
// threads (backward() runs a "tpu" graph there while its caller waits: its ops go to the
// newest block).
std::atomic<int>& active_blocks();
bool is_autograd_thread();

// Whether this thread's ops are logged: what an op asks, one check while no block is open.
inline bool logs_ops() {
  return op_logging() ||
         (active_blocks().load(std::memory_order_relaxed) > 0 && is_autograd_thread());
}

// Log an op that has run: its arguments as it was called with them, its results. `fused`: it
// is recorded for a DEFER_AND_FUSE graph. A signature seen before costs a hash and a look-up;
// per op only its tensors' identities are kept.
void log_op(const c10::FunctionSchema& schema, const c10::IValue* args, size_t n,
            const c10::IValue* results, size_t m, bool fused);
// The same for the kernels that run an op of another schema (convolution_overrideable is
// logged as the convolution the user called).
void log_op(const c10::OperatorHandle& op, std::initializer_list<c10::IValue> args,
            std::initializer_list<c10::IValue> results, bool fused);

// Python's side (module.cpp): start logging this thread (blocks nest; returns where this one
// starts), mark a point in the log (kind 0: a DEFER_AND_FUSE graph ends; 1: a compiled
// graph ran, tag = its number), and end a block: (signatures, ops, counted, calls). Each
// distinct signature once, as (namespace, name, overload), args, kwargs, results, with each
// tensor as ``make(position, sizes, strides, dtype)`` (positions number an op's tensors in
// schema order, arguments then results); the first 100,000 ops and marks in order, each op as
// (its signature's index, fused, the (tensor, storage) identities of its tensors by
// position), each mark as (None, kind, tag); beyond them, the ops counted per signature
// (counted[i]: signature i's) and the calls per compiled graph ({tag: calls}).
size_t op_log_begin();
void op_log_mark(int64_t kind, int64_t tag);
pybind11::tuple op_log_end(size_t start, const pybind11::object& make);

}  // namespace tpu_lab
