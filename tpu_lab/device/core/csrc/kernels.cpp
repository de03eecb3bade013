// Ops on "tpu" tensors. Views, factories, copies, resize and .item() have kernels of their own
// (PyTorch's own view kernels on the real storages); every other op goes through one boxed
// fallback that runs the op's CPU kernel on CPU tensors sharing the "tpu" tensors' memory, so
// the numbers are the CPU's, bit for bit, and no byte is copied. Sparse COO tensors take the
// same way, for the sparse ops TorchTPU has kernels for (sparse_fallback below).
#include "core.h"
#include "opcache.h"
#include "oplog.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/SparseTensorImpl.h>
#include <ATen/native/Resize.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice_ops.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

#include <c10/util/SmallVector.h>

#include <algorithm>
#include <array>
#include <mutex>
#include <string_view>
#include <unordered_map>

namespace tpu_lab {
namespace {

const c10::DispatchKeySet kTpuKeys(c10::DispatchKey::PrivateUse1);
const c10::DispatchKeySet kCpuKeys(c10::DispatchKey::CPU);
const c10::DispatchKeySet kSparseTpuKeys(c10::DispatchKey::SparsePrivateUse1);
const c10::DispatchKeySet kSparseCpuKeys(c10::DispatchKey::SparseCPU);

bool is_tpu(const at::Tensor& t) {
  return t.defined() && t.device().type() == kTpu;
}

// A tensor of `keys` on `storage` with the geometry and math bits of `like` (and its
// ZeroTensor key: autograd's efficient zeros have no bytes at all).
at::Tensor on_storage(c10::Storage storage, c10::DispatchKeySet keys, const at::Tensor& like) {
  if (like._is_zerotensor()) {
    keys = keys | c10::DispatchKeySet(c10::DispatchKey::ZeroTensor);
  }
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), keys, like.dtype());
  t.unsafeGetTensorImpl()->set_sizes_and_strides(like.sizes(), like.strides(),
                                                  like.storage_offset());
  if (like.is_conj()) {
    t._set_conj(true);
  }
  if (like.is_neg()) {
    t._set_neg(true);
  }
  return t;
}

at::SparseTensorImpl* sparse_impl(const at::Tensor& t) {
  return static_cast<at::SparseTensorImpl*>(t.unsafeGetTensorImpl());
}

// A sparse COO tensor of `keys` with `like`'s shape, dimensions and coalesced flag, on the
// given indices and values.
at::Tensor sparse_like(c10::DispatchKeySet keys, const at::Tensor& like, const at::Tensor& indices,
                       const at::Tensor& values) {
  const at::SparseTensorImpl* from = sparse_impl(like);
  at::Tensor t = at::detail::make_tensor<at::SparseTensorImpl>(keys, like.dtype());
  at::SparseTensorImpl* impl = sparse_impl(t);
  impl->raw_resize_(from->sparse_dim(), from->dense_dim(), like.sizes());
  impl->set_indices_and_values_unsafe(indices, values);
  impl->set_coalesced(from->coalesced());
  return t;
}

void drop_storage(void* ctx) {
  delete static_cast<c10::Storage*>(ctx);
}

// A CPU storage on a "tpu" storage's memory. `owner` keeps that storage alive (for tensors
// handed to Python); inside an op the "tpu" tensors outlive the call and need no owner.
// Resizable with the CPU allocator, so an out= kernel that grows its output still works: the
// "tpu" storage takes the new bytes afterwards (reconcile below).
c10::Storage cpu_storage(const c10::Storage& storage, bool owner) {
  void* data = storage.mutable_data();
  at::DataPtr ptr = owner ? at::DataPtr(data, new c10::Storage(storage), &drop_storage,
                                        c10::Device(c10::DeviceType::CPU))
                          : at::DataPtr(data, c10::Device(c10::DeviceType::CPU));
  return c10::Storage(c10::Storage::use_byte_size_t(), storage.nbytes(), std::move(ptr),
                      c10::GetCPUAllocator(), /*resizable=*/true);
}

std::string qualname(const c10::OperatorHandle& op) {
  const auto& name = op.schema().operator_name();
  std::string base = name.name.substr(name.name.find("::") + 2);
  return name.overload_name.empty() ? base : base + "." + name.overload_name;
}

