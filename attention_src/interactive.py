"""Interactive figures: a notebook cell's data, drawn in the reader's browser, offline.

A figure here is data plus a renderer. Python computes every number the figure shows (the
weights, the weighted sums, the online softmax's running statistics, with the package's own
functions) and writes them, rounded to the :data:`DIGITS` decimals shown, as JSON into the
cell's HTML output::

    <div data-interactive="attention_explorer" class="aei" role="figure" aria-label="...">
      <div class="aei-fallback"><img src="data:image/png;base64,..." alt="..."><p>...</p></div>
      <script type="application/json">{...}</script>
      <script data-interactive-renderer>...</script>
    </div>

The renderer, :data:`RENDERER_JS` (the site serves the same text as
``_static/interactive.js``, written by :func:`write_site_script`), finds each such ``div``,
reads its JSON and draws it with plain DOM elements: buttons for tokens (Tab, Enter, arrow
keys), range inputs for sliders (arrow keys), bars whose numbers are written as text. It
computes nothing, fetches nothing, uses no library, draws a ``div`` once however often it is
loaded, and fits a 390 px phone. Each figure's MIME bundle also holds ``image/png`` (a static
matplotlib drawing in the book's style, for a frontend that runs no script) and
``text/plain``.

Why a hand-written script rather than Bokeh or Plotly: weight. Measured in their wheels
(bokeh 3.9.2, plotly 7.1.0): ``bokeh.min.js`` is 1,268,134 bytes and a slider needs
``bokeh-widgets.min.js`` too (381,992 bytes), 1.65 MB in all; ``plotly.min.js`` is 4,815,814
bytes. Both work offline when the site serves the file, but either would be the heaviest thing
on a chapter's page, and in a notebook each would embed or fetch its library per output.
The figures here need buttons, a slider and bars of precomputed numbers: the whole renderer
is under 12 kB (``len(RENDERER_JS)``; the test suite holds it there), and no new dependency.
"""

from __future__ import annotations

import base64
import html
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure

from attention_src.efficient import online_softmax, online_softmax_stats
from attention_src.plotting import MAX_FIGURE_WIDTH, OKABE_ITO, figure_png_2x
from attention_src.softmax import softmax

__all__ = [
    "InteractiveFigure", "attention_explorer", "softmax_temperature", "online_softmax_steps",
    "head_explorer", "RENDERER_JS", "write_site_script", "DIGITS",
]

#: Decimals of every number a figure shows (and stores in its JSON).
DIGITS = 3
#: Most tokens (keys) a figure shows: at 390 px, more bars or cells would not be readable.
MAX_TOKENS = 32
#: Widest value vector shown as numbers.
MAX_VALUE_WIDTH = 8
#: Most tokens labelled one by one on a static heatmap's axes; past it, every
#: :data:`TICK_STEP`-th position is labelled with its index.
MAX_TICKS = 8
TICK_STEP = 4
#: Most heatmaps side by side in a static drawing (a 5.8 in column holds two legibly).
PANELS_PER_ROW = 2
#: How far a row of attention weights may sum from 1 (float32 weights from a model included).
ROW_SUM_ATOL = 1e-4


def _r(x: float) -> float:
    """``x`` rounded to :data:`DIGITS` decimals, with ``-0.0`` written as ``0.0``."""
    return round(float(x), DIGITS) + 0.0


def _rounded(a) -> list:
    return np.vectorize(_r, otypes=[float])(np.asarray(a, dtype=np.float64)).tolist()


def _array(name: str, x: object, ndim: int) -> np.ndarray:
    """``x`` (a tensor, array or nested list of real numbers) as a float64 array of rank
    ``ndim``; ``TypeError`` for anything else, ``ValueError`` for the wrong rank, an empty
    axis or a non-finite entry."""
    if isinstance(x, torch.Tensor):
        if x.is_complex() or x.dtype == torch.bool:
            raise TypeError(f"{name} must hold real numbers, got a {x.dtype} tensor")
        a = x.detach().to("cpu", torch.float64).numpy()
    elif isinstance(x, (np.ndarray, list, tuple)):
        a = np.asarray(x)
        if a.dtype == object or a.dtype.kind not in "iuf":
            raise TypeError(f"{name} must hold real numbers, got dtype {a.dtype}")
        a = a.astype(np.float64)
    else:
        raise TypeError(f"{name} must be a tensor, array or list, got {type(x).__name__}")
    if a.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {a.shape}")
    if 0 in a.shape:
        raise ValueError(f"{name} must not be empty, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} must be finite, got non-finite entries in shape {a.shape}")
    return a


