// The op log: while an estimate asks (tpu_lab.estimate.estimating), each op a thread runs is
// kept as its schema, its non-tensor arguments and, for every tensor it reads and writes, its
// shape, strides, dtype and identity (the tensor's and its storage's, so that in-place ops and
// views can be told apart). Nothing is converted per op: Python takes the records when the
// block ends and costs them there. While no block runs, an op pays one check (a thread-local
// flag, and the count of open blocks).
#include "oplog.h"

#include "hashing.h"

#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/tensor_memoryformats.h>

#include <cstring>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace py = pybind11;

namespace tpu_lab {
namespace {

struct LoggedTensor {
  const void* impl;     // null: an undefined tensor (a None in a Tensor?[] list)
  const void* storage;
  c10::ScalarType dtype;
  uint32_t dims;        // its sizes, then its strides, from Log::dims[dims]
  uint32_t rank;
};

// One argument or result: a value (not a tensor), a tensor, or a list of tensors.
struct Slot {
  enum Kind : uint8_t { kValue, kTensor, kTensors } kind;
  c10::IValue value;
  uint32_t first = 0;  // its tensors, from Log::tensors[first]
  uint32_t count = 0;
};

// A distinct signature: its schema and its slots (arguments, then results).
struct Signature {
  const c10::FunctionSchema* schema;  // the dispatcher keeps it
  uint32_t first;
  uint32_t arguments;
  uint32_t results;
};

// One op run (or a mark: signature -1 - its kind): its signature, whether it was
// recorded for DEFER_AND_FUSE, and its tensors' identities, from Log::ids[ids].
struct LoggedOp {
  int64_t signature;  // -1: a mark
  int64_t tag;        // a mark's tag
  uint32_t ids;
  uint32_t count;
  bool fused;
};

// Ops a log keeps in order (with their tensors' identities); after them it only counts each
// signature's ops and each compiled graph's calls, so that a long block stays small.
constexpr size_t kLaidOut = 100000;

// What a log counted beyond kLaidOut: ops per signature, calls per compiled graph.
struct Counted {
  std::vector<uint64_t> ops;
  std::unordered_map<int64_t, uint64_t> calls;
};

struct Log {
  int depth = 0;
  Counted counted;
  std::vector<Counted> opened;  // what was counted when each inner block began
  std::vector<LoggedOp> ops;
  std::vector<const void*> ids;  // (tensor, storage) per tensor of each op
  std::unordered_map<uint64_t, uint32_t> known;  // a signature's key -> its index
  std::vector<Signature> signatures;
  std::vector<Slot> slots;
  std::vector<LoggedTensor> tensors;
  std::vector<int64_t> dims;

  void reserve() {
    ops.reserve(1 << 12);
    ids.reserve(1 << 14);
  }
};

// This thread's own log (its blocks'), the log autograd's device threads write to (that of the
// newest outermost block: backward() runs the graph there while its caller waits), the lock
// every write to a log takes while a block is open, and the log the current write goes to.
thread_local Log own;
Log* followed = nullptr;
std::mutex writing;
thread_local Log* log = nullptr;

void add_tensor(const at::Tensor& t) {
  if (!t.defined()) {
    log->tensors.push_back(LoggedTensor{nullptr, nullptr, c10::ScalarType::Undefined, 0, 0});
    return;
  }
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  const void* storage = impl->has_storage() ? impl->storage().unsafeGetStorageImpl() : nullptr;
  const auto sizes = impl->sizes();
  const auto strides = impl->strides();
  const auto at = static_cast<uint32_t>(log->dims.size());
  log->dims.insert(log->dims.end(), sizes.begin(), sizes.end());
  log->dims.insert(log->dims.end(), strides.begin(), strides.end());
  log->tensors.push_back(
      LoggedTensor{impl, storage, t.scalar_type(), at, static_cast<uint32_t>(sizes.size())});
}

// A Python number PyTorch wrapped in a tensor (x * 2): the number, as a dispatch mode sees it.
c10::IValue wrapped_number(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case c10::ScalarType::Double:
      return c10::Scalar(*static_cast<const double*>(t.const_data_ptr()));
    case c10::ScalarType::Long:
      return c10::Scalar(*static_cast<const int64_t*>(t.const_data_ptr()));
    case c10::ScalarType::Bool:
      return c10::Scalar(*static_cast<const bool*>(t.const_data_ptr()));
    case c10::ScalarType::ComplexDouble:
      return c10::Scalar(*static_cast<const c10::complex<double>*>(t.const_data_ptr()));
    default:
      return t;
  }
}

// A Python number PyTorch wrapped in a tensor, read back as the number.
bool is_number(const at::Tensor& t) {
  return t.defined() && t.unsafeGetTensorImpl()->is_wrapped_number() &&
         !wrapped_number(t).isTensor();
}

bool is_tensors(const c10::IValue& value) {
  if (value.isTensorList()) {
    return true;
  }
  if (!value.isList()) {
    return false;
  }
  const auto items = value.toListRef();
  return !items.empty() && (items[0].isTensor() || items[0].isNone());
}

void add_slot(const c10::IValue& value) {
  Slot& slot = log->slots.emplace_back();
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    if (!t.defined() || is_number(t)) {
      slot.kind = Slot::kValue;
      slot.value = t.defined() ? wrapped_number(t) : c10::IValue();
      return;
    }
    slot.kind = Slot::kTensor;
    slot.first = static_cast<uint32_t>(log->tensors.size());
    slot.count = 1;
    add_tensor(t);
  } else if (is_tensors(value)) {
    slot.kind = Slot::kTensors;
    slot.first = static_cast<uint32_t>(log->tensors.size());
    for (const c10::IValue& item : value.toListRef()) {
      add_tensor(item.isTensor() ? item.toTensor() : at::Tensor());
    }
    slot.count = static_cast<uint32_t>(log->tensors.size()) - slot.first;
  } else {
    slot.kind = Slot::kValue;
    slot.value = value;
  }
}