// The ops TorchTPU 0.2.0 registers for sparse COO tensors (its TORCH_LIBRARY_IMPL(aten,
// SparsePrivateUse1) block); every other sparse op raises there, and here (sparse_fallback).
const std::array<std::string_view, 36> kSparseOps = {
    "_coalesce", "_coalesced_", "_dimI", "_dimV", "_indices", "_nnz",
    "_sparse_coo_tensor_with_dims", "_sparse_coo_tensor_with_dims_and_tensors", "_to_copy",
    "_to_dense", "_values", "add.Tensor", "add.out", "add_.Tensor", "clone", "copy_",
    "copy_sparse_to_sparse_", "dense_dim", "empty.memory_format", "empty_like", "indices",
    "is_coalesced", "mul.Tensor", "mul.out", "mul_.Tensor", "neg", "neg.out", "neg_",
    "sparse_dim", "sparse_resize_", "sparse_resize_and_clear_", "sub.Tensor", "sub.out",
    "sub_.Tensor", "values", "zero_"};

// What the fallback needs to know about an op, worked out on its first call.
struct OpPlan {
  std::string name;
  int generator = -1;           // index of a `Generator?` argument
  bool seeded = false;          // random, without a generator argument (CPU default generator)
  // index ops accept CPU index tensors, as CUDA's indexing does (index_fill too: PyTorch's
  // device-generic tests fill "tpu" tensors at CPU indices, which only CUDA skips)
  bool cpu_indices_ok = false;
  bool dot = false;             // runs on the MXU: its precision is part of a compiled op's key
  bool sparse = false;          // TorchTPU has a kernel for it on sparse COO tensors
  std::vector<size_t> written;  // arguments the op writes to (in-place, out=)
};

OpPlan make_plan(const c10::OperatorHandle& op) {
  OpPlan plan;
  plan.name = qualname(op);
  const auto& args = op.schema().arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& type = args[i].type();
    if (type->kind() == c10::TypeKind::OptionalType &&
        type->expectRef<c10::OptionalType>().getElementType()->kind() ==
            c10::TypeKind::GeneratorType) {
      plan.generator = static_cast<int>(i);
    }
    if (args[i].alias_info() != nullptr && args[i].alias_info()->isWrite()) {
      plan.written.push_back(i);
    }
  }
  plan.seeded = plan.generator < 0 && op.hasTag(at::Tag::nondeterministic_seeded);
  const std::string base = plan.name.substr(0, plan.name.find('.'));
  plan.cpu_indices_ok = base == "index" || base == "index_put" || base == "index_put_" ||
                        base == "_index_put_impl_" || base == "index_fill" ||
                        base == "index_fill_";
  plan.dot = is_dot_op(plan.name);
  plan.sparse = std::find(kSparseOps.begin(), kSparseOps.end(), plan.name) != kSparseOps.end();
  return plan;
}

const OpPlan& plan_of(const c10::OperatorHandle& op) {
  static std::mutex mutex;
  static std::unordered_map<const c10::FunctionSchema*, OpPlan> plans;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = plans.find(&op.schema());
  if (found == plans.end()) {
    found = plans.emplace(&op.schema(), make_plan(op)).first;
  }
  return found->second;
}

// TorchTPU registers no quantized kernels (no QuantizedPrivateUse1 backend): a quantized
// tensor cannot be on "tpu" there, nor here (a quantizer holds CPU-only state).
[[noreturn]] void refuse_quantized(const std::string& op) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "quantized tensors cannot be on the 'tpu' device (", op,
                              " made one): TorchTPU has no quantized kernels. Quantize on the "
                              "CPU (x.cpu()), or keep integer weights in an int8 tensor with a "
                              "float scale on 'tpu'.");
}

void quantized_fallback(const c10::OperatorHandle& op, torch::jit::Stack* /*stack*/) {
  refuse_quantized(qualname(op));
}

// TorchTPU's sparse fallback (TpuSparseOpFallback) refuses every sparse op it has no kernel for
// with "<op>(): sparse operators are not supported on TPU yet".
[[noreturn]] void refuse_sparse(const c10::OperatorHandle& op) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, op.schema().name(),
                              "(): sparse operators are not supported on TPU yet: TorchTPU's "
                              "sparse COO tensors have construction, coalescing, add, sub, mul, "
                              "neg, clone, copies, zero_ and to_dense only. Densify first "
                              "(.to_dense()) or run it on the CPU (.cpu()).");
}

[[noreturn]] void mixed_devices() {
  TORCH_CHECK(false,
              "Expected all tensors to be on the same device, but found at least two devices, "
              "tpu:0 and cpu! Move the CPU tensor with .to('tpu') (or the 'tpu' one with .cpu()).");
}

