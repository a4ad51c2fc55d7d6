"""apply_rotary (attention_src.positional): rotary position embedding (Su et al., 2021).

References independent of the implementation: the complex-number form used by the original
LLaMA code (each feature pair is a complex number multiplied by exp(i m theta)), and an explicit
block-diagonal rotation matrix built entry by entry. Properties: the rotated dot product depends
on positions only through their difference, norms are preserved, position 0 is the identity.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import attention_src as att
from attention_src.positional import apply_rotary, sinusoidal_positional_encoding
from tests.conftest import PROPERTY, TOL, randn, seeds


def _rotary_complex(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0):
    """Reference: pairs (x[2i], x[2i+1]) as complex numbers times exp(i * m * theta_i)."""
    d = x.shape[-1]
    theta = torch.tensor([base ** (-2 * i / d) for i in range(d // 2)], dtype=torch.float64)
    angle = positions.double()[..., None] * theta
    rot = torch.polar(torch.ones_like(angle), angle)                      # exp(i angle)
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(pairs * rot).reshape(x.shape).to(x.dtype)


def _rotation_matrix(m: float, d: int, base: float = 10000.0) -> torch.Tensor:
    """Reference: the (d, d) block-diagonal matrix R_m with rows as outputs (column vectors)."""
    R = torch.zeros(d, d, dtype=torch.float64)
    for i in range(d // 2):
        a = m * base ** (-2 * i / d)
        R[2 * i, 2 * i], R[2 * i, 2 * i + 1] = math.cos(a), -math.sin(a)
        R[2 * i + 1, 2 * i], R[2 * i + 1, 2 * i + 1] = math.sin(a), math.cos(a)
    return R


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(5, 2), (3, 7, 8), (2, 3, 4, 6)])
def test_equals_the_complex_number_form(shape, dtype):
    x = randn(0, *shape, dtype=dtype)
    positions = torch.arange(shape[-2])
    got = apply_rotary(x, positions)
    assert got.shape == x.shape and got.dtype == dtype
    torch.testing.assert_close(got, _rotary_complex(x, positions), **TOL[dtype])


def test_equals_a_hand_built_rotation_matrix():
    x = randn(1, 4, 6)                                   # 4 positions, d = 6
    positions = torch.tensor([0, 1, 5, 12])
    got = apply_rotary(x, positions, base=100.0)
    for row, m in enumerate(positions.tolist()):
        expected = _rotation_matrix(m, 6, base=100.0) @ x[row]
        torch.testing.assert_close(got[row], expected, atol=1e-12, rtol=0)


def test_uses_the_frequencies_of_the_sinusoidal_table():
    """Rotating the unit vector e_0 of pair i gives (cos, sin) of the table's angle for pair i."""
    L, d = 9, 8
    x = torch.zeros(L, d, dtype=torch.float64)
    x[:, 0::2] = 1.0                                     # (1, 0) in every pair
    rotated = apply_rotary(x, torch.arange(L))
    pe = sinusoidal_positional_encoding(L, d, dtype=torch.float64)
    torch.testing.assert_close(rotated[:, 0::2], pe[:, 1::2], atol=1e-12, rtol=0)  # cos
    torch.testing.assert_close(rotated[:, 1::2], pe[:, 0::2], atol=1e-12, rtol=0)  # sin


@PROPERTY
@given(seed=seeds, half=st.integers(1, 8), m=st.integers(-50, 50), n=st.integers(-50, 50),
       shift=st.integers(-1000, 1000))
def test_rotated_dot_product_depends_only_on_the_offset(seed, half, m, n, shift):
    q, k = randn(seed, 1, 2 * half), randn(seed + 1, 1, 2 * half)
    at = apply_rotary(q, torch.tensor([m])) @ apply_rotary(k, torch.tensor([n])).T
    shifted = apply_rotary(q, torch.tensor([m + shift])) @ apply_rotary(
        k, torch.tensor([n + shift])).T
    torch.testing.assert_close(at, shifted, atol=1e-9, rtol=0)


@PROPERTY
@given(seed=seeds, half=st.integers(1, 8), L=st.integers(1, 6))
def test_norms_are_kept_and_position_zero_is_the_identity(seed, half, L):
    x = randn(seed, 2, L, 2 * half)
    positions = torch.arange(L) * 3.5                    # fractional positions are allowed
    torch.testing.assert_close(
        apply_rotary(x, positions).norm(dim=-1), x.norm(dim=-1), atol=1e-10, rtol=0)
    torch.testing.assert_close(apply_rotary(x, torch.zeros(L)), x, atol=0, rtol=0)


