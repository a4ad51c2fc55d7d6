"""show_heatmaps (attention_src.plotting) and set_seed / count_parameters (attention_src.utils)."""

from __future__ import annotations

import io
import random

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402
from PIL import Image  # noqa: E402
from torch import nn  # noqa: E402

import attention_src as att  # noqa: E402
from attention_src.plotting import DEFAULT_CMAP, show_heatmaps  # noqa: E402
from attention_src.utils import count_parameters, set_seed  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _colorbars(fig):
    """The axes of ``fig`` that are colour bars (matplotlib tags them with ``_colorbar``)."""
    return [ax for ax in fig.axes if hasattr(ax, "_colorbar")]


# --- show_heatmaps -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape,grid",
    [((3, 4), (1, 1)), ((2, 3, 4), (1, 2)), ((3, 2, 3, 4), (3, 2)), ((1, 5, 2, 2), (1, 5))],
    ids=str,
)
@pytest.mark.parametrize("kind", ["torch", "numpy", "list"])
def test_grid_shape_and_one_shared_colorbar(shape, grid, kind):
    data = torch.rand(shape, generator=torch.Generator().manual_seed(0))
    matrices = {"torch": data, "numpy": data.numpy(), "list": data.tolist()}[kind]
    fig, axes = show_heatmaps(matrices)
    assert isinstance(fig, plt.Figure)
    assert isinstance(axes, np.ndarray) and axes.shape == grid
    assert len(_colorbars(fig)) == 1  # one colour bar for the whole grid
    assert len(fig.axes) == grid[0] * grid[1] + 1
    flat = data.reshape(-1, *shape[-2:])
    for ax, expected in zip(axes.ravel(), flat, strict=True):
        (image,) = ax.get_images()
        np.testing.assert_allclose(image.get_array(), expected.numpy(), rtol=1e-6)
        assert image.get_clim() == (0.0, pytest.approx(float(data.max())))  # shared scale
        assert image.get_cmap().name == DEFAULT_CMAP


def test_labels_titles_and_ticks():
    weights = torch.softmax(torch.randn(2, 3, 4, 5), -1)
    fig, axes = show_heatmaps(
        weights, xlabel="Key", ylabel="Query", titles=["h0", "h1", "h2"],
        row_titles=["layer 1", "layer 2"], xticklabels=list("abcde"), yticklabels=list("wxyz"),
        colorbar_label="weight", suptitle="All heads",
    )
    assert [ax.get_title() for ax in axes[0]] == ["h0", "h1", "h2"]
    assert all(ax.get_title() == "" for ax in axes[1])
    assert [ax.get_xlabel() for ax in axes[-1]] == ["Key"] * 3  # bottom row only
    assert all(ax.get_xlabel() == "" for ax in axes[0])
    assert [axes[r, 0].get_ylabel() for r in range(2)] == ["layer 1\nQuery", "layer 2\nQuery"]
    assert all(ax.get_ylabel() == "" for ax in axes[:, 1:].ravel())  # first column only
    assert [t.get_text() for t in axes[1, 2].get_xticklabels()] == list("abcde")
    # shared y axes: the token labels show on the first column
    assert [t.get_text() for t in axes[1, 0].get_yticklabels()] == list("wxyz")
    (cbar_ax,) = _colorbars(fig)
    assert cbar_ax.get_ylabel() == "weight"
    assert fig.get_suptitle() == "All heads"


def test_defaults():
    fig, axes = show_heatmaps(np.eye(3))
    assert axes[0, 0].get_xlabel() == "Keys" and axes[0, 0].get_ylabel() == "Queries"
    assert _colorbars(fig)[0].get_ylabel() == "attention weight"
    assert tuple(fig.get_size_inches()) == pytest.approx((2.6 + 1.0, 2.4))
    fig2, _ = show_heatmaps(np.ones((2, 3, 2, 2)), figsize=(5, 4))
    assert tuple(fig2.get_size_inches()) == pytest.approx((5, 4))


def test_explicit_colour_limits_and_cmap():
    fig, axes = show_heatmaps(np.array([[0.2, 0.4], [0.6, 0.8]]), vmin=None, vmax=2.0,
                              cmap="magma")
    (image,) = axes[0, 0].get_images()
    assert image.get_clim() == (pytest.approx(0.2), 2.0)  # vmin=None: the data minimum
    assert image.get_cmap().name == "magma"


