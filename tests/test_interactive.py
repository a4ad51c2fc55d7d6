"""attention_src.interactive: each figure's data against an independent NumPy computation,
its HTML (escaping, structure), its static fallback, bad input and determinism. The browser
side is tests/test_interactive_browser.py."""

from __future__ import annotations

import base64
import json
import math
from html.parser import HTMLParser

import numpy as np
import pytest
import torch

from attention_src import interactive as I
from attention_src.plotting import unlabelled_axes
from tests.toc import ROOT

TOKENS = ["the", "cat", "<b>", "sat", "on", "mat"]


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _weights(seed: int, *shape: int) -> np.ndarray:
    return _softmax(np.random.default_rng(seed).normal(size=shape) * 2)


class _Parts(HTMLParser):
    """The outer div's attributes, the JSON script's text and the renderer script's text."""

    def __init__(self):
        super().__init__()
        self.divs, self.scripts, self.images, self._attrs = [], [], [], None

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs))
        if tag == "div":
            self.divs.append(dict(attrs))
        if tag == "script":
            self._attrs = dict(attrs)

    def handle_data(self, data):
        if self._attrs is not None:
            self.scripts.append((self._attrs, data))

    def handle_endtag(self, tag):
        if tag == "script":
            self._attrs = None


def _parts(html_text: str) -> _Parts:
    p = _Parts()
    p.feed(html_text)
    return p


def _close(got, want, digits=I.DIGITS):
    """Equal up to the rounding to ``digits`` decimals of the shown numbers."""
    np.testing.assert_allclose(np.asarray(got, dtype=float), want, rtol=0,
                               atol=0.5 * 10 ** -digits + 1e-12)


# ------------------------------------------------------------------------ attention_explorer


def test_explorer_payload_matches_inputs_and_weighted_sums():
    w = _weights(0, 6, 6)
    v = np.random.default_rng(1).normal(size=(6, 3))
    fig = I.attention_explorer(TOKENS, torch.from_numpy(w), v, query=2)
    p = fig.payload
    assert p["tokens"] == TOKENS and p["query"] == 2
    _close(p["weights"], w)
    _close(p["outputs"], w @ v)
    # rounded as shown: three decimals, no -0.0
    flat = np.asarray(p["outputs"]).ravel().tolist() + np.asarray(p["weights"]).ravel().tolist()
    assert all(round(x, 3) == x for x in flat)
    assert all(math.copysign(1, x) == 1 for x in flat if x == 0)
    assert json.loads(fig.json()) == p


def test_explorer_without_values_has_no_outputs():
    fig = I.attention_explorer(TOKENS[:2], [[1.0, 0.0], [0.25, 0.75]])
    assert fig.payload["outputs"] is None
    assert fig.payload["weights"] == [[1.0, 0.0], [0.25, 0.75]]


def test_explorer_value_labels_name_the_value_features():
    w, v = _weights(20, 6, 6), np.random.default_rng(21).normal(size=(6, 2))
    fig = I.attention_explorer(TOKENS, w, v, value_labels=("action", "place"))
    assert fig.payload["value_labels"] == ["action", "place"]
    _close(fig.payload["outputs"], w @ v)
    assert I.attention_explorer(TOKENS, w, v).payload["value_labels"] is None
    assert '"value_labels":["action","place"]' in fig.json()


@pytest.mark.parametrize("labels, values, error, match", [
    (["action"], np.ones((6, 2)), ValueError, r"d_v = 2\), got 1 labels"),
    (["a", "b", "c"], np.ones((6, 2)), ValueError, "got 3 labels"),
    (["a", "b"], None, ValueError, "no values"),
    ("ab", np.ones((6, 2)), TypeError, "sequence of str"),
    (["a", 2], np.ones((6, 2)), TypeError, "sequence of str"),
    (3, np.ones((6, 2)), TypeError, "sequence of str"),
])
def test_explorer_rejects_bad_value_labels(labels, values, error, match):
    with pytest.raises(error, match=match):
        I.attention_explorer(TOKENS, _weights(22, 6, 6), values, value_labels=labels)