void hash_tensor(uint64_t& h, const at::Tensor& t) {
  if (!t.defined()) {
    mix(h, 1);
    return;
  }
  if (is_number(t)) {  // a Python number: the number is part of the signature
    hash_argument(h, wrapped_number(t), hash_tensor);
    return;
  }
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  mix(h, 2);
  mix(h, static_cast<uint64_t>(impl->dtype().toScalarType()));
  mix(h, static_cast<uint64_t>(impl->dim()));
  for (int64_t size : impl->sizes()) {
    mix(h, static_cast<uint64_t>(size));
  }
  for (int64_t stride : impl->strides()) {
    mix(h, static_cast<uint64_t>(stride));
  }
}

// What makes two ops the same signature: the schema, the values, the tensors' geometry.
void hash_slot(uint64_t& h, const c10::IValue& v) {
  if (v.isTensor()) {
    hash_tensor(h, v.toTensor());
  } else if (is_tensors(v)) {
    mix(h, 3);
    for (const c10::IValue& item : v.toListRef()) {
      if (item.isTensor()) {
        hash_tensor(h, item.toTensor());
      } else {
        mix(h, 1);
      }
    }
  } else {
    hash_argument(h, v, hash_tensor);
  }
}

void add_identity(const at::Tensor& t) {
  if (!t.defined()) {  // a None of a Tensor?[] list
    log->ids.push_back(nullptr);
    log->ids.push_back(nullptr);
    return;
  }
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  log->ids.push_back(impl);
  log->ids.push_back(impl->has_storage() ? impl->storage().unsafeGetStorageImpl() : nullptr);
}

void add_identities(const c10::IValue& v) {
  if (v.isTensor()) {
    if (v.toTensor().defined() && !is_number(v.toTensor())) {
      add_identity(v.toTensor());
    }
  } else if (is_tensors(v)) {
    for (const c10::IValue& item : v.toListRef()) {
      add_identity(item.isTensor() ? item.toTensor() : at::Tensor());
    }
  }
}

class Converter {
 public:
  Converter(const Signature& op, py::object make) : op_(op), make_(std::move(make)) {}

  py::object tensor(uint32_t index) {
    const LoggedTensor& t = log->tensors[index];
    const uint32_t position = position_++;
    if (t.impl == nullptr) {
      return py::none();
    }
    py::tuple sizes(t.rank);
    py::tuple strides(t.rank);
    for (uint32_t d = 0; d < t.rank; ++d) {
      sizes[d] = log->dims[t.dims + d];
      strides[d] = log->dims[t.dims + t.rank + d];
    }
    py::object dtype = py::reinterpret_borrow<py::object>(
        reinterpret_cast<PyObject*>(torch::getTHPDtype(t.dtype)));
    return make_(position, sizes, strides, dtype);
  }

