// Unsigned-integer ops a TPU has and PyTorch's CPU kernels lack (uint16, uint32).
//
// A TPU computes u16/u32 arithmetic natively, and TorchTPU's quantization tutorials rely on it
// (`2 ** torch.arange(32, dtype=torch.uint32, device="tpu")`, sums of packed bits). The CPU
// kernels the fallback runs refuse several of these ops ("arange_cpu" not implemented for
// 'UInt32'). When an op with a uint16/uint32 tensor or dtype argument is refused that way, it
// runs again here on int64 copies of those arguments (int64 holds every uint16/uint32 value)
// and each result is cast to the dtype PyTorch gives it (the op run on meta tensors): the cast
// keeps the low bits, so results wrap modulo 2**32 (2**16) as a TPU's unsigned ops do. An out=
// or in-place argument takes the values back. Ops the CPU runs on these dtypes are untouched,
// and other dtypes never reach this file. uint64 is not covered: int64 cannot hold it.
#include "core.h"

#include <c10/util/Exception.h>

namespace tpu_lab {
namespace {

bool narrow_unsigned(c10::ScalarType type) {
  return type == c10::ScalarType::UInt16 || type == c10::ScalarType::UInt32;
}

bool is_dtype_argument(const c10::Argument& argument) {
  c10::TypePtr type = argument.real_type();  // type() says int for a ScalarType
  if (type->kind() == c10::TypeKind::OptionalType) {
    type = type->expectRef<c10::OptionalType>().getElementType();
  }
  return type->kind() == c10::TypeKind::ScalarTypeType;
}

bool unsigned_tensor(const c10::IValue& value) {
  return value.isTensor() && value.toTensor().defined() &&
         narrow_unsigned(value.toTensor().scalar_type());
}

// `value` with `fn` applied to its tensors (a tensor, a tensor list or a list of optional ones).
template <typename Fn>
c10::IValue map_tensors(const c10::IValue& value, const Fn& fn) {
  if (value.isTensor()) {
    return value.toTensor().defined() ? c10::IValue(fn(value.toTensor())) : value;
  }
  if (value.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : value.toTensorList()) {
      out.push_back(t.defined() ? fn(t) : t);
    }
    return out;
  }
  if (value.isList()) {
    auto list = value.toList();
    if (list.empty() || !list.get(0).isTensor() && !list.get(0).isNone()) {
      return value;
    }
    c10::impl::GenericList out(list.elementType());
    for (const c10::IValue& item : list) {
      out.push_back(item.isTensor() ? c10::IValue(fn(item.toTensor())) : item);
    }
    return out;
  }
  return value;
}

at::Tensor widen(const at::Tensor& t) {
  return narrow_unsigned(t.scalar_type()) ? t.to(c10::ScalarType::Long) : t;
}

}  // namespace

bool has_narrow_unsigned(const c10::FunctionSchema& schema, const torch::jit::Stack& stack,
                         size_t first) {
  const auto& arguments = schema.arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::IValue& value = stack[first + i];
    if (unsigned_tensor(value)) {
      return true;
    }
    if (value.isTensorList()) {
      for (const at::Tensor& t : value.toTensorList()) {
        if (t.defined() && narrow_unsigned(t.scalar_type())) {
          return true;
        }
      }
    }
    if (value.isInt() && is_dtype_argument(arguments[i]) &&
        narrow_unsigned(static_cast<c10::ScalarType>(value.toInt()))) {
      return true;
    }
  }
  return false;
}

void run_widening(const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t first,
                  const std::function<void(torch::jit::Stack*)>& run) {
  const c10::FunctionSchema& schema = op.schema();
  const std::vector<c10::IValue> args(stack->begin() + first, stack->end());
  try {
    run(stack);
    return;
  } catch (const c10::NotImplementedError&) {
    // the CPU has no kernel for these dtypes: computed in int64 below
  }
  stack->resize(first);

  // The results' dtypes, as PyTorch gives them: the op on meta tensors.
  torch::jit::Stack meta;
  for (const c10::IValue& value : args) {
    meta.push_back(map_tensors(value, [](const at::Tensor& t) {
      return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
    }));
  }
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta);
  std::vector<c10::ScalarType> wanted;
  for (const c10::IValue& result : meta) {
    wanted.push_back(result.isTensor() ? result.toTensor().scalar_type()
                                       : c10::ScalarType::Undefined);
  }

  // The same call on int64 copies; written (in-place, out=) arguments are copies too.
  const auto& arguments = schema.arguments();
  std::vector<std::pair<at::Tensor, at::Tensor>> written;  // (argument, its int64 copy)
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& value = args[i];
    if (value.isInt() && is_dtype_argument(arguments[i]) &&
        narrow_unsigned(static_cast<c10::ScalarType>(value.toInt()))) {
      stack->push_back(static_cast<int64_t>(c10::ScalarType::Long));
      continue;
    }
    const bool writes = arguments[i].alias_info() != nullptr && arguments[i].alias_info()->isWrite();
    if (writes && unsigned_tensor(value)) {
      at::Tensor copy = widen(value.toTensor());
      written.emplace_back(value.toTensor(), copy);
      stack->push_back(copy);
      continue;
    }
    stack->push_back(map_tensors(value, widen));
  }
  run(stack);

  for (auto& [argument, copy] : written) {
    argument.resize_(copy.sizes());
    argument.copy_(copy);  // int64 -> uint: keeps the low bits
  }
  const size_t nreturns = schema.returns().size();
  for (size_t r = 0; r < nreturns; ++r) {
    c10::IValue& result = (*stack)[stack->size() - nreturns + r];
    if (!result.isTensor() || !result.toTensor().defined()) {
      continue;
    }
    const at::Tensor& t = result.toTensor();
    bool returned_argument = false;
    for (auto& [argument, copy] : written) {
      if (copy.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) {
        result = argument;
        returned_argument = true;
      }
    }
    if (!returned_argument && wanted[r] != c10::ScalarType::Undefined &&
        t.scalar_type() != wanted[r]) {
      result = t.to(wanted[r]);
    }
  }
}

}  // namespace tpu_lab
