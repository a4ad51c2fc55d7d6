"""Tests of the chapter-5 generator in ``attention_src.data``: ``offset_copy_task``."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attention_src.data import IGNORE_INDEX, offset_copy_task
from tests.conftest import PROPERTY


def test_shapes_dtypes_and_token_range():
    tokens, targets = offset_copy_task(7, length=10, vocab_size=5, offsets=(-1, 2, -3))
    assert tokens.shape == (7, 10) and targets.shape == (7, 3, 10)
    assert tokens.dtype == targets.dtype == torch.int64
    assert int(tokens.min()) >= 0 and int(tokens.max()) < 5


def test_hand_example():
    tokens, targets = offset_copy_task(1, length=5, vocab_size=3, offsets=(-1, 2), seed=4)
    t = tokens[0].tolist()
    assert targets[0, 0].tolist() == [IGNORE_INDEX, t[0], t[1], t[2], t[3]]
    assert targets[0, 1].tolist() == [t[2], t[3], t[4], IGNORE_INDEX, IGNORE_INDEX]


@PROPERTY
@given(length=st.integers(2, 12), data=st.data(), seed=st.integers(0, 2**31 - 1))
def test_every_target_is_the_token_at_its_offset(length, data, seed):
    candidates = [o for o in range(-(length - 1), length) if o != 0]
    offsets = data.draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=3,
                                 unique=True))
    tokens, targets = offset_copy_task(3, length, 6, offsets, seed=seed)
    for k, o in enumerate(offsets):
        for i in range(length):
            if 0 <= i + o < length:
                assert torch.equal(targets[:, k, i], tokens[:, i + o])
            else:
                assert bool((targets[:, k, i] == IGNORE_INDEX).all())
        # exactly |o| positions per row have no target
        assert int((targets[:, k] == IGNORE_INDEX).sum(-1).unique()) == abs(o)


def test_seed_reproduces_and_generator_streams():
    a = offset_copy_task(4, seed=3)
    b = offset_copy_task(4, seed=3)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    gen = torch.Generator().manual_seed(3)
    first = offset_copy_task(4, seed=gen)[0]
    second = offset_copy_task(4, seed=gen)[0]
    assert torch.equal(first, a[0]) and not torch.equal(first, second)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"offsets": ()}, ValueError, "offsets is empty"),
        ({"offsets": (0, 1)}, ValueError, "non-zero"),
        ({"offsets": (12,)}, ValueError, r"\|o\| < length"),
        ({"offsets": (-1, -1)}, ValueError, "distinct"),
        ({"offsets": (1.0,)}, TypeError, "must be ints"),
        ({"offsets": (True,)}, TypeError, "must be ints"),
        ({"length": 0}, ValueError, "length"),
        ({"vocab_size": -2}, ValueError, "vocab_size"),
    ],
)
def test_bad_input(kwargs, error, match):
    with pytest.raises(error, match=match):
        offset_copy_task(3, **kwargs)


# --- defaults, boundaries and anchored messages (issue 13) ----------------------------------

import numpy as np  # noqa: E402


def test_defaults():
    tokens, targets = offset_copy_task(5)
    ref = offset_copy_task(5, length=12, vocab_size=16, offsets=(-1, 2), seed=0)
    assert torch.equal(tokens, ref[0]) and torch.equal(targets, ref[1])
    assert tokens.shape == (5, 12) and targets.shape == (5, 2, 12)


def test_every_token_value_occurs_including_zero():
    tokens, _ = offset_copy_task(40, length=10, vocab_size=5, seed=1)
    assert sorted(tokens.unique().tolist()) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("offsets", [(1,), (-1,), (11,), (-11,), (np.int64(3), -2)])
def test_offsets_at_the_edges_are_allowed(offsets):
    tokens, targets = offset_copy_task(2, length=12, offsets=offsets, seed=2)
    for k, o in enumerate(offsets):
        o = int(o)
        inside = [i for i in range(12) if 0 <= i + o < 12]
        assert torch.equal(targets[:, k, inside], tokens[:, [i + o for i in inside]])
        assert int((targets[:, k] == IGNORE_INDEX).sum()) == 2 * abs(o)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"offsets": ()}, ValueError, r"^offsets is empty$"),
        ({"offsets": (1, 0)}, ValueError,
         r"^every offset must be non-zero with \|o\| < length \(12\), got 0$"),
        ({"offsets": (-12,)}, ValueError,
         r"^every offset must be non-zero with \|o\| < length \(12\), got -12$"),
        ({"offsets": (2, 1.0)}, TypeError, r"^offsets must be ints, got 1.0$"),
        ({"offsets": (True,)}, TypeError, r"^offsets must be ints, got True$"),
        ({"offsets": (2, -1, 2)}, ValueError, r"^offsets must be distinct, got \(2, -1, 2\)$"),
        ({"length": 0}, ValueError, r"^length must be positive, got 0$"),
        ({"vocab_size": 0}, ValueError, r"^vocab_size must be positive, got 0$"),
        ({"n": 0}, ValueError, r"^n must be positive, got 0$"),
    ],
)
def test_bad_input_messages_are_anchored(kwargs, error, match):
    with pytest.raises(error, match=match):
        offset_copy_task(**({"n": 3} | kwargs))
