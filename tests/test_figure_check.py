"""``attention_src.plotting.unlabelled_axes``: the check every shown figure of the book passes."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from attention_src.plotting import show_heatmaps, unlabelled_axes  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_a_labelled_plot_passes_and_each_missing_label_is_named():
    fig, ax = plt.subplots()
    ax.plot([1, 2], [3, 4])
    ax.set_title("loss")
    assert unlabelled_axes(fig) == ["axes 0 'loss': no x label", "axes 0 'loss': no y label"]
    ax.set_xlabel("step")
    assert unlabelled_axes(fig) == ["axes 0 'loss': no y label"]
    ax.set_ylabel("loss (nats)")
    assert unlabelled_axes(fig) == []


def test_blank_labels_count_as_missing():
    fig, ax = plt.subplots()
    ax.plot([1, 2])
    ax.set_xlabel("  ")
    ax.set_ylabel("value")
    assert unlabelled_axes(fig) == ["axes 0 '': no x label"]


def test_a_grid_of_panels_labels_one_shared_axis():
    fig, axes = plt.subplots(2, 2, sharex=True, sharey=True)
    for ax in axes.flat:
        ax.plot([0, 1], [1, 0])
    axes[1, 0].set_xlabel("x")  # shared by every panel
    axes[0, 0].set_ylabel("y")
    assert unlabelled_axes(fig) == []


def test_an_unshared_panel_needs_its_own_labels():
    fig, axes = plt.subplots(1, 2)
    for ax in axes:
        ax.plot([0, 1], [1, 0])
        ax.set_xlabel("x")
    axes[0].set_ylabel("y")
    assert unlabelled_axes(fig) == ["axes 1 '': no y label"]


def test_axes_without_tick_labels_or_data_are_exempt():
    fig, axes = plt.subplots(1, 3)
    axes[0].plot([0, 1])
    axes[0].axis("off")  # a drawing, not a chart
    axes[1].plot([0, 1])
    axes[1].set_xticks([])
    axes[1].set_yticks([])  # no tick labels: nothing to read off
    # axes[2] draws nothing
    assert unlabelled_axes(fig) == []


def test_a_colorbar_needs_a_label():
    fig, ax = plt.subplots()
    image = ax.imshow(np.arange(4.0).reshape(2, 2))
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    bar = fig.colorbar(image)
    assert unlabelled_axes(fig) == ["axes 1 '': no y label"]
    bar.set_label("weight")
    assert unlabelled_axes(fig) == []


def test_show_heatmaps_labels_its_axes():
    fig, _ = show_heatmaps(np.full((2, 3, 4, 4), 0.25), xlabel="keys", ylabel="queries")
    assert unlabelled_axes(fig) == []


def test_a_figure_is_required():
    with pytest.raises(TypeError, match=r"^fig must be a matplotlib Figure, got Axes"):
        unlabelled_axes(plt.subplots()[1])


def test_bars_images_and_text_alone_are_data_too():
    fig, axes = plt.subplots(1, 3)
    axes[0].bar([0, 1], [2, 3])
    axes[1].imshow(np.eye(2))
    axes[2].text(0.5, 0.5, "a diagram")
    assert unlabelled_axes(fig) == [
        f"axes {i} '': no {xy} label" for i in range(3) for xy in "xy"
    ]


def test_panels_after_an_exempt_one_are_still_checked():
    fig, axes = plt.subplots(1, 3)
    axes[0].plot([0, 1])
    axes[0].axis("off")  # exempt: a drawing
    # axes[1] is empty: exempt
    axes[2].plot([0, 1])
    assert unlabelled_axes(fig) == ["axes 2 '': no x label", "axes 2 '': no y label"]


def test_hidden_tick_labels_need_no_axis_label():
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    ax.set_ylabel("value")
    ax.tick_params(labelbottom=False)  # the x tick labels are there, but not shown
    assert unlabelled_axes(fig) == []


def test_a_shared_x_label_does_not_excuse_the_y_axis():
    fig, axes = plt.subplots(2, 1, sharex=True)
    for ax in axes:
        ax.plot([0, 1], [1, 0])
    axes[1].set_xlabel("x")
    axes[1].set_ylabel("y")
    assert unlabelled_axes(fig) == ["axes 0 '': no y label"]


def test_a_labelled_sibling_excuses_one_axis_only():
    fig, axes = plt.subplots(2, 1, sharex=True)
    for ax in axes:
        ax.plot([0, 1], [1, 0])
    axes[0].tick_params(labelbottom=True)  # x tick labels shown on both panels
    axes[1].set_xlabel("x")
    axes[1].set_ylabel("y")
    assert unlabelled_axes(fig) == ["axes 0 '': no y label"]