def test_rounding_writes_no_negative_zero():
    fig = I.attention_explorer(["a", "b"], np.eye(2), [[-1e-9, 0.0], [2.0, -0.0004]])
    assert fig.payload["outputs"] == [[0.0, 0.0], [2.0, 0.0]]
    assert "-0.0" not in fig.json()


def test_html_structure_and_escaping():
    fig = I.attention_explorer(TOKENS + ["</script>", "a&b"], _weights(2, 8, 8),
                               alt='Weights of "each" token <over> the sentence')
    text = fig.to_html()
    assert "<b>" not in text and "</script><" not in text.replace(
        "</script><script data-interactive-renderer>", "").replace("</script></div>", "")
    parts = _parts(text)
    outer = parts.divs[0]
    assert outer["data-interactive"] == "attention_explorer"
    assert outer["role"] == "figure"
    assert outer["aria-label"] == 'Weights of "each" token <over> the sentence'
    (json_attrs, json_text), (js_attrs, js_text) = parts.scripts
    assert json_attrs == {"type": "application/json"}
    assert json.loads(json_text)["tokens"] == TOKENS + ["</script>", "a&b"]
    assert "data-interactive-renderer" in js_attrs and js_text == I.RENDERER_JS
    assert len(_parts(fig.to_html(include_script=False)).scripts) == 1


def test_html_fallback_is_the_static_image_with_the_alt_text():
    """Where no script runs (an untrusted notebook), the HTML still shows the figure: the
    static PNG as a data URI inside the fallback the renderer removes."""
    fig = I.softmax_temperature([1.0, 2.0, -1.0], [0.5, 1.0, 2.0],
                                alt='Interactive figure: "three" <scores>')
    parts = _parts(fig.to_html())
    assert any("aei-fallback" in d.get("class", "") for d in parts.divs)
    (img,) = parts.images
    prefix = "data:image/png;base64,"
    assert img["src"].startswith(prefix)
    assert base64.b64decode(img["src"][len(prefix):]) == fig.png()[0]
    assert img["alt"] == 'Interactive figure: "three" <scores>'
    assert int(img["width"]) == fig.png()[1]["width"]


def test_mimebundle_has_html_png_and_text():
    fig = I.attention_explorer(TOKENS, _weights(3, 6, 6))
    bundle, meta = fig._repr_mimebundle_()
    assert set(bundle) == {"text/html", "image/png", "text/plain"}
    assert bundle["image/png"][:8] == b"\x89PNG\r\n\x1a\n"
    assert meta["image/png"]["width"] > 100 and meta["image/png"]["height"] > 100
    assert bundle["text/plain"] == repr(fig) == f"<attention_explorer: {fig.alt}>"
    assert fig.alt.startswith("Interactive figure:")


@pytest.mark.parametrize("kwargs, error, match", [
    ({"tokens": "the cat"}, TypeError, "sequence of str"),
    ({"tokens": ["a", 1]}, TypeError, "all be str"),
    ({"tokens": [str(i) for i in range(33)]}, ValueError, "1 to 32"),
    ({"weights": np.full((6, 5), 0.2)}, ValueError, r"\(L, L\) = \(6, 6\)"),
    ({"weights": np.full((6,), 1 / 6)}, ValueError, "2 dimensions"),
    ({"weights": np.full((6, 6), np.nan)}, ValueError, "finite"),
    ({"weights": np.full((6, 6), 0.2)}, ValueError, "sum to 1"),
    ({"weights": np.eye(6) * 2 - np.roll(np.eye(6), 1, axis=1)}, ValueError, r"\[0, 1\]"),
    ({"weights": "weights"}, TypeError, "tensor, array or list"),
    ({"weights": [["a"] * 6] * 6}, TypeError, "real numbers"),
    ({"weights": torch.ones(6, 6, dtype=torch.bool)}, TypeError, "real numbers"),
    ({"values": np.ones((5, 2))}, ValueError, "values must have shape"),
    ({"values": np.ones((6, 9))}, ValueError, "d_v <= 8"),
    ({"values": np.full((6, 2), np.inf)}, ValueError, "values must be finite"),
    ({"query": 6}, ValueError, "query must be an int"),
    ({"query": True}, ValueError, "query must be an int"),
    ({"weights": np.zeros((6, 0))}, ValueError, "empty"),
])
def test_explorer_rejects_bad_input(kwargs, error, match):
    args = {"tokens": TOKENS, "weights": _weights(4, 6, 6)} | kwargs
    with pytest.raises(error, match=match):
        I.attention_explorer(**args)


