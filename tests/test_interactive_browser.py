"""The interactive figures in headless Chromium, offline: each figure's HTML output (renderer
inline, as a notebook cell stores it) on one page opened from disk with every non-file request
blocked. Clicks, hovers, key presses and slider moves change what each figure shows; the
numbers read back from the page must be the ones Python computed (the figure's payload,
itself checked against NumPy in tests/test_interactive.py). No console error, nothing fetched,
nothing wider than a 390 px phone; a screenshot of each figure at 390 px is kept in
``_build/screenshots/interactive/``.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from attention_src import interactive as I
from tests import interactive_checks as C
from tests.browser import open_offline
from tests.toc import ROOT

pytestmark = pytest.mark.browser

KEEP = ROOT / "_build" / "screenshots" / "interactive"
TOKENS = ["the", "cat", "<b>", "sat", "on", "the", "mat"]
LONG = [f"word{i}" for i in range(16)]  # 16 tokens: must still fit a phone's screen
#: The tallest a figure may be at 390 px wide (an iPhone 14 shows about 660 px of page
#: below the browser's bars).
MAX_HEIGHT = 660


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _figures():
    rng = np.random.default_rng(22)
    L = len(TOKENS)
    return {
        "attention_explorer": I.attention_explorer(
            TOKENS, _softmax(rng.normal(size=(L, L)) * 2), rng.normal(size=(L, 3))),
        "softmax_temperature": I.softmax_temperature(
            rng.normal(size=5) * 2, [0.25, 0.5, 1.0, 2.0, 4.0, 8.0], parameter="sqrt(d_k)"),
        "online_softmax_steps": I.online_softmax_steps(
            rng.normal(size=10) * 3, rng.normal(size=(10, 2)), 3),
        "head_explorer": I.head_explorer(TOKENS[:5], _softmax(rng.normal(size=(2, 3, 5, 5)) * 2)),
        # one layer (chapter 5's model: 1 layer x 2 heads), 16 tokens: no layer slider
        "head_explorer_one_layer": I.head_explorer(
            LONG, _softmax(rng.normal(size=(1, 2, 16, 16)) * 2)),
        # the editor's case: 2 layers x 4 heads over 16 tokens (823 px tall before)
        "head_explorer_long": I.head_explorer(
            LONG, _softmax(rng.normal(size=(2, 4, 16, 16)) * 2)),
        "head_explorer_one_head": I.head_explorer(
            TOKENS[:4], _softmax(rng.normal(size=(2, 1, 4, 4)) * 2)),
        "attention_explorer_labelled": I.attention_explorer(
            LONG, _softmax(rng.normal(size=(16, 16)) * 2), rng.normal(size=(16, 3)),
            value_labels=["action", "place", "<i>thing</i>"]),
    }


@pytest.fixture(scope="module")
def browser(chromium_session):
    return chromium_session


@pytest.fixture(scope="module")
def page_and_figures(browser, tmp_path_factory):
    figs = _figures()
    folder = tmp_path_factory.mktemp("interactive")
    html = ("<!doctype html><html lang=en><head><meta charset=utf-8><title>figures</title>"
            "<meta name=viewport content='width=device-width, initial-scale=1'></head><body>"
            + "".join(f"<section id={key}>{f.to_html()}</section>"
                      for key, f in figs.items())
            + "</body></html>")
    path = folder / "figures.html"
    path.write_text(html, encoding="utf-8")
    errors: list[str] = []
    page, blocked = open_offline(browser, path.as_uri(), errors,
                                 viewport={"width": 390, "height": 844})
    yield page, figs, folder
    page.close()
    assert not errors, f"console errors: {errors}"
    assert not blocked, f"requests that would leave the machine: {blocked}"


def _box(page, key):
    return page.locator(f"#{key} > div[data-interactive]")


def test_each_figure_renders_once_and_fits_a_phone(page_and_figures):
    page, figs, _ = page_and_figures
    for key in figs:
        C.check_rendered(_box(page, key))
    # loading the renderer again (the site's copy beside the inline one) draws nothing twice
    page.add_script_tag(content=I.RENDERER_JS)
    page.add_script_tag(content=I.RENDERER_JS)
    assert page.locator(".aei-view").count() == len(figs)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390


def test_payload_on_the_page_is_the_one_python_computed(page_and_figures):
    page, figs, _ = page_and_figures
    for key, fig in figs.items():
        assert C.payload_of(_box(page, key)) == fig.payload


@pytest.mark.parametrize("key", sorted(_figures()))
def test_clicks_keys_and_sliders_show_the_computed_values(page_and_figures, key):
    page, figs, _ = page_and_figures
    C.CHECKS[figs[key].name](page, _box(page, key), figs[key].payload)


def test_every_figure_fits_a_phone_screen(page_and_figures):
    """16 tokens included: the bars go in two columns, and no figure is taller than a
    phone's screen."""
    page, figs, _ = page_and_figures
    heights = {key: _box(page, key).bounding_box()["height"] for key in figs}
    print(heights)
    assert max(heights.values()) <= MAX_HEIGHT, heights


def test_one_layer_has_no_layer_slider(page_and_figures):
    page, _, _ = page_and_figures
    box = _box(page, "head_explorer_one_layer")
    assert box.locator(".aei-row label").all_inner_texts() == ["head"]
    assert C.field(box, "head") == "layer 1 of 1, head 1 of 2"


def test_online_softmax_key_colours_have_a_legend(page_and_figures):
    page, _, _ = page_and_figures
    legend = _box(page, "online_softmax_steps").locator(".aei-legend").inner_text()
    assert "blue" in legend and "vermillion" in legend


def test_explorer_tokens_stay_text(page_and_figures):
    page, _, _ = page_and_figures
    box = _box(page, "attention_explorer")
    assert box.locator("button.aei-tok").all_inner_texts() == TOKENS  # "<b>" stays text
    assert box.locator("b").count() == 0


def test_screenshots_at_phone_width(page_and_figures):
    page, figs, folder = page_and_figures
    KEEP.mkdir(parents=True, exist_ok=True)
    for key in figs:
        shot = folder / f"{key}.png"
        _box(page, key).screenshot(path=str(shot))
        assert shot.stat().st_size > 2_000
        shutil.copyfile(shot, KEEP / shot.name)


def test_without_a_script_each_figure_shows_its_static_image(browser, tmp_path):
    """What an untrusted notebook shows (HTML without scripts): the static image and a line
    saying the figure is interactive elsewhere; the renderer, once loaded, replaces both."""
    figs = _figures()
    path = tmp_path / "static.html"
    path.write_text("<!doctype html><html lang=en><head><meta charset=utf-8><title>static"
                    "</title></head><body>"
                    + "".join(f.to_html(include_script=False) for f in figs.values())
                    + "</body></html>", encoding="utf-8")
    errors: list[str] = []
    page, blocked = open_offline(browser, path.as_uri(), errors,
                                 viewport={"width": 390, "height": 844})
    images = page.locator(".aei-fallback img.aei-static")
    assert images.count() == len(figs)
    sizes = images.evaluate_all("is => is.map(i => [i.naturalWidth, i.clientWidth])")
    assert all(natural > 0 and 0 < shown <= 390 for natural, shown in sizes), sizes
    assert page.locator("[data-rendered]").count() == 0
    page.add_script_tag(content=I.RENDERER_JS)
    assert page.locator(".aei-fallback").count() == 0
    assert page.locator(".aei-view").count() == len(figs)
    page.close()
    assert not errors and not blocked
