"""The documentation site (docs/, built by Sphinx: ``make docs``, scripts/docs.py).

- the strict build of this checkout succeeds, with no warning, and its pages load nothing from
  the network;
- the pages made from the code are complete: every public module in the API reference, every
  notebook with its stored outputs, every ``%tpu`` subcommand, every ``*_ENV`` setting;
- they follow the code: in a copy of the checkout with a broken link, a new subcommand, a new
  setting and a new module, the build fails on the link alone, and the built pages show the
  subcommand, the setting and the module, without a doc edit.

The browser's view of the site is tests/test_browser_docs.py.
"""

from __future__ import annotations

import json
import re
import shutil
import sys

import pytest

from _docs import ROOT, build, output

pytest.importorskip("sphinx", reason="sphinx is missing: pip install 'tpu-lab[docs]'")
sys.path.insert(0, str(ROOT / "docs" / "_ext"))

import tpu_lab_docs  # noqa: E402

#: A tag that makes a browser fetch its URL (a link's href is only followed when clicked).
_FETCHED = re.compile(
    r"<(?:script|img|iframe|source|video|audio|embed)\b[^>]*\bsrc=\"([^\"]+)\""
    r"|<link\b[^>]*\bhref=\"([^\"]+)\""
)


def _remote(url: str) -> bool:
    return url.startswith(("http:", "https:", "//"))


def test_the_strict_build_succeeds(docs_site):
    built, site = docs_site
    assert built.returncode == 0, output(built)
    assert "WARNING" not in built.stderr + built.stdout, output(built)
    assert (site / "index.html").exists()


def test_no_page_loads_anything_from_the_network(docs_site):
    _, site = docs_site
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 30
    remote = {
        (str(page.relative_to(site)), url)
        for page in pages
        for match in _FETCHED.finditer(page.read_text())
        for url in match.groups()
        if url and _remote(url)
    }
    for sheet in site.rglob("*.css"):
        remote |= {(sheet.name, u) for u in re.findall(r"url\(['\"]?([^)'\"]+)", sheet.read_text())
                   if _remote(u)}  # fmt: skip
    assert not remote


def test_the_api_reference_documents_every_public_module(docs_site):
    _, site = docs_site
    pages = "".join(p.read_text() for p in (site / "api").glob("*.html"))
    modules = [name for package, ms in tpu_lab_docs.public_modules().items() for name in (package, *ms)]
    assert len(modules) > 50
    assert [m for m in modules if f'id="module-{m}"' not in pages] == []
    assert "tpu_lab.standin._torch_tpu" not in pages and 'id="module-tpu_lab.device._' not in pages


def test_every_notebook_is_rendered_with_its_stored_outputs(docs_site):
    _, site = docs_site
    notebooks = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert len(notebooks) >= 9
    for notebook in notebooks:
        page = (site / "notebooks" / f"{notebook.stem}.html").read_text()
        cells = json.loads(notebook.read_text())["cells"]
        streams = ["".join(o["text"]) for c in cells for o in c.get("outputs", [])
                   if o.get("output_type") == "stream"]  # fmt: skip
        shown = [line for text in streams for line in text.splitlines() if len(line) > 20]
        if shown:  # a line the notebook printed when it was executed, not when the site was built
            assert _plain(shown[0]) in _plain(page), notebook.name
        assert "cell_output" in page or not any(c.get("outputs") for c in cells), notebook.name


def _plain(html: str) -> str:
    text = re.sub(r"<[^>]+>", "", html)
    for entity, char in (("&lt;", "<"), ("&gt;", ">"), ("&quot;", '"'), ("&#39;", "'"),
                         ("&amp;", "&")):  # fmt: skip
        text = text.replace(entity, char)
    return " ".join(text.split())


def test_the_magics_and_settings_pages_list_what_the_code_defines(docs_site):
    from tpu_lab.magics import COMMANDS

    _, site = docs_site
    magics = _plain((site / "reference" / "magics.html").read_text())
    for command in COMMANDS.values():
        assert f"%tpu {command.name}" in magics and _plain(command.help) in magics, command.name
    settings = _plain((site / "reference" / "settings.html").read_text())
    found = tpu_lab_docs.settings()
    assert {"TPU_LAB_TOPOLOGY", "TPU_LAB_BACKEND", "TPU_LAB_NUMERICS"} <= {s.variable for s in found}
    for setting in found:
        assert setting.variable in settings, setting.variable


# --- a changed copy of the checkout -------------------------------------------------------

BROKEN_LINK = "\nSee [the page that is not there](no-such-page.md).\n"
NEW_COMMAND = '''
from .table import Arg, subcommand  # noqa: E402


@subcommand(
    "docs-check",
    "a subcommand added by tests/test_docs.py",
    Arg(("--depth",), {"type": int, "metavar": "D", "help": "how deep to look"}),
)
def docs_check(magics, args, cell):
    print("checked")
'''
NEW_MODULE = '''"""A module added by tests/test_docs.py."""

#: Environment variable: ``1`` turns on a setting added by tests/test_docs.py.
DOCS_CHECK_ENV = "TPU_LAB_DOCS_CHECK"


def docs_check() -> None:
    """A function added by tests/test_docs.py."""
'''


@pytest.fixture(scope="module")
def changed(tmp_path_factory):
    """A copy of the checkout with a broken link on a guide, a ``%tpu docs-check`` subcommand
    and a new module with a setting, built as ``make docs`` builds it: (the build, the site)."""
    root = tmp_path_factory.mktemp("checkout")
    generated = shutil.ignore_patterns("api", "_generated", "*.ipynb", "__pycache__")
    shutil.copytree(ROOT / "docs", root / "docs", ignore=generated)
    shutil.copytree(ROOT / "tpu_lab", root / "tpu_lab",
                    ignore=shutil.ignore_patterns("_build", "__pycache__"))  # fmt: skip
    for folder in ("notebooks", "scripts", "benchmarks", "widgets"):
        shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    with open(root / "docs" / "guides" / "numerics.md", "a") as page:
        page.write(BROKEN_LINK)
    with open(root / "tpu_lab" / "magics" / "session.py", "a") as magics:
        magics.write(NEW_COMMAND)
    (root / "tpu_lab" / "docs_check.py").write_text(NEW_MODULE)
    site = root / "site"
    return build(root, site), site


def test_a_broken_link_fails_the_build(changed):
    built, _ = changed
    warnings = [line for line in built.stderr.splitlines() if "WARNING" in line]
    assert built.returncode != 0, output(built)
    assert len(warnings) == 1, output(built)
    assert "guides/numerics.md" in warnings[0] and "no-such-page" in warnings[0]


def test_a_new_subcommand_appears_in_the_magics_reference(changed):
    _, site = changed
    page = _plain((site / "reference" / "magics.html").read_text())
    assert "%tpu docs-check [--depth D]" in page
    assert "a subcommand added by tests/test_docs.py" in page and "how deep to look" in page


def test_a_new_setting_and_module_appear_in_the_references(changed):
    _, site = changed
    settings = _plain((site / "reference" / "settings.html").read_text())
    assert "TPU_LAB_DOCS_CHECK" in settings
    assert "turns on a setting added by tests/test_docs.py" in settings
    assert "tpu_lab.docs_check.DOCS_CHECK_ENV" in settings
    api = (site / "api" / "tpu_lab.html").read_text()
    assert 'id="module-tpu_lab.docs_check"' in api and "A function added by" in api
