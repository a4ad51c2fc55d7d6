"""Attention scoring functions: how well does a query match a key?

All four share one interface, ``score(query, key) -> scores``:

==================  =======================================  =================================
name                score of query ``q`` and key ``k``       parameters
==================  =======================================  =================================
AdditiveScore       ``tanh(q W_q + k W_k) w_v`` (Bahdanau)   ``(d_q + d_k + 1) * d_a``
DotScore            ``q k^T``                                none (needs ``d_q == d_k``)
ScaledDotScore      ``q k^T / sqrt(d_k)`` (Vaswani)          none (needs ``d_q == d_k``)
BilinearScore       ``q W k^T`` (Luong's "general")          ``d_q * d_k``
==================  =======================================  =================================

(Row vectors, as everywhere in the book: ``q`` is ``(1, d_q)``, ``k`` is ``(1, d_k)``, and a
matrix acts from the right; ``d_a`` is the additive score's hidden width, the argument
``d_hidden``.) The score of query ``i`` against key ``j`` is ``s_ij``; for all pairs the scores
form ``S``, of shape ``(L_q, L_k)``. :class:`Attention` turns any of them into an attention
layer.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attention_src.attention import attention_from_scores
from attention_src.utils import place
from attention_src.validation import (
    check_positive_int,
    check_same_device,
    check_same_dtype,
    check_tensor,
)

__all__ = [
    "Score", "AdditiveScore", "DotScore", "ScaledDotScore", "BilinearScore", "UniformScore",
    "Attention", "SCORE_NAMES", "score_by_name",
]


class Score(nn.Module):
    """Base class: checks the inputs, then calls :meth:`score`.

    ``forward(query: (..., L_q, d_q), key: (..., L_k, d_k)) -> scores: (..., L_q, L_k)``.
    ``d_q`` and ``d_k`` are the feature sizes the module was built for (``None`` = any).
    """

    d_q: int | None = None
    d_k: int | None = None

    def forward(self, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        check_tensor("query", query)
        check_tensor("key", key)
        check_same_dtype(query=query, key=key)
        check_same_device(query=query, key=key)
        name = type(self).__name__
        if self.d_q is not None and query.shape[-1] != self.d_q:
            raise ValueError(
                f"{name} expects query features d_q={self.d_q}, got query {tuple(query.shape)}"
            )
        if self.d_k is not None and key.shape[-1] != self.d_k:
            raise ValueError(
                f"{name} expects key features d_k={self.d_k}, got key {tuple(key.shape)}"
            )
        if query.shape[:-2] != key.shape[:-2]:
            raise ValueError(
                f"query {tuple(query.shape)} and key {tuple(key.shape)} must share their "
                "leading (batch) dimensions"
            )
        return self.score(query, key)

    def score(self, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError(
            f"{type(self).__name__} does not define score(query, key); Score subclasses must"
        )


class AdditiveScore(Score):
    """Additive (Bahdanau) score: a one-hidden-layer MLP on the query and key.

    ``score(q, k) = tanh(q W_q + k W_k) w_v`` with row vectors ``q: (d_q,)``, ``k: (d_k,)``,
    ``W_q: (d_q, d_a)``, ``W_k: (d_k, d_a)`` and ``w_v: (d_a,)``; ``d_hidden`` is the MLP's width
    ``d_a``. Query and key may have different sizes. As everywhere in PyTorch, each
    ``nn.Linear`` stores the transpose of its matrix: ``self.W_q.weight`` is ``W_q^T``, of shape
    ``(d_a, d_q)``, and ``self.w_v.weight`` is ``w_v^T``, of shape ``(1, d_a)``; so the row form
    reads ``W_q.weight.T``, and the papers' column form ``w_v^T tanh(W_q^T q + W_k^T k)`` reads
    the stored weights as they are. For all pairs the score builds a
    ``(..., L_q, L_k, d_a)`` tensor, ``d_a`` times the size of the scores. ``device`` and
    ``dtype`` (keywords) place the module after its weights are drawn on the CPU
    (:func:`attention_src.utils.place`).
    """

    def __init__(self, d_q: int, d_k: int, d_hidden: int, *,
                 device: str | torch.device | None = None, dtype: torch.dtype | None = None):
        super().__init__()
        self.d_q = check_positive_int("d_q", d_q)
        self.d_k = check_positive_int("d_k", d_k)
        check_positive_int("d_hidden", d_hidden)
        self.W_q = nn.Linear(d_q, d_hidden, bias=False)
        self.W_k = nn.Linear(d_k, d_hidden, bias=False)
        self.w_v = nn.Linear(d_hidden, 1, bias=False)
        place(self, device, dtype)

    def score(self, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        q = self.W_q(query).unsqueeze(-2)  # (..., L_q, d_a) -> (..., L_q, 1, d_a)
        k = self.W_k(key).unsqueeze(-3)  # (..., L_k, d_a) -> (..., 1, L_k, d_a)
        features = torch.tanh(q + k)  # broadcast -> (..., L_q, L_k, d_a)
        return self.w_v(features).squeeze(-1)  # (..., L_q, L_k, 1) -> (..., L_q, L_k)


class UniformScore(Score):
    """Control score: every key scores 0, so the weights are uniform over the allowed keys.

    An attention layer with this score averages its values, whatever the query: the baseline
    against which chapter 2 measures what a learned score adds. No parameters.
    ``score(query: (..., L_q, d_q), key: (..., L_k, d_k)) -> (..., L_q, L_k)`` of zeros.
    """

    def score(self, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        return query.new_zeros(*query.shape[:-1], key.shape[-2])  # (..., L_q, L_k)


class DotScore(Score):
    """Dot-product score ``q k^T`` (all pairs: ``S = Q K^T``): no parameters; widths must match."""

    def score(self, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        if query.shape[-1] != key.shape[-1]:
            raise ValueError(
                f"{type(self).__name__} needs query and key of one feature size, got query "
                f"{tuple(query.shape)} and key {tuple(key.shape)}"
            )
        return query @ key.transpose(-2, -1)  # (..., L_q, d) @ (..., d, L_k) -> (..., L_q, L_k)


class ScaledDotScore(DotScore):
    """Scaled dot-product score ``q k^T / sqrt(d_k)`` (Vaswani et al., 2017).

    For query and key components that are independent with mean 0 and variance 1, ``q k^T`` has
    variance ``d_k`` (Vaswani et al.'s footnote 4); the division brings it back to 1.
    """

    def score(self, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        return super().score(query, key) / math.sqrt(key.shape[-1])


class BilinearScore(Score):
    """Bilinear score ``q W k^T`` ("general" in Luong et al., 2015); widths may differ.

    ``self.W`` is a plain parameter of shape ``(d_q, d_k)``, stored as in the formula (not
    transposed, unlike an ``nn.Linear`` weight); the column form ``q^T W k`` uses the same ``W``.
    ``device`` and ``dtype`` (keywords) as in :class:`AdditiveScore`.
    """

    def __init__(self, d_q: int, d_k: int, *, device: str | torch.device | None = None,
                 dtype: torch.dtype | None = None):
        super().__init__()
        self.d_q = check_positive_int("d_q", d_q)
        self.d_k = check_positive_int("d_k", d_k)
        self.W = nn.Parameter(torch.empty(d_q, d_k))
        nn.init.xavier_uniform_(self.W)
        place(self, device, dtype)

    def score(self, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        # (..., L_q, d_q) @ (d_q, d_k) -> (..., L_q, d_k); then @ (..., d_k, L_k) -> (..., L_q, L_k)
        return (query @ self.W) @ key.transpose(-2, -1)


class Attention(nn.Module):
    """Attention built from any scoring function: score, masked softmax, weighted sum.

    ``forward(query: (..., L_q, d_q), key: (..., L_k, d_k), value: (..., L_k, d_v),
    mask=None) -> (output: (..., L_q, d_v), weights: (..., L_q, L_k))``; ``mask`` is boolean,
    broadcastable to ``(..., L_q, L_k)``, ``True`` = may attend. ``dropout`` acts on the weights
    in training mode only.
    """

    def __init__(self, score: Score, dropout: float = 0.0):
        super().__init__()
        if not isinstance(score, Score):
            raise TypeError(f"score must be a Score module, got {type(score).__name__}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.score = score
        self.dropout = dropout

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        check_tensor("value", value)
        check_same_dtype(key=key, value=value)
        if key.shape[-2] != value.shape[-2] or key.shape[:-2] != value.shape[:-2]:
            raise ValueError(
                f"key {tuple(key.shape)} and value {tuple(value.shape)} must have the same "
                "leading dimensions and length L_k"
            )
        scores = self.score(query, key)  # (..., L_q, L_k)
        p = self.dropout if self.training else 0.0
        return attention_from_scores(scores, value, mask, dropout_p=p)


#: The names :func:`score_by_name` accepts, in the order chapter 2 compares them.
SCORE_NAMES = ("additive", "dot", "scaled dot", "bilinear", "uniform (control)")


def score_by_name(name: str, d_q: int, d_k: int, d_hidden: int) -> Score:
    """A new, freshly initialised scoring function, chosen by its name in :data:`SCORE_NAMES`.

    ``d_q`` and ``d_k`` are the query and key widths; ``d_hidden`` is the additive score's
    hidden width ``d_a`` (ignored by the others). The dot-product scores need ``d_q == d_k``.
    One call builds one module, drawing its initial weights from the global RNG, so a training
    script that seeds before the call gets the same model every time.
    """
    if name not in SCORE_NAMES:
        raise ValueError(f"unknown score {name!r}; choose one of {', '.join(SCORE_NAMES)}")
    if name in ("dot", "scaled dot") and d_q != d_k:
        raise ValueError(f"the {name} score needs d_q == d_k, got d_q={d_q}, d_k={d_k}")
    if name == "additive":
        return AdditiveScore(d_q, d_k, d_hidden)
    if name == "bilinear":
        return BilinearScore(d_q, d_k)
    return {"dot": DotScore, "scaled dot": ScaledDotScore, "uniform (control)": UniformScore}[
        name]()
