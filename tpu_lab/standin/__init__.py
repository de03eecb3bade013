"""The stand-in for ``import torch_tpu`` on machines without TorchTPU: the package in
``_torch_tpu/`` (TorchTPU 0.2.0's module names over the bundled device), loaded under the name
``torch_tpu`` by the finder in :mod:`tpu_lab.runtime.torch_tpu_finder`, never imported as
``tpu_lab.standin``. It sits at the top of the layers: it starts the device and imports the
launch helpers, as ``import torch_tpu`` does."""
