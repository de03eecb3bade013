"""The embedded character model and ``tpu-lab demo text``.

The model loads offline with ``AutoModelForCausalLM.from_pretrained``; greedy generation on
the "tpu" device is the CPU's, token for token; from "Beautiful is" it recites the Zen of
Python it was trained on. The app is served on 127.0.0.1 (a free port, closed in ``finally``)
and called with gradio_client: it returns the text and the request's events (compiled mode
compiles once, then reuses the graph: one window shape). Bad inputs come back as the app's
message. Compiled graphs run the ATen graph (the ``aten`` lowering).
"""

from __future__ import annotations

import json

import pytest
import torch

import tpu_lab  # noqa: F401  (the "tpu" device)

pytest.importorskip("transformers", reason="transformers is missing: pip install 'tpu-lab[hf]'")
pytest.importorskip("gradio", reason="gradio is missing: pip install 'tpu-lab[demo]'")
pytest.importorskip("gradio_client", reason="gradio_client is missing: pip install 'tpu-lab[demo]'")

from gradio_client import Client  # noqa: E402
from gradio_client.exceptions import AppError  # noqa: E402

from _browser import served  # noqa: E402
from tpu_lab.apps import text as app  # noqa: E402
from tpu_lab.cli import main  # noqa: E402
from tpu_lab.errors import DemoInputError  # noqa: E402
from tpu_lab.models import chars_model  # noqa: E402
from tpu_lab.models.chars import (  # noqa: E402
    CHARS,
    FOLDER,
    CharsInputError,
    CharTokenizer,
    generate,
    zen,
)
from tpu_lab.session import COMPILED, EAGER, FUSE  # noqa: E402

#: What the events panel says of an eager request (the eager cache explained).
EAGER_NOTE = ("Eager: op by op, no graph of yours compiled. DEFER_NEVER: each op runs as its "
              "own small compiled program")

DEFAULTS = {"prompt": "Beautiful is", "max_new_tokens": 24, "temperature": 0, "seed": 0,
            "mode": EAGER.value}  # fmt: skip


@pytest.fixture(scope="module")
def models():
    (tpu, tokenizer), (cpu, _) = chars_model("tpu"), chars_model("cpu")
    return tpu, cpu, tokenizer


def test_loads_offline_with_from_pretrained(monkeypatch):
    from transformers import AutoModelForCausalLM, LlamaForCausalLM

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = AutoModelForCausalLM.from_pretrained(FOLDER, local_files_only=True)
    assert isinstance(model, LlamaForCausalLM)
    assert json.loads((FOLDER / "vocab.json").read_text()) == list(CHARS)
    assert model.config.vocab_size == len(CHARS)
    assert (FOLDER / "model.safetensors").stat().st_size < 1_000_000
    assert model.lm_head.weight is model.model.embed_tokens.weight


def test_tokenizer_round_trip_and_unknown_characters():
    tokenizer = CharTokenizer.from_pretrained(FOLDER)
    ids = tokenizer.encode("Flat is better\nthan nested.")
    assert len(ids) == 27 and tokenizer.decode(ids) == "Flat is better\nthan nested."
    with pytest.raises(CharsInputError) as info:
        tokenizer.encode("café ☕")
    assert str(info.value) == (
        "characters not in the model's vocabulary: 'é☕'; use plain ASCII letters, digits "
        "and punctuation."
    )


def test_greedy_on_tpu_equals_cpu_token_for_token(models):
    tpu, cpu, tokenizer = models
    ids = tokenizer.encode("Errors should")
    on_tpu = generate(tpu, ids, 40, device="tpu")
    assert on_tpu == generate(cpu, ids, 40, device="cpu")
    assert len(on_tpu) == 40


def test_sampling_follows_the_seed(models):
    _, cpu, tokenizer = models
    ids = tokenizer.encode("Simple is")

    def sample(seed):
        g = torch.Generator().manual_seed(seed)
        return generate(cpu, ids, 30, temperature=1.0, generator=g, device="cpu")

    assert sample(1) == sample(1)
    assert sample(1) != sample(2)