# ------------------------------------------------------------------------ softmax_temperature


def test_temperature_weights_are_softmax_of_scaled_scores():
    s = np.array([2.0, -1.0, 0.5, 3.0])
    temps = [0.25, 0.5, 1.0, 2.0, 8.0]
    fig = I.softmax_temperature(torch.from_numpy(s), temps, parameter="sqrt(d_k)")
    p = fig.payload
    assert p["labels"] == ["key 1", "key 2", "key 3", "key 4"]
    assert p["temperatures"] == temps and p["parameter"] == "sqrt(d_k)"
    assert p["start"] == 2  # the divisor closest to 1
    _close(p["weights"], np.stack([_softmax(s / t) for t in temps]))
    # a large divisor flattens the weights, a small one sharpens them
    assert max(p["weights"][-1]) < max(p["weights"][2]) < max(p["weights"][0])


def test_temperature_labels_and_start():
    fig = I.softmax_temperature([1.0, 0.0], [1.0, 2.0], labels=["x", "y"], start=1)
    assert fig.payload["labels"] == ["x", "y"] and fig.payload["start"] == 1


@pytest.mark.parametrize("kwargs, error, match", [
    ({"temperatures": [1.0, 0.0]}, ValueError, "positive"),
    ({"temperatures": np.ones(102)}, ValueError, "1 to 101"),
    ({"temperatures": [1.0, np.nan]}, ValueError, "finite"),
    ({"scores": [[1.0, 2.0]]}, ValueError, "1 dimensions"),
    ({"labels": ["a", "b"]}, ValueError, "name the 3 scores"),
    ({"parameter": ""}, TypeError, "parameter"),
    ({"start": 5}, ValueError, "start must be"),
])
def test_temperature_rejects_bad_input(kwargs, error, match):
    args = {"scores": [1.0, 2.0, 3.0], "temperatures": [0.5, 1.0, 2.0]} | kwargs
    with pytest.raises(error, match=match):
        I.softmax_temperature(**args)


# ----------------------------------------------------------------------- online_softmax_steps


def test_online_steps_follow_the_streaming_statistics():
    rng = np.random.default_rng(5)
    x, v, block = rng.normal(size=10) * 3, rng.normal(size=(10, 2)), 3
    p = I.online_softmax_steps(x, v, block).payload
    exact = _softmax(x) @ v
    _close(p["exact"], exact)
    _close(p["scores"], x)
    assert [(s["start"], s["stop"]) for s in p["steps"]] == [(0, 3), (3, 6), (6, 9), (9, 10)]
    m_old = None
    for step in p["steps"]:
        seen = x[:step["stop"]]
        m = seen.max()
        _close(step["max"], m)
        _close(step["sum"], np.exp(seen - m).sum())
        _close(step["output"], _softmax(seen) @ v[:step["stop"]])
        err = np.abs(_softmax(seen) @ v[:step["stop"]] - exact).max()
        if step["stop"] < 10:
            assert step["error"] == pytest.approx(err, rel=0.05)
        if m_old is None:
            assert step["rescale"] is None
        else:
            _close(step["rescale"], math.exp(m_old - m))
        m_old = m
    assert p["steps"][-1]["error"] == 0.0  # below 1e-12: the exact output
    assert p["steps"][-1]["output"] == p["exact"]


def test_online_one_block_is_one_step():
    p = I.online_softmax_steps([1.0, 2.0], [[1.0], [0.0]], 5).payload
    assert len(p["steps"]) == 1 and p["steps"][0]["stop"] == 2


