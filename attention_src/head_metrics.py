"""What attention heads do: per-head measurements, head ablation and a small probe model.

Chapter 5 trains a one-layer multi-head attention model and asks what each head learned:

* :func:`attention_entropy`: how spread out each query's weights are (0 nats for one-hot
  weights, ``log L_k`` for uniform weights);
* :func:`offset_profile` and :func:`preferred_offset`: the mean weight a head gives to the key
  at each relative offset ``j - i`` from the query, and the offset with the largest mean;
* :func:`ablate_heads`: a context manager that silences chosen heads (their slice of the
  concatenation entering ``W^O`` is set to zero), to measure what each head contributes;
* :class:`OffsetReader`, :func:`offset_losses` and :func:`train_offset_reader`: the probe
  model of the chapter (embeddings and positions, one multi-head self-attention layer, a
  linear read-out) trained on :func:`attention_src.data.offset_copy_task`.
"""

from __future__ import annotations

import contextlib
import math
import operator
from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from attention_src.data import IGNORE_INDEX, offset_copy_task
from attention_src.multihead import MultiHeadSelfAttention
from attention_src.optim import Adam
from attention_src.positional import sinusoidal_positional_encoding
from attention_src.utils import module_device, place
from attention_src.validation import check_positive_int, check_tensor

__all__ = [
    "attention_entropy",
    "offset_profile",
    "preferred_offset",
    "ablate_heads",
    "OffsetReader",
    "offset_losses",
    "train_offset_reader",
]


def _check_weights(weights: object) -> torch.Tensor:
    check_tensor("weights", weights, min_rank=2)  # a floating tensor, >= 2 axes
    if not bool(torch.isfinite(weights).all()) or bool((weights < 0).any()):
        raise ValueError("weights must be finite and non-negative (attention weights)")
    return weights


def attention_entropy(weights: torch.Tensor) -> torch.Tensor:
    """Entropy, in nats, of each query's attention distribution.

    ``H_i = -sum_j alpha_ij log alpha_ij`` with ``0 log 0 = 0``: 0 when one key takes all the
    weight, ``log L_k`` when the weights are uniform over ``L_k`` keys. A row of zeros (a
    fully masked query, which the book's attention returns as zeros) has entropy 0.

    Args:
        weights: ``(..., L_q, L_k)`` attention weights, each row summing to 1 (or 0).

    Returns:
        ``(..., L_q)`` entropies, same dtype as ``weights``.
    """
    weights = _check_weights(weights)
    sums = weights.sum(-1)  # (..., L_q)
    ok = ((sums - 1).abs() < 1e-3) | (sums == 0)
    if not bool(ok.all()):
        raise ValueError("each row of weights must sum to 1 (or be all zeros)")
    logs = torch.where(weights > 0, weights.log(), torch.zeros_like(weights))
    # 0 - s, not -s: a one-hot or all-zero row gives +0.0, not -0.0
    return 0.0 - (weights * logs).sum(-1)


