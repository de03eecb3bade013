"""The pictures of the README and the documentation site are made from the current code
(``make images``, scripts/readme_images.py), and none is older than the code it shows: each
source a picture shows (its notebook's cells, the test that sets the scene, the code that draws
it) has the SHA-256 recorded in docs/images/fingerprints.json when the picture was made."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import readme_images  # noqa: E402

PICTURE = re.compile(r"!\[[^\]]*\]\((?:\.\./)*(?:docs/)?images/([\w.-]+\.png)\)")


def test_every_picture_is_newer_than_the_code_it_shows():
    recorded = json.loads(readme_images.FINGERPRINTS.read_text())
    stale = {}
    for picture in readme_images.SOURCES:
        now, then = readme_images.fingerprint(picture), recorded.get(picture, {})
        changed = sorted(p for p in now.keys() | then.keys() if now.get(p) != then.get(p))
        if changed:
            stale[picture] = changed
    assert not stale, (
        "pictures older than the code they show: run `make images` (or python "
        f"scripts/readme_images.py PICTURE ...) and commit them with fingerprints.json: {stale}"
    )


def test_every_picture_shown_is_made_by_the_script():
    pages = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    shown = {name for page in pages for name in PICTURE.findall(page.read_text())}
    assert {"dashboard.png", "recompile-explanation.png", "shapes.png"} <= shown
    assert shown <= set(readme_images.SOURCES)
    assert set(readme_images.SOURCES) == set(readme_images.OUTPUTS) | set(readme_images.FROM_TESTS)
    for picture in readme_images.SOURCES:
        assert (readme_images.OUT / picture).stat().st_size > 1000, picture


def test_a_changed_source_changes_the_fingerprint_and_new_outputs_do_not(tmp_path):
    picture = "recompile-explanation.png"
    for pattern in readme_images.SOURCES[picture]:
        (tmp_path / pattern).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / pattern, tmp_path / pattern)
    before = readme_images.fingerprint(picture, tmp_path)
    notebook = tmp_path / "notebooks" / "02_eager_vs_compiled.ipynb"
    nb = json.loads(notebook.read_text())
    for cell in nb["cells"]:
        cell.pop("outputs", None)  # executed again: other outputs, the same cells
    notebook.write_text(json.dumps(nb))
    assert readme_images.fingerprint(picture, tmp_path) == before
    with open(tmp_path / "tpu_lab" / "events" / "explain.py", "a") as source:
        source.write("\n# a change\n")
    after = readme_images.fingerprint(picture, tmp_path)
    assert [p for p in after if after[p] != before[p]] == ["tpu_lab/events/explain.py"]
    (tmp_path / "tpu_lab" / "views" / "events.py").unlink()
    with pytest.raises(ValueError, match="no file matches 'tpu_lab/views/events.py'"):
        readme_images.fingerprint(picture, tmp_path)