// One op's arguments as CPU tensors on the same memory, and the way back.
class Unwrapped {
 public:
  Unwrapped(const std::string& op, bool cpu_indices_ok)
      : op_(op), cpu_indices_ok_(cpu_indices_ok) {}

  // `written`: the op writes to this argument (in-place, out=): a CPU tensor there is always
  // another device's, even a 0-dim one (CPU scalars are allowed as inputs only, as on CUDA).
  c10::IValue unwrap(const c10::IValue& value, bool written = false) {
    if (value.isTensor()) {
      const at::Tensor& t = value.toTensor();
      if (written && t.defined() && t.is_cpu()) {
        saw_cpu_ = true;
      }
      return unwrap_tensor(t);
    }
    if (value.isTensorList()) {
      auto list = value.toTensorList();
      c10::List<at::Tensor> out;
      out.reserve(list.size());
      for (const at::Tensor& t : list) {
        out.push_back(unwrap_tensor(t));
      }
      return out;
    }
    if (value.isList()) {  // Tensor?[] (index) and other generic lists
      auto list = value.toList();
      if (list.empty() || !list.get(0).isTensor() && !list.get(0).isNone()) {
        return value;
      }
      c10::impl::GenericList out(list.elementType());
      out.reserve(list.size());
      for (const c10::IValue& item : list) {
        out.push_back(item.isTensor() ? c10::IValue(unwrap_tensor(item.toTensor())) : item);
      }
      return out;
    }
    if (value.isDevice() && value.toDevice().type() == kTpu) {
      return c10::Device(c10::DeviceType::CPU);
    }
    return value;
  }

  void check_devices() const {
    if (saw_tpu_ && saw_cpu_) {
      mixed_devices();
    }
  }

  // The "tpu" tensor for a CPU result: the argument itself, a view of an argument's storage,
  // or the result's memory taken over by a new "tpu" storage.
  at::Tensor wrap(const at::Tensor& out) {
    if (!out.defined() || !out.is_cpu()) {
      return out;
    }
    if (out.is_quantized()) {
      refuse_quantized(op_);
    }
    for (size_t i = 0; i < aliases_.size(); ++i) {
      if (aliases_[i].unsafeGetTensorImpl() == out.unsafeGetTensorImpl()) {
        return originals_[i];
      }
    }
    if (out.is_sparse()) {  // a new sparse tensor: "tpu" indices and values, by the rules here
      const at::SparseTensorImpl* impl = sparse_impl(out);
      return sparse_like(kSparseTpuKeys, out, wrap(impl->indices()), wrap(impl->values()));
    }
    c10::StorageImpl* impl = out.storage().unsafeGetStorageImpl();
    for (const auto& [cpu, tpu] : storages_) {
      if (cpu.unsafeGetStorageImpl() == impl) {
        return on_storage(tpu, kTpuKeys, out);
      }
    }
    for (const auto& [cpu, tpu] : adopted_) {
      if (cpu.unsafeGetStorageImpl() == impl) {
        return on_storage(tpu, kTpuKeys, out);
      }
    }
    for (const at::Tensor& input : cpu_inputs_) {  // a CPU argument returned: copy it
      if (input.storage().unsafeGetStorageImpl() == impl) {
        return adopt(out.clone());
      }
    }
    c10::Storage tpu = adopt_storage(out.storage());
    adopted_.emplace_back(out.storage(), tpu);
    return on_storage(std::move(tpu), kTpuKeys, out);
  }

  c10::IValue wrap(const c10::IValue& value) {
    if (value.isTensor()) {
      return wrap(value.toTensor());
    }
    if (value.isTensorList()) {
      c10::List<at::Tensor> out;
      for (const at::Tensor& t : value.toTensorList()) {
        out.push_back(wrap(t));
      }
      return out;
    }
    return value;
  }

