"""Make the README's pictures from the real thing: outputs of the executed notebooks, rendered by
nbconvert and photographed in headless Chromium, and the screenshots the browser tests keep.

    python scripts/readme_images.py        (after `make test`, which writes tests/artifacts/)

Writes docs/images/*.png. Needs Debian's chromium and the [dev] extra.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "images"
ARTIFACTS = ROOT / "tests" / "artifacts"
sys.path.insert(0, str(ROOT / "tests"))
from _browser import CHROMIUM, CHROMIUM_ARGS  # noqa: E402  (the browser and flags tests use)

#: picture -> (notebook, the code cell whose output it shows, counted from 0 among code cells)
OUTPUTS = {
    "recompile-explanation.png": ("02_eager_vs_compiled", 3),
    "sharding-map.png": ("03_sharding_across_chips", 6),
    "plan.png": ("03_sharding_across_chips", 2),
    "digits.png": ("04_images_and_video", 2),
}
#: picture -> screenshot kept by a browser test
FROM_TESTS = {"dashboard.png": "dashboard.png", "gradio-demo.png": "gradio.png"}


def _html(notebook: str, folder: Path) -> Path:
    source = ROOT / "notebooks" / f"{notebook}.ipynb"
    target = folder / f"{notebook}.html"
    subprocess.run(
        [sys.executable, "-m", "nbconvert", "--to", "html", str(source), "--output", str(target)],
        check=True,
        capture_output=True,
    )
    return target


def main() -> int:
    from playwright.sync_api import sync_playwright

    OUT.mkdir(parents=True, exist_ok=True)
    for picture, name in FROM_TESTS.items():
        if not (ARTIFACTS / name).exists():
            print(f"missing tests/artifacts/{name}: run the browser tests first", file=sys.stderr)
            return 1
        shutil.copyfile(ARTIFACTS / name, OUT / picture)
    with tempfile.TemporaryDirectory() as folder, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1000, "height": 800}, device_scale_factor=1)
        pages = {}
        for picture, (notebook, index) in OUTPUTS.items():
            if notebook not in pages:
                pages[notebook] = _html(notebook, Path(folder))
            page.goto(pages[notebook].as_uri())
            outputs = page.locator(".jp-CodeCell").nth(index).locator(".jp-OutputArea")
            outputs.screenshot(path=str(OUT / picture))
        browser.close()
    for picture in sorted(OUT.glob("*.png")):
        print(f"wrote {picture.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
