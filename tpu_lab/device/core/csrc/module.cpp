// The Python binding of the compiled core, and its calls back into Python (tpu_lab.device.core
// registers the callbacks; they hold no state of their own).
#include "core.h"
#include "opcache.h"
#include "oplog.h"

#include <torch/csrc/Generator.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/extension.h>

namespace py = pybind11;

namespace tpu_lab {

namespace {

std::atomic<bool> recording{false};
thread_local int8_t recording_here = -1;  // -1: this thread follows the process's setting

// Leaked on purpose: Python objects must not be destroyed after the interpreter is gone.
py::object* recorder = nullptr;
py::object* notifier = nullptr;
py::object* oom_wording = nullptr;

[[noreturn]] void rethrow(py::error_already_set& error) {
  std::string message = py::str(error.value());
  TORCH_CHECK(false, message);
}

void set_callback(py::object*& slot, py::object fn) {
  py::object* previous = slot;
  slot = fn.is_none() ? nullptr : new py::object(std::move(fn));
  delete previous;
}

}  // namespace

bool is_recording() {
  return recording_here >= 0 ? recording_here != 0 : recording.load(std::memory_order_relaxed);
}

void record_op(const std::string& name, const std::vector<c10::IValue>& args) {
  py::gil_scoped_acquire gil;
  if (recorder == nullptr) {
    return;
  }
  py::tuple values(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    values[i] = torch::jit::toPyObject(args[i]);
  }
  try {
    (*recorder)(name, values, py::dict());
  } catch (py::error_already_set& error) {
    rethrow(error);
  }
}

void notify(const char* kind, const char* what, int64_t nbytes) {
  py::gil_scoped_acquire gil;
  if (notifier == nullptr) {
    return;
  }
  try {
    (*notifier)(kind, what, nbytes);
  } catch (py::error_already_set& error) {
    rethrow(error);
  }
}

std::string oom_message(int64_t nbytes, int64_t live, int64_t capacity) {
  py::gil_scoped_acquire gil;
  if (oom_wording == nullptr) {
    return "RESOURCE_EXHAUSTED: TPU out of memory allocating " + std::to_string(nbytes) +
           " bytes on tpu:0";
  }
  try {
    return (*oom_wording)(nbytes, live, capacity).cast<std::string>();
  } catch (py::error_already_set& error) {
    rethrow(error);
  }
}

}  // namespace tpu_lab

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace tpu_lab;
  m.doc() = "The compiled core of tpu_lab's bundled 'tpu' device (see core.h).";
  m.def("set_recorder", [](py::object fn) { set_callback(recorder, std::move(fn)); });
  m.def("set_recording", [](bool on) { recording.store(on); });
  m.def("set_thread_recording", [](int on) { recording_here = static_cast<int8_t>(on); });
  m.def("set_notifier", [](py::object fn) { set_callback(notifier, std::move(fn)); });
  m.def("set_oom_wording", [](py::object fn) { set_callback(oom_wording, std::move(fn)); });
  m.def("stats", [] {
    HbmStats s = hbm_stats();
    return py::make_tuple(s.capacity, s.live, s.peak, s.allocations, s.ooms);
  });
  m.def("set_capacity", &hbm_set_capacity);
  m.def("reset_peak", &hbm_reset_peak);
  m.def("reset_accumulated", &hbm_reset_accumulated);
  m.def("charge", [](int64_t nbytes) { hbm_charge(static_cast<size_t>(nbytes)); });
  m.def("release", [](int64_t nbytes) { hbm_release(static_cast<size_t>(nbytes)); });
  m.def("check", [](int64_t nbytes) { hbm_check(static_cast<size_t>(nbytes)); });
  m.def("cpu_view", &cpu_view, "A CPU tensor on the same memory as a 'tpu' tensor.");
  m.def("adopt", &adopt, "A 'tpu' tensor that takes over a CPU tensor's memory (no copy).");
  m.def("register_cpu_kernels", &register_cpu_kernels);
  m.def("op_cache_configure", &op_cache_configure);
  m.def("op_log_begin", &op_log_begin);
  m.def("op_log_mark", &op_log_mark);
  m.def("op_log_end", &op_log_end);
  m.def("op_logging", [] { return op_logging(); });
  m.def("set_thread_precision", &set_thread_precision);
  m.def("op_cache_dot_ops", &op_cache_dot_ops);
  m.def("op_cache_clear", &op_cache_clear);
  m.def("op_cache_stats", [](bool with_entries) {
    OpCacheStats s = op_cache_stats(with_entries);
    return py::make_tuple(s.requests, s.hits, s.entries);
  });
  m.def("default_generator", [] {
    return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(
        default_generator()));
  });
}