def _tokens(tokens: object) -> list[str]:
    if isinstance(tokens, str) or not isinstance(tokens, Sequence):
        raise TypeError(f"tokens must be a sequence of str, got {type(tokens).__name__}")
    bad = [t for t in tokens if not isinstance(t, str)]
    if bad:
        raise TypeError(f"tokens must all be str, got {type(bad[0]).__name__}")
    if not 1 <= len(tokens) <= MAX_TOKENS:
        raise ValueError(f"tokens must number 1 to {MAX_TOKENS}, got {len(tokens)}")
    return list(tokens)


def _check_rows(name: str, w: np.ndarray) -> None:
    """Every row of ``w`` (last axis) is a probability distribution."""
    if (w < 0).any() or (w > 1 + ROW_SUM_ATOL).any():
        raise ValueError(f"{name} must lie in [0, 1], got {w.min():.3g} to {w.max():.3g}")
    sums = w.sum(axis=-1)
    worst = np.abs(sums - 1).max()
    if worst > ROW_SUM_ATOL:
        raise ValueError(f"every row of {name} must sum to 1 (within {ROW_SUM_ATOL}), "
                         f"one sums to {sums.flat[np.abs(sums - 1).argmax()]:.6g}")


class InteractiveFigure:
    """A figure for the reader's browser: its name, its data and its static fallback.

    Attributes:
        name: the renderer that draws it, written to ``data-interactive``.
        payload: the JSON-ready data, every number rounded to :data:`DIGITS` decimals.
        alt: one sentence saying what the figure shows (the ``aria-label`` and fallback text).

    In Jupyter the cell shows ``text/html`` (interactive where scripts run, that is in a
    trusted notebook and on the site), or ``image/png`` where only the static image can be
    shown, or ``text/plain``.
    """

    def __init__(self, name: str, payload: dict, alt: str,
                 draw_static: Callable[[Figure], None], figsize: tuple[float, float]):
        if name not in _NAMES:
            raise ValueError(f"no renderer named {name!r}; there are {sorted(_NAMES)}")
        if not isinstance(alt, str) or len(alt.strip()) < 20:
            raise ValueError(f"alt must be a sentence saying what the figure shows, got {alt!r}")
        self.name, self.payload, self.alt = name, payload, alt.strip()
        self._draw_static, self._figsize = draw_static, figsize
        self._png: tuple[bytes, dict[str, int]] | None = None

    def json(self) -> str:
        """The payload as JSON that is safe inside a ``<script>`` element."""
        text = json.dumps(self.payload, sort_keys=True, separators=(",", ":"),
                          allow_nan=False, ensure_ascii=True)
        return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")

    def to_html(self, include_script: bool = True) -> str:
        """The figure's HTML: its outer ``div``, the static fallback, the JSON and (by
        default) the renderer inline.

        The fallback is the static drawing as an ``<img>`` (a data URI) with the alt text,
        and a line saying the figure is interactive where JavaScript runs: it is what a
        reader sees where no script runs, e.g. a downloaded notebook that is not trusted
        (JupyterLab then shows the HTML without its scripts, and keeps data-URI images). The
        renderer removes it when it draws the figure.
        """
        alt = html.escape(self.alt)
        data, size = self.png()
        image = (f'<img class="aei-static" src="data:image/png;base64,'
                 f'{base64.b64encode(data).decode("ascii")}" alt="{alt}" '
                 f'width="{size["width"]}" style="max-width:100%;height:auto">')
        script = (f"<script data-interactive-renderer>{RENDERER_JS}</script>"
                  if include_script else "")
        return (f'<div data-interactive="{self.name}" class="aei" role="figure" '
                f'aria-label="{alt}">'
                f'<div class="aei-fallback">{image}'
                f'<p>A static image: the figure is interactive where JavaScript runs.</p></div>'
                f'<script type="application/json">{self.json()}</script>{script}</div>')

    def static_figure(self) -> Figure:
        """The static drawing, a matplotlib ``Figure`` outside pyplot (never shown twice)."""
        fig = Figure(figsize=self._figsize, layout="constrained")
        self._draw_static(fig)
        return fig

    def png(self) -> tuple[bytes, dict[str, int]]:
        """The static drawing as the book stores figures (:func:`figure_png_2x`)."""
        if self._png is None:
            self._png = figure_png_2x(self.static_figure())
        return self._png

    def __repr__(self) -> str:
        return f"<{self.name}: {self.alt}>"

    def _repr_mimebundle_(self, include=None, exclude=None):
        data, size = self.png()
        bundle = {"text/html": self.to_html(), "image/png": data, "text/plain": repr(self)}
        return bundle, {"image/png": size}


def _ticks(n: int) -> list[int]:
    """The positions given a tick label: all of them up to :data:`MAX_TICKS`, else every
    :data:`TICK_STEP`-th (so 16 tokens are labelled 0, 4, 8, 12)."""
    return list(range(0, n, 1 if n <= MAX_TICKS else TICK_STEP))