def test_annotate_writes_each_value():
    data = np.array([[[0.1, 0.9], [0.5, 0.25]]] * 2)  # (2 panels, 2, 2)
    fig, axes = show_heatmaps(data, annotate=True)
    for ax in axes.ravel():
        assert sorted(t.get_text() for t in ax.texts) == ["0.10", "0.25", "0.50", "0.90"]
        colours = {t.get_text(): to_hex(t.get_color()) for t in ax.texts}
        # viridis is dark at the bottom: white text below the middle of the scale, black above
        assert colours["0.10"] == to_hex("white") and colours["0.90"] == to_hex("black")
        assert colours["0.25"] == to_hex("white")


def test_annotate_without_vmin_uses_the_data_minimum():
    fig, axes = show_heatmaps(np.array([[10.0, 11.0], [12.0, 19.0]]), annotate=True, vmin=None)
    colours = {t.get_text(): to_hex(t.get_color()) for t in axes[0, 0].texts}
    # scale 10..19, midpoint 14.5: 12 is dark (white text), 19 light (black text)
    assert colours["12.00"] == to_hex("white") and colours["19.00"] == to_hex("black")


def test_accepts_tensors_that_require_grad_and_other_dtypes():
    w = torch.rand(2, 3, 3, requires_grad=True)
    fig, axes = show_heatmaps(w * 2)  # not detached by the caller
    assert axes.shape == (1, 2)
    fig, axes = show_heatmaps(torch.rand(3, 3, dtype=torch.bfloat16))
    assert axes.shape == (1, 1)


@pytest.mark.parametrize("shape", [(4,), (), (1, 2, 3, 4, 5)], ids=str)
def test_rejects_bad_shapes(shape):
    with pytest.raises(ValueError, match=rf"matrices must be \(L_q, L_k\), \(cols, L_q, L_k\) "
                                         rf"or \(rows, cols, L_q, L_k\), got shape "
                                         rf"{repr(shape).replace('(', '[(]').replace(')', '[)]')}"):
        show_heatmaps(np.zeros(shape))


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"titles": ["a", "b"]}, "titles has 2 entries, expected 3"),
        ({"row_titles": ["r"]}, "row_titles has 1 entries, expected 2"),
        ({"xticklabels": list("abc")}, "xticklabels has 3 entries, expected 5"),
        ({"yticklabels": list("abcde")}, "yticklabels has 5 entries, expected 4"),
    ],
)
def test_rejects_wrong_label_counts(kwargs, message):
    with pytest.raises(ValueError, match=message):
        show_heatmaps(np.zeros((2, 3, 4, 5)), **kwargs)
    assert not plt.get_fignums()  # the error comes before any figure is created


def test_top_level_export():
    assert att.show_heatmaps is show_heatmaps


# --- utils ---------------------------------------------------------------------------------


def _draws():
    return (random.random(), np.random.rand(3).tolist(),  # noqa: NPY002 - the global generator
            torch.rand(3).tolist(), torch.nn.Linear(2, 2).weight.detach().clone())


@pytest.mark.parametrize("seed", [0, 1234, 2**40, -5])
def test_set_seed_makes_random_numpy_and_torch_reproducible(seed):
    set_seed(seed)
    first = _draws()
    set_seed(seed)
    second = _draws()
    assert first[:3] == second[:3]
    assert torch.equal(first[3], second[3])
    set_seed(seed + 1)
    other = _draws()
    assert other[0] != first[0] and other[1] != first[1] and other[2] != first[2]


@pytest.mark.parametrize("numpy_seed", [np.int64(7), np.int32(7), np.uint8(7)])
def test_set_seed_takes_numpy_integers_as_the_same_python_int(numpy_seed):
    set_seed(7)
    expected = _draws()
    set_seed(numpy_seed)
    got = _draws()
    assert got[:3] == expected[:3]
    assert torch.equal(got[3], expected[3])


@pytest.mark.parametrize("bad,name", [(1.5, "float"), ("3", "str"), (True, "bool"),
                                      (np.bool_(True), "bool"), (None, "NoneType"),
                                      (np.float64(2.0), "float64")])
def test_set_seed_rejects_non_int(bad, name):
    with pytest.raises(TypeError, match=f"seed must be an int, got {name}"):
        set_seed(bad)


