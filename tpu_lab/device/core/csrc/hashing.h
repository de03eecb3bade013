// The 64-bit hash that keys an op by its arguments, shared by the eager compile cache's counts
// (opcache.cpp) and the op log's signatures (oplog.cpp). Each hashes its tensors its own way
// (the cache by shape and dtype, the log by its geometry too): `tensor` is called for each.
#pragma once

#include <ATen/core/ivalue.h>

#include <cstdint>
#include <cstring>
#include <string_view>

namespace tpu_lab {

inline void mix(uint64_t& h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
}

// One argument: a tensor through `tensor(h, t)`, anything else by its type and value (a list
// item by item; a generator, a stream...: by its kind alone, the same key whichever).
template <typename HashTensor>
void hash_argument(uint64_t& h, const c10::IValue& v, const HashTensor& tensor) {
  if (v.isTensor()) {
    tensor(h, v.toTensor());
  } else if (v.isInt()) {
    mix(h, 4);
    mix(h, static_cast<uint64_t>(v.toInt()));
  } else if (v.isDouble()) {
    const double d = v.toDouble();
    uint64_t bits = 0;
    std::memcpy(&bits, &d, sizeof(bits));
    mix(h, 5);
    mix(h, bits);
  } else if (v.isBool()) {
    mix(h, v.toBool() ? 7 : 6);
  } else if (v.isNone()) {
    mix(h, 8);
  } else if (v.isIntList()) {
    mix(h, 9);
    for (int64_t x : v.toIntList()) {
      mix(h, static_cast<uint64_t>(x));
    }
  } else if (v.isList()) {
    mix(h, 10);
    for (const c10::IValue& item : v.toListRef()) {
      hash_argument(h, item, tensor);
    }
  } else if (v.isString()) {
    mix(h, 11);
    mix(h, std::hash<std::string_view>{}(v.toStringView()));
  } else if (v.isDevice()) {
    mix(h, 12);
    mix(h, static_cast<uint64_t>(v.toDevice().type()));
    mix(h, static_cast<uint64_t>(v.toDevice().index() + 1));
  } else {
    mix(h, 13);
  }
}

}  // namespace tpu_lab
