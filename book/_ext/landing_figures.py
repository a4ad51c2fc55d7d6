"""Sphinx extension: the landing page shows one figure from each chapter.

The figure is not a copy kept by hand: each chapter notebook tags one code
cell ``landing-figure``, and at the start of every build this extension writes
the first PNG that cell stores to ``book/_landing/<notebook stem>.png``, where
the landing page (``book/intro.md``) picks it up. Strict nbval proves every
stored output equal to a fresh run, so the map shows what the chapter computes
today. A chapter notebook without exactly one tagged cell holding a PNG is a
build warning, which the ``-W`` build turns into an error. A card shows the
figure at most about 320 px wide, so the copy is scaled to 640 px (sharp on a
high-density screen) and kept in 256 colours.
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.util import logging

TAG = "landing-figure"
OUT_DIR = Path("book") / "_landing"
logger = logging.getLogger(__name__)


def tagged_png(notebook: Path) -> bytes | None:
    """The first PNG stored by the notebook's one cell tagged
    ``landing-figure``, or None (with a warning)."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    tagged = [c for c in cells
              if TAG in c.get("metadata", {}).get("tags", [])]
    if len(tagged) != 1:
        logger.warning("%s: %d cells tagged %r, expected exactly one",
                       notebook.name, len(tagged), TAG)
        return None
    for output in tagged[0].get("outputs", []):
        png = output.get("data", {}).get("image/png")
        if png:
            text = "".join(png) if isinstance(png, list) else png
            return base64.b64decode(text)
    logger.warning("%s: the cell tagged %r stores no PNG", notebook.name, TAG)
    return None


#: The widest copy a card needs, in pixels (twice its displayed width).
CARD_WIDTH = 640


def card_png(png: bytes, width: int = CARD_WIDTH) -> bytes:
    """``png`` scaled down to at most ``width`` pixels wide, in 256 colours."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    if image.width > width:
        height = round(image.height * width / image.width)
        image = image.resize((width, height), Image.Resampling.LANCZOS)
    small = image.quantize(colors=256, method=Image.Quantize.MEDIANCUT,
                           dither=Image.Dither.NONE)
    out = io.BytesIO()
    small.save(out, format="PNG", optimize=True)
    return out.getvalue()


def chapter_notebooks(srcdir: Path) -> list[Path]:
    """Chapter notebooks: ``book/NN_*.ipynb`` (solutions are elsewhere)."""
    return sorted((srcdir / "book").glob("[0-9][0-9]_*.ipynb"))


def _write_figures(app: Sphinx) -> None:
    srcdir = Path(app.srcdir)
    out = srcdir / OUT_DIR
    out.mkdir(parents=True, exist_ok=True)
    for notebook in chapter_notebooks(srcdir):
        png = tagged_png(notebook)
        if png is None:
            continue
        png = card_png(png)
        target = out / f"{notebook.stem}.png"
        if not target.exists() or target.read_bytes() != png:
            target.write_bytes(png)


def setup(app: Sphinx) -> dict:
    app.connect("builder-inited", _write_figures)
    return {"version": "1.0", "parallel_read_safe": True,
            "parallel_write_safe": True}
