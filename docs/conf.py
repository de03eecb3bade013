"""Sphinx's configuration of the tpu_lab documentation: ``make docs`` builds it into build/site/.

The navigation is the toctrees in index.md (adding a page is one line there). The pages that
come from the code (the API reference, the rendered notebooks, the magics and the settings
tables) are written when the build starts, by _ext/tpu_lab_docs.py.
"""

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
# this checkout's tpu_lab is the one documented, and the docs' own extension is importable
sys.path[:0] = [str(DOCS.parent), str(DOCS / "_ext")]

from tpu_lab import __version__  # noqa: E402

project = "tpu_lab"
author = "the tpu_lab developers"
copyright = "the tpu_lab developers, Apache-2.0"  # noqa: A001  (Sphinx's name)
release = __version__

extensions = ["myst_nb", "sphinx.ext.autodoc", "tpu_lab_docs"]
exclude_patterns = ["_generated", "_ext", "README.md", "**/.ipynb_checkpoints"]

# Strict: `make docs` runs with -W -n, so every warning (a broken link, a missing reference)
# fails the build. References into other projects' APIs are not checked (no network, no
# intersphinx): their names are listed here.
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(torch|c10d|numpy|np|PIL|IPython|ipywidgets|anywidget|matplotlib|gradio|diffusers"
               r"|transformers|safetensors|av|jax|ipyparallel|nbformat|psutil|traitlets)\b.*"),
    (r"py:class", r"InteractiveShell"),  # IPython's, named in an annotation
    (r"py:class", r"SliceRows"),  # the slice widget's rows (private views/_slice_rows.py)
    # the standard library's
    (r"py:.*", r"(abc|argparse|collections|contextlib|datetime|enum|importlib|io|os|pathlib"
               r"|random|threading|types|typing|timedelta)\b.*"),
]

# Text is shown as written: "--chips" stays two hyphens, quotes stay straight.
smartquotes = False

# Markdown: headings get anchors for links (page.md#a-heading); ``:::`` fences and definition
# lists.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]

# Notebooks are shown with the outputs stored in them, never executed by the build. Their
# widgets are shown as the static HTML stored beside them (no widget JavaScript from a CDN).
nb_execution_mode = "off"
nb_ipywidgets_js = {}
nb_mime_priority_overrides = [("html", "application/vnd.jupyter.widget-view+json", None)]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
# annotations link to the full name of what they mean, and show its short name
autodoc_typehints_format = "fully-qualified"
python_use_unqualified_type_names = True
autodoc_default_options = {"show-inheritance": True}

html_theme = "sphinx_book_theme"
html_title = "tpu_lab"
html_static_path = []
html_theme_options = {
    "show_toc_level": 2,
    "home_page_in_toc": True,
    "use_download_button": True,
    "use_fullscreen_button": False,
}
html_show_sourcelink = False