  // An out= or in-place kernel may have resized or re-pointed its CPU argument: the "tpu"
  // tensor follows (its storage takes the new bytes, charged to the chip).
  void reconcile(const c10::IValue& original) {
    if (!original.isTensor() || !is_tpu(original.toTensor())) {
      return;
    }
    const at::Tensor& tpu = original.toTensor();
    for (size_t i = 0; i < originals_.size(); ++i) {
      if (originals_[i].unsafeGetTensorImpl() != tpu.unsafeGetTensorImpl()) {
        continue;
      }
      if (tpu.is_sparse()) {
        reconcile_sparse(tpu, aliases_[i]);
        return;
      }
      const at::Tensor& cpu = aliases_[i];
      const c10::Storage& storage = tpu.storage();
      if (cpu.storage().data() != storage.data() || cpu.storage().nbytes() != storage.nbytes()) {
        at::DataPtr fresh = device_allocator()->allocate(cpu.storage().nbytes());
        if (cpu.storage().nbytes() > 0) {
          std::memcpy(fresh.get(), cpu.storage().data(), cpu.storage().nbytes());
        }
        storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(fresh));
        storage.unsafeGetStorageImpl()->set_nbytes(cpu.storage().nbytes());
      }
      if (cpu.sizes() != tpu.sizes() || cpu.strides() != tpu.strides() ||
          cpu.storage_offset() != tpu.storage_offset()) {
        tpu.unsafeGetTensorImpl()->set_sizes_and_strides(cpu.sizes(), cpu.strides(),
                                                         cpu.storage_offset());
      }
      return;
    }
  }

 private:
  // A sparse kernel may have resized the CPU tensor, grown its indices and values in place or
  // given it new ones: the "tpu" tensor takes its dimensions and members (its own members
  // follow their CPU aliases first).
  void reconcile_sparse(const at::Tensor& tpu, const at::Tensor& cpu) {
    const at::SparseTensorImpl* from = sparse_impl(cpu);
    for (const at::Tensor& member : {from->indices(), from->values()}) {
      for (size_t i = 0; i < aliases_.size(); ++i) {
        if (aliases_[i].unsafeGetTensorImpl() == member.unsafeGetTensorImpl()) {
          reconcile(originals_[i]);
        }
      }
    }
    at::SparseTensorImpl* impl = sparse_impl(tpu);
    impl->raw_resize_(from->sparse_dim(), from->dense_dim(), cpu.sizes());
    impl->set_indices_and_values_unsafe(wrap(from->indices()), wrap(from->values()));
    impl->set_coalesced(from->coalesced());
  }

  at::Tensor unwrap_tensor(const at::Tensor& t) {
    if (!t.defined()) {
      return t;
    }
    if (t.is_sparse() && is_tpu(t)) {  // a CPU sparse tensor on CPU aliases of its members
      saw_tpu_ = true;
      const at::SparseTensorImpl* impl = sparse_impl(t);
      return keep(t, sparse_like(kSparseCpuKeys, t, unwrap_tensor(impl->indices()),
                                 unwrap_tensor(impl->values())));
    }
    if (!is_tpu(t)) {
      if (t.is_cpu() && t.dim() > 0 && !cpu_indices_ok_) {
        saw_cpu_ = true;
      }
      if (t.is_cpu()) {
        cpu_inputs_.push_back(t);
      }
      return t;
    }
    saw_tpu_ = true;
    const c10::Storage& storage = t.storage();
    c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
    for (const auto& [cpu, tpu] : storages_) {
      if (tpu.unsafeGetStorageImpl() == impl) {
        return keep(t, on_storage(cpu, kCpuKeys, t));
      }
    }
    c10::Storage cpu = cpu_storage(storage, /*owner=*/false);
    storages_.emplace_back(cpu, storage);
    return keep(t, on_storage(std::move(cpu), kCpuKeys, t));
  }

  at::Tensor keep(const at::Tensor& tpu, at::Tensor cpu) {
    originals_.push_back(tpu);
    aliases_.push_back(cpu);
    return cpu;
  }

  const std::string& op_;
  bool cpu_indices_ok_;
  bool saw_tpu_ = false;
  bool saw_cpu_ = false;
  // small vectors: most ops take a few tensors, and a heap allocation costs as much as a view
  c10::SmallVector<at::Tensor, 4> originals_;
  c10::SmallVector<at::Tensor, 4> aliases_;
  c10::SmallVector<at::Tensor, 2> cpu_inputs_;
  c10::SmallVector<std::pair<c10::Storage, c10::Storage>, 4> storages_;  // (cpu, tpu)
  c10::SmallVector<std::pair<c10::Storage, c10::Storage>, 2> adopted_;   // (cpu result, tpu)
};

// The device generator's state, lent to a CPU generator for one call and taken back after.
struct LentState {
  at::CPUGeneratorImpl* device;
  at::CPUGeneratorImpl* cpu;

  static void copy(at::CPUGeneratorImpl* from, at::CPUGeneratorImpl* to) {
    to->set_engine(from->engine());
    to->set_next_float_normal_sample(from->next_float_normal_sample());
    to->set_next_double_normal_sample(from->next_double_normal_sample());
  }
};

