"""Security rules, checked on the source and on the running pieces: servers bind 127.0.0.1 and
share nothing unless asked; no pickle (``pickle``, ``torch.load``) of files tpu_lab did not
write; magic arguments are looked up, never evaluated; shipped weights are safetensors."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import tpu_lab

PACKAGE = Path(tpu_lab.__file__).resolve().parent

#: (module, function) -> why running code there is what the user asked for
ALLOWED_EXEC = {
    ("magics/shell.py", "run_cell"): "%%tpu runs the cell's own code, as %%time does",
}


def _calls(tree: ast.AST):
    """(enclosing function, dotted callee) of every call in ``tree``."""
    stack: list[str] = []

    def visit(node):
        is_function = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        if is_function:
            stack.append(node.name)
        if isinstance(node, ast.Call):
            yield (stack[-1] if stack else "<module>"), ast.unparse(node.func)
        for child in ast.iter_child_nodes(node):
            yield from visit(child)
        if is_function:
            stack.pop()

    yield from visit(tree)


def _sources():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"))


def test_no_pickle_and_no_torch_load_in_the_package():
    found = []
    for path, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                if any(n.split(".")[0] in ("pickle", "dill", "cloudpickle") for n in names):
                    found.append(f"{path.name}: imports {names}")
        for function, callee in _calls(tree):
            if callee in ("torch.load", "pickle.load", "pickle.loads", "numpy.load", "np.load"):
                found.append(f"{path.name}:{function} calls {callee}")
    assert found == []


def test_eval_and_exec_only_run_the_users_own_cell():
    found = []
    for path, tree in _sources():
        for function, callee in _calls(tree):
            runs_code = callee in ("eval", "exec", "compile", "builtins.eval", "builtins.exec")
            if runs_code and (path.relative_to(PACKAGE).as_posix(), function) not in ALLOWED_EXEC:
                found.append(f"{path.relative_to(PACKAGE)}:{function} calls {callee}")
    assert found == []
    for module, function in ALLOWED_EXEC:
        assert function in (PACKAGE / module).read_text(encoding="utf-8")


def test_no_shell_commands_built_from_strings():
    found = []
    for path, tree in _sources():
        for node in ast.walk(tree):
            shell = isinstance(node, ast.keyword) and node.arg == "shell"
            if shell and isinstance(node.value, ast.Constant) and node.value.value is True:
                found.append(f"{path.name}: shell=True")
        for function, callee in _calls(tree):
            if callee in ("os.system", "os.popen"):
                found.append(f"{path.name}:{function} calls {callee}")
    assert found == []


def test_servers_default_to_localhost_and_no_share_link():
    pytest.importorskip("gradio")
    from tpu_lab.apps import DEFAULT_HOST
    from tpu_lab.apps.image import launch
    from tpu_lab.cli import _parser

    signature = inspect.signature(launch)
    assert DEFAULT_HOST == "127.0.0.1"
    assert signature.parameters["host"].default == "127.0.0.1"
    assert signature.parameters["share"].default is False
    args = _parser().parse_args(["demo", "image"])
    assert args.host == "127.0.0.1" and args.share is False


def test_shipped_weights_are_safetensors_only():
    weights = [
        p for p in PACKAGE.rglob("*") if p.suffix in (".bin", ".pt", ".pth", ".pkl", ".ckpt")
    ]
    assert weights == []
    assert list((PACKAGE / "models" / "digits").rglob("*.safetensors"))


@pytest.mark.parametrize(
    "line",
    [
        "sharding __import__('os').system('echo hacked')",
        "sharding os.system",
        "preview t.__class__.__init__.__globals__",
        "sharding t.__dict__",
        "plan (lambda: 1)()",
        "sharding t[0]",
    ],
)
def test_magic_arguments_are_looked_up_never_evaluated(line, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shell = InteractiveShell.instance()
    tpu_lab.load_ipython_extension(shell)
    import torch

    shell.user_ns["t"] = torch.ones(2, device="tpu")
    try:
        with pytest.raises(UsageError):
            shell.run_line_magic("tpu", line)
    finally:
        shell.user_ns.pop("t", None)
    assert not (tmp_path / "hacked").exists()