@pytest.mark.parametrize("kwargs, error, match", [
    ({"block": 0}, ValueError, "positive"),
    ({"block": True}, TypeError, "block must be an int"),
    ({"block": 2.0}, TypeError, "block must be an int"),
    ({"values": np.ones((3, 2))}, ValueError, "n <= 32"),
    ({"values": np.ones((4, 9))}, ValueError, "d_v <= 8"),
    ({"scores": np.ones(33), "values": np.ones((33, 1))}, ValueError, "n <= 32"),
    ({"scores": [1.0, np.inf, 0.0, 0.0]}, ValueError, "finite"),
])
def test_online_rejects_bad_input(kwargs, error, match):
    args = {"scores": [1.0, 2.0, 0.0, -1.0], "values": np.ones((4, 2)), "block": 2} | kwargs
    with pytest.raises(error, match=match):
        I.online_softmax_steps(**args)


# ------------------------------------------------------------------------------ head_explorer


def test_head_explorer_payload():
    w = _weights(6, 2, 3, 4, 4)
    fig = I.head_explorer(TOKENS[:4], w)
    assert fig.payload["tokens"] == TOKENS[:4]
    _close(fig.payload["weights"], w)
    assert "2 layers with 3 heads" in fig.alt


def test_head_explorer_static_panels_two_per_row_with_short_titles_and_sparse_ticks():
    """2 layers x 4 heads over 16 tokens: 4 rows of 2 panels titled "L1 H1" ..., every 4th
    position labelled with its index; the figure grows with its rows."""
    tokens = [f"tok{i}" for i in range(16)]
    static = I.head_explorer(tokens, _weights(10, 2, 4, 16, 16)).static_figure()
    panels = [ax for ax in static.axes if ax.images]
    assert [ax.get_title() for ax in panels] == [f"L{a} H{b}" for a in (1, 2)
                                                 for b in (1, 2, 3, 4)]
    grid = {ax.get_subplotspec().get_geometry()[:2] for ax in panels}
    assert grid == {(4, 2)}
    for ax in panels:
        assert list(ax.get_xticks()) == list(ax.get_yticks()) == [0, 4, 8, 12]
    static.draw_without_rendering()
    assert [t.get_text() for t in panels[-1].get_xticklabels()] == ["0", "4", "8", "12"]
    assert static.get_figwidth() <= I.MAX_FIGURE_WIDTH + 1e-9
    small = I.head_explorer(tokens[:6], _weights(11, 1, 2, 6, 6)).static_figure()
    (ax,) = [a for a in small.axes if a.images][:1]
    assert [t.get_text() for t in ax.get_yticklabels()] == tokens[:6]  # few tokens: named
    assert static.get_figheight() > 3 * small.get_figheight()
    odd = I.head_explorer(tokens[:4], _weights(12, 1, 3, 4, 4)).static_figure()
    assert unlabelled_axes(odd) == [] and sum(bool(a.images) for a in odd.axes) == 3


def test_head_explorer_names_the_model_s_layers():
    """One layer of a six-layer model, its fourth: titled L4 H1 ..., read out "4 of 6"; a
    figure that titled it L1 contradicted the chapter's L1 heads."""
    w = _weights(13, 1, 3, 4, 4)
    fig = I.head_explorer(TOKENS[:4], w, first_layer=4, total_layers=6)
    assert (fig.payload["first_layer"], fig.payload["total_layers"]) == (4, 6)
    panels = [ax for ax in fig.static_figure().axes if ax.images]
    assert [ax.get_title() for ax in panels] == ["L4 H1", "L4 H2", "L4 H3"]
    default = I.head_explorer(TOKENS[:4], _weights(14, 2, 1, 4, 4))
    assert (default.payload["first_layer"], default.payload["total_layers"]) == (1, 2)
    assert '((d.first_layer || 1) + layer) + " of " +' in I.RENDERER_JS


@pytest.mark.parametrize("args, error, match", [
    ({"first_layer": 0}, ValueError, "first_layer counts from 1, got 0"),
    ({"first_layer": 2, "total_layers": 2}, ValueError,
     r"total_layers = 2 is less than the last layer shown, 3"),
    ({"first_layer": 1.0}, TypeError, "first_layer must be an int, got float 1.0"),
    ({"total_layers": True}, TypeError, "total_layers must be an int, got bool True"),
])
def test_head_explorer_rejects_bad_layer_numbers(args, error, match):
    with pytest.raises(error, match=match):
        I.head_explorer(TOKENS[:4], _weights(15, 2, 1, 4, 4), **args)


