"""What each interactive figure must do in a browser, checked against its own payload.

A figure's payload is the JSON its notebook cell wrote (the numbers Python computed, rounded as
shown). Each ``check_<name>(page, box, payload)`` clicks, hovers, presses keys or moves sliders
in the figure's ``<div data-interactive=name>`` (``box``, a playwright locator) and compares
every number the figure then shows with the payload. The same checks run on a test page
(``tests/test_interactive_browser.py``) and on the built chapter pages
(``tests/test_interactive_pages.py``).
"""

from __future__ import annotations

import json


def fmt(xs) -> list[str]:
    return [f"{x:.3f}" for x in xs]


def vec(xs) -> str:
    return "[" + ", ".join(fmt(xs)) + "]"


def bars(box) -> list[str]:
    return box.locator(".aei-bar .aei-num").all_inner_texts()


def field(box, name: str) -> str:
    return box.locator(f"[data-field={name}]").inner_text()


def payload_of(box) -> dict:
    """The JSON the cell wrote into the figure's ``div``."""
    return json.loads(box.locator("script[type='application/json']").text_content())


def check_rendered(box) -> None:
    """Drawn once, by the renderer, with its fallback text gone."""
    assert box.get_attribute("data-rendered") == "true", "the figure was not drawn"
    assert box.locator(".aei-view").count() == 1
    assert box.locator(".aei-fallback").count() == 0


def check_attention_explorer(page, box, p: dict) -> None:
    tokens = p["tokens"]
    buttons = box.locator("button.aei-tok")
    assert buttons.all_inner_texts() == tokens  # tokens stay text, never markup
    assert box.locator(".aei-label").all_inner_texts() == tokens

    def check(i):
        assert box.get_attribute("data-query") == str(i)
        assert bars(box) == fmt(p["weights"][i])
        names = p.get("value_labels")
        if names:  # one "name: number" row per value feature
            assert [field(box, f"v{k}") for k in range(len(names))] == fmt(p["outputs"][i])
        elif p["outputs"] is not None:
            assert field(box, "output") == vec(p["outputs"][i])
        assert buttons.nth(i).get_attribute("aria-pressed") == "true"

    check(p["query"])
    if p.get("value_labels"):
        assert box.locator("dt").all_inner_texts() == p["value_labels"]  # text, not markup
    for i in range(len(tokens)):
        buttons.nth(i).click()
        check(i)
    n = len(tokens)
    if n < 3:
        return
    buttons.nth(1).hover()
    check(1)
    buttons.nth(1).focus()
    page.keyboard.press("ArrowRight")
    check(2)
    page.keyboard.press("ArrowLeft")
    check(1)
    if n >= 4:
        page.keyboard.press("Tab")
        page.keyboard.press("Enter")
        check(2)


def check_softmax_temperature(page, box, p: dict) -> None:
    slider = box.locator("input[type=range]")
    assert box.locator(".aei-label").all_inner_texts() == p["labels"]
    assert box.get_attribute("data-step") == str(p["start"])
    slider.focus()
    page.keyboard.press("Home")
    for t in range(len(p["temperatures"])):
        if t:
            page.keyboard.press("ArrowRight")
        assert box.get_attribute("data-step") == str(t)
        assert field(box, "parameter") == f"{p['temperatures'][t]:.3f}"
        assert bars(box) == fmt(p["weights"][t])
        assert field(box, "max") == f"{max(p['weights'][t]):.3f}"


def check_online_softmax_steps(page, box, p: dict) -> None:
    legend = box.locator(".aei-legend").inner_text()  # what the key cells' colours mean
    assert "blue" in legend and "vermillion" in legend
    assert field(box, "exact") == vec(p["exact"])
    box.locator("input[type=range]").focus()
    page.keyboard.press("Home")
    n = len(p["scores"])
    for b, step in enumerate(p["steps"]):
        if b:
            page.keyboard.press("ArrowRight")
        assert box.get_attribute("data-step") == str(b)
        assert field(box, "keys") == f"{step['stop']} of {n}"
        assert field(box, "max") == f"{step['max']:.3f}"
        assert field(box, "sum") == f"{step['sum']:.3f}"
        rescale = field(box, "rescale")
        assert (rescale.startswith("\u2014") if step["rescale"] is None
                else rescale == f"{step['rescale']:.3f}")
        assert field(box, "output") == vec(step["output"])
        error = field(box, "error")
        assert (error == "< 1e-12" if step["error"] == 0 else float(error) == step["error"])
        classes = box.locator(".aei-key").evaluate_all("ks => ks.map(k => k.className)")
        assert sum("now" in c for c in classes) == step["stop"] - step["start"]
        assert sum("read" in c for c in classes) == step["start"]
    assert field(box, "output") == field(box, "exact")


def check_head_explorer(page, box, p: dict) -> None:
    """Sliders for the layer and the head, each only where there is more than one."""
    w = p["weights"]
    layers, heads, n = len(w), len(w[0]), len(p["tokens"])
    first, total = p.get("first_layer", 1), p.get("total_layers", layers)
    sliders = box.locator("input[type=range]").all()
    assert len(sliders) == (layers > 1) + (heads > 1)
    layer = sliders.pop(0) if layers > 1 else None
    head = sliders.pop(0) if heads > 1 else None
    labels = box.locator(".aei-row label").all_inner_texts()
    assert labels == ["layer"] * (layers > 1) + ["head"] * (heads > 1)
    buttons = box.locator("button.aei-tok")
    assert buttons.all_inner_texts() == p["tokens"]
    for s in (layer, head):
        if s is not None:
            s.focus()
            page.keyboard.press("End")
    q = min(2, n - 1)
    buttons.nth(q).click()
    assert (box.get_attribute("data-layer"), box.get_attribute("data-head")) == (
        str(layers - 1), str(heads - 1))
    assert field(box, "head") == (f"layer {first + layers - 1} of {total}, "
                                  f"head {heads} of {heads}")
    assert bars(box) == fmt(w[-1][-1][q])
    if q:
        page.keyboard.press("ArrowLeft")  # focus is on the token: the query moves
        assert bars(box) == fmt(w[-1][-1][q - 1])
    box.locator(".aei-cell").nth(n * (n - 1) + 1).click()  # a cell of the last row
    assert box.get_attribute("data-query") == str(n - 1)
    assert bars(box) == fmt(w[-1][-1][n - 1])
    if head is not None:
        head.focus()
        page.keyboard.press("Home")
        assert bars(box) == fmt(w[-1][0][n - 1])
    if layer is not None:
        layer.focus()
        page.keyboard.press("Home")
    assert field(box, "head") == f"layer {first} of {total}, head 1 of {heads}"
    assert bars(box) == fmt(w[0][0][n - 1])


CHECKS = {
    "attention_explorer": check_attention_explorer,
    "softmax_temperature": check_softmax_temperature,
    "online_softmax_steps": check_online_softmax_steps,
    "head_explorer": check_head_explorer,
}
