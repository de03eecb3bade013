"""Make the pictures of the README and of the documentation site from the current code, and
record which sources each one shows.

    python scripts/readme_images.py [PICTURE ...]     (make images; default: every picture)

- a notebook's output (OUTPUTS): the notebook is executed afresh in a temporary folder (the
  stored notebook is left as it is), rendered by nbconvert, and the cell's output photographed
  in headless Chromium;
- a test's picture (FROM_TESTS): the test that draws it runs, and its screenshot or grid in
  tests/artifacts/ is copied.

Then docs/images/fingerprints.json records, for every picture made, the SHA-256 of each source
it shows (SOURCES; of a notebook, its cells' sources, not its outputs): tests/test_readme_images.py
fails when a source changed after its picture was made. Needs Debian's chromium and [dev].
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "images"
FINGERPRINTS = OUT / "fingerprints.json"
ARTIFACTS = ROOT / "tests" / "artifacts"

#: picture -> (notebook, the code cell whose output it shows, counted from 0 among code cells)
OUTPUTS = {
    "recompile-explanation.png": ("02_eager_vs_compiled", 3),
    "sharding-map.png": ("03_sharding_across_chips", 6),
    "plan.png": ("03_sharding_across_chips", 2),
    "digits.png": ("04_images_and_video", 11),
}
#: picture -> (the test that draws it, what it writes in tests/artifacts/)
FROM_TESTS = {
    "dashboard.png": ("tests/test_browser_lab.py::test_dashboard_in_jupyterlab", "dashboard.png"),
    "gradio-demo.png": (
        "tests/test_browser_gradio.py::test_generate_shows_the_digits_and_a_playable_video",
        "gradio.png",
    ),
    "shapes.png": ("tests/test_shapes.py::test_honours_80_percent_of_100_random_prompts",
                   "shapes_grid.png"),  # fmt: skip
    "clips.png": ("tests/test_clips.py::test_honours_80_percent_of_100_random_prompts",
                  "clips_grid.png"),  # fmt: skip
    "choose-llama-70b.png": (
        "tests/test_choose.py::"
        "test_llama_70b_training_has_options_on_three_generations_and_its_first_choice_fits",
        "choose-llama-70b.png",
    ),
}
#: picture -> the sources it shows (paths or globs from the repository's root): the scene (the
#: notebook or test that sets it up) and the code that draws it. A glob matching nothing fails
#: the check: a moved file must be named here again.
SOURCES = {
    "dashboard.png": [
        "tests/test_browser_lab.py", "widgets/dashboard.js", "widgets/dashboard.css",
        "tpu_lab/views/dashboard.py", "tpu_lab/views/_dashboard_view.py",
        "tpu_lab/views/_widget_protocol.py", "tpu_lab/session.py",
    ],
    "recompile-explanation.png": [
        "notebooks/02_eager_vs_compiled.ipynb", "tpu_lab/views/events.py",
        "tpu_lab/events/explain.py", "tpu_lab/views/base.py",
    ],
    "sharding-map.png": [
        "notebooks/03_sharding_across_chips.ipynb", "tpu_lab/views/sharding.py",
        "tpu_lab/sharding/info.py", "tpu_lab/sharding/mesh.py",
    ],
    "plan.png": [
        "notebooks/03_sharding_across_chips.ipynb", "tpu_lab/views/sharding.py",
        "tpu_lab/sharding/plan.py", "tpu_lab/sharding/meta.py",
    ],
    "digits.png": [
        "notebooks/04_images_and_video.ipynb", "tpu_lab/media/grid.py",
        "tpu_lab/media/previews.py", "tpu_lab/views/preview.py", "tpu_lab/models/digits.py",
        "tpu_lab/models/digits/**/*",
    ],
    "gradio-demo.png": [
        "tests/test_browser_gradio.py", "tpu_lab/apps/image.py", "tpu_lab/apps/shared.py",
        "tpu_lab/models/digits.py", "tpu_lab/models/digits/**/*",
    ],
    "shapes.png": [
        "tests/test_shapes.py", "tpu_lab/models/shapes.py", "tpu_lab/models/shapes_world.py",
        "tpu_lab/models/shapes/**/*",
    ],
    "clips.png": [
        "tests/test_clips.py", "tpu_lab/models/clips.py", "tpu_lab/models/shapes_world.py",
        "tpu_lab/models/clips/**/*",
    ],
    "choose-llama-70b.png": [
        "tests/test_choose.py", "tpu_lab/views/choice.py", "tpu_lab/sharding/chooser.py",
        "tpu_lab/hardware/prices.py", "tpu_lab/estimate/fitted.json",
    ],
}  # fmt: skip


def _digest(path: Path) -> str:
    if path.suffix == ".ipynb":  # what it runs, not what it printed when it last ran
        cells = json.loads(path.read_text())["cells"]
        data = json.dumps([[c["cell_type"], "".join(c["source"])] for c in cells]).encode()
    else:
        data = path.read_bytes()
    return hashlib.sha256(data).hexdigest()


def fingerprint(picture: str, root: Path = ROOT) -> dict[str, str]:
    """Each source of ``picture`` (relative path) -> its SHA-256; a pattern that matches no
    file is a ValueError naming it."""
    found = {}
    for pattern in SOURCES[picture]:
        paths = [p for p in sorted(root.glob(pattern)) if p.is_file()]
        if not paths:
            raise ValueError(f"{picture}: no file matches {pattern!r}; update SOURCES in "
                             "scripts/readme_images.py")  # fmt: skip
        for path in paths:
            found[path.relative_to(root).as_posix()] = _digest(path)
    return found


def _html(notebook: str, folder: Path) -> Path:
    sys.path.insert(0, str(ROOT / "scripts"))
    import nbformat

    from notebooks import execute, problems

    nb = execute(ROOT / "notebooks" / f"{notebook}.ipynb")
    if found := problems(nb):
        raise SystemExit(f"{notebook}: " + "; ".join(found))
    executed = folder / f"{notebook}.ipynb"
    nbformat.write(nb, executed)
    subprocess.run([sys.executable, "-m", "nbconvert", "--to", "html", str(executed)],
                   check=True, capture_output=True)  # fmt: skip
    return executed.with_suffix(".html")


def _photograph(pictures: list[str]) -> None:
    if not pictures:
        return
    from playwright.sync_api import sync_playwright

    sys.path.insert(0, str(ROOT / "tests"))
    from _browser import CHROMIUM, CHROMIUM_ARGS  # the browser and flags the tests use

    with tempfile.TemporaryDirectory() as folder, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1000, "height": 800}, device_scale_factor=1)
        pages: dict[str, Path] = {}
        for picture in pictures:
            notebook, index = OUTPUTS[picture]
            if notebook not in pages:
                print(f"executing {notebook}", flush=True)
                pages[notebook] = _html(notebook, Path(folder))
            page.goto(pages[notebook].as_uri())
            outputs = page.locator(".jp-CodeCell").nth(index).locator(".jp-OutputArea")
            outputs.screenshot(path=str(OUT / picture))
        browser.close()


def _from_tests(pictures: list[str]) -> None:
    if not pictures:  # pytest with no test named would run them all
        return
    for picture in pictures:
        (ARTIFACTS / FROM_TESTS[picture][1]).unlink(missing_ok=True)
    tests = [FROM_TESTS[picture][0] for picture in pictures]
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
                   cwd=ROOT, check=True)  # fmt: skip
    for picture in pictures:
        shutil.copyfile(ARTIFACTS / FROM_TESTS[picture][1], OUT / picture)


def main(argv: list[str] | None = None) -> int:
    chosen = (sys.argv[1:] if argv is None else argv) or list(SOURCES)
    unknown = [p for p in chosen if p not in SOURCES]
    if unknown:
        print(f"unknown pictures {unknown}; they are {', '.join(SOURCES)}", file=sys.stderr)
        return 2
    OUT.mkdir(parents=True, exist_ok=True)
    _photograph([p for p in chosen if p in OUTPUTS])
    _from_tests([p for p in chosen if p in FROM_TESTS])
    recorded = json.loads(FINGERPRINTS.read_text()) if FINGERPRINTS.exists() else {}
    recorded.update({picture: fingerprint(picture) for picture in chosen})
    FINGERPRINTS.write_text(json.dumps(dict(sorted(recorded.items())), indent=1) + "\n")
    for picture in chosen:
        print(f"wrote docs/images/{picture}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
