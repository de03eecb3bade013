// What PyTorch asks a PrivateUse1 backend for: hooks (pinned memory, generators, storage
// resize, device count), a device guard (one chip per process, one stream, host-timed events)
// and a random generator that draws exactly what the CPU's draws for the same seed.
#include "core.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <chrono>

namespace tpu_lab {
namespace {

void check_index(c10::DeviceIndex index) {
  TORCH_CHECK(index <= 0, "tpu:", static_cast<int>(index),
              " does not exist: this process drives one chip, tpu:0 (as with TorchTPU, each "
              "process drives one chip of the topology). Use device='tpu'; for several chips "
              "run one process per chip: %tpu cluster start v6e-4 (tpu_lab.launch.cluster).");
}

// A CPU generator that says it belongs to "tpu": the bundled device draws on the CPU, so the
// same seed gives the same numbers as on the CPU.
class TpuGenerator : public at::CPUGeneratorImpl {
 public:
  explicit TpuGenerator(uint64_t seed = c10::default_rng_seed_val) : at::CPUGeneratorImpl(seed) {
    device_ = c10::Device(kTpu, 0);
    key_set_ = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
  }

  static c10::DeviceType device_type() {
    return kTpu;
  }

 private:
  at::CPUGeneratorImpl* clone_impl() const override {
    auto* copy = new TpuGenerator();
    copy->set_engine(const_cast<TpuGenerator*>(this)->engine());
    copy->set_next_float_normal_sample(
        const_cast<TpuGenerator*>(this)->next_float_normal_sample());
    copy->set_next_double_normal_sample(
        const_cast<TpuGenerator*>(this)->next_double_normal_sample());
    return copy;
  }
};

struct TpuHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override {
    return true;
  }
  bool isAvailable() const override {
    return true;
  }
  bool hasPrimaryContext(c10::DeviceIndex /*device_index*/) const override {
    return true;
  }
  c10::DeviceIndex deviceCount() const override {
    return 1;
  }
  void setCurrentDevice(c10::DeviceIndex device) const override {
    check_index(device);
  }
  c10::DeviceIndex getCurrentDevice() const override {
    return 0;
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    check_index(device);
    return 0;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex /*device*/) const override {
    return 0;
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    check_index(device_index);
    return default_generator();
  }
  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override {
    TORCH_CHECK_VALUE(device_index <= 0, "Cannot set TPU device to index ",
                      static_cast<int>(device_index),
                      ", current process is bound to device index 0. Changing the active TPU "
                      "device within a process is not supported.");
    return at::make_generator<TpuGenerator>();
  }
  at::Device getDeviceFromPtr(void* /*data*/) const override {
    return {kTpu, 0};
  }
  bool isPinnedPtr(const void* data) const override {
    return is_pinned(data);
  }
  at::Allocator* getPinnedMemoryAllocator() const override {
    return pinned_allocator();
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_storage(storage, newsize);
  }
};

using Clock = std::chrono::steady_clock;

// Every op has finished when it returns: streams are always idle, events complete at once
// and only keep the host time at which they were recorded.
struct TpuGuard final : public c10::impl::DeviceGuardImplInterface {
  static thread_local c10::StreamId current_stream;

  c10::DeviceType type() const override {
    return kTpu;
  }
  c10::Device exchangeDevice(c10::Device device) const override {
    check_index(device.index());
    return {kTpu, 0};
  }
  c10::Device getDevice() const override {
    return {kTpu, 0};
  }
  void setDevice(c10::Device device) const override {
    check_index(device.index());
  }
  void uncheckedSetDevice(c10::Device /*device*/) const noexcept override {}
  c10::Stream getStream(c10::Device /*device*/) const override {
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kTpu, 0), current_stream);
  }
  c10::Stream getDefaultStream(c10::Device /*device*/) const override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kTpu, 0));
  }
  c10::Stream getNewStream(c10::Device /*device*/, int /*priority*/) const override {
    static std::atomic<c10::StreamId> next{1};
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kTpu, 0), next++);
  }
  c10::Stream exchangeStream(c10::Stream stream) const override {
    c10::Stream previous = getStream(stream.device());
    current_stream = stream.id();
    return previous;
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return 1;
  }
  void record(void** event, const c10::Stream& /*stream*/, const c10::DeviceIndex /*device*/,
              const c10::EventFlag /*flag*/) const override {
    if (*event == nullptr) {
      *event = new Clock::time_point();
    }
    *static_cast<Clock::time_point*>(*event) = Clock::now();
  }
  void block(void* /*event*/, const c10::Stream& /*stream*/) const override {}
  bool queryEvent(void* /*event*/) const override {
    return true;
  }
  void destroyEvent(void* event, const c10::DeviceIndex /*device*/) const noexcept override {
    delete static_cast<Clock::time_point*>(event);
  }
  bool queryStream(const c10::Stream& /*stream*/) const override {
    return true;
  }
  void synchronizeStream(const c10::Stream& /*stream*/) const override {
    notify("sync", "synchronize", 0);
  }
  void synchronizeEvent(void* /*event*/) const override {}
  void synchronizeDevice(const c10::DeviceIndex /*device*/) const override {
    notify("sync", "synchronize", 0);
  }
  void recordDataPtrOnStream(const c10::DataPtr& /*ptr*/,
                             const c10::Stream& /*stream*/) const override {}
  double elapsedTime(void* start, void* end, const c10::DeviceIndex /*device*/) const override {
    TORCH_CHECK(start != nullptr && end != nullptr,
                "Both events must be recorded before calculating elapsed time.");
    auto span = *static_cast<Clock::time_point*>(end) - *static_cast<Clock::time_point*>(start);
    return std::chrono::duration<double, std::milli>(span).count();
  }
};

thread_local c10::StreamId TpuGuard::current_stream = 0;

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuard);

struct Registration {
  Registration() {
    static TpuHooks hooks;
    at::RegisterPrivateUse1HooksInterface(&hooks);
  }
};
Registration registration;

}  // namespace

const at::Generator& default_generator() {
  static at::Generator generator = at::make_generator<TpuGenerator>();
  return generator;
}

}  // namespace tpu_lab
