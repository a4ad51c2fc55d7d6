"""band_mask (attention_src.softmax): windowed ("truncated") self-attention, note 004 (§4.3)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import attention_src as att
from attention_src.softmax import band_mask, causal_mask, masked_softmax
from tests.conftest import PROPERTY, randn


def _by_definition(length: int, window: int, causal: bool) -> torch.Tensor:
    """Reference: a double loop over (query i, key j) of the rule in the docstring."""
    return torch.tensor([[abs(i - j) < window and (j <= i or not causal)
                          for j in range(length)] for i in range(length)])


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("length,window", [(1, 1), (5, 1), (5, 2), (6, 3), (4, 4), (4, 9)])
def test_equals_the_definition(length, window, causal):
    mask = band_mask(length, window, causal=causal)
    assert mask.shape == (length, length) and mask.dtype == torch.bool
    assert torch.equal(mask, _by_definition(length, window, causal))


def test_a_hand_written_case():
    expected = torch.tensor([[1, 1, 0, 0],
                             [1, 1, 1, 0],
                             [0, 1, 1, 1],
                             [0, 0, 1, 1]], dtype=torch.bool)
    assert torch.equal(band_mask(4, 2), expected)
    assert torch.equal(band_mask(4, 2, causal=True), expected.tril())


@PROPERTY
@given(length=st.integers(1, 12), window=st.integers(1, 14))
def test_band_is_inside_the_full_mask_and_grows_with_the_window(length, window):
    mask = band_mask(length, window)
    assert torch.equal(mask, mask.T)                                  # symmetric
    assert bool(mask.diagonal().all())                                # a query sees itself
    assert torch.equal(mask & band_mask(length, window + 1), mask)    # nested windows
    keys = mask.sum(dim=-1)                                           # keys per query
    assert int(keys.max()) == min(2 * window - 1, length)
    causal = band_mask(length, window, causal=True)
    assert torch.equal(causal, mask & causal_mask(length))
    assert int(causal.sum(dim=-1).max()) == min(window, length)
    if window >= length:
        assert bool(mask.all()) and torch.equal(causal, causal_mask(length))


def test_blocked_keys_get_exactly_zero_weight():
    scores = randn(0, 2, 6, 6)
    weights = masked_softmax(scores, band_mask(6, 2))
    assert bool((weights[..., ~band_mask(6, 2)] == 0).all())
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 6, dtype=torch.float64))


def test_is_exported_at_the_top_level():
    assert att.band_mask is band_mask


def test_bad_input_is_named():
    with pytest.raises(ValueError, match=r"window must be at least 1 .*got 0"):
        band_mask(5, 0)
    with pytest.raises(TypeError, match="window must be an int, got float"):
        band_mask(5, 2.0)
    with pytest.raises(TypeError, match="window must be an int, got bool"):
        band_mask(5, True)
    with pytest.raises(ValueError, match="length must be positive, got 0"):
        band_mask(0, 2)
    with pytest.raises(TypeError, match="causal must be a bool, got int"):
        band_mask(5, 2, causal=1)
