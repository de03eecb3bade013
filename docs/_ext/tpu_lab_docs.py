"""The pages of the documentation that come from the code, written when a build starts.

- ``api/``: one page per public package of ``tpu_lab`` (a package whose dotted name has no part
  starting with ``_``), found by walking the package, so that moving or adding a module needs no
  edit here; each page documents the package and its public modules from their docstrings.
- ``notebooks/NN_*.ipynb``: copies of the teaching notebooks in ``notebooks/``, rendered with
  their stored outputs (MyST-NB never executes them: ``nb_execution_mode = "off"``); an output
  that framed a local server (a Gradio app) says where the app was instead.
- ``_generated/magics.md``: the ``%tpu`` subcommands, from ``tpu_lab.magics.COMMANDS``.
- ``_generated/settings.md``: the environment variables, from every module-level ``*_ENV``
  string constant in the package and the ``#:`` comment above it.

Each file is rewritten only when its text changes, so incremental builds stay incremental. The
generated paths are in .gitignore.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.domains import python
from sphinx.errors import ExtensionError

DOCS = Path(__file__).resolve().parent.parent
ROOT = DOCS.parent
PACKAGE = "tpu_lab"
#: The ``#:`` comment of a setting that tpu_lab sets itself (for its own child processes)
#: starts with this word; such settings get a table of their own.
INTERNAL = "Internal:"


def _write(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _prune(folder: Path, keep: set[Path], pattern: str) -> None:
    for path in folder.glob(pattern):
        if path not in keep:
            path.unlink()


# ---------------------------------------------------------------------------------- the API


def public_modules(package: str = PACKAGE) -> dict[str, list[str]]:
    """Public package -> its public modules (not packages), every name dotted, sorted."""
    root = importlib.import_module(package)
    found: dict[str, list[str]] = {package: []}
    for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
        parts = info.name.split(".")
        if any(part.startswith("_") for part in parts):
            continue
        if info.ispkg:
            found.setdefault(info.name, [])
        else:
            found.setdefault(".".join(parts[:-1]), []).append(info.name)
    return {name: sorted(modules) for name, modules in sorted(found.items())}


def _summary(module: str) -> str:
    doc = importlib.import_module(module).__doc__ or ""
    first = doc.strip().split("\n\n")[0]
    return " ".join(first.split())


def _exported(module: str) -> dict[str, object]:
    """The classes and functions that ``module`` lists in ``__all__`` but defines elsewhere."""
    imported = importlib.import_module(module)
    found = {}
    for name in getattr(imported, "__all__", ()):
        obj = getattr(imported, name, None)
        if (inspect.isclass(obj) or inspect.isroutine(obj)) and obj.__module__ != module:
            found[name] = obj
    return found


def _homes(documented: list[str]) -> dict[int, str]:
    """id(object) -> the one dotted name under which each re-exported object is documented:
    where it is defined when that module is documented, else the documented module closest to
    its definition that exports it (a name in a private module is documented where it is
    exported)."""
    homes: dict[int, str] = {}
    for module in sorted(documented, key=lambda m: -m.count(".")):
        for name, obj in _exported(module).items():
            if obj.__module__ in documented and "<locals>" not in obj.__qualname__:
                homes.setdefault(id(obj), f"{obj.__module__}.{obj.__qualname__}")
            else:
                homes.setdefault(id(obj), f"{module}.{name}")
    return homes


def _module_rst(module: str, homes: dict[int, str]) -> list[str]:
    """autodoc of ``module``: what it defines, then what it re-exports (documented here when
    this is its home, else a link to its home)."""
    options = ["   :members:", "   :undoc-members:", "   :ignore-module-all:"]
    lines = [f".. automodule:: {module}", *options, ""]
    links = []
    for name, obj in _exported(module).items():
        home = homes[id(obj)]
        if home == f"{module}.{name}":
            kind = "autoclass" if inspect.isclass(obj) else "autofunction"
            lines += [f".. {kind}:: {home}", *(["   :members:"] if kind == "autoclass" else []), ""]
        else:
            links.append(f"- ``{name}``: :py:obj:`{home}`")
    if links:
        lines += [f"Also importable from ``{module}``:", "", *links, ""]
    return lines


def _api_page(package: str, modules: list[str], homes: dict[int, str]) -> str:
    lines = [f"# `{package}`", "", "```{eval-rst}", *_module_rst(package, homes), "```", ""]
    for module in modules:
        lines += [f"## `{module}`", "", "```{eval-rst}", *_module_rst(module, homes), "```", ""]
    return "\n".join(lines)


def write_api(folder: Path) -> None:
    packages = public_modules()
    homes = _homes([*packages, *(m for modules in packages.values() for m in modules)])
    written = set()
    index = [
        "# API reference",
        "",
        "Generated from the docstrings of every public module of `tpu_lab` (a module or",
        "package whose name has no part starting with `_`): one page per package.",
        "`import tpu_lab` re-exports the few names most code needs; see",
        "[](tpu_lab.md).",
        "",
        "| package | what it holds |",
        "|---|---|",
    ]
    for package, modules in packages.items():
        path = folder / f"{package}.md"
        _write(path, _api_page(package, modules, homes))
        written.add(path)
        summary = _summary(package).replace("|", "\\|")
        index.append(f"| [`{package}`]({package}.md) | {summary} |")
    index += ["", "```{toctree}", ":hidden:", "", *packages, "```", ""]
    path = folder / "index.md"
    _write(path, "\n".join(index))
    written.add(path)
    _prune(folder, written, "*.md")


# ------------------------------------------------------------------------------ notebooks


#: An output that framed a server the notebook ran (a Gradio app on 127.0.0.1): gone when the
#: page is read, so the page says where it was instead of framing nothing.
_SERVED = re.compile(r'<iframe src="(http://127\.0\.0\.1:\d+/?)"')


def _unframed(notebook: dict) -> dict:
    for cell in notebook["cells"]:
        for out in cell.get("outputs", []):
            html = "".join(out.get("data", {}).get("text/html", ""))
            if served := _SERVED.search(html):
                out["data"]["text/html"] = (
                    f"<p><em>The app was served here, from {served[1]}, while the notebook "
                    "ran.</em></p>"
                )
    return notebook


def copy_notebooks(source: Path, folder: Path) -> None:
    """Every ``NN_*.ipynb`` of ``source`` into ``folder``, as stored but for framed servers."""
    written = set()
    for notebook in sorted(source.glob("[0-9][0-9]_*.ipynb")):
        target = folder / notebook.name
        _write(target, json.dumps(_unframed(json.loads(notebook.read_text())), indent=1) + "\n")
        written.add(target)
    _prune(folder, written, "*.ipynb")


# ---------------------------------------------------------------------------------- magics


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _value(options: dict) -> str:
    if "choices" in options:
        return " \\| ".join(f"`{c}`" for c in options["choices"])
    if options.get("action") == "store_true":
        return "(a switch)"
    metavar = options.get("metavar")
    kind = getattr(options.get("type"), "__name__", None)
    return " ".join(filter(None, [f"`{metavar}`" if metavar else "", f"({kind})" if kind else ""]))


def _usage(prog: str, args) -> str:
    """``%tpu plan MODEL [--chips N] [--plot]``: the arguments' names, options in brackets."""
    words = [prog]
    for arg in args:
        o, flag = arg.options, arg.flags[0]
        value = o.get("metavar") or ("|".join(o["choices"]) if "choices" in o else None)
        if not flag.startswith("-"):
            value = value or flag.upper()
            words.append(f"[{value}]" if o.get("nargs") == "?" else value)
        elif o.get("action") == "store_true":
            words.append(f"[{flag}]")
        else:
            words.append(f"[{flag} {value or flag.lstrip('-').upper()}]")
    return " ".join(words)