void run_on_cpu(const c10::OperatorHandle& op, const OpPlan& plan, torch::jit::Stack* stack,
                size_t first, c10::DispatchKeySet keys) {
  if (plan.generator >= 0) {
    c10::IValue& slot = (*stack)[first + plan.generator];
    at::Generator device = slot.isNone() ? default_generator() : slot.toGenerator();
    if (device.device().type() == kTpu) {
      auto* impl = device.get<at::CPUGeneratorImpl>();
      at::Generator cpu = at::make_generator<at::CPUGeneratorImpl>();
      std::lock_guard<std::mutex> lock(device.mutex());
      LentState::copy(impl, cpu.get<at::CPUGeneratorImpl>());
      slot = cpu;
      op.redispatchBoxed(keys, stack);
      LentState::copy(cpu.get<at::CPUGeneratorImpl>(), impl);
      return;
    }
  }
  if (plan.seeded) {  // draws from the CPU's default generator: lend it the device's state
    at::Generator device = default_generator();
    at::Generator host = at::detail::getDefaultCPUGenerator();
    auto* impl = device.get<at::CPUGeneratorImpl>();
    auto* cpu = host.get<at::CPUGeneratorImpl>();
    at::Generator saved = at::make_generator<at::CPUGeneratorImpl>();
    {
      std::lock_guard<std::mutex> lock(host.mutex());
      LentState::copy(cpu, saved.get<at::CPUGeneratorImpl>());
      LentState::copy(impl, cpu);
    }
    try {
      op.redispatchBoxed(keys, stack);
    } catch (...) {
      std::lock_guard<std::mutex> lock(host.mutex());
      LentState::copy(saved.get<at::CPUGeneratorImpl>(), cpu);
      throw;
    }
    std::lock_guard<std::mutex> lock(host.mutex());
    LentState::copy(cpu, impl);
    LentState::copy(saved.get<at::CPUGeneratorImpl>(), cpu);
    return;
  }
  op.redispatchBoxed(keys, stack);
}

// The op's CPU kernel (of `keys`: dense or sparse) on CPU tensors sharing the arguments' memory.
void run_fallback(const c10::OperatorHandle& op, const OpPlan& plan, torch::jit::Stack* stack,
                  c10::DispatchKeySet keys) {
  const size_t nargs = op.schema().arguments().size();
  const size_t first = stack->size() - nargs;
  const bool recording = is_recording();
  if (recording) {
    record_op(plan.name, std::vector<c10::IValue>(stack->begin() + first, stack->end()));
  } else {
    count_op(plan.name.c_str(), plan.dot, c10::ArrayRef<c10::IValue>(stack->data() + first, nargs));
  }
  const bool logging = logs_ops();  // an estimate asks (oplog.h)
  c10::SmallVector<c10::IValue, 6> called;
  if (logging) {
    called.assign(stack->begin() + first, stack->end());
  }
  c10::SmallVector<c10::IValue, 2> written;  // the "tpu" arguments the op writes to
  for (size_t index : plan.written) {
    written.push_back((*stack)[first + index]);
  }
  Unwrapped unwrapped(plan.name, plan.cpu_indices_ok);
  for (size_t i = first; i < stack->size(); ++i) {
    const bool writes = std::find(plan.written.begin(), plan.written.end(), i - first) !=
                        plan.written.end();
    (*stack)[i] = unwrapped.unwrap((*stack)[i], writes);
  }
  unwrapped.check_devices();
  if (has_narrow_unsigned(op.schema(), *stack, first)) {  // uint16/uint32: see unsigned.cpp
    run_widening(op, stack, first,
                 [&](torch::jit::Stack* s) { run_on_cpu(op, plan, s, first, keys); });
  } else {
    run_on_cpu(op, plan, stack, first, keys);
  }
  for (const c10::IValue& value : written) {
    unwrapped.reconcile(value);
  }
  const size_t nreturns = op.schema().returns().size();
  for (size_t i = stack->size() - nreturns; i < stack->size(); ++i) {
    (*stack)[i] = unwrapped.wrap((*stack)[i]);
  }
  if (logging) {
    log_op(op.schema(), called.data(), nargs, stack->data() + stack->size() - nreturns, nreturns,
           recording);
  }
}

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  run_fallback(op, plan_of(op), stack, kCpuKeys);
}

