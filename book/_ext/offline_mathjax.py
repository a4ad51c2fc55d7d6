"""Sphinx extension: serve MathJax from the site itself, for offline formulas.

Sphinx loads MathJax from a CDN by default, which leaves a reader of a local
build, or a test browser with no network, looking at raw TeX. The pinned PyPI
package ``django-static-mathjax`` ships MathJax 3's files; this extension copies
one self-contained component of it, ``tex-svg-full.js`` (all TeX extensions, SVG
output, so no web fonts to fetch), into ``_static/mathjax/`` and points
``mathjax_path`` at it.
"""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.config import Config

COMPONENT = "tex-svg-full.js"
# relative to _static, as Sphinx reads mathjax_path
TARGET = f"mathjax/{COMPONENT}"


def mathjax_component() -> Path:
    """Path of the vendored MathJax component inside the installed package."""
    package = Path(str(resources.files("mathjax")))
    path = package / "static" / "mathjax" / "es5" / COMPONENT
    if not path.is_file():
        raise FileNotFoundError(f"MathJax component missing: {path}")
    return path


def _use_local_mathjax(app: Sphinx, config: Config) -> None:
    config.mathjax_path = TARGET


def _copy_mathjax(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    dest = Path(app.outdir) / "_static" / TARGET
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(mathjax_component(), dest)
    licence = mathjax_component().parents[1] / "LICENSE"
    if licence.is_file():
        shutil.copy2(licence, dest.parent / "LICENSE")


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", _use_local_mathjax, priority=900)
    app.connect("build-finished", _copy_mathjax)
    return {"version": "1.0", "parallel_read_safe": True,
            "parallel_write_safe": True}
