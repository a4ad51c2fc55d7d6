"""show_heatmaps(annotate=True): text is white on dark cells and black on light ones."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest

from attention_src import show_heatmaps


@pytest.mark.parametrize("vmin", [0.0, None])
def test_annotation_colour_follows_the_colour_scale_midpoint(vmin):
    weights = np.array([[0.05, 0.95], [0.2, 0.8]])
    fig, axes = show_heatmaps(weights, annotate=True, vmin=vmin, vmax=1.0)
    colours = {t.get_text(): t.get_color() for t in axes[0, 0].texts}
    plt.close(fig)
    assert colours["0.05"] == "white" and colours["0.20"] == "white"
    assert colours["0.95"] == "black" and colours["0.80"] == "black"