// Ops on sparse COO "tpu" tensors: the sparse CPU kernel, on CPU sparse tensors whose indices
// and values share the "tpu" ones' memory, for the ops TorchTPU has sparse kernels for.
void sparse_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const OpPlan& plan = plan_of(op);
  if (!plan.sparse) {
    refuse_sparse(op);
  }
  run_fallback(op, plan, stack, kSparseCpuKeys);
}

void record(const char* name, std::vector<c10::IValue> args) {
  if (is_recording()) {
    record_op(name, args);
  }
}

// An op that computes (not a view, an allocation or a transfer): recorded for DEFER_AND_FUSE,
// else counted as a single-op graph. `dot`: it runs on the MXU.
void compute(const char* name, bool dot, std::vector<c10::IValue> args) {
  if (is_recording()) {
    record_op(name, args);
  } else {
    count_op(name, dot, args);
  }
}

// The op a kernel of its own runs, for an estimate that asks (oplog.h).
void log(const char* qualified, const char* overload, std::initializer_list<c10::IValue> args,
         std::initializer_list<c10::IValue> results) {
  log_op(c10::Dispatcher::singleton().findSchemaOrThrow(qualified, overload), args, results,
         is_recording());
}

int64_t nbytes_of(const at::Tensor& t) {
  return static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size());
}

// Allocations are not recorded for DEFER_AND_FUSE: a compiled graph has no allocation ops
// (and every structured op allocates its result through empty_strided before its out= kernel).
at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout,
                               std::optional<c10::Device> device, std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "the 'tpu' device supports strided tensors only");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "Pin memory can only be on CPU");
  if (device.has_value()) {
    c10::DeviceGuard guard(*device);
  }
  return at::detail::empty_generic(size, device_allocator(), kTpuKeys,
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "the 'tpu' device supports strided tensors only");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "Pin memory can only be on CPU");
  if (device.has_value()) {
    c10::DeviceGuard guard(*device);
  }
  return at::detail::empty_strided_generic(size, stride, device_allocator(), kTpuKeys,
                                           c10::dtype_or_default(dtype));
}

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset) {
  record("as_strided", {self, size, stride, storage_offset});
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) {
  record("view", {self, size});
  return at::native::view(self, size);
}

at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) {
  record("_reshape_alias", {self, size, stride});
  return at::native::_reshape_alias(self, size, stride);
}

const at::Tensor& resize(const at::Tensor& self, c10::IntArrayRef size,
                         std::optional<at::MemoryFormat> memory_format) {
  record("resize_", {self, size});
  return at::native::resize_(self, size, memory_format);
}

at::Tensor& set_storage(at::Tensor& self, at::Storage source, int64_t offset,
                        c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::set_storage_cpu_(self, std::move(source), offset, size, stride);
}

at::Tensor& set_source_storage(at::Tensor& self, at::Storage source) {
  return at::native::set_(self, std::move(source));
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool /*non_blocking*/) {
  // Every op has finished when it returns: a non-blocking copy is complete at once.
  // Transfers feed or end a graph; only copies on the device are recorded as its ops.
  if (is_tpu(self) && !is_tpu(dst)) {
    notify("transfer", "tpu->cpu", nbytes_of(self));
    at::Tensor target = dst;
    target.copy_(cpu_view(self));
  } else if (!is_tpu(self) && is_tpu(dst)) {
    notify("transfer", "cpu->tpu", nbytes_of(self));
    cpu_view(dst).copy_(self);
  } else {
    compute("_copy_from", false, {self, dst});
    cpu_view(dst).copy_(cpu_view(self));
    if (logs_ops()) {  // as the copy_ that asked for it
      log("aten::copy_", "", {dst, self, false}, {dst});
    }
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  record("_local_scalar_dense", {self});
  notify("sync", "item", static_cast<int64_t>(self.element_size()));
  return at::_local_scalar_dense(cpu_view(self));
}

// model.to("tpu") keeps its Parameter objects (and tied weights) as on CUDA: CPU and "tpu"
// tensors are both plain dense tensors, so `param.data = tpu_tensor` is allowed.
bool compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    return t.layout() == c10::Layout::Strided && (t.is_cpu() || is_tpu(t));
  };
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) ||
         (dense(self) && dense(from));
}

void record_stream(at::Tensor& /*self*/, c10::Stream /*stream*/) {}

std::optional<at::Tensor> cpu_view_of(const std::optional<at::Tensor>& t) {
  if (t.has_value() && t->defined()) {
    return cpu_view(*t);
  }
  return std::nullopt;
}