@pytest.mark.parametrize("bad", [2**64, -(2**63) - 1])
def test_set_seed_rejects_seeds_torch_cannot_take(bad):
    with pytest.raises(ValueError, match=rf"seed must lie in \[-2\*\*63, 2\*\*64\).*got {bad}"):
        set_seed(bad)


def test_set_seed_accepts_the_ends_of_torchs_range():
    set_seed(2**64 - 1)
    set_seed(-(2**63))


def test_count_parameters_counts_trainable_elements_only():
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2, bias=False))
    assert count_parameters(model) == 3 * 4 + 4 + 4 * 2
    model[0].bias.requires_grad_(False)
    assert count_parameters(model) == 3 * 4 + 4 * 2
    model.register_buffer("running", torch.zeros(10))  # buffers are not parameters
    assert count_parameters(model) == 3 * 4 + 4 * 2
    assert count_parameters(nn.ReLU()) == 0
    assert att.count_parameters is count_parameters and att.set_seed is set_seed


@pytest.mark.parametrize("bad,match", [(np.zeros((0, 3)), "empty"),
                                       (np.full((2, 2), np.nan), "no finite value")])
def test_show_heatmaps_rejects_empty_or_all_nan_input(bad, match):
    with pytest.raises(ValueError, match=match):
        show_heatmaps(bad)


# --- show_heatmaps: anchored messages, boundaries and the drawing contract (issue 13) -------


def test_rejects_bad_shapes_and_empty_input_with_anchored_messages():
    with pytest.raises(ValueError, match=r"^matrices must be \(L_q, L_k\), \(cols, L_q, L_k\) "
                                         r"or \(rows, cols, L_q, L_k\), got shape \(4,\)$"):
        show_heatmaps(np.zeros(4))
    with pytest.raises(ValueError, match=r"^matrices is empty \(shape \(1, 1, 0, 3\)\): "
                                         r"nothing to draw$"):
        show_heatmaps(np.zeros((0, 3)))
    with pytest.raises(ValueError, match=r"^matrices holds no finite value: nothing to draw$"):
        show_heatmaps(np.full((2, 2), np.inf))


def test_a_single_value_and_partly_missing_values_are_drawn():
    fig, axes = show_heatmaps(np.array([[0.7]]))
    (image,) = axes[0, 0].get_images()
    assert image.get_array().tolist() == [[0.7]]
    # NaN (or None in a nested list) is a missing value: drawn blank, ignored by the scale
    fig, axes = show_heatmaps([[0.2, None], [np.nan, 0.6]])
    (image,) = axes[0, 0].get_images()
    # matplotlib masks the missing cells (drawn in the colormap's 'bad' colour, none)
    assert np.ma.getmaskarray(image.get_array()).tolist() == [[False, True], [True, False]]
    assert image.get_clim() == (0.0, pytest.approx(0.6))


def test_no_annotation_unless_asked_and_default_size_of_a_grid():
    fig, axes = show_heatmaps(np.ones((2, 3, 2, 2)))
    assert all(not ax.texts for ax in axes.ravel())
    # 2.6 inches per column plus 1 for the colour bar, 2.4 per row: 8.8 x 4.8, wider than the
    # book's widest figure (5.8 inches), so scaled down by 5.8 / 8.8 in both directions
    assert tuple(fig.get_size_inches()) == pytest.approx((5.8, 4.8 * 5.8 / 8.8))
    fig, _ = show_heatmaps(np.ones((1, 1, 2, 2)))  # 3.6 inches wide: kept as it is
    assert tuple(fig.get_size_inches()) == pytest.approx((2.6 + 1.0, 2.4))


def test_book_style_text_is_readable_on_a_phone():
    """At most 5.8 inches wide and 12 pt ticks: 16.7 px at 100 dpi, at least 10 px once the
    figure is scaled to a phone's 358 px text column."""
    import matplotlib as mpl

    from attention_src.plotting import BOOK_STYLE, MAX_FIGURE_WIDTH

    smallest_pt = min(BOOK_STYLE[k] for k in ("xtick.labelsize", "ytick.labelsize",
                                              "legend.fontsize", "font.size"))
    px = smallest_pt / 72 * BOOK_STYLE["figure.dpi"]
    assert px * 358 / (MAX_FIGURE_WIDTH * BOOK_STYLE["figure.dpi"]) >= 10
    with mpl.rc_context():
        from attention_src.plotting import apply_book_style

        apply_book_style()
        assert mpl.rcParams["xtick.labelsize"] == 12