@pytest.mark.parametrize("weights, match", [
    (np.full((2, 2, 4, 3), 1 / 3), r"\(layers, heads, 4, 4\)"),
    (np.full((5, 4, 4, 4), 0.25), "layers \\* heads <= 16"),
    (np.full((4, 4, 4), 0.25), "4 dimensions"),
    (np.full((1, 1, 4, 4), 0.3), "sum to 1"),
])
def test_head_explorer_rejects_bad_input(weights, match):
    with pytest.raises(ValueError, match=match):
        I.head_explorer(TOKENS[:4], weights)


# ----------------------------------------------------------------------- every figure at once


def _all_figures():
    rng = np.random.default_rng(7)
    return [
        I.attention_explorer(TOKENS, _weights(8, 6, 6), rng.normal(size=(6, 2))),
        I.softmax_temperature(rng.normal(size=12), [0.1, 1.0, 3.0]),
        I.online_softmax_steps(rng.normal(size=7), rng.normal(size=(7, 3)), 2),
        I.head_explorer(TOKENS[:3], _weights(9, 2, 2, 3, 3)),
    ]


def test_static_fallbacks_have_labelled_axes_and_fit_the_page():
    for fig in _all_figures():
        static = fig.static_figure()
        assert unlabelled_axes(static) == [], fig.name
        assert static.get_figwidth() <= I.MAX_FIGURE_WIDTH + 0.8 + 1e-9
        assert fig.png()[0] is fig.png()[0]  # drawn once


def test_static_fallbacks_have_no_text_below_12_points():
    """The book's rule for every figure (``tests/test_reader_page.py`` reads the notebooks'
    sources for it; these figures are drawn in the package): a legend once had 10 pt."""
    from matplotlib.text import Text

    for fig in _all_figures():
        static = fig.static_figure()
        static.draw_without_rendering()  # makes the tick labels
        small = {(t.get_text(), t.get_fontsize()) for t in static.findobj(Text)
                 if t.get_visible() and t.get_text().strip() and t.get_fontsize() < 12}
        assert not small, (fig.name, sorted(small))


def test_output_is_deterministic():
    first, second = _all_figures(), _all_figures()
    for a, b in zip(first, second, strict=True):
        assert a._repr_mimebundle_() == b._repr_mimebundle_()


def test_figure_needs_a_known_renderer_and_an_alt_text():
    with pytest.raises(ValueError, match="no renderer"):
        I.InteractiveFigure("scatter", {}, "Interactive figure: nothing", lambda f: None, (1, 1))
    with pytest.raises(ValueError, match="alt must be"):
        I.InteractiveFigure("head_explorer", {}, "short", lambda f: None, (1, 1))


def test_renderer_draws_a_slider_only_where_there_is_a_choice_and_keys_the_colours():
    """The browser tests check these on a page; here, the text that does it."""
    js = I.RENDERER_JS
    assert 'if (nl > 1) slider(box, "layer"' in js and 'if (nh > 1) slider(box, "head"' in js
    assert '"aei-legend", "Keys: blue read before, vermillion this block"' in js
    assert "if (n > 12)" in js and ".aei-two{display:grid" in js


def test_renderer_is_small_offline_and_written_as_is(tmp_path):
    js = I.RENDERER_JS
    assert len(js.encode()) < 12_000
    for word in ("http:", "https:", "fetch(", "XMLHttpRequest", "import(", "innerHTML", "eval("):
        assert word not in js, word
    for name in I._NAMES:
        assert f"{name}: function" in js
    assert not (ROOT / "_static" / "interactive.js").exists(), (
        "the site writes the renderer at build time; a copy in _static would be loaded on "
        "every page")
    out = I.write_site_script(tmp_path / "interactive.js")
    assert out.read_text(encoding="utf-8") == js