// PyTorch sends PrivateUse1 convolutions to the "overrideable" kernels: the CPU's convolution
// on the same memory (it picks its own backend, as for CPU tensors).
at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight,
                       const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                       c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                       c10::IntArrayRef output_padding, int64_t groups) {
  compute("convolution_overrideable", true, {input, weight, bias, stride, padding, dilation});
  at::Tensor out = adopt(at::convolution(cpu_view(input), cpu_view(weight), cpu_view_of(bias),
                                         stride, padding, dilation, transposed, output_padding,
                                         groups));
  if (logs_ops()) {  // as the convolution the user called
    log("aten::convolution", "",
        {input, weight, bias, stride, padding, dilation, transposed, output_padding, groups},
        {out});
  }
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
    c10::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask) {
  compute("convolution_backward_overrideable", true,
          {grad_output, input, weight, stride, padding});
  std::optional<std::vector<int64_t>> bias_sizes;
  if (output_mask[2]) {
    bias_sizes = std::vector<int64_t>{transposed ? weight.size(1) * groups : weight.size(0)};
  }
  auto [grad_input, grad_weight, grad_bias] = at::convolution_backward(
      cpu_view(grad_output), cpu_view(input), cpu_view(weight),
      bias_sizes.has_value() ? std::optional<c10::IntArrayRef>(*bias_sizes) : std::nullopt,
      stride, padding, dilation, transposed, output_padding, groups, output_mask);
  auto back = [](const at::Tensor& t) { return t.defined() ? adopt(t) : t; };
  std::tuple<at::Tensor, at::Tensor, at::Tensor> out{back(grad_input), back(grad_weight),
                                                     back(grad_bias)};
  if (logs_ops()) {
    log("aten::convolution_backward", "",
        {grad_output, input, weight,
         bias_sizes.has_value() ? c10::IValue(*bias_sizes) : c10::IValue(), stride, padding,
         dilation, transposed, output_padding, groups,
         c10::List<bool>({output_mask[0], output_mask[1], output_mask[2]})},
        {std::get<0>(out), std::get<1>(out), std::get<2>(out)});
  }
  return out;
}

// TorchTPU's out_dtype matmuls (no CPU kernel exists): bfloat16 or float16 inputs, a float32
// accumulator and result, as the MXU computes them (their products are exact in float32).
at::ScalarType accumulator(const at::Tensor& self, at::ScalarType out_dtype) {
  const at::ScalarType in = self.scalar_type();
  TORCH_CHECK(out_dtype == in || (out_dtype == at::kFloat && (in == at::kBFloat16 || in == at::kHalf)),
              "out_dtype must be the input's dtype, or float32 for bfloat16 and float16 inputs; "
              "got inputs of ", in, " and out_dtype ", out_dtype);
  return out_dtype;
}

at::Tensor mm_dtype(const at::Tensor& self, const at::Tensor& mat2, at::ScalarType out_dtype) {
  compute("mm.dtype", true, {self, mat2, out_dtype});
  const at::ScalarType acc = accumulator(self, out_dtype);
  at::Tensor out = adopt(at::mm(cpu_view(self).to(acc), cpu_view(mat2).to(acc)));
  if (logs_ops()) {
    log("aten::mm", "dtype", {self, mat2, out_dtype}, {out});
  }
  return out;
}

at::Tensor bmm_dtype(const at::Tensor& self, const at::Tensor& mat2, at::ScalarType out_dtype) {
  compute("bmm.dtype", true, {self, mat2, out_dtype});
  const at::ScalarType acc = accumulator(self, out_dtype);
  at::Tensor out = adopt(at::bmm(cpu_view(self).to(acc), cpu_view(mat2).to(acc)));
  if (logs_ops()) {
    log("aten::bmm", "dtype", {self, mat2, out_dtype}, {out});
  }
  return out;
}

// A CPU tensor with t's metadata and no bytes (fake tensors while tracing have none either).
at::Tensor metadata_twin(const at::Tensor& t) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0,
                       at::DataPtr(nullptr, c10::Device(c10::DeviceType::CPU)), nullptr, false);
  at::Tensor twin = on_storage(std::move(storage), kCpuKeys, t);
  if (t.requires_grad()) {
    twin.set_requires_grad(true);
  }
  return twin;
}

