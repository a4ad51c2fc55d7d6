"""Sphinx extension: serve MathJax from the site itself, for offline
formulas, and only the parts of it the book uses.

Sphinx loads MathJax from a CDN by default, which leaves a reader of a local
build, or a test browser with no network, looking at raw TeX. The pinned PyPI
package ``django-static-mathjax`` ships MathJax 3's files; this extension
copies the pieces the book needs into ``_static/mathjax/`` and points
``mathjax_path`` at MathJax's loader, ``startup.js``, which then loads:

* ``input/tex`` (TeX with the AMS macros; any other TeX extension a page uses
  is fetched on demand from ``input/tex/extensions/``, which is copied too),
* ``output/chtml`` (HTML and CSS output; the fonts are small WOFF files fetched
  as needed),
* ``a11y/assistive-mml`` (a MathML copy of each formula for screen readers).

Together about 0.8 MB, where the all-in-one ``tex-svg-full.js`` the book used
to load is 2.3 MB: it carries every TeX extension, SVG glyph data for every
font, and the context menu.
"""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.config import Config

#: MathJax's files the site serves, relative to its ``es5`` directory.
FILES = ("startup.js", "core.js", "input/tex.js", "output/chtml.js",
         "output/chtml/fonts/tex.js", "a11y/assistive-mml.js")
DIRECTORIES = ("input/tex/extensions", "output/chtml/fonts/woff-v2")
#: The components the loader fetches, in MathJax's own names.
LOAD = ["input/tex", "output/chtml", "a11y/assistive-mml"]
#: relative to _static, as Sphinx reads mathjax_path
TARGET = "mathjax/startup.js"


def mathjax_root() -> Path:
    """MathJax's ``es5`` directory inside the installed package."""
    root = Path(str(resources.files("mathjax"))) / "static" / "mathjax" / "es5"
    missing = [f for f in (*FILES, *DIRECTORIES) if not (root / f).exists()]
    if missing:
        raise FileNotFoundError(
            f"MathJax files missing under {root}: {missing}")
    return root


def _use_local_mathjax(app: Sphinx, config: Config) -> None:
    config.mathjax_path = TARGET
    settings = dict(config.mathjax3_config or {})
    loader = dict(settings.get("loader", {}))
    loader["load"] = sorted(set(loader.get("load", [])) | set(LOAD))
    settings["loader"] = loader
    # (the fonts: output/chtml defaults to [mathjax]/output/chtml/fonts/
    # woff-v2, resolved by the loader next to startup.js: from the site too)
    config.mathjax3_config = settings


def _copy_mathjax(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    root = mathjax_root()
    dest = Path(app.outdir) / "_static" / "mathjax"
    for name in FILES:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, dest / name)
    for name in DIRECTORIES:
        shutil.copytree(root / name, dest / name, dirs_exist_ok=True)
    licence = root.parent / "LICENSE"
    if licence.is_file():
        shutil.copy2(licence, dest / "LICENSE")


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", _use_local_mathjax, priority=900)
    app.connect("build-finished", _copy_mathjax)
    return {"version": "2.0", "parallel_read_safe": True,
            "parallel_write_safe": True}