  py::object slot(const Slot& slot, const c10::Argument* arg) {
    if (slot.kind == Slot::kTensor) {
      return tensor(slot.first);
    }
    if (slot.kind == Slot::kTensors) {
      py::list items(slot.count);
      for (uint32_t i = 0; i < slot.count; ++i) {
        items[i] = tensor(slot.first + i);
      }
      return std::move(items);
    }
    const c10::IValue& value = slot.value;
    if (value.isNone()) {
      return py::none();
    }
    if (arg != nullptr) {  // as the Python dispatcher hands them to a dispatch mode
      const c10::TypePtr& type = arg->real_type();
      auto is = [&](c10::TypeKind kind) {
        if (type->kind() == kind) {
          return true;
        }
        auto optional = type->cast<c10::OptionalType>();
        return optional && optional->getElementType()->kind() == kind;
      };
      if (is(c10::TypeKind::ScalarTypeType)) {
        return py::reinterpret_borrow<py::object>(
            reinterpret_cast<PyObject*>(torch::getTHPDtype(value.toScalarType())));
      }
      if (is(c10::TypeKind::LayoutType)) {
        return py::reinterpret_borrow<py::object>(
            reinterpret_cast<PyObject*>(torch::getTHPLayout(value.toLayout())));
      }
      if (is(c10::TypeKind::MemoryFormatType)) {
        return py::reinterpret_borrow<py::object>(
            torch::utils::getTHPMemoryFormat(value.toMemoryFormat()));
      }
    }
    return torch::jit::toPyObject(value);
  }

  // (namespace, name, overload), args, kwargs, results: the arguments split as the Python
  // dispatcher splits them for a dispatch mode (trailing defaults and defaulted keyword-only
  // arguments left out), so that a signature reads as one recorded on meta tensors does.
  // Tensors are make(position, sizes, strides, dtype), numbered in the op's slot order.
  py::tuple signature() {
    const c10::FunctionSchema& schema = *op_.schema;
    const auto& declared = schema.arguments();
    const Slot* slots = log->slots.data() + op_.first;
    const int64_t n = std::min<int64_t>(op_.arguments, static_cast<int64_t>(declared.size()));
    int64_t keywords = n;
    while (keywords > 0 && declared[keywords - 1].kwarg_only()) {
      --keywords;
    }
    int64_t positional = keywords;
    while (positional > 0 && is_default(declared[positional - 1], slots[positional - 1])) {
      --positional;
    }
    py::tuple args(positional);
    for (int64_t i = 0; i < positional; ++i) {
      args[i] = slot(slots[i], &declared[i]);
    }
    for (int64_t i = positional; i < keywords; ++i) {  // defaults: numbered, not shown
      skip(slots[i]);
    }
    py::dict kwargs;
    for (int64_t i = keywords; i < n; ++i) {
      if (is_default(declared[i], slots[i])) {
        skip(slots[i]);
      } else {
        kwargs[py::str(declared[i].name())] = slot(slots[i], &declared[i]);
      }
    }
    for (int64_t i = n; i < op_.arguments; ++i) {
      skip(slots[i]);
    }
    py::tuple results(op_.results);
    for (uint32_t i = 0; i < op_.results; ++i) {
      results[i] = slot(slots[op_.arguments + i], nullptr);
    }
    const auto& name = schema.operator_name().name;
    const size_t colons = name.find("::");
    py::tuple which = py::make_tuple(name.substr(0, colons), name.substr(colons + 2),
                                     schema.overload_name());
    return py::make_tuple(which, args, kwargs, results);
  }

 private:
  static bool is_default(const c10::Argument& arg, const Slot& slot) {
    return slot.kind == Slot::kValue && arg.default_value().has_value() &&
           *arg.default_value() == slot.value;
  }

  void skip(const Slot& slot) {
    position_ += slot.kind == Slot::kValue ? 0 : slot.count;
  }

  const Signature& op_;
  py::object make_;
  uint32_t position_ = 0;
};

}  // namespace

std::atomic<int>& active_blocks() {
  static std::atomic<int> blocks{0};
  return blocks;
}

bool is_autograd_thread() {
  static thread_local int8_t known = -1;
  if (known < 0) {
    char name[16] = {0};
    pthread_getname_np(pthread_self(), name, sizeof(name));
    known = std::strncmp(name, "pt_autograd", 11) == 0 ? 1 : 0;
  }
  return known == 1;
}