def test_batched_positions_broadcast_per_sequence():
    x = randn(2, 2, 3, 4)
    positions = torch.tensor([[0, 1, 2], [10, 11, 12]])  # (B, L): another offset per sequence
    got = apply_rotary(x, positions)
    for b in range(2):
        torch.testing.assert_close(got[b], apply_rotary(x[b], positions[b]), atol=0, rtol=0)
    assert not torch.allclose(got[0], got[1])


def test_is_exported_at_the_top_level():
    assert att.apply_rotary is apply_rotary


def test_bad_input_is_named():
    x = randn(0, 3, 5)
    with pytest.raises(ValueError, match=r"last dimension of x must be even.*\(3, 5\)"):
        apply_rotary(x, torch.arange(3))
    x = randn(0, 3, 4)
    with pytest.raises(ValueError, match=r"positions of shape \(4,\) must be \(L,\) = \(3,\)"):
        apply_rotary(x, torch.arange(4))
    with pytest.raises(ValueError, match=r"positions of shape \(2, 3\) must be \(L,\) = \(3,\)"):
        apply_rotary(x, torch.zeros(2, 3))                # would enlarge x's batch shape
    with pytest.raises(TypeError, match="positions must be a torch.Tensor, got list"):
        apply_rotary(x, [0, 1, 2])
    with pytest.raises(TypeError, match="positions must hold integers or real numbers"):
        apply_rotary(x, torch.ones(3, dtype=torch.bool))
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        apply_rotary(torch.ones(3, 4, dtype=torch.long), torch.arange(3))
    with pytest.raises(ValueError, match="x must have at least 2 dimensions"):
        apply_rotary(torch.ones(4), torch.arange(1))
    with pytest.raises(ValueError, match=r"positions must be finite, got \[0.0, nan, 2.0\]"):
        apply_rotary(x, torch.tensor([0.0, float("nan"), 2.0]))
    with pytest.raises(ValueError, match="positions must be finite"):
        apply_rotary(x, torch.tensor([0.0, float("inf"), 2.0]))
    with pytest.raises(ValueError, match="base must be positive and finite, got 0"):
        apply_rotary(x, torch.arange(3), base=0)
    with pytest.raises(TypeError, match="base must be a real number, got str"):
        apply_rotary(x, torch.arange(3), base="10000")


def test_positions_of_shape_one_by_L_broadcast_over_the_batch():
    """(1, L) positions, like (L,), give every sequence of the batch the same positions."""
    x = randn(3, 4, 5, 6)  # (B=4, L=5, d=6)
    shared = apply_rotary(x, torch.arange(5))
    torch.testing.assert_close(apply_rotary(x, torch.arange(5)[None, :]), shared, atol=0,
                               rtol=0)
    torch.testing.assert_close(apply_rotary(x, torch.arange(5).expand(4, 5)), shared, atol=0,
                               rtol=0)
    x4 = randn(4, 2, 3, 5, 4)  # (2, 3, L=5, d=4) with (1, 3, 5) positions: one row per middle index
    pos = torch.arange(15).reshape(1, 3, 5)
    got = apply_rotary(x4, pos)
    for j in range(3):
        torch.testing.assert_close(got[:, j], apply_rotary(x4[:, j], pos[0, j]), atol=0, rtol=0)


def test_per_sequence_positions_for_heads_need_an_axis_for_the_heads():
    """x of shape (B, h, L, d) with B == h: (B, L) positions, broadcast from the left, would be
    lined up with the heads, not the sequences. They are rejected with both shapes named;
    (B, 1, L) gives each sequence its own positions in every head."""
    x = randn(5, 2, 2, 3, 4)  # (B=2, h=2, L=3, d=4)
    pos = torch.tensor([[0, 1, 2], [10, 11, 12]])  # (B, L): one row per sequence
    with pytest.raises(ValueError, match=r"^positions of shape \(2, 3\) must be \(L,\) = \(3,\) "
                                         r"or have one axis per axis of x\.shape\[:-1\] = "
                                         r"\(2, 2, 3\), each 1 or equal \(x has shape "
                                         r"\(2, 2, 3, 4\)\)$"):
        apply_rotary(x, pos)
    got = apply_rotary(x, pos[:, None, :])  # (B, 1, L)
    for b in range(2):
        for r in range(2):
            torch.testing.assert_close(got[b, r], apply_rotary(x[b, r], pos[b]), atol=0, rtol=0)
    assert not torch.allclose(got[0, 0], apply_rotary(x[0, 0], pos[1]))