def offset_profile(weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean attention weight at each relative offset ``o = j - i`` (key minus query position).

    ``profile[..., m] = mean_i alpha_{i, i + o_m}``, the mean over the queries ``i`` that have a
    key at ``i + o_m``. For a head that always attends to the previous token, the profile is
    1 at ``o = -1`` and 0 elsewhere. Average ``weights`` over a batch first (the profile is
    linear in the weights) to get one profile per head.

    Args:
        weights: ``(..., L_q, L_k)`` attention weights.

    Returns:
        offsets: ``(L_q + L_k - 1,)`` int64, from ``-(L_q - 1)`` to ``L_k - 1``;
        profile: ``(..., L_q + L_k - 1)``, same dtype as ``weights``; both on the device of
        ``weights``.
    """
    weights = _check_weights(weights)
    L_q, L_k = weights.shape[-2:]
    offsets = torch.arange(-(L_q - 1), L_k, device=weights.device)
    columns = [torch.diagonal(weights, offset=o, dim1=-2, dim2=-1).mean(-1)
               for o in range(-(L_q - 1), L_k)]  # each (...,): mean over the queries there
    return offsets, torch.stack(columns, dim=-1)  # (..., L_q + L_k - 1)


def preferred_offset(weights: torch.Tensor) -> torch.Tensor:
    """The relative offset ``j - i`` with the largest mean weight (see :func:`offset_profile`).

    Args:
        weights: ``(..., L_q, L_k)`` attention weights, e.g. ``(h, L, L)`` for one head each.

    Returns:
        ``(...)`` int64 offsets, on the device of ``weights``.
    """
    offsets, profile = offset_profile(weights)
    return offsets[profile.argmax(-1)]


@contextlib.contextmanager
def ablate_heads(mha: nn.Module, heads: Sequence[int]) -> Iterator[nn.Module]:
    """Silence ``heads`` of a multi-head attention module inside a ``with`` block.

    Head ``i`` contributes to the output only through its slice
    ``i * head_dim : (i + 1) * head_dim`` of the concatenation that enters ``out_proj`` (the
    matrix ``W^O``). A forward pre-hook sets those slices to zero, which removes the heads'
    contributions and nothing else (``out_proj``'s bias stays). Works with
    :class:`~attention_src.multihead.MultiHeadAttention`, its self-attention subclass and
    :class:`~attention_src.multihead.PerHeadMultiHeadAttention`.

    Args:
        mha: the module; it must have ``num_heads``, ``head_dim`` and ``out_proj``.
        heads: indices in ``[0, num_heads)``, of any integer type (``int``, a NumPy integer,
            anything ``operator.index`` accepts; not ``bool``); may be empty.

    Yields:
        ``mha``, whose forward passes inside the block run without those heads.
    """
    for name in ("num_heads", "head_dim", "out_proj"):
        if not hasattr(mha, name):
            raise TypeError(f"mha must be a multi-head attention module with {name!r}")
    indices = []
    for i in heads:
        if isinstance(i, bool):
            raise ValueError(f"head indices must be ints in [0, {mha.num_heads}), got {i!r}")
        try:
            index = operator.index(i)
        except TypeError:
            raise TypeError(f"head indices must be integers, got {i!r} of type "
                            f"{type(i).__name__}") from None
        if not 0 <= index < mha.num_heads:
            raise ValueError(f"head indices must be ints in [0, {mha.num_heads}), got {i!r}")
        indices.append(index)
    heads = indices
    keep = torch.ones(mha.num_heads, mha.head_dim,
                      device=mha.out_proj.weight.device)  # (h, d_head), on the module's device
    keep[heads] = 0.0
    keep = keep.reshape(-1)  # (h, d_head) -> (h * d_head,), the concatenation's layout

    def zero_heads(module, args):
        concat = args[0]  # (..., h * d_head)
        return (concat * keep.to(concat),) + tuple(args[1:])

    handle = mha.out_proj.register_forward_pre_hook(zero_heads)
    try:
        yield mha
    finally:
        handle.remove()


class OffsetReader(nn.Module):
    """Token embeddings plus sinusoidal positions, one multi-head self-attention layer, a
    linear read-out.

    The probe model of chapter 5, for :func:`attention_src.data.offset_copy_task`: output
    position ``i`` predicts, for each of ``num_outputs`` offsets, the token at that offset.
    There is no residual connection, so everything the read-out sees about other tokens
    comes through attention. The positions are the fixed sinusoidal table times
    ``position_scale`` (a buffer, not trained): a shift by a fixed offset is then a fixed
    linear map of the encoding, so one pair of query and key projections can point every
    query at the same relative offset. The default scale 2 gives the encodings (norm
    ``2 sqrt(E/2)``) about the norm of the token embeddings (``sqrt(E)``, entries N(0, 1)).

    ``forward(tokens: (B, L) int64, L <= length) -> (logits: (B, num_outputs, L, vocab_size),
    weights: (B, num_heads, L, L))``, ``tokens`` on the model's device. ``device`` and
    ``dtype`` (keywords) place the model after its weights are drawn on the CPU
    (:func:`attention_src.utils.place`).
    """

    def __init__(self, vocab_size: int, length: int, embed_dim: int, num_heads: int,
                 num_outputs: int = 2, position_scale: float = 2.0, *,
                 device: str | torch.device | None = None, dtype: torch.dtype | None = None):
        super().__init__()
        for name, v in (("vocab_size", vocab_size), ("length", length),
                        ("embed_dim", embed_dim), ("num_heads", num_heads),
                        ("num_outputs", num_outputs)):
            check_positive_int(name, v)
        if (isinstance(position_scale, bool) or not isinstance(position_scale, (int, float))
                or not math.isfinite(position_scale)):
            raise ValueError(f"position_scale must be a finite number, got {position_scale!r}")
        self.vocab_size, self.length, self.num_outputs = vocab_size, length, num_outputs
        self.tok = nn.Embedding(vocab_size, embed_dim)
        table = sinusoidal_positional_encoding(length, embed_dim)  # (length, E)
        # Not persistent: the table is fixed, so a state_dict need not store it.
        self.register_buffer("pos", position_scale * table, persistent=False)
        self.mha = MultiHeadSelfAttention(embed_dim, num_heads)
        self.read = nn.Linear(embed_dim, num_outputs * vocab_size)
        place(self, device, dtype)

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not isinstance(tokens, torch.Tensor) or tokens.dtype != torch.long:
            raise TypeError(f"tokens must be an int64 tensor, got {type(tokens).__name__} "
                            f"{getattr(tokens, 'dtype', '')}")
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be (B, L), got shape {tuple(tokens.shape)}")
        B, L = tokens.shape
        if L > self.length:
            raise ValueError(f"sequences of length {L} are longer than length={self.length}")
        if bool((tokens < 0).any()) or bool((tokens >= self.vocab_size).any()):
            raise ValueError(f"token ids must lie in [0, {self.vocab_size})")
        x = self.tok(tokens) + self.pos[:L]  # (B, L, E) + (L, E)
        out, weights = self.mha(x)  # (B, L, E), (B, h, L, L)
        logits = self.read(out)  # (B, L, num_outputs * V)
        # (B, L, n_out * V) -> (B, L, n_out, V) -> (B, n_out, L, V)
        logits = logits.view(B, L, self.num_outputs, self.vocab_size).transpose(1, 2)
        return logits, weights


def offset_losses(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (nats) of each output, over the positions that have a target.

    Args:
        logits: ``(B, n_out, L, V)``.
        targets: ``(B, n_out, L)`` int64 in ``[0, V)``, or
            :data:`~attention_src.data.IGNORE_INDEX` where there is no target.

    Returns:
        ``(n_out,)`` losses.
    """
    check_tensor("logits", logits, min_rank=4)
    if logits.dim() != 4 or getattr(targets, "shape", None) != logits.shape[:3]:
        raise ValueError(f"logits must be (B, n_out, L, V) and targets (B, n_out, L), got "
                         f"{tuple(logits.shape)} and {tuple(getattr(targets, 'shape', ()))}")
    if not isinstance(targets, torch.Tensor) or targets.dtype != torch.long:
        raise TypeError(f"targets must be an int64 tensor, got {type(targets).__name__} "
                        f"{getattr(targets, 'dtype', '')}")
    V = logits.shape[-1]
    valid = (targets >= 0) & (targets < V)
    if not bool((valid | (targets == IGNORE_INDEX)).all()):
        raise ValueError(f"targets must lie in [0, {V}) or be IGNORE_INDEX ({IGNORE_INDEX})")
    return torch.stack([
        F.cross_entropy(logits[:, k].reshape(-1, V), targets[:, k].reshape(-1),
                        ignore_index=IGNORE_INDEX)  # (B * L, V) against (B * L,)
        for k in range(logits.shape[1])
    ])


def train_offset_reader(model: OffsetReader, offsets: Sequence[int], steps: int,
                        batch_size: int = 64, lr: float = 0.01, seed: int = 0) -> list[float]:
    """Train ``model`` on fresh batches of :func:`~attention_src.data.offset_copy_task` with Adam.

    The loss is the sum of :func:`offset_losses` over the offsets. Batches come from a
    generator seeded with ``seed``, so a run is reproducible given the model's initial weights.
    They are drawn on the CPU (the same batches on every device) and moved to the model's
    device.

    Returns:
        the loss of every step (before that step's update).
    """
    check_positive_int("steps", steps)
    check_positive_int("batch_size", batch_size)
    if len(offsets) != model.num_outputs:
        raise ValueError(f"model has {model.num_outputs} outputs but {len(offsets)} offsets "
                         "were given")
    gen = torch.Generator().manual_seed(seed)
    device = module_device(model)
    opt = Adam(model.parameters(), lr=lr)
    model.train()
    losses = []
    for _ in range(steps):
        tokens, targets = offset_copy_task(batch_size, model.length, model.vocab_size,
                                           offsets, seed=gen, device=device)
        loss = offset_losses(model(tokens)[0], targets).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    return losses
