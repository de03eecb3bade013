// The compiled core of the bundled "tpu" device: what PyTorch sees as the PrivateUse1 backend.
//
// Device memory is host memory standing in for HBM; every allocation is charged to the one
// chip this process drives (hbm.cpp), so a "tpu" tensor's data pointer is a real host pointer
// and CPU kernels can run on it in place (kernels.cpp). runtime.cpp holds what PyTorch asks a
// backend for (hooks, device guard, generator); module.cpp is the Python binding. Policy (the
// event log, eager modes, the torch.tpu module) stays in Python: the core calls back into it
// only at sync points, transfers, out-of-memory errors and, while DEFER_AND_FUSE is on, ops.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace tpu_lab {

constexpr c10::DeviceType kTpu = c10::DeviceType::PrivateUse1;

// ---- hbm.cpp: the chip's memory -------------------------------------------------------------

struct HbmStats {
  int64_t capacity = 0;
  int64_t live = 0;
  int64_t peak = 0;
  int64_t allocations = 0;  // accumulated, like frees and ooms (reset_accumulated zeroes them)
  int64_t frees = 0;
  int64_t ooms = 0;
  int64_t blocks = 0;  // allocations held now
};

HbmStats hbm_stats();
void hbm_set_capacity(int64_t capacity);
void hbm_reset_peak();
void hbm_reset_accumulated();
// Reserve nbytes or throw torch.OutOfMemoryError (nothing reserved, nothing allocated).
void hbm_charge(size_t nbytes);
// Raise the OutOfMemoryError that charging nbytes would raise; reserves nothing.
void hbm_check(size_t nbytes);
void hbm_release(size_t nbytes);
c10::Allocator* device_allocator();
c10::Allocator* pinned_allocator();
bool is_pinned(const void* ptr);
// A "tpu" storage that takes over a CPU storage's memory (no copy), charged to the chip.
c10::Storage adopt_storage(const c10::Storage& cpu);
// Grow or shrink a "tpu" storage (storage.resize_()).
void resize_storage(const c10::Storage& storage, size_t nbytes);

// ---- runtime.cpp: generator ------------------------------------------------------------------

const at::Generator& default_generator();

// ---- kernels.cpp: tensors --------------------------------------------------------------------

// A CPU tensor on the same memory as the "tpu" tensor t (keeps t's storage alive).
at::Tensor cpu_view(const at::Tensor& t);
// A "tpu" tensor that takes over the CPU tensor's memory (no copy).
at::Tensor adopt(const at::Tensor& cpu);
// Route ops with a CPU kernel and a CompositeExplicitAutograd one to the CPU kernel.
int register_cpu_kernels();

// ---- module.cpp: calls into Python -----------------------------------------------------------

// Whether this thread's ops are recorded for DEFER_AND_FUSE (else each is counted as a
// single-op graph, opcache.h): the process's setting, or this thread's own while Python has set
// one (torch.tpu.set_eager_mode blocks are context variables there).
bool is_recording();
void record_op(const std::string& name, const std::vector<c10::IValue>& args);
// kind: "sync" (what: the reason) or "transfer" (what: "cpu->tpu" / "tpu->cpu").
void notify(const char* kind, const char* what, int64_t nbytes);
// The out-of-memory message, worded by Python (it knows the topology); also reports the event.
std::string oom_message(int64_t nbytes, int64_t live, int64_t capacity);

}  // namespace tpu_lab
