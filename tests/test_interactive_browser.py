"""The interactive figures in headless Chromium, offline: each figure's HTML output (renderer
inline, as a notebook cell stores it) on one page opened from disk with every non-file request
blocked. Clicks, hovers, key presses and slider moves change what each figure shows; the
numbers read back from the page must be the ones Python computed (the figure's payload,
itself checked against NumPy in tests/test_interactive.py). No console error, nothing fetched,
nothing wider than a 390 px phone; a screenshot of each figure at 390 px is kept in
``_build/screenshots/interactive/``.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from attention_src import interactive as I
from tests.toc import ROOT

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
KEEP = ROOT / "_build" / "screenshots" / "interactive"
TOKENS = ["the", "cat", "<b>", "sat", "on", "the", "mat"]


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
    }


def _fmt(xs):
    return [f"{x:.3f}" for x in xs]


def _vec(xs):
    return "[" + ", ".join(_fmt(xs)) + "]"


@pytest.fixture(scope="module")
def page_and_figures(tmp_path_factory):
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing (apt-get install chromium)")
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    figs = _figures()
    folder = tmp_path_factory.mktemp("interactive")
    html = ("<!doctype html><html lang=en><head><meta charset=utf-8><title>figures</title>"
            "<meta name=viewport content='width=device-width, initial-scale=1'></head><body>"
            + "".join(f"<section>{f.to_html()}</section>" for f in figs.values())
            + "</body></html>")
    path = folder / "figures.html"
    path.write_text(html, encoding="utf-8")
    errors, blocked = [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 390, "height": 844})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))

        def gate(route):
            if route.request.url.startswith(("file://", "data:", "blob:")):
                route.continue_()
            else:
                blocked.append(route.request.url)
                route.abort()

        page.route("**/*", gate)
        page.goto(path.as_uri(), wait_until="load")
        yield page, figs, folder
        assert not errors, f"console errors: {errors}"
        assert not blocked, f"requests that would leave the machine: {blocked}"
        browser.close()


def _box(page, name):
    return page.locator(f"div[data-interactive={name}]")


def _bars(box):
    return box.locator(".aei-bar .aei-num").all_inner_texts()


def _field(box, name):
    return box.locator(f"[data-field={name}]").inner_text()


def test_each_figure_renders_once_and_fits_a_phone(page_and_figures):
    page, figs, _ = page_and_figures
    for name in figs:
        box = _box(page, name)
        assert box.get_attribute("data-rendered") == "true"
        assert box.locator(".aei-view").count() == 1
        assert box.locator(".aei-fallback").count() == 0
    # loading the renderer again (the site's copy beside the inline one) draws nothing twice
    page.add_script_tag(content=I.RENDERER_JS)
    page.add_script_tag(content=I.RENDERER_JS)
    assert page.locator(".aei-view").count() == len(figs)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390


def test_explorer_click_hover_and_keys_show_the_computed_rows(page_and_figures):
    page, figs, _ = page_and_figures
    p = figs["attention_explorer"].payload
    box = _box(page, "attention_explorer")
    buttons = box.locator("button.aei-tok")
    assert buttons.all_inner_texts() == TOKENS  # "<b>" stays text
    assert box.locator("b").count() == 0
    assert box.locator(".aei-label").all_inner_texts() == TOKENS

    def check(i):
        assert box.get_attribute("data-query") == str(i)
        assert _bars(box) == _fmt(p["weights"][i])
        assert _field(box, "output") == _vec(p["outputs"][i])
        assert buttons.nth(i).get_attribute("aria-pressed") == "true"

    check(p["query"])
    for i in range(len(TOKENS)):
        buttons.nth(i).click()
        check(i)
    buttons.nth(3).hover()
    check(3)
    buttons.nth(3).focus()
    page.keyboard.press("ArrowRight")
    check(4)
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    check(5)
    page.keyboard.press("ArrowLeft")
    check(4)


def test_temperature_slider_shows_the_computed_weights(page_and_figures):
    page, figs, _ = page_and_figures
    p = figs["softmax_temperature"].payload
    box = _box(page, "softmax_temperature")
    slider = box.locator("input[type=range]")
    assert box.locator(".aei-label").all_inner_texts() == p["labels"]
    assert box.get_attribute("data-step") == str(p["start"])
    slider.focus()
    page.keyboard.press("Home")
    for t in range(len(p["temperatures"])):
        if t:
            page.keyboard.press("ArrowRight")
        assert box.get_attribute("data-step") == str(t)
        assert _field(box, "parameter") == f"{p['temperatures'][t]:.3f}"
        assert _bars(box) == _fmt(p["weights"][t])
        assert _field(box, "max") == f"{max(p['weights'][t]):.3f}"


def test_online_softmax_slider_steps_to_the_exact_output(page_and_figures):
    page, figs, _ = page_and_figures
    p = figs["online_softmax_steps"].payload
    box = _box(page, "online_softmax_steps")
    assert _field(box, "exact") == _vec(p["exact"])
    box.locator("input[type=range]").focus()
    n = len(p["scores"])
    for b, step in enumerate(p["steps"]):
        if b:
            page.keyboard.press("ArrowRight")
        assert box.get_attribute("data-step") == str(b)
        assert _field(box, "keys") == f"{step['stop']} of {n}"
        assert _field(box, "max") == f"{step['max']:.3f}"
        assert _field(box, "sum") == f"{step['sum']:.3f}"
        rescale = _field(box, "rescale")
        assert (rescale.startswith("\u2014") if step["rescale"] is None
                else rescale == f"{step['rescale']:.3f}")
        assert _field(box, "output") == _vec(step["output"])
        error = _field(box, "error")
        assert (error == "< 1e-12" if step["error"] == 0 else float(error) == step["error"])
        classes = box.locator(".aei-key").evaluate_all("ks => ks.map(k => k.className)")
        assert sum("now" in c for c in classes) == step["stop"] - step["start"]
        assert sum("read" in c for c in classes) == step["start"]
    assert _field(box, "output") == _field(box, "exact")


def test_head_explorer_sliders_and_tokens_show_the_computed_rows(page_and_figures):
    page, figs, _ = page_and_figures
    w = figs["head_explorer"].payload["weights"]
    box = _box(page, "head_explorer")
    layer, head = box.locator("input[type=range]").all()
    buttons = box.locator("button.aei-tok")
    layer.focus()
    page.keyboard.press("ArrowRight")
    head.focus()
    page.keyboard.press("End")
    buttons.nth(2).click()
    assert (box.get_attribute("data-layer"), box.get_attribute("data-head")) == ("1", "2")
    assert _field(box, "head") == "layer 2 of 2, head 3 of 3"
    assert _bars(box) == _fmt(w[1][2][2])
    page.keyboard.press("ArrowLeft")  # focus is on the token: the query moves
    assert _bars(box) == _fmt(w[1][2][1])
    box.locator(".aei-cell").nth(5 * 4 + 1).click()  # a cell of row 4 picks query 4
    assert box.get_attribute("data-query") == "4"
    assert _bars(box) == _fmt(w[1][2][4])
    head.focus()
    page.keyboard.press("Home")
    assert _bars(box) == _fmt(w[1][0][4])


def test_screenshots_at_phone_width(page_and_figures):
    page, figs, folder = page_and_figures
    KEEP.mkdir(parents=True, exist_ok=True)
    for name in figs:
        shot = folder / f"{name}.png"
        _box(page, name).screenshot(path=str(shot))
        assert shot.stat().st_size > 2_000
        shutil.copyfile(shot, KEEP / shot.name)