def magics_markdown(commands: dict) -> str:
    """One section per subcommand of ``commands`` (``tpu_lab.magics.COMMANDS``): how it is
    written, its help, and a table of its arguments."""
    lines = []
    for command in commands.values():
        forms = ([f"%tpu {command.name}"] if command.line else []) + (
            [f"%%tpu {command.name}"] if command.cell else []
        )
        lines += [f"## `{forms[0]}`", "", "```text", *(_usage(f, command.args) for f in forms),
                  "```", "", _cell(command.help), ""]  # fmt: skip
        if command.args:
            lines += ["| argument | value | meaning |", "|---|---|---|"]
            for arg in command.args:
                flags = ", ".join(f"`{flag}`" for flag in arg.flags)
                meaning = _cell(arg.options.get("help", "")).replace("%%", "%")  # argparse's %
                default = arg.options.get("default")
                if default not in (None, False) and "default" not in meaning:
                    meaning += f" (default `{default}`)"
                if arg.complete:
                    meaning += f" (Tab completes: {arg.complete} names)"
                lines.append(f"| {flags} | {_value(arg.options)} | {meaning.strip()} |")
            lines.append("")
    return "\n".join(lines)


# -------------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class Setting:
    variable: str
    module: str
    constant: str
    doc: str


def _comment_above(lines: list[str], lineno: int) -> str:
    """The ``#:`` comment lines right above line ``lineno`` (1-based), joined."""
    found = []
    index = lineno - 2
    while index >= 0 and lines[index].lstrip().startswith("#:"):
        found.insert(0, lines[index].lstrip()[2:].strip())
        index -= 1
    return " ".join(found)