def _heatmap(ax, w: np.ndarray, tokens: list[str], fig: Figure, title: str | None = None):
    """``w`` as an image, its ticks labelled with the tokens (or, past :data:`MAX_TICKS`
    tokens, with the position index of every :data:`TICK_STEP`-th)."""
    im = ax.imshow(w, vmin=0.0, vmax=1.0, cmap="viridis")
    ticks = _ticks(len(tokens))
    names = tokens if len(ticks) == len(tokens) else [str(i) for i in ticks]
    ax.set_xticks(ticks, names, rotation=90 if names is tokens else 0)
    ax.set_yticks(ticks, names)
    ax.set_xlabel("key" if names is tokens else "key position")
    ax.set_ylabel("query" if names is tokens else "query position")
    if title:
        ax.set_title(title)
    return im


# ---------------------------------------------------------------------------- the figures


def attention_explorer(tokens: Sequence[str], weights, values=None, *, query: int = 0,
                       value_labels: Sequence[str] | None = None,
                       alt: str | None = None) -> InteractiveFigure:
    """Point at a query token, see its row of attention weights over the sentence (ch. 4).

    Args:
        tokens: the ``L`` tokens of the sentence (queries and keys), ``1 <= L <=`` 32.
        weights: ``(L, L)`` attention weights, row ``i`` the query ``i``'s weights over the
            keys; each row in ``[0, 1]`` summing to 1.
        values: optional ``(L, d_v)`` value vectors, ``d_v <= 8``; then the figure also shows
            each query's weighted sum ``weights[i] @ values`` (computed here, in float64).
        query: the query shown first.
        value_labels: optional names of the ``d_v`` value features (e.g. ``"action"``,
            ``"place"``); given, the weighted sum is shown as one ``name: number`` row each.
            Needs ``values``.
        alt: the figure's one-sentence description (a default is written from the data).

    Returns:
        An :class:`InteractiveFigure` named ``attention_explorer``; its payload holds
        ``tokens``, ``weights`` (``L x L``), ``outputs`` (``L x d_v`` or ``None``), ``query``
        and ``value_labels`` (``d_v`` names or ``None``).
    """
    toks = _tokens(tokens)
    L = len(toks)
    w = _array("weights", weights, 2)
    if w.shape != (L, L):
        raise ValueError(f"weights must have shape (L, L) = ({L}, {L}) for {L} tokens, "
                         f"got {w.shape}")
    _check_rows("weights", w)
    outputs = None
    if values is not None:
        v = _array("values", values, 2)
        if v.shape[0] != L or v.shape[1] > MAX_VALUE_WIDTH:
            raise ValueError(f"values must have shape (L, d_v) with L = {L} and d_v <= "
                             f"{MAX_VALUE_WIDTH}, got {v.shape}")
        outputs = _rounded(torch.from_numpy(w) @ torch.from_numpy(v))  # (L, d_v)
    if value_labels is not None:
        if isinstance(value_labels, str) or not isinstance(value_labels, Sequence) or any(
                not isinstance(x, str) for x in value_labels):
            raise TypeError(f"value_labels must be a sequence of str, got {value_labels!r}")
        if outputs is None or len(value_labels) != len(outputs[0]):
            width = "no values" if outputs is None else f"d_v = {len(outputs[0])}"
            raise ValueError(f"value_labels must name the d_v value features ({width}), "
                             f"got {len(value_labels)} labels")
        value_labels = list(value_labels)
    if isinstance(query, bool) or not isinstance(query, int) or not 0 <= query < L:
        raise ValueError(f"query must be an int in [0, {L}), got {query!r}")
    payload = {"tokens": toks, "weights": _rounded(w), "outputs": outputs, "query": query,
               "value_labels": value_labels}
    alt = alt or (f"Interactive figure: the attention weights of each of the {L} tokens "
                  "over the sentence; choose a query token to see its row"
                  + (" and its weighted sum of the values." if outputs else "."))

    def draw(fig: Figure) -> None:
        ax = fig.add_subplot()
        im = _heatmap(ax, w, toks, fig)
        fig.colorbar(im, ax=ax, label="attention weight")

    side = min(MAX_FIGURE_WIDTH, 2.2 + 0.35 * L)
    return InteractiveFigure("attention_explorer", payload, alt, draw, (side + 0.8, side))