@pytest.mark.parametrize("shape", [(5,), (1, 1, 5), (2, 1, 5), (1, 3, 5), (2, 3, 5), (1, 5),
                                   (3, 5), (4, 1, 5), (1, 2, 3, 5), (2, 3, 4)])
def test_positions_must_be_one_row_or_match_every_leading_axis(shape):
    """x is (2, 3, 5, 4): positions are (L,), or of rank 3 with each axis 1 or x's; nothing is
    broadcast from the left, and no axis is added or changed."""
    x = randn(0, 2, 3, 5, 4)
    if shape in ((5,), (1, 1, 5), (2, 1, 5), (1, 3, 5), (2, 3, 5)):
        assert apply_rotary(x, torch.zeros(shape)).shape == x.shape
        return
    text = ", ".join(str(n) for n in shape)
    with pytest.raises(ValueError, match=rf"^positions of shape \({text}\) must be \(L,\) = "
                                         r"\(5,\) or have one axis per axis of x\.shape\[:-1\] = "
                                         r"\(2, 3, 5\), each 1 or equal \(x has shape "
                                         r"\(2, 3, 5, 4\)\)$"):
        apply_rotary(x, torch.zeros(shape))


def test_positions_with_too_many_axes_or_none_are_rejected():
    x = randn(0, 3, 4)
    for pos in (torch.zeros(1, 3), torch.tensor(2)):
        with pytest.raises(ValueError, match=r"^positions of shape \(.*\) must be \(L,\) = \(3,\)"):
            apply_rotary(x, pos)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.bool])
def test_complex_and_boolean_positions_are_rejected(dtype):
    x = randn(0, 3, 4)
    with pytest.raises(TypeError, match=rf"^positions must hold integers or real numbers, got "
                                        rf"{dtype}$"):
        apply_rotary(x, torch.zeros(3, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.float16, torch.float32])
def test_any_integer_or_real_positions_give_the_same_rotation(dtype):
    x = randn(0, 2, 5, 6)
    ref = apply_rotary(x, torch.arange(5))
    torch.testing.assert_close(apply_rotary(x, torch.arange(5).to(dtype)), ref, atol=0, rtol=0)


def test_bad_x_and_positions_messages_are_anchored():
    x = randn(0, 3, 4)
    with pytest.raises(TypeError, match=r"^x must be a torch\.Tensor, got list$"):
        apply_rotary([[0.0] * 4] * 3, torch.arange(3))
    with pytest.raises(TypeError, match=r"^x must be a floating-point tensor, got dtype "
                                        r"torch\.int64"):
        apply_rotary(torch.ones(3, 4, dtype=torch.long), torch.arange(3))
    with pytest.raises(ValueError, match=r"^x must have at least 2 dimensions, got shape "
                                         r"\(4,\)$"):
        apply_rotary(torch.ones(4), torch.arange(1))
    with pytest.raises(ValueError, match=r"^apply_rotary rotates feature pairs, so the last "
                                         r"dimension of x must be even, got x of shape "
                                         r"\(2, 3, 5\) \(d = 5\)$"):
        apply_rotary(randn(0, 2, 3, 5), torch.arange(3))
    with pytest.raises(TypeError, match=r"^positions must be a torch\.Tensor, got ndarray$"):
        apply_rotary(x, torch.arange(3).numpy())
    with pytest.raises(ValueError, match=r"^positions must be finite, got \[0\.0, inf, 2\.0\]$"):
        apply_rotary(x, torch.tensor([0.0, float("inf"), 2.0]))
    with pytest.raises(TypeError, match=r"^base must be a real number, got NoneType$"):
        apply_rotary(x, torch.arange(3), base=None)
    with pytest.raises(ValueError, match=r"^base must be positive and finite, got -1\.0$"):
        apply_rotary(x, torch.arange(3), base=-1.0)


@pytest.mark.parametrize("base", [0.5, 1.0, 100])
def test_any_positive_base_follows_the_rotation_matrix(base):
    x = randn(1, 3, 4)
    got = apply_rotary(x, torch.tensor([0, 2, 7]), base=base)
    for row, m in enumerate([0, 2, 7]):
        torch.testing.assert_close(got[row], _rotation_matrix(m, 4, base=float(base)) @ x[row],
                                   atol=1e-12, rtol=0)


def test_default_base_is_10000():
    x = randn(2, 4, 8)
    assert torch.equal(apply_rotary(x, torch.arange(4)),
                       apply_rotary(x, torch.arange(4), base=10000.0))
