"""The embedded text model: a tiny character-level causal language model.

Trained by ``scripts/train_chars.py`` (on the "tpu" device) on text that ships with Python:
the Zen of Python (``import this``) and the docstrings of a fixed list of standard-library
modules (:data:`MODULES`). Shipped in ``tpu_lab/models/chars/`` as a transformers folder
(``config.json`` and ``model.safetensors`` of a 2-layer ``LlamaForCausalLM``, 112,960
parameters, 454 kB) plus ``vocab.json``, the characters in token order. :func:`chars_model` loads it
with ``AutoModelForCausalLM.from_pretrained``, offline.

Tokens are characters: :class:`CharTokenizer` maps each character of the vocabulary to its
index and back (``encode("Beautiful")`` is a list of 9 ints; ``decode`` joins them again);
a character outside the vocabulary is an error naming it. :func:`generate` continues a
prompt one character at a time over a fixed window of :data:`CONTEXT` tokens (the prompt
right-padded), so the model always sees one shape: compiled, it compiles once.
"""

from __future__ import annotations

import codecs
import inspect
import json
from collections.abc import Callable, Sequence
from pathlib import Path

from .. import _install
from ..errors import CharsInputError, TpuLabError

try:
    import torch
    from transformers import AutoModelForCausalLM
except ImportError as exc:
    raise ImportError(
        f"The text model needs transformers and safetensors: {_install.hint('hf')}"
    ) from exc

#: The model folder shipped inside the package.
FOLDER = Path(__file__).with_name("chars")
#: The vocabulary file inside a model folder.
VOCAB = "vocab.json"
#: Tokens the model sees at once (its ``max_position_embeddings``).
CONTEXT = 128
#: The characters of the vocabulary, in token order: newline and printable ASCII.
CHARS = "\n" + "".join(chr(c) for c in range(32, 127))
#: Standard-library modules whose docstrings are the rest of the training text.
MODULES = (
    "string", "textwrap", "operator", "functools", "itertools", "collections", "json", "random",
    "re", "os", "pathlib", "math", "heapq", "bisect", "fractions", "difflib", "shlex",
    "argparse", "contextlib", "dataclasses",
)  # fmt: skip
#: The model of the shipped weights (vocab_size is the number of characters).
LLAMA_CONFIG = {
    "hidden_size": 64,
    "intermediate_size": 192,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": CONTEXT,
    "tie_word_embeddings": True,
}


def zen() -> str:
    """The Zen of Python, as ``import this`` prints it (without printing it)."""
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):  # its first import prints the text
        import this
    return codecs.decode(this.s, "rot13")


def corpus() -> tuple[str, str]:
    """The training text: (the Zen of Python, the docstrings of :data:`MODULES` and of the
    classes and functions in their ``__all__``, joined by blank lines; docstrings with a
    character outside :data:`CHARS` are left out). The same for the same Python version."""
    import importlib

    docs = []
    for name in MODULES:
        module = importlib.import_module(name)
        doc = inspect.getdoc(module)
        if doc:
            docs.append(doc)
        for attr in sorted(getattr(module, "__all__", ())):
            obj = getattr(module, attr, None)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                doc = inspect.getdoc(obj)
                if doc:
                    docs.append(doc)
    known = set(CHARS)
    return zen(), "\n\n".join(d for d in docs if set(d) <= known)


class CharTokenizer:
    """Characters to token ids and back, for the character-level model.

    ``CharTokenizer(chars)``: token ``i`` is ``chars[i]``. ``encode(text)`` is the list of ids
    (a :class:`CharsInputError` names any character not in the vocabulary); ``decode(ids)``
    is the text. :meth:`from_pretrained` reads ``vocab.json`` (a JSON list of the characters)
    from a model folder; :meth:`save_pretrained` writes it.
    """

    def __init__(self, chars: Sequence[str]) -> None:
        chars = list(chars)
        if not chars or any(not isinstance(c, str) or len(c) != 1 for c in chars):
            raise CharsInputError("a character vocabulary is a non-empty list of 1-char strings.")
        if len(set(chars)) != len(chars):
            raise CharsInputError("the character vocabulary repeats a character.")
        self.chars = chars
        self.index = {c: i for i, c in enumerate(chars)}

    def __len__(self) -> int:
        return len(self.chars)

    @classmethod
    def from_pretrained(cls, folder: str | Path) -> CharTokenizer:
        path = Path(folder) / VOCAB
        if not path.is_file():
            raise TpuLabError(f"{folder}: no {VOCAB} there (the character vocabulary).")
        return cls(json.loads(path.read_text()))

    def save_pretrained(self, folder: str | Path) -> None:
        (Path(folder) / VOCAB).write_text(json.dumps(self.chars) + "\n")

    def encode(self, text: str) -> list[int]:
        unknown = sorted({c for c in text if c not in self.index})
        if unknown:
            raise CharsInputError(
                f"characters not in the model's vocabulary: {''.join(unknown)!r}; "
                "use plain ASCII letters, digits and punctuation."
            )
        return [self.index[c] for c in text]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.chars[int(i)] for i in ids)


def chars_model(device: str = "tpu", path: str | Path | None = None):
    """The embedded text model and its tokenizer, ``(model, tokenizer)``: the model loaded with
    ``AutoModelForCausalLM.from_pretrained`` from the package (or from ``path``), offline, in
    eval mode on ``device``."""
    folder = Path(path) if path is not None else FOLDER
    if not (folder / "config.json").is_file():
        raise TpuLabError(
            f"{folder} is not a transformers model folder (no config.json): pass the folder "
            "written by scripts/train_chars.py."
        )
    tokenizer = CharTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    if model.config.vocab_size != len(tokenizer):
        raise TpuLabError(
            f"{folder}: the model has {model.config.vocab_size} tokens but {VOCAB} has "
            f"{len(tokenizer)} characters."
        )
    model = model.to(device).eval()
    return model, tokenizer


@torch.no_grad()
def generate(
    model: Callable,
    ids: Sequence[int],
    max_new_tokens: int,
    *,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    device: str | torch.device = "cpu",
    context: int = CONTEXT,
) -> list[int]:
    """``max_new_tokens`` token ids continuing ``ids``: greedy when ``temperature`` is 0,
    else sampled (on the host, from ``generator``) from the softmax at that temperature.

    Every step runs ``model`` on one ``(1, context)`` window: the last ``context`` tokens,
    right-padded with token 0 (the causal mask hides the padding from the positions read),
    so a compiled ``model`` sees a single shape however long the text grows."""
    if not ids:
        raise CharsInputError("the prompt is empty: give at least one character.")
    if temperature < 0:
        raise CharsInputError(f"temperature={temperature!r}: use 0 (greedy) or more.")
    tokens, out = list(ids), []
    for _ in range(max_new_tokens):
        window = tokens[-context:]
        batch = torch.zeros(1, context, dtype=torch.long)
        batch[0, : len(window)] = torch.tensor(window)
        logits = model(input_ids=batch.to(device), use_cache=False).logits[0, len(window) - 1]
        logits = logits.float().cpu()
        if temperature == 0:
            token = int(logits.argmax())
        else:
            probs = torch.softmax(logits / temperature, dim=-1)
            token = int(torch.multinomial(probs, 1, generator=generator))
        tokens.append(token)
        out.append(token)
    return out
