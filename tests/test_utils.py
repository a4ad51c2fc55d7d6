"""set_seed and count_parameters (attention_src.utils), beyond tests/test_plotting_utils.py."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch import nn

from attention_src.utils import count_parameters, set_seed


def _numpy_draw() -> list[float]:
    return np.random.rand(4).tolist()  # noqa: NPY002 - the global generator set_seed seeds


@pytest.mark.parametrize("seed", [0, 1, 2, 5, 33, 2**31 - 1, 2**32 - 1])
def test_set_seed_seeds_numpy_as_np_random_seed_does_for_seeds_numpy_takes(seed):
    """For a seed NumPy accepts (0 .. 2**32 - 1), set_seed(s) is np.random.seed(s)."""
    np.random.seed(seed)  # noqa: NPY002
    expected = _numpy_draw()
    set_seed(seed)
    assert _numpy_draw() == expected


@pytest.mark.parametrize("seed", [2**32, 2**32 + 5, 2**40 + 3, 2**64 - 1, -1, -(2**63)])
def test_set_seed_reduces_other_seeds_modulo_2_to_the_32_for_numpy(seed):
    """Seeds outside NumPy's range are wrapped into it, not rejected or collapsed."""
    reduced = seed % 2**32
    assert 0 <= reduced < 2**32
    np.random.seed(reduced)  # noqa: NPY002
    expected = _numpy_draw()
    set_seed(seed)
    assert _numpy_draw() == expected


def test_set_seed_gives_distinct_numpy_streams_for_distinct_small_seeds():
    streams = []
    for seed in range(6):
        set_seed(seed)
        streams.append(tuple(_numpy_draw()))
    assert len(set(streams)) == 6


@pytest.mark.parametrize("seed", [3, 2**40, -5])
def test_set_seed_seeds_python_and_torch_with_the_seed_itself(seed):
    random.seed(seed)
    expected_py = random.random()
    torch.manual_seed(seed)
    expected_torch = torch.rand(3)
    set_seed(seed)
    assert random.random() == expected_py
    assert torch.equal(torch.rand(3), expected_torch)


def test_count_parameters_counts_elements_not_tensors():
    """A (5, 7) weight is 35 parameters, its bias 5; a frozen one is left out."""
    model = nn.Linear(7, 5)
    assert count_parameters(model) == 7 * 5 + 5
    assert count_parameters(model) == sum(p.numel() for p in model.parameters())
    model.weight.requires_grad_(False)
    assert count_parameters(model) == 5
