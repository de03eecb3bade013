"""Models to plan, built on the meta device: from a transformers config, a diffusers config, a
local directory (config.json, or a pipeline's model_index.json) or a model given as it is.
No weights are read and nothing is downloaded."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..errors import ShardingError


def load_meta_model(obj, device="meta") -> tuple[torch.nn.Module, str]:
    """``obj`` (a transformers or diffusers config, a model, or a local directory with
    config.json) as a model; configs and directories are built on the meta device (on
    ``device``: with freshly initialised weights there)."""
    if isinstance(obj, torch.nn.Module):
        return obj, "model"
    if isinstance(obj, (str, Path)):
        return _from_directory(Path(obj), device)
    if hasattr(obj, "to_dict") and hasattr(obj, "model_type"):
        return _from_transformers_config(obj, device), "config"
    if isinstance(obj, dict) and "_class_name" in obj:
        return _from_diffusers_config(dict(obj), device), "config"
    raise ShardingError(
        f"Cannot plan a {type(obj).__name__}: pass a transformers config (e.g. LlamaConfig), a "
        "diffusers config dict (with '_class_name'), a model (on the meta device or not) or a "
        "local directory with config.json."
    )


def _from_directory(path: Path, device="meta"):
    if not path.is_dir():
        raise ShardingError(f"{str(path)!r} is not a local directory with a config.json.")
    if not (path / "config.json").exists() and (path / "model_index.json").exists():
        for sub in ("transformer", "unet"):
            if (path / sub / "config.json").exists():
                return _from_directory(path / sub, device)[0], f"{path / sub}"
    if not (path / "config.json").exists():
        raise ShardingError(f"{str(path)!r} has no config.json (nor model_index.json).")
    config = json.loads((path / "config.json").read_text())
    if "_class_name" in config:
        return _from_diffusers_config(config, device), str(path)
    from transformers import AutoConfig

    return _from_transformers_config(AutoConfig.from_pretrained(path), device), str(path)


def _from_transformers_config(config, device="meta") -> torch.nn.Module:
    import transformers

    classes = [getattr(transformers, a, None) for a in (config.architectures or ())]
    with torch.device(device):
        for cls in classes:
            if cls is not None:
                return cls(config)
        for auto in (transformers.AutoModelForCausalLM, transformers.AutoModel):
            try:
                return auto.from_config(config)
            except ValueError:
                continue
    raise ShardingError(f"transformers has no model class for {type(config).__name__}.")


def _from_diffusers_config(config: dict, device="meta") -> torch.nn.Module:
    import diffusers

    cls = getattr(diffusers, config["_class_name"], None)
    if cls is None:
        raise ShardingError(f"diffusers has no model class {config['_class_name']!r}.")
    with torch.device(device):
        return cls.from_config(config)
