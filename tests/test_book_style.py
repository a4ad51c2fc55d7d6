"""The book's figure style: colour-blind-safe colours and colormaps in every notebook.

Importing ``attention_src`` sets matplotlib's colour cycle to the Okabe-Ito palette and its
default colormap to viridis; these tests check that, and scan the code of every notebook in
the table of contents for colours and colormaps outside the safe set.
"""

from __future__ import annotations

import json
import re

import matplotlib as mpl
import pytest

import attention_src as att
from tests.toc import toc_entries

#: Published Okabe-Ito values (Okabe & Ito, "Color Universal Design", 2008).
PUBLISHED_OKABE_ITO = {
    "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#000000",
}
#: Greys and the two extremes are safe for every reader.
NEUTRAL = {"#555555", "#FFFFFF", "#000000", "#808080", "#999999", "#BBBBBB", "#DDDDDD"}
NAMED_OK = {"black", "white", "grey", "gray", "lightgrey", "lightgray", "darkgrey", "darkgray",
            "none"}
#: Perceptually uniform (and greyscale-readable) colormaps, and their reversed forms.
CMAPS_OK = {"viridis", "cividis", "magma", "inferno", "plasma", "Greys", "gray", "binary"}

NOTEBOOKS = [p for p in toc_entries() if p.suffix == ".ipynb"]


def test_import_applies_okabe_ito_cycle_and_viridis():
    mpl.rcParams["axes.prop_cycle"] = mpl.cycler(color=["red", "green"])
    mpl.rcParams["image.cmap"] = "jet"
    att.apply_book_style()
    cycle = [c.upper() for c in mpl.rcParams["axes.prop_cycle"].by_key()["color"]]
    assert set(cycle) == PUBLISHED_OKABE_ITO
    assert cycle[:3] == ["#0072B2", "#D55E00", "#009E73"]  # blue, vermillion, green first
    assert mpl.rcParams["image.cmap"] == "viridis"


def test_palette_constant_is_the_published_palette():
    assert {c.upper() for c in att.OKABE_ITO.values()} == PUBLISHED_OKABE_ITO


def _code(notebook) -> str:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_colours_are_colour_blind_safe(notebook):
    code = _code(notebook)
    # hex colours in strings (not issue numbers in comments: those are not quoted)
    hexes = {h.upper() for h in re.findall(r"[\"'](#[0-9A-Fa-f]{6})[\"']", code)}
    unsafe = hexes - PUBLISHED_OKABE_ITO - NEUTRAL
    assert not unsafe, f"{notebook.name}: colours outside Okabe-Ito and greys: {unsafe}"
    named = set(re.findall(r"\b(?:color|colour|c|facecolor|edgecolor)\s*=\s*[\"']([a-z]+)[\"']",
                           code))
    assert named <= NAMED_OK, f"{notebook.name}: named colours {named - NAMED_OK}"
    tab = set(re.findall(r"[\"'](tab:[a-z]+|C[0-9])[\"']", code))
    assert not tab, f"{notebook.name}: colours of matplotlib's default palette: {tab}"
    cmaps = set(re.findall(r"cmap\s*=\s*[\"']([A-Za-z_]+)[\"']", code))
    cmaps |= set(re.findall(r"(?:get_cmap|colormaps)\s*[\[(]\s*[\"']([A-Za-z_]+)", code))
    unsafe_maps = {m for m in cmaps if m.removesuffix("_r") not in CMAPS_OK}
    assert not unsafe_maps, f"{notebook.name}: colormaps that are not perceptually uniform: " \
                            f"{unsafe_maps}"


def test_the_scan_catches_unsafe_colours(tmp_path):
    """A planted jet colormap, a tab10 colour and a pure red are all reported."""
    bad = tmp_path / "bad.ipynb"
    src = 'plt.imshow(x, cmap="jet"); plt.plot(y, color="#FF0000"); plt.plot(z, color="tab:red")'
    bad.write_text(json.dumps({"cells": [{"cell_type": "code", "source": [src]}]}))
    with pytest.raises(AssertionError, match="colours outside Okabe-Ito"):
        test_notebook_colours_are_colour_blind_safe(bad)
    bad.write_text(json.dumps({"cells": [{"cell_type": "code", "source": ['cmap="jet"']}]}))
    with pytest.raises(AssertionError, match="not perceptually uniform"):
        test_notebook_colours_are_colour_blind_safe(bad)