def test_figures_are_reformatted_only_inside_a_kernel():
    from attention_src.plotting import _retina_in_jupyter

    assert _retina_in_jupyter() is False  # pytest runs no IPython kernel


def test_panels_share_axes_fill_their_cells_and_show_cells_as_blocks():
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    fig, axes = show_heatmaps(np.random.default_rng(0).random((2, 2, 3, 5)))
    first = axes[0, 0]
    for ax in axes.ravel():
        assert first.get_shared_x_axes().joined(first, ax)
        assert first.get_shared_y_axes().joined(first, ax)
        assert ax.get_aspect() == "auto"  # a panel's cells need not be square
        (image,) = ax.get_images()
        assert image.get_interpolation() == "nearest"  # one flat block per weight
    assert isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine)


def test_the_colour_bar_spans_all_rows_at_four_fifths_of_their_height():
    fig, axes = show_heatmaps(np.random.default_rng(1).random((2, 2, 3, 3)))
    fig.canvas.draw()
    (cbar_ax,) = _colorbars(fig)
    top = max(ax.get_position().y1 for ax in axes.ravel())
    bottom = min(ax.get_position().y0 for ax in axes.ravel())
    assert cbar_ax.get_position().height / (top - bottom) == pytest.approx(0.8, abs=0.01)


def test_annotation_text_is_centred_small_and_its_colour_switches_at_the_midpoint():
    # scale 0..1 (vmin = 0 by default, vmax = 1 given): midpoint 0.5, which is still "dark";
    # the data minimum (0.4) must not move the midpoint while vmin is given
    weights = np.array([[0.4, 0.5], [0.55, 1.0]])
    fig, axes = show_heatmaps(weights, annotate=True, vmax=1.0, xticklabels=["a", "b"])
    texts = {t.get_text(): t for t in axes[0, 0].texts}
    assert {k: to_hex(t.get_color()) for k, t in texts.items()} == {
        "0.40": to_hex("white"), "0.50": to_hex("white"),
        "0.55": to_hex("black"), "1.00": to_hex("black")}
    for t in texts.values():
        assert (t.get_ha(), t.get_va(), t.get_fontsize()) == ("center", "center", 12)
    positions = {k: t.get_position() for k, t in texts.items()}
    assert positions == {"0.40": (0, 0), "0.50": (1, 0), "0.55": (0, 1), "1.00": (1, 1)}
    assert [t.get_rotation() for t in axes[0, 0].get_xticklabels()] == [0.0, 0.0]


def test_key_labels_of_one_character_stand_upright_and_words_turn():
    """A date read character by character keeps its characters upright (turned, "j", "u" and
    "␣1" overprinted each other); a word is turned so that neighbours do not collide."""
    chars = ["j", "u", "l", "y", "␣", "1", ""]
    words = ["the", "a", "animal", "a", "b", "c", "d"]
    for labels, angle in ((chars, 0.0), (words, 90.0)):
        _, axes = show_heatmaps(np.eye(7), xticklabels=labels)
        assert [t.get_rotation() for t in axes[0, 0].get_xticklabels()] == [angle] * 7
        plt.close("all")


def test_the_colour_bar_shows_the_panels_scale_and_colormap():
    data = 3.0 * np.random.default_rng(2).random((2, 3, 3))  # values up to about 3
    fig, axes = show_heatmaps(data, cmap="magma", vmin=0.5)
    fig.canvas.draw()
    (cbar_ax,) = _colorbars(fig)
    assert cbar_ax.get_ylim() == pytest.approx((0.5, float(data.max())))
    (mesh,) = [c for c in cbar_ax.collections if c.get_array() is not None]
    assert mesh.get_cmap().name == "magma"


def test_apply_book_style_restores_viridis_and_the_okabe_ito_cycle():
    import matplotlib as mpl

    from attention_src.plotting import OKABE_ITO, apply_book_style

    with mpl.rc_context({"image.cmap": "jet",
                         "axes.prop_cycle": mpl.cycler(color=["red", "green"])}):
        apply_book_style()
        assert mpl.rcParams["image.cmap"] == "viridis"
        assert mpl.rcParams["axes.prop_cycle"].by_key()["color"] == list(OKABE_ITO.values())