def test_greedy_recites_the_zen(models):
    _, cpu, tokenizer = models
    text = tokenizer.decode(generate(cpu, tokenizer.encode("Beautiful is"), 60, device="cpu"))
    assert set(text) <= set(CHARS)
    assert text.startswith(" better than ugly.\nExplicit is better than")
    assert "Beautiful is" + text[: len(" better than ugly.")] in zen()


@pytest.fixture(scope="module")
def server():
    with served(app) as blocks:
        yield blocks


@pytest.fixture(scope="module")
def client(server):
    return Client(server.local_url, verbose=False)


def _call(client, **changes):
    args = {**DEFAULTS, **changes}
    return client.predict(*args.values(), api_name="/generate")


def test_binds_localhost_without_share_link(server):
    assert server.server_name == "127.0.0.1"
    assert server.local_url.startswith("http://127.0.0.1:")
    assert server.share_url is None


def test_generate_returns_text_and_events(client):
    text, html, report = _call(client)
    assert text.startswith("Beautiful is better than ugly.")
    assert len(text) == len("Beautiful is") + 24
    assert report["mode"] == "eager" and report["counts"]["sync"] >= 24
    assert EAGER_NOTE in html


def test_compiled_mode_compiles_once_for_every_length(client):
    eager, _, _ = _call(client, max_new_tokens=30)
    text, html, first = _call(client, mode=COMPILED.value, max_new_tokens=30)
    assert text == eager
    assert [e["kind"] for e in first["events"]] == ["compile"]
    assert "compiled" in html
    longer, _, again = _call(client, mode=COMPILED.value, max_new_tokens=50, prompt="Now is")
    assert again["events"] == [] and "compile" not in again["counts"]
    assert "No compilation in this request" in _call(client, mode=COMPILED.value)[1]
    assert longer.startswith("Now is better than never.")


def test_defer_and_fuse_reports_cache_statistics(client):
    _call(client, mode=FUSE.value, max_new_tokens=4)
    _, html, report = _call(client, mode=FUSE.value, max_new_tokens=4)
    cache = report["cache"]
    assert cache["requests"] == cache["hits"] + cache["misses"] > 0
    assert cache["hits"] > 0
    assert f"requests {cache['requests']}" in html


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"prompt": ""}, "Prompt is empty: type a few characters for the model to continue."),
        ({"prompt": "naïve"}, "characters not in the model's vocabulary: 'ï'; use plain ASCII "
                              "letters, digits and punctuation."),
        ({"max_new_tokens": 0}, "Characters must be a whole number from 1 to 400; got 0."),
        ({"max_new_tokens": 2.5}, "Characters must be a whole number from 1 to 400; got 2.5."),
        ({"seed": -1}, "Seed must be a whole number from 0 to 4294967295; got -1."),
    ],
)  # fmt: skip
def test_bad_input_is_answered_with_the_message(client, changes, message):
    with pytest.raises(AppError) as info:
        _call(client, **changes)
    assert str(info.value) == message


def test_gradio_checks_the_slider(client):
    with pytest.raises(AppError, match=r"Value 3 is greater than maximum value 2.0."):
        _call(client, temperature=3)


def test_check_request_names_the_field():
    with pytest.raises(DemoInputError) as info:
        app.check_request("Flat", 40, -0.5, 0, EAGER.value)
    assert str(info.value) == "Temperature must be a number from 0 to 2; got -0.5."
    with pytest.raises(DemoInputError) as info:
        app.check_request("Flat", 40, 0, 0, "fast")
    assert str(info.value) == (
        "mode must be one of eager, fuse, compiled; got 'fast'."
    )
    with pytest.raises(DemoInputError, match="Prompt has 2001 characters; use at most 2000"):
        app.check_request("x" * 2001, 40, 0, 0, EAGER.value)


def test_check_request_accepts_what_the_widgets_send():
    request = app.check_request("Flat", 40.0, 0.7, "3", COMPILED.value)
    assert request == app.Request("Flat", 40, 0.7, 3, COMPILED.value)


def test_cli_help(capsys):
    with pytest.raises(SystemExit) as info:
        main(["demo", "text", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert all(flag in out for flag in ("--model PATH", "--port", "--host", "--share"))


def test_cli_reports_a_bad_model_path(tmp_path, capsys):
    assert main(["demo", "text", "--model", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tpu-lab demo text: ")
    assert "is not a transformers model folder (no config.json)" in err