// scaled_dot_product_attention picks the kernel the CPU would pick for the same tensors (its
// flash kernel then runs through the fallback), so the numbers are the CPU's.
int64_t sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                   const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                   std::optional<double> scale, bool enable_gqa) {
  const bool has_mask = attn_mask.has_value() && attn_mask->defined();
  const auto symbolic = [](const at::Tensor& t) {
    return t.unsafeGetTensorImpl()->has_symbolic_sizes_strides();
  };
  if (symbolic(query) || symbolic(key) || symbolic(value) || (has_mask && symbolic(*attn_mask))) {
    // Tracing with dynamic shapes: no CPU tensor can hold symbolic sizes, so the CPU's choice
    // reads the fake tensors themselves (it reads only their metadata, guarding on the
    // symbolic sizes as it does for the CPU's own fake tensors).
    return at::_ops::_fused_sdp_choice::redispatch(kCpuKeys, query, key, value, attn_mask,
                                                   dropout_p, is_causal, scale, enable_gqa);
  }
  std::optional<at::Tensor> mask;
  if (has_mask) {
    mask = metadata_twin(*attn_mask);
  }
  // straight to the CPU kernel: while tracing, a fake-tensor mode must not see the twins
  return at::_ops::_fused_sdp_choice::redispatch(
      kCpuKeys, metadata_twin(query), metadata_twin(key), metadata_twin(value), mask, dropout_p,
      is_causal, scale, enable_gqa);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", as_strided);
  m.impl("view", view);
  m.impl("_reshape_alias", reshape_alias);
  m.impl("resize_", resize);
  m.impl("set_.source_Storage_storage_offset", set_storage);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Tensor", set_source_tensor);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("_has_compatible_shallow_copy_type", compatible_shallow_copy_type);
  m.impl("record_stream", record_stream);
  m.impl("convolution_overrideable", convolution);
  m.impl("mm.dtype", mm_dtype);
  m.impl("bmm.dtype", bmm_dtype);
  m.impl("convolution_backward_overrideable", convolution_backward);
}

// Cross-device and device-to-device copies take lazily conjugated or negated sources as they
// are (the CPU copy on the same memory resolves the bits); the math-bit fallback would clone
// them first, and cloning is a copy again.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

// The list's ops explicitly, as a composite kernel would otherwise run before the fallback
// (is_coalesced's refuses every sparse backend but the CPU's and CUDA's); except _to_copy and
// empty_like, whose composites (on the listed ops) also move a tensor to another device.
TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  for (std::string_view name : kSparseOps) {
    if (name != "_to_copy" && name != "empty_like") {
      m.impl(std::string(name).c_str(),
             torch::CppFunction::makeFromBoxedFunction<&sparse_fallback>());
    }
  }
}

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&sparse_fallback>());
}

TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&quantized_fallback>());
}

}  // namespace

int register_cpu_kernels() {
  // An op with both a CPU kernel and a composite one (addr and the structured ops' out=
  // wrappers: CompositeExplicitAutograd; mish_backward: CompositeImplicitAutograd) would run
  // the composite on "tpu", with other rounding than the CPU's: the boxed fallback is
  // registered for it explicitly, so its CPU kernel runs, exactly as for CPU tensors.
  static auto* library = new torch::Library(torch::Library::IMPL, "aten",
                                            c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  int count = 0;
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) {
      continue;
    }
    auto op = c10::Dispatcher::singleton().findOp(name);
    if (!op.has_value() || op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1) ||
        !op->hasKernelForDispatchKey(c10::DispatchKey::CPU)) {
      continue;
    }
    if (!op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) &&
        !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) &&
        !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) {
      continue;
    }
    std::string qualified = name.name.substr(6);
    if (!name.overload_name.empty()) {
      qualified += "." + name.overload_name;
    }
    library->impl(qualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
    ++count;
  }
  // Composite kernels that refuse devices other than CPU, CUDA and XPU ("mode only supports
  // CPU, CUDA and XPU device type"): the fallback runs them on the CPU, as for CPU tensors.
  for (const char* qualified : {"mode.values"}) {
    library->impl(qualified, torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
    ++count;
  }
  return count;
}

}  // namespace tpu_lab

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &tpu_lab::sdp_choice);
}  // namespace at::native

namespace tpu_lab {

at::Tensor cpu_view(const at::Tensor& t) {
  TORCH_CHECK(is_tpu(t), "expected a 'tpu' tensor, got one on ", t.device());
  return on_storage(cpu_storage(t.storage(), /*owner=*/true), kCpuKeys, t);
}

at::Tensor adopt(const at::Tensor& cpu) {
  TORCH_CHECK(cpu.is_cpu(), "expected a CPU tensor, got one on ", cpu.device());
  return on_storage(adopt_storage(cpu.storage()), kTpuKeys, cpu);
}

}  // namespace tpu_lab
