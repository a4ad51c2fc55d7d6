"""sinusoidal_positional_encoding (attention_src.positional) against a hand loop of the formula

    PE[pos, 2i] = sin(pos / 10000^(2i/d)),  PE[pos, 2i+1] = cos(pos / 10000^(2i/d)).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import attention_src as att
from attention_src.positional import shift_rotation, sinusoidal_positional_encoding
from tests.conftest import PROPERTY


def _hand_pe(length: int, d: int, base: float = 10000.0) -> list[list[float]]:
    table = []
    for pos in range(length):
        row = []
        for col in range(d):
            i = col // 2  # column pair index: columns 2i and 2i+1 share a frequency
            angle = pos / base ** (2 * i / d)
            row.append(math.sin(angle) if col % 2 == 0 else math.cos(angle))
        table.append(row)
    return table


@pytest.mark.parametrize("d", [1, 2, 3, 4, 7, 8, 16, 33])
@pytest.mark.parametrize("length", [1, 5, 50])
def test_equals_hand_loop_for_even_and_odd_d(length, d):
    pe = sinusoidal_positional_encoding(length, d, dtype=torch.float64)
    assert pe.shape == (length, d)
    expected = torch.tensor(_hand_pe(length, d), dtype=torch.float64)
    torch.testing.assert_close(pe, expected, atol=1e-12, rtol=0)


def test_custom_base():
    pe = sinusoidal_positional_encoding(6, 4, base=100.0, dtype=torch.float64)
    torch.testing.assert_close(pe, torch.tensor(_hand_pe(6, 4, base=100.0), dtype=torch.float64),
                               atol=1e-12, rtol=0)


def test_known_values():
    pe = sinusoidal_positional_encoding(3, 4, dtype=torch.float64)
    assert pe[0].tolist() == [0.0, 1.0, 0.0, 1.0]  # position 0: sin 0 = 0, cos 0 = 1
    # position 1, pair 0: angle 1; pair 1: angle 1/10000^(2/4) = 0.01
    torch.testing.assert_close(pe[1], torch.tensor([math.sin(1), math.cos(1), math.sin(0.01),
                                                    math.cos(0.01)], dtype=torch.float64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_dtype_and_range(dtype):
    pe = sinusoidal_positional_encoding(100, 10, dtype=dtype)
    assert pe.dtype == dtype and pe.shape == (100, 10)
    assert pe.abs().max() <= 1
    ref = torch.tensor(_hand_pe(100, 10), dtype=torch.float64).to(dtype)
    torch.testing.assert_close(pe, ref, atol=0, rtol=0)  # computed in float64, rounded once


def test_default_dtype_is_float32():
    assert sinusoidal_positional_encoding(4, 6).dtype == torch.float32
    assert att.sinusoidal_positional_encoding is sinusoidal_positional_encoding


def test_each_sin_cos_pair_has_unit_norm():
    pe = sinusoidal_positional_encoding(20, 8, dtype=torch.float64)
    pairs = pe.reshape(20, 4, 2)
    torch.testing.assert_close(pairs.pow(2).sum(-1), torch.ones(20, 4, dtype=torch.float64))


def test_rejects_bad_arguments():
    with pytest.raises(ValueError, match="length must be positive, got 0"):
        sinusoidal_positional_encoding(0, 4)
    with pytest.raises(ValueError, match="dim must be positive, got -2"):
        sinusoidal_positional_encoding(5, -2)
    with pytest.raises(TypeError, match="length must be an int, got float"):
        sinusoidal_positional_encoding(5.0, 4)
    with pytest.raises(TypeError, match="dim must be an int, got bool"):
        sinusoidal_positional_encoding(5, True)
    with pytest.raises(TypeError, match="dtype must be a floating torch.dtype, got torch.int64"):
        sinusoidal_positional_encoding(5, 4, dtype=torch.int64)
    with pytest.raises(TypeError, match="dtype must be a floating torch.dtype, got torch.bool"):
        sinusoidal_positional_encoding(5, 4, dtype=torch.bool)
    with pytest.raises(TypeError, match="dtype must be a floating torch.dtype, got 'float32'"):
        sinusoidal_positional_encoding(5, 4, dtype="float32")
    # base 0 would divide by 0 ** (2i/d) = 0 and fill the table with NaN
    for bad in (0.0, -10.0, math.inf, math.nan):
        with pytest.raises(ValueError, match=f"base must be positive and finite, got {bad}"):
            sinusoidal_positional_encoding(5, 4, base=bad)
    with pytest.raises(TypeError, match="base must be a real number, got str"):
        sinusoidal_positional_encoding(5, 4, base="10000")


def test_base_may_be_any_real_number_type():
    ref = sinusoidal_positional_encoding(4, 6, base=100.0)
    for base in (100, np.int64(100), np.float32(100.0)):
        torch.testing.assert_close(sinusoidal_positional_encoding(4, 6, base=base), ref)


# ---------------------------------------------------------------- shift_rotation


def test_shift_rotation_by_hand():
    # d = 4: block 0 turns by k, block 1 by k / 10000^(2/4) = k / 100
    R = shift_rotation(2, 4)
    c0, s0, c1, s1 = math.cos(2), math.sin(2), math.cos(0.02), math.sin(0.02)
    expected = torch.tensor(
        [[c0, -s0, 0, 0], [s0, c0, 0, 0], [0, 0, c1, -s1], [0, 0, s1, c1]], dtype=torch.float64
    )
    torch.testing.assert_close(R, expected, atol=1e-15, rtol=0)
    assert shift_rotation(1, 4, dtype=torch.float32).dtype == torch.float32


@PROPERTY
@given(st.integers(-60, 60), st.integers(1, 16), st.sampled_from([100.0, 10000.0]))
def test_shift_rotation_moves_the_table(k, half, base):
    d = 2 * half
    pe = _hand_table(130, d, base)  # (130, d), from the hand loop of the formula
    R = shift_rotation(k, d, base)
    if k >= 0:
        moved, target = pe[: 130 - k] @ R, pe[k:]
    else:
        moved, target = pe[-k:] @ R, pe[: 130 + k]
    torch.testing.assert_close(moved, target, atol=1e-12, rtol=0)
    eye = torch.eye(d, dtype=torch.float64)
    torch.testing.assert_close(R @ R.T, eye, atol=1e-12, rtol=0)  # orthogonal
    torch.testing.assert_close(shift_rotation(-k, d, base), R.T, atol=1e-12, rtol=0)
    torch.testing.assert_close(  # shifts compose
        shift_rotation(3, d, base) @ R, shift_rotation(k + 3, d, base), atol=1e-12, rtol=0
    )


def _hand_table(length: int, d: int, base: float) -> torch.Tensor:
    return torch.tensor(_hand_pe(length, d, base), dtype=torch.float64)


def test_shift_rotation_rejects_bad_arguments():
    with pytest.raises(ValueError, match="dim must be even .*got 5"):
        shift_rotation(1, 5)
    with pytest.raises(ValueError, match="dim must be positive, got 0"):
        shift_rotation(1, 0)
    with pytest.raises(TypeError, match="k must be an int, got float"):
        shift_rotation(1.5, 4)
    with pytest.raises(TypeError, match="k must be an int, got bool"):
        shift_rotation(True, 4)
    with pytest.raises(ValueError, match="base must be positive and finite, got 0.0"):
        shift_rotation(1, 4, base=0.0)
    with pytest.raises(TypeError, match="dtype must be a floating torch.dtype, got torch.int64"):
        shift_rotation(1, 4, dtype=torch.int64)


# ---------------------------------------------------------------- boundaries and messages


@pytest.mark.parametrize("base", [0.5, 1.0, 1, 2.0])
def test_any_positive_base_is_accepted_even_at_or_below_one(base):
    """base > 0 is the whole condition: base 1 gives every pair the same angle pos, a base
    below 1 frequencies that grow along the pairs. Both follow the hand loop."""
    pe = sinusoidal_positional_encoding(5, 6, base=base, dtype=torch.float64)
    torch.testing.assert_close(pe, _hand_table(5, 6, float(base)), atol=1e-12, rtol=0)
    R = shift_rotation(2, 6, base=base)
    torch.testing.assert_close(pe[:3] @ R, pe[2:], atol=1e-12, rtol=0)


def test_defaults_of_the_table_and_the_shift():
    """base 10000 and float32 (table) / float64 (shift) by default, as written out."""
    assert torch.equal(sinusoidal_positional_encoding(7, 6),
                       sinusoidal_positional_encoding(7, 6, 10000.0, torch.float32))
    assert torch.equal(shift_rotation(3, 6), shift_rotation(3, 6, 10000.0, torch.float64))
    assert shift_rotation(3, 6).dtype == torch.float64


@pytest.mark.parametrize("fn,args", [
    ("table", (5, 4)), ("shift", (1, 4)),
])
def test_bad_base_and_dtype_messages_are_anchored(fn, args):
    call = sinusoidal_positional_encoding if fn == "table" else shift_rotation
    for bad, name in ((None, "NoneType"), ("100", "str"), (True, "bool"),
                      (torch.tensor(100.0), "Tensor")):
        with pytest.raises(TypeError, match=rf"^base must be a real number, got {name}$"):
            call(*args, base=bad)
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match=rf"^base must be positive and finite, got {bad}$"):
            call(*args, base=bad)
    for bad, shown in ((torch.int32, "torch.int32"), ("float64", "'float64'"),
                       (float, "<class 'float'>")):
        with pytest.raises(TypeError, match=rf"^dtype must be a floating torch\.dtype, got "
                                            rf"{re.escape(shown)}$"):
            call(*args, dtype=bad)


def test_table_names_each_bad_size():
    for args, error, message in (
        ((0, 4), ValueError, r"^length must be positive, got 0$"),
        ((4, 0), ValueError, r"^dim must be positive, got 0$"),
        ((4.0, 4), TypeError, r"^length must be an int, got float$"),
        ((4, None), TypeError, r"^dim must be an int, got NoneType$"),
    ):
        with pytest.raises(error, match=message):
            sinusoidal_positional_encoding(*args)


def test_shift_names_each_bad_argument():
    for args, error, message in (
        ((1.0, 4), TypeError, r"^k must be an int, got float$"),
        ((None, 4), TypeError, r"^k must be an int, got NoneType$"),
        ((False, 4), TypeError, r"^k must be an int, got bool$"),
        ((1, 0), ValueError, r"^dim must be positive, got 0$"),
        ((1, 2.0), TypeError, r"^dim must be an int, got float$"),
        ((1, 3), ValueError, r"^dim must be even \(sine and cosine pairs\), got 3$"),
        ((1, 6), None, None),  # an even width that is not a multiple of 4 passes
    ):
        if error is None:
            assert shift_rotation(*args).shape == (6, 6)
            continue
        with pytest.raises(error, match=message):
            shift_rotation(*args)


def test_shift_takes_numpy_integers_as_the_same_int():
    torch.testing.assert_close(shift_rotation(np.int64(-3), 4), shift_rotation(-3, 4),
                               atol=0, rtol=0)


def test_shift_rotation_of_two_dimensions_is_the_plain_rotation():
    """d = 2: a single block turning by k radians, [[cos k, -sin k], [sin k, cos k]]."""
    R = shift_rotation(1, 2)
    c, s = math.cos(1.0), math.sin(1.0)
    torch.testing.assert_close(R, torch.tensor([[c, -s], [s, c]], dtype=torch.float64),
                               atol=1e-15, rtol=0)