def test_figure_png_2x_doubles_the_pixels_and_keeps_at_most_256_colours():
    import io

    import matplotlib.pyplot as plt
    from PIL import Image

    from attention_src.plotting import figure_png_2x

    fig, ax = plt.subplots(figsize=(3, 2), dpi=100)
    ax.imshow(np.linspace(0, 1, 400).reshape(20, 20))  # a full colour map: 256+ colours drawn
    ax.set_xlabel("keys")
    data, size = figure_png_2x(fig)
    plt.close(fig)
    image = Image.open(io.BytesIO(data))
    assert image.format == "PNG" and image.mode == "P"  # a palette of at most 256 colours
    assert abs(image.size[0] - 2 * size["width"]) <= 1
    assert abs(image.size[1] - 2 * size["height"]) <= 1
    # 3 x 2 inches at 100 dpi, trimmed to the drawing (a tight box may add the label's margin)
    assert 150 <= size["width"] <= 330 and 150 <= size["height"] <= 250
    assert image.convert("RGB").getpixel((0, 0)) == (255, 255, 255)  # white, not transparent
    assert len(image.getcolors(maxcolors=257)) <= 256


def _chart(layout):
    """A two-panel chart with a legend, a colour bar and a title, as the chapters draw them."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(5.8, 3.4), dpi=100, layout=layout)
    x = np.linspace(0, 10, 200)
    for shift in range(4):
        axes[0].plot(x, np.sin(x + shift), label=f"shift {shift}")
    axes[0].legend()
    image = axes[1].imshow(np.random.default_rng(0).random((30, 30)))
    fig.colorbar(image, ax=axes[1], label="weight")
    for ax in axes:
        ax.set_xlabel("keys")
        ax.set_ylabel("queries")
    fig.suptitle("a title above both panels")
    if layout is None:
        fig.tight_layout()
    return fig


@pytest.mark.parametrize("layout", [None, "constrained"])
def test_figure_png_2x_draws_what_a_tight_savefig_draws(layout):
    """One drawing cut to the tight box against matplotlib's own ``savefig(bbox_inches=
    "tight")`` at twice the dpi: the same size to a pixel and, pixel by pixel, the same picture
    up to anti-aliasing (savefig can place the drawing a fraction of a pixel differently)."""
    import matplotlib.pyplot as plt

    from attention_src.plotting import _tight_rgb_by_cropping, _tight_rgb_by_savefig

    fig = _chart(layout)
    fast = _tight_rgb_by_cropping(fig)
    assert fast is not None  # nothing drawn beyond the figure: the one-drawing path
    assert fig.dpi == 100 and tuple(fig.get_facecolor()) == (1.0, 1.0, 1.0, 1.0)
    reference = _tight_rgb_by_savefig(fig)
    plt.close(fig)
    assert abs(fast.size[0] - reference.size[0]) <= 1
    assert abs(fast.size[1] - reference.size[1]) <= 1
    w, h = min(fast.size[0], reference.size[0]), min(fast.size[1], reference.size[1])
    a = np.asarray(fast, dtype=float)[:h, :w]
    b = np.asarray(reference, dtype=float)[:h, :w]
    # mean difference per channel, of 255: 3.6-3.7 measured (matplotlib 3.11); the same
    # drawing moved by 3 pixels differs by 15-18, which the second check shows it would see
    assert np.abs(a - b).mean() < 5
    assert np.abs(a - np.roll(b, 3, axis=1)).mean() > 12


def test_figure_png_2x_leaves_a_figure_drawn_past_its_edge_to_savefig():
    """A label outside the figure (no layout engine) is cut off by a crop; savefig's tight box
    grows past the figure to include it, so that figure goes through savefig, and the two give
    the same PNG."""
    import matplotlib.pyplot as plt

    from attention_src.plotting import (
        _tight_rgb_by_cropping,
        _tight_rgb_by_savefig,
        figure_png_2x,
    )

    fig, ax = plt.subplots(figsize=(3, 2), dpi=100)
    ax.plot([0, 1], [0, 1])
    ax.set_xlabel("a label below the figure's edge", labelpad=40)
    assert _tight_rgb_by_cropping(fig) is None
    data, _ = figure_png_2x(fig)
    reference = _tight_rgb_by_savefig(fig)
    plt.close(fig)
    image = Image.open(io.BytesIO(data)).convert("RGB")
    assert image.size == reference.size
    assert np.abs(np.asarray(image, float) - np.asarray(reference, float)).max() <= 32
