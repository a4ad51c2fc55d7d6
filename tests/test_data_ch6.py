"""Tests of ``attention_src.data.repeated_segments``, the data of chapter 6's induction experiment.

The invariants are checked against their definition, position by position in plain Python:
the second copy equals the first, the copies do not overlap, ``repeated`` marks exactly the
tokens after the first of the second copy, and the offset between the copies varies.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attention_src import data
from tests.conftest import PROPERTY, seeds


def _check_invariants(batch: data.RepeatedSegments, n: int, length: int, vocab_size: int,
                      segment_len: int) -> None:
    assert batch.tokens.shape == (n, length) and batch.tokens.dtype == torch.int64
    assert batch.repeated.shape == (n, length) and batch.repeated.dtype == torch.bool
    assert int(batch.tokens.min()) >= 0 and int(batch.tokens.max()) < vocab_size
    for row in range(n):
        a, b = int(batch.first[row]), int(batch.second[row])
        assert 0 <= a and a + segment_len <= b and b + segment_len <= length
        seq = batch.tokens[row].tolist()
        assert seq[b:b + segment_len] == seq[a:a + segment_len]
        expected = [b + 1 <= t < b + segment_len for t in range(length)]
        assert batch.repeated[row].tolist() == expected


@PROPERTY
@given(n=st.integers(1, 5), segment_len=st.integers(2, 6), extra=st.integers(0, 6),
       vocab_size=st.integers(2, 40), seed=seeds)
def test_invariants_hold_for_any_valid_arguments(n, segment_len, extra, vocab_size, seed):
    length = 2 * segment_len + extra
    batch = data.repeated_segments(n, length, vocab_size, segment_len, seed=seed)
    _check_invariants(batch, n, length, vocab_size, segment_len)


def test_the_chapters_setting_has_varying_offsets_covering_every_possible_one():
    batch = data.repeated_segments(4000, length=32, vocab_size=32, segment_len=8, seed=0)
    _check_invariants(batch, 4000, 32, 32, 8)
    offsets = (batch.second - batch.first).tolist()
    assert set(offsets) == set(range(8, 32 - 8 + 1))  # every offset 8 .. 24 occurs
    starts = batch.first.tolist()
    assert set(starts) == set(range(0, 32 - 16 + 1))


def test_first_start_is_uniform_within_sampling_error():
    n, choices = 17_000, 17  # first start uniform on 0..16 when L = 32, s = 8
    batch = data.repeated_segments(n, 32, 32, 8, seed=3)
    counts = torch.bincount(batch.first, minlength=choices).double()
    expected = n / choices
    # each count is binomial(n, 1/17): standard deviation sqrt(n p (1 - p)); 5 sd is generous
    sd = (n * (1 / choices) * (1 - 1 / choices)) ** 0.5
    assert (counts - expected).abs().max() < 5 * sd


def test_second_start_is_uniform_given_the_first_within_sampling_error():
    # L = 32, s = 8: given a, b is uniform on a + 8 .. 24, that is 17 - a choices
    n = 60_000
    batch = data.repeated_segments(n, 32, 32, 8, seed=4)
    assert bool((batch.second[batch.first == 16] == 24).all())  # one choice left
    for a in (0, 5, 12, 15):
        given = batch.second[batch.first == a]
        choices = 17 - a
        counts = torch.bincount(given - a - 8, minlength=choices).double()
        assert counts.numel() == choices  # never outside a + 8 .. 24
        m, p = given.numel(), 1 / choices
        sd = (m * p * (1 - p)) ** 0.5  # binomial(m, p) per count; 5 sd is generous
        assert (counts - m * p).abs().max() < 5 * sd, (a, counts)


def test_other_tokens_are_uniform_over_the_vocabulary():
    batch = data.repeated_segments(2000, 32, 8, 4, seed=1)
    counts = torch.bincount(batch.tokens.flatten(), minlength=8).double()
    n = batch.tokens.numel()
    sd = (n * (1 / 8) * (7 / 8)) ** 0.5
    assert (counts - n / 8).abs().max() < 5 * sd


def test_same_seed_same_data_other_seed_other_data():
    a = data.repeated_segments(16, seed=5)
    b = data.repeated_segments(16, seed=5)
    c = data.repeated_segments(16, seed=6)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.second, b.second)
    assert not torch.equal(a.tokens, c.tokens)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n": 0}, ValueError, "n must be positive"),
        ({"n": 2, "length": 10, "segment_len": 6}, ValueError, "at least 2 \\* segment_len"),
        ({"n": 2, "segment_len": 1}, ValueError, "segment_len must be at least 2"),
        ({"n": 2, "vocab_size": 1}, ValueError, "vocab_size must be at least 2"),
        ({"n": 2.0}, TypeError, "n must be an int"),
    ],
)
def test_bad_arguments_are_refused(kwargs, error, match):
    with pytest.raises(error, match=match):
        data.repeated_segments(**kwargs)


# --- defaults, boundaries and anchored messages (issue 13) ----------------------------------


def test_defaults():
    a = data.repeated_segments(20)
    b = data.repeated_segments(20, length=32, vocab_size=32, segment_len=8, seed=0)
    for field in ("tokens", "repeated", "first", "second"):
        assert torch.equal(getattr(a, field), getattr(b, field)), field
    _check_invariants(a, 20, 32, 32, 8)


def test_smallest_allowed_arguments():
    # vocab_size = 2, segment_len = 2 and length = 2 * segment_len are all allowed; with
    # length = 2 s the copies sit at 0 and s, back to back
    batch = data.repeated_segments(50, length=4, vocab_size=2, segment_len=2, seed=3)
    _check_invariants(batch, 50, 4, 2, 2)
    assert batch.first.tolist() == [0] * 50 and batch.second.tolist() == [2] * 50
    assert sorted(batch.tokens.unique().tolist()) == [0, 1]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"length": 0}, ValueError, r"^length must be positive, got 0$"),
        ({"vocab_size": 0}, ValueError, r"^vocab_size must be positive, got 0$"),
        ({"segment_len": 0}, ValueError, r"^segment_len must be positive, got 0$"),
        ({"vocab_size": 1}, ValueError, r"^vocab_size must be at least 2, got 1$"),
        ({"segment_len": 1}, ValueError, r"^segment_len must be at least 2, got 1$"),
        ({"length": 11, "segment_len": 6}, ValueError,
         r"^length \(11\) must be at least 2 \* segment_len \(12\)$"),
        ({"length": 7, "segment_len": 4}, ValueError,
         r"^length \(7\) must be at least 2 \* segment_len \(8\)$"),
    ],
)
def test_bad_input_messages_are_anchored(kwargs, error, match):
    with pytest.raises(error, match=match):
        data.repeated_segments(**({"n": 2} | kwargs))
