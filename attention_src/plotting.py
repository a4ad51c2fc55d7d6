"""Plotting: the book's figure style and the one heatmap helper every chapter uses.

Importing ``attention_src`` applies :data:`BOOK_STYLE` to matplotlib: lines and bars cycle
through the Okabe-Ito palette (distinguishable with every common colour-vision deficiency),
and images default to viridis (perceptually uniform, readable in greyscale). A chapter that
names a colour takes it from :data:`OKABE_ITO`.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import torch
from cycler import cycler

__all__ = [
    "show_heatmaps", "DEFAULT_CMAP", "OKABE_ITO", "BOOK_STYLE", "MAX_FIGURE_WIDTH",
    "apply_book_style", "figure_png_2x",
    "unlabelled_axes",
]

#: Perceptually uniform and readable with colour-vision deficiencies (and in greyscale).
DEFAULT_CMAP = "viridis"

#: Okabe & Ito's colour-blind-safe palette (https://jfly.uni-koeln.de/color/), in the order
#: the book cycles through it (black last: it is kept for reference lines).
OKABE_ITO = {
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "green": "#009E73",
    "orange": "#E69F00",
    "purple": "#CC79A7",
    "sky": "#56B4E9",
    "yellow": "#F0E442",
    "black": "#000000",
}

#: The widest figure the book draws, in inches. A phone shows the text column about 358 px
#: wide; a figure at most this wide, with tick labels at 12 pt (16.7 px at 100 dpi), keeps
#: its smallest text at 10 px or more there.
MAX_FIGURE_WIDTH = 5.8

#: The matplotlib settings every figure of the book uses: the palette, and text large enough
#: to read on a phone once the figure is scaled to the text column.
BOOK_STYLE = {
    "axes.prop_cycle": cycler(color=list(OKABE_ITO.values())),
    "image.cmap": DEFAULT_CMAP,
    "font.size": 13,
    "axes.titlesize": 13,
    "axes.labelsize": 13,
    "xtick.labelsize": 12,
    "ytick.labelsize": 12,
    "legend.fontsize": 12,
    "figure.titlesize": 14,
    "figure.dpi": 100,
}


def apply_book_style() -> None:
    """Apply :data:`BOOK_STYLE` to matplotlib's global settings (done on import).

    In a Jupyter kernel, figures are also shown and stored through :func:`figure_png_2x`:
    twice the pixels, 256 colours.
    """
    mpl.rcParams.update(BOOK_STYLE)
    _retina_in_jupyter()


def figure_png_2x(fig: mpl.figure.Figure) -> tuple[bytes, dict[str, int]]:
    """``fig`` as a PNG at twice its size, in at most 256 colours, for a notebook to store.

    Twice the pixels keep lines and text sharp on high-density screens and when a reader
    enlarges the figure; 256 colours (no dithering, on a white background) make the file
    smaller than a plain PNG at the normal size, since a chart has few colours and a colour
    map has 256. Returns the bytes and the size to show it at (half the pixel size), the
    ``(data, metadata)`` pair an IPython formatter returns.

    The picture is what ``fig.savefig(dpi=2 * fig.dpi, bbox_inches="tight")`` draws, made with
    one drawing instead of savefig's two (a layout pass, then the drawing): the figure is drawn
    once at twice its dpi and cut to its tight box. Where that box reaches outside the figure
    (an artist drawn beyond its edge), only savefig can include it, and savefig makes it.
    """
    from PIL import Image

    rgb = _tight_rgb_by_cropping(fig)
    if rgb is None:
        rgb = _tight_rgb_by_savefig(fig)
    width, height = rgb.size
    small = rgb.quantize(colors=256, method=Image.Quantize.MEDIANCUT,
                         dither=Image.Dither.NONE)
    out = io.BytesIO()
    small.save(out, format="PNG", optimize=True)
    return out.getvalue(), {"width": round(width / 2), "height": round(height / 2)}


def _tight_rgb_by_savefig(fig: mpl.figure.Figure):
    """``fig`` drawn by savefig at twice its dpi, cut to its tight box, on white: RGB image."""
    from PIL import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=2 * fig.dpi, bbox_inches="tight",
                facecolor="white")
    return Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")


def _tight_rgb_by_cropping(fig: mpl.figure.Figure):
    """``fig`` drawn once at twice its dpi on white and cut to its tight box, padded as savefig
    pads it (with white where the padding passes the figure's edge): RGB image. ``None`` when
    the canvas is not Agg, or when something is drawn beyond the figure's edge."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from PIL import Image

    if not isinstance(fig.canvas, FigureCanvasAgg):
        return None
    dpi, facecolor = fig.dpi, fig.get_facecolor()
    fig.set_dpi(2 * dpi)
    fig.set_facecolor("white")
    try:
        fig.canvas.draw()  # runs the layout engine, as savefig's first pass does
        # inches, frozen: the box is a transform of the dpi it was drawn at
        box = fig.get_tightbbox(fig.canvas.get_renderer()).frozen()
        rgba = np.asarray(fig.canvas.buffer_rgba())  # (H, W, 4), row 0 at the top
    finally:
        fig.set_dpi(dpi)
        fig.set_facecolor(facecolor)
    fig_w, fig_h = fig.get_size_inches()
    if box.x0 < 0 or box.y0 < 0 or box.x1 > fig_w or box.y1 > fig_h:
        return None
    box = box.padded(mpl.rcParams["savefig.pad_inches"])
    scale, height = 2 * dpi, rgba.shape[0]  # pixels per inch; rows of the drawing
    # the padded box in the drawing's pixels: columns left..right, rows top..bottom
    left, right = round(box.x0 * scale), round(box.x1 * scale)
    top, bottom = height - round(box.y1 * scale), height - round(box.y0 * scale)
    out = np.full((bottom - top, right - left, 3), 255, dtype=np.uint8)
    rows = slice(max(top, 0), min(bottom, height))
    cols = slice(max(left, 0), min(right, rgba.shape[1]))
    out[rows.start - top:rows.stop - top, cols.start - left:cols.stop - left] = \
        rgba[rows, cols, :3]
    return Image.fromarray(out)


def _retina_in_jupyter() -> bool:
    """Show inline figures through :func:`figure_png_2x` in a running IPython kernel;
    ``False`` outside one."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - ships with Jupyter
        return False
    shell = get_ipython()
    if shell is None or not hasattr(shell, "kernel"):
        return False
    if "inline" in mpl.rcParams["backend"]:
        # Importing the inline backend registers its own PNG formatter; do it now, so that it
        # does not replace this one when the first figure is drawn.
        import matplotlib_inline.backend_inline  # noqa: F401
    formatters = shell.display_formatter.formatters
    for mime in ("image/svg+xml", "image/jpeg", "application/pdf"):
        formatters[mime].pop(mpl.figure.Figure, None)
    formatters["image/png"].for_type(mpl.figure.Figure, figure_png_2x)
    return True


def _as_grid(matrices) -> np.ndarray:
    if isinstance(matrices, torch.Tensor):
        matrices = matrices.detach().to("cpu", torch.float64).numpy()
    array = np.asarray(matrices, dtype=float)
    if array.ndim == 2:
        array = array[None, None]  # (L_q, L_k) -> (1, 1, L_q, L_k)
    elif array.ndim == 3:
        array = array[None]  # (cols, L_q, L_k) -> (1, cols, L_q, L_k)
    if array.ndim != 4:
        raise ValueError(
            "matrices must be (L_q, L_k), (cols, L_q, L_k) or (rows, cols, L_q, L_k), "
            f"got shape {array.shape}"
        )
    if array.size == 0:
        raise ValueError(f"matrices is empty (shape {array.shape}): nothing to draw")
    if not np.isfinite(array).any():
        raise ValueError("matrices holds no finite value: nothing to draw")
    return array


def show_heatmaps(
    matrices,
    xlabel: str = "Keys",
    ylabel: str = "Queries",
    titles: Sequence[str] | None = None,
    row_titles: Sequence[str] | None = None,
    xticklabels: Sequence[str] | None = None,
    yticklabels: Sequence[str] | None = None,
    figsize: tuple[float, float] | None = None,
    cmap: str = DEFAULT_CMAP,
    vmin: float | None = 0.0,
    vmax: float | None = None,
    annotate: bool = False,
    colorbar_label: str = "attention weight",
    suptitle: str | None = None,
):
    """Draw a grid of heatmaps with one shared colour scale and colour bar.

    Args:
        matrices: ``(rows, cols, L_q, L_k)`` (also ``(cols, L_q, L_k)`` or ``(L_q, L_k)``),
            a tensor or array; typically attention weights, queries down, keys across.
        xlabel, ylabel: axis labels (on the bottom row and first column).
        titles: one title per column; row_titles: one label per row.
        xticklabels, yticklabels: token labels for the keys and queries (key labels of one
            character each are drawn upright, longer ones turned a quarter turn).
        figsize: default ``(2.6 * cols + 1, 2.4 * rows)`` inches, scaled down to at most
            :data:`MAX_FIGURE_WIDTH` wide.
        cmap: a colour-blind-safe colormap by default (viridis).
        vmin, vmax: colour scale limits, shared by every panel (default 0 to the largest value).
        annotate: write each value (2 decimals) in its cell; for small matrices.
        colorbar_label: the colour bar's label.
        suptitle: a title over the whole figure.

    Returns:
        ``(fig, axes)`` with ``axes`` of shape ``(rows, cols)``.
    """
    grid = _as_grid(matrices)
    rows, cols, L_q, L_k = grid.shape
    for name, labels, n in (("titles", titles, cols), ("row_titles", row_titles, rows),
                            ("xticklabels", xticklabels, L_k), ("yticklabels", yticklabels, L_q)):
        if labels is not None and len(labels) != n:
            raise ValueError(f"{name} has {len(labels)} entries, expected {n}")
    if vmax is None:
        vmax = float(np.nanmax(grid))
    if figsize is None:  # about 2.6 x 2.4 inches a panel, shrunk to the widest figure
        shrink = min(1.0, MAX_FIGURE_WIDTH / (2.6 * cols + 1.0))
        figsize = ((2.6 * cols + 1.0) * shrink, 2.4 * rows * shrink)
    fig, axes = plt.subplots(rows, cols, figsize=figsize, squeeze=False,
                             sharex=True, sharey=True, layout="constrained")
    image = None
    for r in range(rows):
        for c in range(cols):
            ax = axes[r, c]
            image = ax.imshow(grid[r, c], cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto",
                              interpolation="nearest")
            if annotate:
                low = vmin if vmin is not None else float(np.nanmin(grid))
                mid = (low + vmax) / 2  # dark cells (below mid) get white text
                for i in range(L_q):
                    for j in range(L_k):
                        value = grid[r, c, i, j]
                        ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=12,
                                color="black" if value > mid else "white")
            if titles is not None and r == 0:
                ax.set_title(titles[c])
            if r == rows - 1:
                ax.set_xlabel(xlabel)
            if c == 0:
                ax.set_ylabel(ylabel if row_titles is None else f"{row_titles[r]}\n{ylabel}")
            if xticklabels is not None:  # single characters upright, words turned
                ax.set_xticks(range(L_k), labels=xticklabels,
                              rotation=0 if all(len(str(t)) <= 1 for t in xticklabels) else 90)
            if yticklabels is not None:
                ax.set_yticks(range(L_q), labels=yticklabels)
    fig.colorbar(image, ax=axes, shrink=0.8, label=colorbar_label)
    if suptitle:
        fig.suptitle(suptitle)
    return fig, axes


def unlabelled_axes(fig: mpl.figure.Figure) -> list[str]:
    """The axes of ``fig`` that show data on an axis with tick labels but no axis label.

    The book's rule is that every axis a reader has to read carries a label (with units). An
    axis is exempt when it shows no tick labels (hidden by ``label_outer``, or ``axis("off")``),
    when an axis it shares has a label (a grid of panels labels one row or column), or when
    its axes draw nothing (an empty panel). A colorbar counts as an axes: its long axis needs
    a label too. Returns one line per missing label, e.g. ``"axes 2 'softmax': no y label"``.
    """
    if not isinstance(fig, mpl.figure.Figure):
        raise TypeError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
    fig.draw_without_rendering()  # tick labels get their text when the figure is drawn
    problems = []
    for i, ax in enumerate(fig.axes):
        if not (ax.axison and ax.get_visible()):
            continue
        if not (ax.lines or ax.collections or ax.images or ax.patches or ax.texts):
            continue
        for name, axis, shared in (("x", ax.xaxis, ax.get_shared_x_axes()),
                                   ("y", ax.yaxis, ax.get_shared_y_axes())):
            if axis.get_label_text().strip():
                continue
            # get_ticklabels() lists the shown tick labels only
            if not any(t.get_text().strip() for t in axis.get_ticklabels()):
                continue
            siblings = shared.get_siblings(ax)
            if any(getattr(s, f"{name}axis").get_label_text().strip() for s in siblings):
                continue
            problems.append(f"axes {i} {ax.get_title()!r}: no {name} label")
    return problems