def settings(package: str = PACKAGE) -> list[Setting]:
    """Every module-level ``NAME_ENV = "VARIABLE"`` of ``package``'s source files, with its
    ``#:`` comment, sorted by variable. A constant without a comment is an error: the house
    style documents every environment variable."""
    root = Path(importlib.import_module(package).__file__).parent
    found, undocumented = [], []
    for path in sorted(root.rglob("*.py")):
        module = ".".join((package, *path.relative_to(root).with_suffix("").parts))
        module = module.removesuffix(".__init__")
        source = path.read_text()
        lines = source.splitlines()
        for node in ast.parse(source).body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id.endswith("_ENV")
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                constant = node.targets[0].id
                doc = _comment_above(lines, node.lineno)
                if not doc:
                    undocumented.append(f"{module}.{constant}")
                found.append(Setting(node.value.value, module, constant, doc))
    if undocumented:
        raise ExtensionError(
            "environment-variable constants without a '#:' comment above them: "
            + ", ".join(undocumented)
            + ". Say what the variable does, its values and its default there."
        )
    return sorted(found, key=lambda s: s.variable)


def settings_markdown(found: list[Setting]) -> str:
    user = [s for s in found if not s.doc.startswith(INTERNAL)]
    internal = [s for s in found if s.doc.startswith(INTERNAL)]
    def row(s: Setting) -> str:
        doc = _cell(s.doc.removeprefix(INTERNAL))
        return f"| `{s.variable}` | {doc} | `{s.module}.{s.constant}` |"

    lines = ["| variable | what it does | defined in |", "|---|---|---|", *map(row, user)]
    if internal:
        lines += ["", "Set by tpu_lab itself, for the processes it starts (never by hand):",
                  "", "| variable | what it marks | defined in |", "|---|---|---|"]  # fmt: skip
        lines += map(row, internal)
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------- references
# A Python reference in a docstring is read as its reader reads it: the name means what it
# means in the module it is written in. A private name (a part starting with "_") is shown as
# code, not a link (private names are not documented); so is a name that exists but has no
# entry of its own (a constant without a comment, a class made on first use). A name that
# exists nowhere warns, and fails the strict build.

_MISSING = object()


def _lookup(path: str):
    """The object at dotted ``path`` (a module, then attributes), or _MISSING."""
    parts = path.split(".")
    for cut in range(1, len(parts) + 1):  # attributes first, as Python reads a dotted name
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            obj = getattr(obj, part, _MISSING)
            if obj is _MISSING:
                break
        if obj is not _MISSING:
            return obj
    return _MISSING


def meant(module: str | None, classname: str | None, target: str):
    """What ``target`` names where it is written (in ``module``, inside ``classname``), or in
    that module's package (a sibling module), else as an absolute dotted name; _MISSING when
    it names nothing."""
    package = module.rpartition(".")[0] if module else None
    scopes = [f"{module}.{classname}" if module and classname else None, module, package]
    for scope in filter(None, scopes):
        obj = _lookup(f"{scope}.{target}")
        if obj is not _MISSING:
            return obj
    return _lookup(target)


def _full_name(obj) -> str | None:
    if inspect.ismodule(obj):
        return obj.__name__
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    return f"{module}.{qualname}" if module and qualname else None


class PythonDomain(python.PythonDomain):
    """Sphinx's Python domain, where a name with several documented targets (``Event``: the
    event log's or the stream's) resolves to the one its module means."""

    def find_obj(self, env, modname, classname, name, type, searchmode=0):  # noqa: A002
        matches = super().find_obj(env, modname, classname, name, type, searchmode)
        if len(matches) > 1:
            full = _full_name(meant(modname, classname, name))
            chosen = [match for match in matches if match[0] == full]
            return chosen or matches
        return matches


def resolve_reference(app: Sphinx, env, node, contnode):
    """``missing-reference``: the rules above, for a Python reference with no target found."""
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip("~.")
    if any(part.startswith("_") and not part.startswith("__") for part in target.split(".")):
        return contnode
    obj = meant(node.get("py:module"), node.get("py:class"), target)
    if obj is _MISSING:
        return None
    domain = env.get_domain("py")
    full = _full_name(obj)
    if full in domain.objects:
        return domain.resolve_xref(env, node["refdoc"], app.builder, "obj", full, node, contnode)
    return contnode


def literal_magic_usage(app, what, name, obj, options, lines) -> None:
    """``autodoc-process-docstring``: IPython's ``magic_arguments`` writes a magic's docstring
    as ``::`` and its argparse help, whose later lines are not indented; indent them all, so
    the help reads as the literal block it is."""
    if lines and lines[0] == "::":
        lines[1:] = ["    " + line if line else line for line in lines[1:]]


# ------------------------------------------------------------------------------- the hook


def generate(app: Sphinx) -> None:
    from tpu_lab import magics

    srcdir = Path(app.srcdir)
    write_api(srcdir / "api")
    copy_notebooks(ROOT / "notebooks", srcdir / "notebooks")
    _write(srcdir / "_generated" / "magics.md", magics_markdown(magics.COMMANDS))
    _write(srcdir / "_generated" / "settings.md", settings_markdown(settings()))


def setup(app: Sphinx) -> dict:
    app.add_domain(PythonDomain, override=True)
    app.connect("builder-inited", generate)
    app.connect("missing-reference", resolve_reference)
    app.connect("autodoc-process-docstring", literal_magic_usage)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