def softmax_temperature(scores, temperatures, *, labels: Sequence[str] | None = None,
                        parameter: str = "temperature T", start: int | None = None,
                        alt: str | None = None) -> InteractiveFigure:
    """A slider over a divisor of the scores, showing ``softmax(scores / T)`` (ch. 3).

    With ``T = sqrt(d_k)`` (and ``parameter="sqrt(d_k)"``) it is the scaling of scaled
    dot-product attention; a large ``T`` flattens the weights, a small one sharpens them.

    Args:
        scores: ``(n,)`` finite scores, ``n <= 32``.
        temperatures: ``(t,)`` positive divisors, one slider position each (``t <= 101``).
        labels: the ``n`` keys' names (default ``key 1`` ... ``key n``).
        parameter: the name of the divisor, shown beside the slider.
        start: the slider's first position (default: the divisor closest to 1).
        alt: the figure's one-sentence description.

    Returns:
        An :class:`InteractiveFigure` named ``softmax_temperature``; its payload holds
        ``labels``, ``temperatures`` (``t``), ``weights`` (``t x n``, each row the package's
        :func:`~attention_src.softmax.softmax` of ``scores / T``), ``parameter``, ``start``.
    """
    s = _array("scores", scores, 1)
    temps = _array("temperatures", temperatures, 1)
    if (temps <= 0).any() or len(temps) > 101:
        raise ValueError(f"temperatures must be 1 to 101 positive numbers, got {len(temps)} "
                         f"from {temps.min():.3g} to {temps.max():.3g}")
    n = len(s)
    names = _tokens(list(labels) if labels is not None else [f"key {j + 1}" for j in range(n)])
    if len(names) != n:
        raise ValueError(f"labels must name the {n} scores, got {len(names)} labels")
    if not isinstance(parameter, str) or not parameter:
        raise TypeError(f"parameter must be a non-empty str, got {parameter!r}")
    if start is None:
        start = int(np.abs(np.log(temps)).argmin())
    if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start < len(temps):
        raise ValueError(f"start must be an int in [0, {len(temps)}), got {start!r}")
    x = torch.from_numpy(s)
    w = torch.stack([softmax(x / float(t)) for t in temps]).numpy()  # (t, n)
    payload = {"labels": names, "temperatures": _rounded(temps), "weights": _rounded(w),
               "parameter": parameter, "start": start}
    alt = alt or (f"Interactive figure: the softmax weights of {n} scores divided by "
                  f"{parameter}, with a slider over {len(temps)} values of {parameter}.")

    def draw(fig: Figure) -> None:
        ax = fig.add_subplot()
        for j in range(n):
            ax.plot(temps, w[:, j], marker="o", markersize=3, label=names[j])
        if temps.max() / temps.min() > 10:
            ax.set_xscale("log")
        ax.set_xlabel(parameter)
        ax.set_ylabel("softmax weight")
        ax.set_ylim(0, 1)
        if n <= len(OKABE_ITO):
            ax.legend()

    return InteractiveFigure("softmax_temperature", payload, alt, draw, (MAX_FIGURE_WIDTH, 3.6))


