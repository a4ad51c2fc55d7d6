"""Tests of attention_src.softmax_jacobian: against autograd, by hand, and on bad input."""

from __future__ import annotations

import math

import pytest
import torch

from attention_src import softmax_jacobian


def _autograd_jacobian(scores: torch.Tensor) -> torch.Tensor:
    """Jacobian of torch.softmax over the last axis, one (n, n) block per row of ``scores``."""
    rows = scores.reshape(-1, scores.shape[-1])
    blocks = [
        torch.autograd.functional.jacobian(lambda s: torch.softmax(s, dim=-1), row)
        for row in rows
    ]
    return torch.stack(blocks).reshape(*scores.shape, scores.shape[-1])


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 6)])
def test_matches_autograd_of_torch_softmax(shape):
    gen = torch.Generator().manual_seed(0)
    scores = 3.0 * torch.randn(shape, generator=gen, dtype=torch.float64)
    weights = torch.softmax(scores, dim=-1)
    jac = softmax_jacobian(weights)
    assert jac.shape == (*shape, shape[-1])
    torch.testing.assert_close(jac, _autograd_jacobian(scores), rtol=1e-12, atol=1e-12)


def test_two_element_case_by_hand():
    # s = (0, log 3): p = (1/4, 3/4); J = [[p0(1-p0), -p0 p1], [-p1 p0, p1(1-p1)]]
    #   = [[3/16, -3/16], [-3/16, 3/16]]
    weights = torch.softmax(torch.tensor([0.0, math.log(3.0)], dtype=torch.float64), dim=-1)
    expected = torch.tensor([[3.0, -3.0], [-3.0, 3.0]], dtype=torch.float64) / 16
    torch.testing.assert_close(softmax_jacobian(weights), expected, rtol=0, atol=1e-15)


def test_properties_symmetric_rows_sum_to_zero_and_one_hot_gives_zero():
    gen = torch.Generator().manual_seed(1)
    weights = torch.softmax(torch.randn(4, 7, generator=gen, dtype=torch.float64), dim=-1)
    jac = softmax_jacobian(weights)
    torch.testing.assert_close(jac, jac.transpose(-1, -2))
    torch.testing.assert_close(jac.sum(-1), torch.zeros(4, 7, dtype=torch.float64))
    one_hot = torch.tensor([0.0, 1.0, 0.0])
    assert torch.equal(softmax_jacobian(one_hot), torch.zeros(3, 3))


def test_uniform_row_has_frobenius_norm_sqrt_n_minus_1_over_n():
    n = 16
    jac = softmax_jacobian(torch.full((n,), 1.0 / n, dtype=torch.float64))
    assert math.isclose(float(torch.linalg.matrix_norm(jac)), math.sqrt(n - 1) / n, rel_tol=1e-12)


@pytest.mark.parametrize(
    ("bad", "error", "match"),
    [
        (torch.tensor([1, 0]), TypeError, "floating-point"),
        ([0.5, 0.5], TypeError, "torch.Tensor"),
        (torch.tensor(0.5), ValueError, "at least 1 dimensions"),
    ],
)
def test_bad_input_is_rejected(bad, error, match):
    with pytest.raises(error, match=match):
        softmax_jacobian(bad)


def test_bad_input_messages_name_the_weights_argument():
    """Each message starts with the argument's name, so a caller sees which input is at fault."""
    with pytest.raises(TypeError, match=r"^weights must be a torch\.Tensor, got list$"):
        softmax_jacobian([0.5, 0.5])
    with pytest.raises(TypeError, match=r"^weights must be a floating-point tensor, got dtype "
                                        r"torch\.int64"):
        softmax_jacobian(torch.tensor([1, 0]))
    with pytest.raises(ValueError, match=r"^weights must have at least 1 dimensions, got shape "
                                         r"\(\)$"):
        softmax_jacobian(torch.tensor(0.5))
