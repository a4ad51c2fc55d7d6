"""The input checks of attention_src.validation, called directly.

Every public function of the package relies on these four helpers to turn bad input into a
``TypeError``/``ValueError`` that names the argument and the problem. Each check is tested on
both sides of its boundary, and each message is matched from its start, so that a message that
loses the argument's name (or reports the wrong type) fails.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attention_src.validation import (
    check_mask,
    check_positive_int,
    check_same_dtype,
    check_tensor,
)

# --- check_tensor --------------------------------------------------------------------------


@pytest.mark.parametrize("bad,type_name", [([[1.0]], "list"), (np.zeros((2, 2)), "ndarray"),
                                           (None, "NoneType"), (3.0, "float")])
def test_check_tensor_rejects_non_tensors_naming_argument_and_type(bad, type_name):
    with pytest.raises(TypeError, match=rf"^query must be a torch\.Tensor, got {type_name}$"):
        check_tensor("query", bad)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.uint8])
def test_check_tensor_rejects_non_floating_dtypes_with_a_fix(dtype):
    x = torch.zeros(2, 3, dtype=dtype)
    with pytest.raises(
        TypeError,
        match=rf"^key must be a floating-point tensor, got dtype {dtype}; "
        r"convert it first, e.g\. key\.float\(\)$",
    ):
        check_tensor("key", x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_check_tensor_accepts_every_floating_dtype_and_returns_the_same_object(dtype):
    x = torch.zeros(2, 3, dtype=dtype)
    assert check_tensor("x", x) is x


def test_check_tensor_default_min_rank_is_two():
    """A matrix passes with the default rank, a vector does not (both sides of ``< 2``)."""
    matrix = torch.zeros(2, 3)
    assert check_tensor("x", matrix) is matrix
    with pytest.raises(ValueError, match=r"^x must have at least 2 dimensions, got shape \(3,\)$"):
        check_tensor("x", torch.zeros(3))


@pytest.mark.parametrize("min_rank", [0, 1, 2, 3, 4])
def test_check_tensor_rank_boundary(min_rank):
    """Rank exactly ``min_rank`` passes; one less fails and the message gives both."""
    exact = torch.zeros((2,) * min_rank)
    assert check_tensor("value", exact, min_rank=min_rank) is exact
    if min_rank > 0:
        short = torch.zeros((2,) * (min_rank - 1))
        with pytest.raises(
            ValueError,
            match=rf"^value must have at least {min_rank} dimensions, "
            rf"got shape {re_shape(short.shape)}$",
        ):
            check_tensor("value", short, min_rank=min_rank)


def re_shape(shape: torch.Size) -> str:
    """``tuple(shape)`` as a regular expression."""
    return str(tuple(shape)).replace("(", r"\(").replace(")", r"\)")


# --- check_same_dtype ----------------------------------------------------------------------


def test_check_same_dtype_accepts_one_shared_dtype_and_no_tensors():
    a, b, c = torch.zeros(2), torch.ones(3), torch.zeros(1, 1)
    assert check_same_dtype(query=a, key=b, value=c) is None
    assert check_same_dtype(query=a) is None
    assert check_same_dtype() is None


def test_check_same_dtype_lists_every_argument_with_its_dtype():
    with pytest.raises(
        TypeError,
        match=r"^inputs must share one dtype, got query: torch\.float32, "
        r"key: torch\.float64, value: torch\.float32$",
    ):
        check_same_dtype(query=torch.zeros(2), key=torch.zeros(2, dtype=torch.float64),
                         value=torch.zeros(2))


def test_check_same_dtype_rejects_two_different_dtypes():
    """Two distinct dtypes already fail (the check is ``more than one``, not ``more than two``)."""
    with pytest.raises(TypeError, match=r"^inputs must share one dtype, got a: torch\.float16"):
        check_same_dtype(a=torch.zeros(1, dtype=torch.float16), b=torch.zeros(1))


# --- check_mask ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mask_shape,target",
    [
        ((2, 3, 4), (2, 3, 4)),  # the full shape
        ((3, 4), (2, 3, 4)),  # fewer dimensions, shared by the batch
        ((4,), (2, 3, 4)),  # one key mask for every query
        ((1, 1, 4), (2, 3, 4)),  # size-1 dimensions
        ((2, 1, 4), (2, 3, 4)),  # a padding mask
        ((), (3, 4)),  # a scalar
    ],
)
def test_check_mask_accepts_every_broadcast_that_keeps_the_target_shape(mask_shape, target):
    mask = torch.ones(mask_shape, dtype=torch.bool)
    assert check_mask(mask, torch.Size(target)) is mask
    assert check_mask(mask, target) is mask  # a plain tuple works too
    # The same verdict as torch's own broadcasting.
    assert torch.broadcast_shapes(mask.shape, target) == target


@pytest.mark.parametrize(
    "mask_shape,target",
    [
        ((2, 2, 3, 4), (2, 3, 4)),  # an extra leading dimension would enlarge the scores
        ((1, 3, 4), (3, 4)),  # even an extra dimension of size 1
        ((5, 4), (2, 3, 4)),  # a size that is neither 1 nor the target's
        ((3, 2), (2, 3, 4)),
        ((2, 4), (3, 4)),  # 2 is neither 1 nor 3
    ],
)
def test_check_mask_rejects_shapes_that_would_change_the_scores(mask_shape, target):
    mask = torch.ones(mask_shape, dtype=torch.bool)
    with pytest.raises(
        ValueError,
        match=rf"^mask of shape {re_shape(mask_shape)} does not broadcast to the "
        rf"scores' shape {re_shape(target)}$",
    ):
        check_mask(mask, torch.Size(target))


def test_check_mask_rejects_an_extra_dimension_even_where_torch_would_broadcast():
    """Torch broadcasts ``(1, 3, 4)`` with ``(3, 4)`` to ``(1, 3, 4)``: the scores would grow."""
    assert torch.broadcast_shapes((1, 3, 4), (3, 4)) == (1, 3, 4)
    with pytest.raises(ValueError, match=r"^mask of shape \(1, 3, 4\) does not broadcast"):
        check_mask(torch.ones(1, 3, 4, dtype=torch.bool), (3, 4))


def test_check_mask_default_name_is_mask_and_a_given_name_is_used():
    with pytest.raises(TypeError, match=r"^mask must be a boolean torch\.Tensor, got list$"):
        check_mask([[True]], (1, 1))
    with pytest.raises(TypeError, match=r"^mask must have dtype torch\.bool"):
        check_mask(torch.ones(1, 1), (1, 1))
    with pytest.raises(ValueError, match=r"^mask of shape \(2,\)"):
        check_mask(torch.ones(2, dtype=torch.bool), (1, 3))
    with pytest.raises(TypeError, match=r"^key_padding_mask must be a boolean torch\.Tensor"):
        check_mask(None, (1, 1), name="key_padding_mask")


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8])
def test_check_mask_rejects_non_boolean_masks_with_a_fix(dtype):
    with pytest.raises(
        TypeError,
        match=rf"^attn_mask must have dtype torch\.bool \(True = may attend\), got {dtype}; "
        r"for a 0/1 mask use attn_mask\.bool\(\)$",
    ):
        check_mask(torch.ones(2, 2, dtype=dtype), (2, 2), name="attn_mask")


@pytest.mark.parametrize("bad,type_name", [(np.ones((2, 2), dtype=bool), "ndarray"),
                                           (None, "NoneType"), (True, "bool")])
def test_check_mask_rejects_non_tensors_naming_the_type(bad, type_name):
    with pytest.raises(TypeError,
                       match=rf"^mask must be a boolean torch\.Tensor, got {type_name}$"):
        check_mask(bad, (2, 2))


# --- check_positive_int --------------------------------------------------------------------


@pytest.mark.parametrize("value", [1, 2, 10**6])
def test_check_positive_int_accepts_positive_ints_and_returns_them(value):
    assert check_positive_int("num_heads", value) == value


@pytest.mark.parametrize("value", [0, -1, -7])
def test_check_positive_int_rejects_zero_and_negatives(value):
    """1 passes (above) and 0 fails: the boundary of ``<= 0`` on both sides."""
    with pytest.raises(ValueError, match=rf"^num_heads must be positive, got {value}$"):
        check_positive_int("num_heads", value)


@pytest.mark.parametrize("bad,type_name", [(True, "bool"), (False, "bool"), (2.0, "float"),
                                           ("3", "str"), (None, "NoneType")])
def test_check_positive_int_rejects_non_ints_and_bools(bad, type_name):
    with pytest.raises(TypeError, match=rf"^length must be an int, got {type_name}$"):
        check_positive_int("length", bad)