def online_softmax_steps(scores, values, block: int, *,
                         alt: str | None = None) -> InteractiveFigure:
    """A slider over key blocks: the online softmax's running maximum, sum and output (ch. 9).

    After block ``b`` (keys ``0`` to ``stop - 1`` read), the running maximum ``m`` and sum
    ``s`` are :func:`~attention_src.efficient.online_softmax_stats` of the keys read so far,
    read in blocks of ``block`` (the same arithmetic as the streaming pass), and the running
    output is :func:`~attention_src.efficient.online_softmax` of those scores times their
    values: the attention output over the keys seen so far, which the last block turns into
    the exact one, ``softmax(scores) @ values``.

    Args:
        scores: ``(n,)`` one query's finite scores over ``n <= 32`` keys.
        values: ``(n, d_v)`` the keys' values, ``d_v <= 8``.
        block: positive int, keys read per step.
        alt: the figure's one-sentence description.

    Returns:
        An :class:`InteractiveFigure` named ``online_softmax_steps``; its payload holds
        ``scores``, ``exact`` (``d_v``), ``block`` and ``steps``, one per block, each with
        ``start``, ``stop``, ``max``, ``sum``, ``rescale`` (``exp(m_old - m)``, ``None`` for
        the first block), ``output`` (``d_v``) and ``error`` (the largest difference from the
        exact output, 2 significant digits, ``0.0`` when below ``1e-12``).
    """
    x = torch.from_numpy(_array("scores", scores, 1))  # (n,)
    v = torch.from_numpy(_array("values", values, 2))  # (n, d_v)
    n = x.shape[0]
    if n > MAX_TOKENS or v.shape[0] != n or v.shape[1] > MAX_VALUE_WIDTH:
        raise ValueError(f"scores (n,) and values (n, d_v) need n <= {MAX_TOKENS} and d_v <= "
                         f"{MAX_VALUE_WIDTH}, got {tuple(x.shape)} and {tuple(v.shape)}")
    if isinstance(block, bool) or not isinstance(block, int):
        raise TypeError(f"block must be an int, got {type(block).__name__}")
    if block <= 0:
        raise ValueError(f"block must be positive, got {block}")
    exact = softmax(x) @ v  # (d_v,)
    steps, rows, m_old = [], [], None
    for start in range(0, n, block):
        stop = min(start + block, n)
        m, s = online_softmax_stats(x[:stop], block)  # (), ()
        out = online_softmax(x[:stop], block) @ v[:stop]  # (d_v,)
        err = float((out - exact).abs().max())
        rescale = None if m_old is None else _r(math.exp(m_old - float(m)))
        steps.append({"start": start, "stop": stop, "max": _r(m), "sum": _r(s),
                      "rescale": rescale, "output": _rounded(out),
                      "error": 0.0 if err < 1e-12 else float(f"{err:.1e}")})
        rows.append((stop, float(m), float(s), out.numpy()))
        m_old = float(m)
    payload = {"scores": _rounded(x), "exact": _rounded(exact), "block": block,
               "steps": steps}
    alt = alt or (f"Interactive figure: the online softmax over {n} keys read {block} at a "
                  "time, with a slider over the blocks showing the running maximum, the "
                  "running sum and the output converging to the exact one.")

    def draw(fig: Figure) -> None:
        left, right = fig.subplots(1, 2)
        read = [r[0] for r in rows]
        left.plot(read, [r[1] for r in rows], marker="o", label="running max m")
        left.plot(read, [r[2] for r in rows], marker="s", label="running sum s")
        left.set_xlabel("keys read")
        left.set_ylabel("value")
        # above the panel: inside, it would cover a line wherever the data put one
        left.legend(loc="lower left", bbox_to_anchor=(0, 1.02), borderaxespad=0,
                    frameon=False)
        colours = list(OKABE_ITO.values())
        for c in range(v.shape[1]):
            colour = colours[c % len(colours)]
            right.plot(read, [r[3][c] for r in rows], marker="o", color=colour)
            right.axhline(float(exact[c]), color=colour, linestyle="--", linewidth=1)
        right.set_xlabel("keys read")
        right.set_ylabel("output (dashed: exact)")

    return InteractiveFigure("online_softmax_steps", payload, alt, draw, (MAX_FIGURE_WIDTH, 3.5))


