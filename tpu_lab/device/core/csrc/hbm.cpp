// The chip's HBM: host memory, with exact per-chip accounting checked before anything is
// allocated, and the pinned host memory PyTorch asks a backend for (DataLoader pin_memory).
#include "core.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <mutex>
#include <unordered_set>

namespace tpu_lab {
namespace {

std::mutex hbm_mutex;
HbmStats hbm;

// What a "tpu" DataPtr's context owns: bytes from the host allocator, or a CPU storage whose
// memory an op result took over. Either way the chip is charged nbytes while it lives.
struct Block {
  size_t nbytes;
  void* owned;        // malloc'ed by this allocator, or nullptr
  c10::Storage host;  // a CPU storage kept alive, or empty
};

void delete_block(void* ctx) {
  auto* block = static_cast<Block*>(ctx);
  if (block->owned != nullptr) {
    c10::free_cpu(block->owned);
  }
  hbm_release(block->nbytes);
  delete block;
}

at::DataPtr block_ptr(void* data, Block* block) {
  return {data, block, &delete_block, c10::Device(kTpu, 0)};
}

using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingDeviceAllocator::StatType;

struct TpuAllocator final : public c10::DeviceAllocator {
  at::DataPtr allocate(size_t nbytes) override {
    hbm_charge(nbytes);  // before the host allocation: a 40 GiB request fails without trying
    void* data = nullptr;
    try {
      data = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    } catch (...) {
      hbm_release(nbytes);
      throw;
    }
    return block_ptr(data, new Block{nbytes, data, {}});
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  bool initialized() override {
    return true;
  }

  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {}  // nothing is cached

  void recordStream(const at::DataPtr& /*ptr*/, c10::Stream /*stream*/) override {}

  DeviceStats getDeviceStats(c10::DeviceIndex /*device*/) override {
    HbmStats s = hbm_stats();
    DeviceStats stats;
    auto fill = [](c10::CachingDeviceAllocator::StatArray& array, int64_t current, int64_t peak,
                   int64_t allocated, int64_t freed) {
      auto& all = array[static_cast<size_t>(StatType::AGGREGATE)];
      all.current = current;
      all.peak = peak;
      all.allocated = allocated;
      all.freed = freed;
    };
    fill(stats.allocated_bytes, s.live, s.peak, 0, 0);
    fill(stats.reserved_bytes, s.live, s.peak, 0, 0);
    fill(stats.active_bytes, s.live, s.peak, 0, 0);
    fill(stats.requested_bytes, s.live, s.peak, 0, 0);
    fill(stats.allocation, s.blocks, 0, s.allocations, s.frees);
    stats.num_ooms = s.ooms;
    return stats;
  }

  void resetAccumulatedStats(c10::DeviceIndex /*device*/) override {
    hbm_reset_accumulated();
  }

  void resetPeakStats(c10::DeviceIndex /*device*/) override {
    hbm_reset_peak();
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex /*device*/) override {
    HbmStats s = hbm_stats();
    return {static_cast<size_t>(s.capacity - s.live), static_cast<size_t>(s.capacity)};
  }
};

std::mutex pinned_mutex;
std::unordered_set<const void*> pinned;

void delete_pinned(void* data) {
  {
    std::lock_guard<std::mutex> lock(pinned_mutex);
    pinned.erase(data);
  }
  c10::free_cpu(data);
}

// Pinned host memory: ordinary host memory the hooks recognise as pinned.
struct PinnedAllocator final : public c10::Allocator {
  at::DataPtr allocate(size_t nbytes) override {
    void* data = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    if (data != nullptr) {
      std::lock_guard<std::mutex> lock(pinned_mutex);
      pinned.insert(data);
    }
    return {data, data, &delete_pinned, c10::Device(c10::DeviceType::CPU)};
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

TpuAllocator tpu_allocator;
PinnedAllocator pinned_host_allocator;

}  // namespace

HbmStats hbm_stats() {
  std::lock_guard<std::mutex> lock(hbm_mutex);
  return hbm;
}

void hbm_set_capacity(int64_t capacity) {
  std::lock_guard<std::mutex> lock(hbm_mutex);
  hbm.capacity = capacity;
}

void hbm_reset_peak() {
  std::lock_guard<std::mutex> lock(hbm_mutex);
  hbm.peak = hbm.live;
}

void hbm_reset_accumulated() {
  std::lock_guard<std::mutex> lock(hbm_mutex);
  hbm.allocations = hbm.frees = hbm.ooms = 0;
}

// Charge nbytes to the chip (reserve = true) or only check that they would fit; either way a
// request that does not fit counts an OOM and raises the XLA-worded OutOfMemoryError.
static void hbm_request(size_t nbytes, bool reserve) {
  int64_t live = 0;
  int64_t capacity = 0;
  {
    std::lock_guard<std::mutex> lock(hbm_mutex);
    const int64_t wanted = hbm.live + static_cast<int64_t>(nbytes);
    if (wanted <= hbm.capacity) {
      if (reserve) {
        hbm.live = wanted;
        hbm.allocations += 1;
        hbm.blocks += 1;
        if (wanted > hbm.peak) {
          hbm.peak = wanted;
        }
      }
      return;
    }
    hbm.ooms += 1;
    live = hbm.live;
    capacity = hbm.capacity;
  }
  std::string message = oom_message(static_cast<int64_t>(nbytes), live, capacity);
  TORCH_CHECK_WITH(OutOfMemoryError, false, message);
}

void hbm_charge(size_t nbytes) {
  hbm_request(nbytes, true);
}

void hbm_check(size_t nbytes) {
  hbm_request(nbytes, false);
}

void hbm_release(size_t nbytes) {
  std::lock_guard<std::mutex> lock(hbm_mutex);
  hbm.live -= static_cast<int64_t>(nbytes);
  hbm.frees += 1;
  hbm.blocks -= 1;
}

c10::Allocator* device_allocator() {
  return &tpu_allocator;
}

c10::Allocator* pinned_allocator() {
  return &pinned_host_allocator;
}

bool is_pinned(const void* ptr) {
  std::lock_guard<std::mutex> lock(pinned_mutex);
  return pinned.count(ptr) > 0;
}

c10::Storage adopt_storage(const c10::Storage& cpu) {
  const size_t nbytes = cpu.nbytes();
  hbm_charge(nbytes);
  void* data = cpu.mutable_data();
  return c10::Storage(c10::Storage::use_byte_size_t(), nbytes,
                      block_ptr(data, new Block{nbytes, nullptr, cpu}), &tpu_allocator,
                      /*resizable=*/true);
}

void resize_storage(const c10::Storage& storage, size_t nbytes) {
  TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
  at::DataPtr fresh = tpu_allocator.allocate(nbytes);
  const size_t keep = std::min(nbytes, storage.nbytes());
  if (keep > 0 && storage.data() != nullptr) {
    std::memcpy(fresh.get(), storage.data(), keep);
  }
  storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(fresh));
  storage.unsafeGetStorageImpl()->set_nbytes(nbytes);
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &tpu_allocator);

}  // namespace tpu_lab