void log_op(const c10::FunctionSchema& schema, const c10::IValue* args, size_t n,
            const c10::IValue* results, size_t m, bool fused) {
  std::lock_guard<std::mutex> lock(writing);
  log = op_logging() ? &own : followed;
  if (log == nullptr) {
    return;  // an autograd thread, after the block it followed ended
  }
  uint64_t h = reinterpret_cast<uintptr_t>(&schema);
  for (size_t i = 0; i < n; ++i) {
    hash_slot(h, args[i]);
  }
  mix(h, 14);
  for (size_t i = 0; i < m; ++i) {
    hash_slot(h, results[i]);
  }
  auto [found, added] = log->known.try_emplace(h, static_cast<uint32_t>(log->signatures.size()));
  if (added) {
    log->counted.ops.push_back(0);
    log->signatures.push_back(Signature{&schema, static_cast<uint32_t>(log->slots.size()),
                                       static_cast<uint32_t>(n), static_cast<uint32_t>(m)});
    for (size_t i = 0; i < n; ++i) {
      add_slot(args[i]);
    }
    for (size_t i = 0; i < m; ++i) {
      add_slot(results[i]);
    }
  }
  if (log->ops.size() >= kLaidOut) {
    ++log->counted.ops[found->second];
    return;
  }
  const auto at = static_cast<uint32_t>(log->ids.size());
  for (size_t i = 0; i < n; ++i) {
    add_identities(args[i]);
  }
  for (size_t i = 0; i < m; ++i) {
    add_identities(results[i]);
  }
  log->ops.push_back(LoggedOp{found->second, 0, at,
                             static_cast<uint32_t>(log->ids.size()) - at, fused});
}

void log_op(const c10::OperatorHandle& op, std::initializer_list<c10::IValue> args,
            std::initializer_list<c10::IValue> results, bool fused) {
  log_op(op.schema(), args.begin(), args.size(), results.begin(), results.size(), fused);
}

size_t op_log_begin() {
  std::lock_guard<std::mutex> lock(writing);
  if (own.depth++ == 0) {
    own.reserve();
    followed = &own;
    active_blocks().fetch_add(1);
  } else {
    own.opened.push_back(own.counted);
  }
  op_logging() = true;
  return own.ops.size();
}

void op_log_mark(int64_t kind, int64_t tag) {
  if (!logs_ops()) {
    return;
  }
  std::lock_guard<std::mutex> lock(writing);
  Log* target = op_logging() ? &own : followed;
  if (target == nullptr) {
    return;
  }
  if (target->ops.size() < kLaidOut) {
    target->ops.push_back(LoggedOp{-1 - kind, tag, 0, 0, false});
  } else if (kind == 1) {  // a compiled graph's call: counted (a graph's end needs no count)
    ++target->counted.calls[tag];
  }
}

py::tuple op_log_end(size_t start, const py::object& make) {
  Log taken;
  {
    std::lock_guard<std::mutex> lock(writing);
    if (own.depth == 0) {
      return py::make_tuple(py::list(), py::list());
    }
    if (--own.depth == 0) {  // the outermost block: the log is handed over and emptied
      op_logging() = false;
      if (followed == &own) {
        followed = nullptr;
      }
      active_blocks().fetch_sub(1);
      taken = std::move(own);
      own = Log();
    } else {
      taken = own;  // an inner block: the outer one keeps the records; it counted from here
      const Counted& before = own.opened.back();
      for (size_t i = 0; i < before.ops.size(); ++i) {
        taken.counted.ops[i] -= before.ops[i];
      }
      for (const auto& [tag, calls] : before.calls) {
        taken.counted.calls[tag] -= calls;
      }
      own.opened.pop_back();
    }
  }
  log = &taken;  // Python is called from here on: no lock is held
  py::list signatures;
  for (const Signature& signature : log->signatures) {
    signatures.append(Converter(signature, make).signature());
  }
  py::list ops;
  for (size_t i = start; i < log->ops.size(); ++i) {
    const LoggedOp& op = log->ops[i];
    if (op.signature < 0) {
      ops.append(py::make_tuple(py::none(), -1 - op.signature, op.tag));
      continue;
    }
    py::tuple ids(op.count);
    for (uint32_t k = 0; k < op.count; ++k) {
      ids[k] = reinterpret_cast<uintptr_t>(log->ids[op.ids + k]);
    }
    ops.append(py::make_tuple(op.signature, op.fused, ids));
  }
  py::list counted;
  for (uint64_t n : log->counted.ops) {
    counted.append(n);
  }
  py::dict calls;
  for (const auto& [tag, n] : log->counted.calls) {
    if (n > 0) {
      calls[py::int_(tag)] = n;
    }
  }
  log = nullptr;
  return py::make_tuple(signatures, ops, counted, calls);
}

}  // namespace tpu_lab
