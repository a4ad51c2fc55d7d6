"""Draw the book's icon, ``_static/favicon.svg``: a 4 x 4 grid of causal attention weights.

Row i is query i, column j key j; each row is a softmax over keys 0..i of the scores
``-(i - j) / 2`` (nearer keys weigh more), and masked cells (j > i) are left blank. Colours
come from matplotlib's viridis, the book's colour map. Run from the repository root::

    .venv/bin/python tools/make_favicon.py

``tests/test_reader_page.py`` checks that the stored file is what this script draws.
"""

from __future__ import annotations

import math
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "_static" / "favicon.svg"
N = 4


def causal_weights(n: int = N) -> list[list[float]]:
    """Row i: softmax over keys 0..i of -(i - j) / 2; masked keys (j > i) get 0."""
    rows = []
    for i in range(n):
        scores = [-(i - j) / 2 for j in range(i + 1)]
        total = sum(math.exp(s) for s in scores)
        rows.append([math.exp(s) / total for s in scores] + [0.0] * (n - i - 1))
    return rows


def favicon_svg() -> str:
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    cell, gap = 14, 2
    size = N * cell + (N + 1) * gap
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {size} {size}">',
             f'<rect width="{size}" height="{size}" rx="8" fill="#1f1f2e"/>']
    for i, row in enumerate(causal_weights()):
        for j, w in enumerate(row):
            if j > i:
                continue  # masked: the future
            r, g, b, _ = cmap(0.15 + 0.85 * w)
            colour = f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"
            x, y = gap + j * (cell + gap), gap + i * (cell + gap)
            parts.append(f'<rect x="{x}" y="{y}" width="{cell}" height="{cell}" rx="2" '
                         f'fill="{colour}"/>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    TARGET.write_text(favicon_svg())
    print(f"wrote {TARGET.relative_to(ROOT)}")