def head_explorer(tokens: Sequence[str], weights, *, alt: str | None = None,
                  first_layer: int = 1, total_layers: int | None = None) -> InteractiveFigure:
    """Choose a layer and a head, see its attention pattern and one query's row (ch. 5, 6).

    A slider chooses the layer (the head), only where there are several. The static image
    draws every head, at most :data:`PANELS_PER_ROW` a row, titled ``L1 H1`` ....

    Args:
        tokens: the ``L`` tokens, ``1 <= L <= 32``.
        weights: ``(layers, heads, L, L)`` attention weights, each row summing to 1;
            ``layers * heads <= 16``.
        alt: the figure's one-sentence description.
        first_layer: the model's number, counted from 1, of the first layer in ``weights``
            (``weights[3:4]`` of a six-layer model is layer 4): the panels' titles and the
            readout use it.
        total_layers: the model's number of layers, for the readout's "layer 4 of 6";
            ``None``: the last layer in ``weights``.

    Returns:
        An :class:`InteractiveFigure` named ``head_explorer``; its payload holds ``tokens``,
        ``weights`` (``layers x heads x L x L``), ``first_layer`` and ``total_layers``.
    """
    toks = _tokens(tokens)
    L = len(toks)
    w = _array("weights", weights, 4)
    if w.shape[2:] != (L, L) or w.shape[0] * w.shape[1] > 16:
        raise ValueError(f"weights must have shape (layers, heads, {L}, {L}) with layers * "
                         f"heads <= 16, got {w.shape}")
    _check_rows("weights", w)
    layers, heads = w.shape[:2]
    for name, value in (("first_layer", first_layer), ("total_layers", total_layers)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if first_layer < 1:
        raise ValueError(f"first_layer counts from 1, got {first_layer}")
    last = first_layer + layers - 1
    total_layers = last if total_layers is None else total_layers
    if total_layers < last:
        raise ValueError(f"total_layers = {total_layers} is less than the last layer shown, "
                         f"{last} (first_layer {first_layer}, {layers} layers in weights)")
    payload = {"tokens": toks, "weights": _rounded(w), "first_layer": first_layer,
               "total_layers": total_layers}
    alt = alt or (f"Interactive figure: the attention weights of {layers} layers with "
                  f"{heads} heads each over {L} tokens; choose a layer, a head and a query.")

    panels = layers * heads
    cols = min(PANELS_PER_ROW, panels)
    rows = math.ceil(panels / cols)

    def draw(fig: Figure) -> None:
        axes = fig.subplots(rows, cols, squeeze=False, sharex="all", sharey="all")
        for k, ax in enumerate(axes.flat):
            if k >= panels:  # an odd number of panels: the last cell stays empty
                ax.set_axis_off()
                continue
            a, b = divmod(k, heads)
            im = _heatmap(ax, w[a, b], toks, fig, f"L{first_layer + a} H{b + 1}")
            # axis names and tick labels on the left column and the lowest panels only
            if k + cols < panels:
                ax.set_xlabel("")
                ax.tick_params(labelbottom=False)
            if k % cols:
                ax.set_ylabel("")
                ax.tick_params(labelleft=False)
        fig.colorbar(im, ax=axes, label="attention weight", shrink=min(1.0, 0.4 + 0.6 / rows))

    side = min(2.4 if cols == 2 else 4.0, 1.6 + 0.25 * L)  # one panel's side, inches
    return InteractiveFigure("head_explorer", payload, alt, draw,
                             (min(MAX_FIGURE_WIDTH, cols * side + 1.4),
                              min(16.0, rows * (side + 0.1) + 0.8)))


def write_site_script(path: str | Path) -> Path:
    """Write :data:`RENDERER_JS` to ``path`` (the site's ``_static/interactive.js``)."""
    path = Path(path)
    path.write_text(RENDERER_JS, encoding="utf-8")
    return path


_NAMES = frozenset({"attention_explorer", "softmax_temperature", "online_softmax_steps",
                    "head_explorer"})

#: The renderer, inline in every figure's HTML and served by the site as
#: ``_static/interactive.js`` (:func:`write_site_script`).
RENDERER_JS = r"""
/* Attention, Executed: interactive figures drawn from the JSON a notebook cell wrote; every
   number was computed in Python (attention_src.interactive). No network, no library; each
   <div data-interactive> is drawn once however often this is loaded. */
(function () {
  "use strict";
  var VERSION = 1;
  var C = {blue: "#0072B2", vermillion: "#D55E00", green: "#009E73", orange: "#E69F00"};
  if (window.AttentionInteractive && window.AttentionInteractive.version >= VERSION) {
    window.AttentionInteractive.renderAll();
    return;
  }
  var CSS = [
    ".aei{font-size:14px;line-height:1.35;max-width:100%;margin:.5em 0;" +
      "font-variant-numeric:tabular-nums}",
    ".aei-toks{display:flex;flex-wrap:wrap;gap:4px;margin:.3em 0}",
    ".aei-tok{font:inherit;padding:2px 7px;border:1px solid currentColor;border-radius:4px;" +
      "background:transparent;color:inherit;cursor:pointer}",
    ".aei-tok[aria-pressed=true]{background:" + C.blue + ";border-color:" + C.blue + ";color:#fff}",
    ".aei-tok:focus-visible,.aei input:focus-visible{outline:3px solid " + C.orange +
      ";outline-offset:1px}",
    ".aei-bar{display:flex;align-items:center;gap:6px;margin:2px 0}",
    ".aei-label{flex:0 0 6.5em;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;" +
      "text-align:right}",
    ".aei-track{flex:1 1 auto;height:14px;position:relative;min-width:60px}",
    ".aei-track::before{content:'';position:absolute;inset:0;background:currentColor;opacity:.12}",
    ".aei-fill{display:block;height:100%;background:" + C.blue + ";position:relative}",
    ".aei-num{flex:0 0 4.2em;text-align:right}",
    ".aei-two{display:grid;grid-auto-flow:column;column-gap:10px}",
    ".aei-two .aei-label{flex-basis:3.6em}.aei-two .aei-num{flex-basis:3em}" +
      ".aei-two .aei-track{min-width:12px}",
    ".aei-row{margin:.25em 0}.aei-row label{margin-right:.5em}",
    ".aei input[type=range]{width:100%;max-width:320px;vertical-align:middle;" +
      "accent-color:" + C.blue + "}",
    ".aei-strip{display:flex;gap:2px;margin:.3em 0}",
    ".aei-key{flex:1 1 0;height:16px;max-width:24px;background:currentColor;opacity:.2}",
    ".aei-key.read{background:" + C.blue + ";opacity:1}",
    ".aei-key.now{background:" + C.vermillion + ";opacity:1}",
    ".aei-grid{display:grid;gap:1px;max-width:260px;margin:.3em 0}",
    ".aei-cell{aspect-ratio:1;background:" + C.blue + ";cursor:pointer}",
    ".aei-cell.sel{outline:2px solid " + C.vermillion + "}",
    ".aei dl{display:grid;grid-template-columns:auto 1fr;gap:1px 8px;margin:.3em 0}",
    ".aei dd{margin:0}",
    ".aei-cap{font-weight:600}"
  ].join("\n");

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function fmt(x) { return x.toFixed(3); }
  function state(box, k, v) { box.parentNode.setAttribute("data-" + k, String(v)); }
  function vec(xs) { return "[" + xs.map(fmt).join(", ") + "]"; }

  /* bars: label, bar, value as text; past 12, in two columns (in order, down each) */
  function bars(box, labels) {
    var n = labels.length;
    if (n > 12) {
      box = box.appendChild(el("div", "aei-two"));
      box.style.gridTemplateRows = "repeat(" + Math.ceil(n / 2) + ",auto)";
    }
    var rows = labels.map(function (lab, j) {
      var r = el("div", "aei-bar"), fill = el("span", "aei-fill"), t = el("span", "aei-track");
      r.setAttribute("data-j", String(j));
      r.appendChild(el("span", "aei-label", lab)).title = lab;
      t.appendChild(fill);
      r.appendChild(t);
      r.appendChild(el("span", "aei-num"));
      box.appendChild(r);
      return {fill: fill, num: r.lastChild};
    });
    return function (values) {
      values.forEach(function (v, j) {
        rows[j].fill.style.width = (100 * Math.max(0, Math.min(1, v))) + "%";
        rows[j].num.textContent = fmt(v);
      });
    };
  }

  /* a readout list: field name -> <dd data-field=name> */
  function readout(box, fields) {
    var dl = el("dl"), dd = {};
    dl.setAttribute("aria-live", "polite");
    fields.forEach(function (f) {
      dl.appendChild(el("dt", null, f[1]));
      dd[f[0]] = dl.appendChild(el("dd"));
      dd[f[0]].setAttribute("data-field", f[0]);
    });
    box.appendChild(dl);
    return dd;
  }

  function slider(box, label, n, onChange, start) {
    var row = el("div", "aei-row"), input = el("input"), lab = el("label", null, label);
    var id = "aei-" + Math.random().toString(36).slice(2);
    input.type = "range"; input.min = "0"; input.max = String(n - 1); input.step = "1";
    input.value = String(start || 0); input.id = id; lab.htmlFor = id;
    input.addEventListener("input", function () { onChange(+input.value); });
    row.appendChild(lab); row.appendChild(input); box.appendChild(row);
    return input;
  }

  /* token buttons: click, Enter/Space, hover or focus selects; arrow keys move */
  function tokens(box, toks, onSelect) {
    var wrap = el("div", "aei-toks"), buttons = [];
    wrap.setAttribute("role", "group");
    wrap.setAttribute("aria-label", "query token");
    toks.forEach(function (t, i) {
      var b = el("button", "aei-tok", t);
      b.type = "button";
      b.setAttribute("data-i", String(i));
      b.addEventListener("click", function () { onSelect(i); });
      b.addEventListener("mouseenter", function () { onSelect(i); });
      b.addEventListener("keydown", function (ev) {
        var k = ev.key === "ArrowRight" ? 1 : ev.key === "ArrowLeft" ? -1 : 0;
        if (!k) return;
        ev.preventDefault();
        var next = buttons[(i + k + buttons.length) % buttons.length];
        next.focus(); next.click();
      });
      buttons.push(wrap.appendChild(b));
    });
    box.appendChild(wrap);
    return function (i) {
      buttons.forEach(function (b, j) { b.setAttribute("aria-pressed", String(i === j)); });
    };
  }

  /* one query's row of weights over the keys, and the weighted sum when given */
  function rowView(box, toks, names) {
    var cap = box.appendChild(el("div", "aei-cap"));
    var draw = bars(box, toks), dd = null;
    return function (i, weights, output) {
      cap.textContent = "Weights of the query \u201c" + toks[i] + "\u201d over the keys";
      draw(weights);
      if (!output) return;
      /* named features: one "name: number" row each */
      if (!dd) {
        if (names) box.appendChild(el("div", "aei-cap", "Weighted sum of the values"));
        dd = readout(box, names ? names.map(function (n, k) { return ["v" + k, n]; })
          : [["output", "weighted sum of values"]]);
      }
      if (!names) dd.output.textContent = vec(output);
      else output.forEach(function (x, k) { dd["v" + k].textContent = fmt(x); });
    };
  }

  var RENDER = {
    attention_explorer: function (box, d) {
      box.appendChild(el("div", null, "Query (click, hover or Tab + Enter):"));
      var mark = tokens(box, d.tokens, select);
      var show = rowView(box, d.tokens, d.value_labels);
      function select(i) {
        mark(i); show(i, d.weights[i], d.outputs ? d.outputs[i] : null);
        state(box, "query", i);
      }
      select(d.query);
    },
    softmax_temperature: function (box, d) {
      slider(box, d.parameter, d.temperatures.length, select, d.start);
      var dd = readout(box, [["parameter", "value of " + d.parameter]]);
      var draw = bars(box, d.labels);
      var dd2 = readout(box, [["max", "largest weight"]]);
      function select(t) {
        dd.parameter.textContent = fmt(d.temperatures[t]);
        draw(d.weights[t]);
        dd2.max.textContent = fmt(Math.max.apply(null, d.weights[t]));
        state(box, "step", t);
      }
      select(d.start);
    },
    online_softmax_steps: function (box, d) {
      var n = d.scores.length, keys = [];
      slider(box, "key blocks read", d.steps.length, select, 0);
      var strip = box.appendChild(el("div", "aei-strip"));
      strip.setAttribute("aria-hidden", "true");
      for (var j = 0; j < n; j++) {
        keys.push(strip.appendChild(el("span", "aei-key")));
        keys[j].title = "key " + (j + 1) + ": score " + fmt(d.scores[j]);
      }
      box.appendChild(el("div", "aei-legend", "Keys: blue read before, vermillion this block"));
      var dd = readout(box, [["keys", "keys read"], ["max", "running maximum m"],
        ["sum", "running sum s"], ["rescale", "rescale exp(m_old \u2212 m)"],
        ["output", "running output"], ["exact", "exact output"],
        ["error", "largest difference"]]);
      dd.exact.textContent = vec(d.exact);
      function select(b) {
        var s = d.steps[b];
        keys.forEach(function (k, j) {
          var now = j >= s.start && j < s.stop;
          k.className = "aei-key" + (now ? " now" : j < s.stop ? " read" : "");
        });
        dd.keys.textContent = s.stop + " of " + n;
        dd.max.textContent = fmt(s.max);
        dd.sum.textContent = fmt(s.sum);
        dd.rescale.textContent = s.rescale === null ? "\u2014 (first block)" : fmt(s.rescale);
        dd.output.textContent = vec(s.output);
        dd.error.textContent = s.error === 0 ? "< 1e-12" : s.error.toExponential(1);
        state(box, "step", b);
      }
      select(0);
    },
    head_explorer: function (box, d) {
      var L = d.tokens.length, layer = 0, head = 0, query = 0, cells = [];
      var nl = d.weights.length, nh = d.weights[0].length;
      var info = readout(box, [["head", "showing"]]);
      /* a slider only where there is a choice */
      if (nl > 1) slider(box, "layer", nl, function (v) { layer = v; update(); }, 0);
      if (nh > 1) slider(box, "head", nh, function (v) { head = v; update(); }, 0);
      var grid = box.appendChild(el("div", "aei-grid"));
      grid.style.gridTemplateColumns = "repeat(" + L + ",1fr)";
      grid.setAttribute("aria-hidden", "true");
      for (var c = 0; c < L * L; c++) {
        cells.push(grid.appendChild(el("span", "aei-cell")));
        cells[c].addEventListener("click", pick.bind(null, Math.floor(c / L)));
      }
      var mark = tokens(box, d.tokens, pick);
      var show = rowView(box, d.tokens);
      function pick(i) { query = i; update(); }
      function update() {
        var w = d.weights[layer][head];
        cells.forEach(function (cell, c) {
          var i = Math.floor(c / L), v = w[i][c % L];
          cell.style.opacity = String(0.08 + 0.92 * v);
          cell.title = d.tokens[i] + " \u2192 " + d.tokens[c % L] + ": " + fmt(v);
          cell.classList.toggle("sel", i === query);
        });
        mark(query);
        show(query, w[query], null);
        info.head.textContent = "layer " + ((d.first_layer || 1) + layer) + " of " +
          (d.total_layers || nl) +
          ", head " + (head + 1) + " of " + nh;
        state(box, "layer", layer);
        state(box, "head", head);
        state(box, "query", query);
      }
      update();
    }
  };

  function renderAll() {
    if (!document.getElementById("aei-style")) {
      var style = el("style", null, CSS);
      style.id = "aei-style";
      document.head.appendChild(style);
    }
    var boxes = document.querySelectorAll("div[data-interactive]:not([data-rendered])");
    Array.prototype.forEach.call(boxes, function (box) {
      var name = box.getAttribute("data-interactive");
      var data = box.querySelector("script[type='application/json']");
      if (!RENDER[name] || !data) return;
      box.setAttribute("data-rendered", "true");
      var payload = JSON.parse(data.textContent);
      var old = box.querySelectorAll(".aei-fallback");
      for (var k = 0; k < old.length; k++) old[k].remove();
      var view = box.appendChild(el("div", "aei-view"));
      RENDER[name](view, payload);
    });
  }

  window.AttentionInteractive = {version: VERSION, renderAll: renderAll};
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", renderAll);
  renderAll();
})();
"""
