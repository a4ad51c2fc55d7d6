"""Shared hypothesis strategies and helpers for the unit tests of ``attention_src``.

Strategies, plain helpers, a settings object, two fixtures (``device``, and the browser
tests' ``chromium_session`` from ``tests/browser.py``) and one hook, which orders the unit
tests' files for the two workers. On import it picks Triton's interpreter where there is no GPU
and gives torch one thread. The nbval run over the notebooks does not collect this conftest.

Tensors are drawn as a shape plus a seed for a ``torch.Generator``: hypothesis then shrinks
shapes and seeds, and drawing stays fast (no element-by-element lists).
"""

from __future__ import annotations

import os

import pytest
import torch

# Triton's interpreter (how attention_src.flash_triton runs on a machine without a GPU) is
# chosen when Triton is imported, and PyTorch imports Triton on its own (torch.utils.
# flop_counter does, through attention_src.compare): so the variable is set here, before any
# test module is collected.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# One headless Chromium per pytest process for the browser tests (a fixture, not a hook; it
# launches only when a browser test asks for it).
from tests.browser import chromium_session  # noqa: F401

# The unit tests run on tiny tensors, where PyTorch's intra-op threads only contend: with
# ``pytest -n 2`` on two cores, two workers x two threads made the suite several times slower
# (the small training test alone went from ~1 s to ~35 s). One thread per worker process.
torch.set_num_threads(1)

#: Settings of every property test: modest example count, no deadline (first calls into torch
#: are slow), so the whole unit suite stays well under a minute on two cores.
PROPERTY = settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

#: Tolerances per dtype for "equal to a reference computed differently".
TOL = {torch.float32: {"atol": 1e-5, "rtol": 0.0}, torch.float64: {"atol": 1e-10, "rtol": 0.0}}

#: The device types the device-parametrised tests run on: the CPU always, CUDA when PyTorch
#: sees a GPU (on a machine without one the ``cuda`` cases are reported as skipped).
DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param("cuda", id="cuda", marks=pytest.mark.skipif(
        not torch.cuda.is_available(), reason="CUDA is not available on this machine")),
]


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    """Each device type in turn: ``"cpu"``, then ``"cuda"`` (skipped without a GPU)."""
    return request.param


#: Test files that keep one worker busy for minutes (``test_wheel.py`` builds the wheel,
#: installs it in a fresh environment and runs three chapters with it: 164 s of test time on
#: 2026-11-28, when the whole unit run took 319 s of wall time on two workers without
#: coverage). ``make unit`` hands out whole files in collection order
#: (``--dist loadfile --no-loadscope-reorder``); sent last, as pytest-xdist's default order (the
#: files with the most tests first) did, such a file ran alone while the other worker idled.
LONG_FILES_FIRST = ("test_wheel.py",)


def pytest_collection_modifyitems(config, items) -> None:
    """Move the tests of ``LONG_FILES_FIRST`` to the front; the rest keep their order."""
    items.sort(key=lambda item: item.path.name not in LONG_FILES_FIRST)


seeds = st.integers(min_value=0, max_value=2**31 - 1)
batch_shapes = st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple)
lengths = st.integers(1, 6)
features = st.integers(1, 6)


def randn(seed: int, *shape: int, dtype: torch.dtype = torch.float64, scale: float = 1.0):
    """A reproducible standard-normal tensor (times ``scale``) of ``shape``."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=dtype) * scale


def random_mask(seed: int, *shape: int, p: float = 0.7) -> torch.Tensor:
    """A reproducible boolean mask of ``shape``, each entry ``True`` with probability ``p``."""
    g = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=g) < p


@st.composite
def qkv(draw, dtype: torch.dtype = torch.float64, scale: float = 1.0):
    """``(query, key, value)`` with 0-2 batch dims, any ``L_q, L_k, d_k, d_v`` in 1..6."""
    batch = draw(batch_shapes)
    L_q, L_k, d_k, d_v = draw(lengths), draw(lengths), draw(features), draw(features)
    seed = draw(seeds)
    q = randn(seed, *batch, L_q, d_k, dtype=dtype, scale=scale)
    k = randn(seed + 1, *batch, L_k, d_k, dtype=dtype, scale=scale)
    v = randn(seed + 2, *batch, L_k, d_v, dtype=dtype, scale=scale)
    return q, k, v


@st.composite
def broadcast_masks(draw, scores_shape: tuple[int, ...]) -> torch.Tensor:
    """A boolean mask that broadcasts to ``scores_shape`` ``(..., L_q, L_k)``.

    Its shape is the full one, or a suffix of it, with any subset of dimensions set to 1
    (e.g. ``(B, 1, L_k)`` padding masks, ``(L_q, L_k)`` masks shared by the batch).
    """
    keep = draw(st.integers(2, len(scores_shape)))  # torch needs a 2-D+ mask
    shape = list(scores_shape[len(scores_shape) - keep:])
    shape = [1 if draw(st.booleans()) else n for n in shape]
    return random_mask(draw(seeds), *shape, p=draw(st.sampled_from([0.3, 0.7, 1.0])))


@st.composite
def qkv_and_mask(draw, dtype: torch.dtype = torch.float64):
    """``(query, key, value, mask)`` with a mask that broadcasts to the scores."""
    q, k, v = draw(qkv(dtype=dtype))
    scores_shape = (*q.shape[:-1], k.shape[-2])
    return q, k, v, draw(broadcast_masks(scores_shape))


def check_dropout_rate(dropped: torch.Tensor, weights: torch.Tensor, p: float) -> float:
    """Check many draws of attention weights after dropout against the rate ``p``.

    Args:
        dropped: ``(draws, *S)``, the weights after dropout, one draw per row.
        weights: ``(*S)``, the same weights before dropout, all > 0 (so every zero in
            ``dropped`` is a dropout).

    Dropout zeroes each weight independently with probability ``p`` and divides the kept ones
    by ``1 - p``. The number of zeros among the ``n = dropped.numel()`` entries is binomial, so
    their fraction has mean ``p`` and standard error ``SE = sqrt(p (1 - p) / n)``; it must lie
    within 5 SE of ``p``. The draw count must make 0.1 at least 10 SE, so that a wrong rate
    ``p' = p + 0.1`` lies 5 SE or more outside the bound and fails. Every kept entry must
    equal ``weight / (1 - p)``. Returns the fraction of zeros.
    """
    assert bool((weights > 0).all()), "weights must be > 0, so that zeros come from dropout"
    n = dropped.numel()
    se = (p * (1 - p) / n) ** 0.5
    assert 0.1 >= 10 * se, f"too few draws to tell p={p} from p+0.1: SE={se:.4f}"
    zeros = dropped == 0
    fraction = float(zeros.double().mean())
    assert abs(fraction - p) < 5 * se, (
        f"fraction of dropped weights {fraction:.4f}, expected p={p} +- 5 SE = {5 * se:.4f}")
    expanded = weights.expand_as(dropped)
    torch.testing.assert_close(dropped[~zeros], expanded[~zeros] / (1 - p), atol=0, rtol=1e-12)
    return fraction
