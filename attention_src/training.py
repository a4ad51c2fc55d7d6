"""Training and evaluation loops for the sequence-to-sequence experiments."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attention_src.data import SequencePairs
from attention_src.validation import check_positive_int

__all__ = ["train_seq2seq", "seq2seq_accuracy"]


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
    ``clip``. Batches are drawn with a generator seeded by ``seed``, so a run is reproducible.

    Returns:
        the loss of every step (a list of ``steps`` floats).
    """
    check_positive_int("steps", steps)
    check_positive_int("batch_size", batch_size)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    losses = []
    for step in range(steps):
        idx = torch.randint(len(data), (min(batch_size, len(data)),), generator=generator)
        batch = data.subset(idx)
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


@torch.no_grad()
def seq2seq_accuracy(
    model: nn.Module, data: SequencePairs, bos_id: int = 1, pad_id: int = 0,
    batch_size: int = 512,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy-decode every source and compare with its target.

    The decoder runs for the target's padded length and is scored on the real target tokens
    (including ``<eos>``), so a model cannot gain by stopping early.

    Returns:
        token_accuracy: ``(N,)`` fraction of each target's tokens predicted correctly.
        exact: ``(N,)`` bool, True where the whole target was right.
    """
    model.eval()
    token_acc, exact = [], []
    for start in range(0, len(data), batch_size):
        batch = data.subset(slice(start, start + batch_size))
        tokens, _ = model.greedy_decode(batch.src, batch.src_len, batch.tgt_out.shape[1], bos_id)
        real = batch.tgt_out != pad_id  # (B, L_t)
        correct = (tokens == batch.tgt_out) & real
        token_acc.append(correct.sum(1) / real.sum(1))
        exact.append(correct.sum(1) == real.sum(1))
    return torch.cat(token_acc), torch.cat(exact)
