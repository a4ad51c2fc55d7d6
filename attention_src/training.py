"""Training and evaluation loops for the sequence-to-sequence experiments."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attention_src.data import SequencePairs
from attention_src.utils import module_device
from attention_src.validation import check_positive_int, check_same_device

__all__ = ["train_seq2seq", "teacher_forced_loss", "seq2seq_accuracy", "mean_by_length"]


def train_seq2seq(
    model: nn.Module,
    data: SequencePairs,
    steps: int,
    batch_size: int = 64,
    lr: float = 3e-3,
    clip: float = 1.0,
    seed: int = 0,
    pad_id: int = 0,
    log_every: int | None = None,
) -> list[float]:
    """Teacher-forced training with Adam on random mini-batches of ``data``.

    The loss is token-level cross-entropy ignoring ``pad_id``; gradients are clipped to norm
    ``clip``. Batches are drawn with a generator seeded by ``seed``, so a run is reproducible;
    they are drawn on the CPU (the same batches on every device) and moved to the model's
    device, so ``data`` may stay on the CPU.

    Returns:
        the loss of every step (a list of ``steps`` floats).
    """
    check_positive_int("steps", steps)
    check_positive_int("batch_size", batch_size)
    generator = torch.Generator().manual_seed(seed)
    device = module_device(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    losses = []
    for step in range(steps):
        idx = torch.randint(len(data), (min(batch_size, len(data)),), generator=generator)
        batch = data.subset(idx.to(data.src.device)).to(device)
        logits, _ = model(batch.src, batch.src_len, batch.tgt_in)  # (B, L_t, V)
        loss = F.cross_entropy(logits.transpose(1, 2), batch.tgt_out, ignore_index=pad_id)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        losses.append(loss.item())
        if log_every and (step + 1) % log_every == 0:
            print(f"step {step + 1:5d}  loss {sum(losses[-log_every:]) / log_every:.4f}")
    model.eval()
    return losses


def teacher_forced_loss(
    model: nn.Module, data: SequencePairs, pad_id: int = 0, batch_size: int = 512
) -> float:
    """Mean token cross-entropy of ``model`` on ``data`` with teacher forcing, in eval mode.

    The loss that :func:`train_seq2seq` minimises, but over *all* of ``data`` (every real target
    token counts once; ``pad_id`` positions are ignored) and with no dropout. A saved model's
    value on a fixed batch ties its ``state_dict`` to the number its training script recorded.
    Each batch is moved to the model's device.

    Args:
        data: ``N`` pairs; ``data.tgt_in`` and ``data.tgt_out`` are ``(N, L_t)``.

    Returns:
        the mean over the real target tokens, a Python float.
    """
    with torch.no_grad():
        check_positive_int("batch_size", batch_size)
        if len(data) == 0:
            raise ValueError("data is empty: no target token to score")
        model.eval()
        device = module_device(model)
        total, count = 0.0, 0
        for start in range(0, len(data), batch_size):
            batch = data.subset(slice(start, start + batch_size)).to(device)
            logits, _ = model(batch.src, batch.src_len, batch.tgt_in)  # (B, L_t, V)
            total += float(F.cross_entropy(logits.transpose(1, 2), batch.tgt_out,
                                           ignore_index=pad_id, reduction="sum"))
            count += int((batch.tgt_out != pad_id).sum())
        if count == 0:
            raise ValueError(f"every target token of data is pad_id={pad_id}: nothing to score")
        return total / count


def seq2seq_accuracy(
    model: nn.Module, data: SequencePairs, bos_id: int = 1, pad_id: int = 0,
    batch_size: int = 512,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy-decode every source and compare with its target.

    The decoder runs for the target's padded length and is scored on the real target tokens
    (including ``<eos>``), so a model cannot gain by stopping early. Each batch is decoded on
    the model's device; the results come back on the device of ``data``.

    Returns:
        token_accuracy: ``(N,)`` fraction of each target's tokens predicted correctly.
        exact: ``(N,)`` bool, True where the whole target was right.
    """
    with torch.no_grad():
        model.eval()
        device = module_device(model)
        token_acc, exact = [], []
        for start in range(0, len(data), batch_size):
            batch = data.subset(slice(start, start + batch_size)).to(device)
            steps = batch.tgt_out.shape[1]
            tokens, _ = model.greedy_decode(batch.src, batch.src_len, steps, bos_id)
            real = batch.tgt_out != pad_id  # (B, L_t)
            correct = (tokens == batch.tgt_out) & real
            token_acc.append(correct.sum(1) / real.sum(1))
            exact.append(correct.sum(1) == real.sum(1))
        home = data.src.device
        return torch.cat(token_acc).to(home), torch.cat(exact).to(home)


def mean_by_length(
    values: torch.Tensor, lengths: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Average ``values`` over the examples of each length (e.g. accuracy by input length).

    Args:
        values: ``(N,)`` one number per example (bools count as 0/1).
        lengths: ``(N,)`` integer lengths (e.g. ``data.src_len``).

    Returns:
        ``(unique_lengths, means, counts)``, each ``(G,)`` for the ``G`` distinct lengths in
        increasing order; ``means`` is float64; on the device of the inputs (one device).
    """
    _check_values_lengths(values, lengths)
    unique, inverse, counts = torch.unique(lengths, return_inverse=True, return_counts=True)
    sums = torch.zeros(len(unique), dtype=torch.float64, device=values.device).index_add_(
        0, inverse, values.to(torch.float64))
    return unique, sums / counts, counts


def mean_over_lengths(values: torch.Tensor, lengths: torch.Tensor, lo: int, hi: int) -> float:
    """Average ``values`` over the examples with ``lo <= length <= hi`` (e.g. short inputs).

    Args:
        values: ``(N,)`` one number per example (bools count as 0/1).
        lengths: ``(N,)`` integer lengths (e.g. ``data.src_len``).
        lo, hi: the range of lengths, both ends included.

    Returns:
        The mean, a Python float computed in float64.
    """
    _check_values_lengths(values, lengths)
    for name, bound in (("lo", lo), ("hi", hi)):
        if isinstance(bound, bool) or not isinstance(bound, int):
            raise TypeError(f"{name} must be an int, got {type(bound).__name__}")
    if lo > hi:
        raise ValueError(f"lo must be at most hi, got lo = {lo} and hi = {hi}")
    selected = (lengths >= lo) & (lengths <= hi)  # (N,)
    if not bool(selected.any()):
        raise ValueError(
            f"no example has a length from {lo} to {hi} (lengths run from "
            f"{int(lengths.min())} to {int(lengths.max())})"
        )
    return float(values[selected].to(torch.float64).mean())


def _check_values_lengths(values: torch.Tensor, lengths: torch.Tensor) -> None:
    if not isinstance(values, torch.Tensor) or not isinstance(lengths, torch.Tensor):
        raise TypeError("values and lengths must be torch tensors")
    check_same_device(values=values, lengths=lengths)
    if lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise TypeError(f"lengths must be an integer tensor, got dtype {lengths.dtype}")
    if values.dim() != 1 or values.shape != lengths.shape or values.numel() == 0:
        raise ValueError(
            "values and lengths must be non-empty and 1-D of one shape, got "
            f"{tuple(values.shape)} and {tuple(lengths.shape)}"
        )
