"""Training and evaluation loops for the sequence-to-sequence experiments.

The loops take the book's recurrent encoder-decoders (:class:`~attention_src.seq2seq.Seq2Seq`)
and its :class:`~attention_src.transformer.Transformer` alike: :func:`seq2seq_logits` calls
either on a batch of :class:`~attention_src.data.SequencePairs`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from attention_src.data import SequencePairs
from attention_src.optim import Adam
from attention_src.transformer import Transformer
from attention_src.utils import module_device
from attention_src.validation import check_positive_int, check_same_device

__all__ = ["train_seq2seq", "teacher_forced_loss", "seq2seq_accuracy", "mean_by_length",
           "seq2seq_logits", "warmup_inverse_sqrt"]


def seq2seq_logits(model: nn.Module, batch: SequencePairs) -> torch.Tensor:
    """Teacher-forced logits ``(B, L_t, V)`` of ``model`` on ``batch``.

    A :class:`~attention_src.transformer.Transformer` gets the source padding as a mask
    (``True`` = real token, from ``batch.src_len``); the target needs none, since with the
    causal mask a real target position never sees a later, padded one. Any other model is
    called as ``model(src, src_len, tgt_in)`` and returns ``(logits, weights)``.
    """
    if isinstance(model, Transformer):
        S = batch.src.shape[1]
        src_len = batch.src_len.to(batch.src.device)
        padding = torch.arange(S, device=batch.src.device) < src_len[:, None]  # (B, S)
        return model(batch.src, batch.tgt_in, src_padding=padding)
    logits, _ = model(batch.src, batch.src_len, batch.tgt_in)
    return logits


def warmup_inverse_sqrt(embed_dim: int, warmup_steps: int) -> Callable[[int], float]:
    """The learning rate of Vaswani et al. (2017), eq. 3, as a function of the step ``t >= 1``:
    ``embed_dim ** -0.5 * min(t ** -0.5, t * warmup_steps ** -1.5)``: a linear rise for
    ``warmup_steps`` steps, then a decay as ``1 / sqrt(t)``. Pass it as ``schedule`` to
    :func:`train_seq2seq` with ``lr=1.0`` (it is the learning rate itself)."""
    check_positive_int("embed_dim", embed_dim)
    check_positive_int("warmup_steps", warmup_steps)

    def rate(t: int) -> float:
        if isinstance(t, bool) or not isinstance(t, int) or t < 1:
            raise ValueError(f"the step must be an int >= 1, got {t!r}")
        return embed_dim ** -0.5 * min(t ** -0.5, t * warmup_steps ** -1.5)

    return rate


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
    *,
    schedule: Callable[[int], float] | None = None,
    label_smoothing: float = 0.0,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    lrs: list[float] | None = None,
    on_step: Callable[[int], None] | None = None,
) -> list[float]:
    """Teacher-forced training with Adam on random mini-batches of ``data``.

    The loss is token-level cross-entropy ignoring ``pad_id`` (with ``label_smoothing`` > 0,
    against targets that put ``1 - label_smoothing`` on the right token and spread the rest
    evenly over the vocabulary, Szegedy et al., 2016); gradients are clipped to norm ``clip``.
    The learning rate of step ``t = 1, 2, ...`` is ``lr * schedule(t)`` (``lr`` without a
    schedule; Vaswani et al. used :func:`warmup_inverse_sqrt` with ``lr=1``, ``betas=(0.9,
    0.98)``, ``eps=1e-9``). Batches are drawn with a generator seeded by ``seed``, so a run is
    reproducible; they are drawn on the CPU (the same batches on every device) and moved to
    the model's device, so ``data`` may stay on the CPU. The model is called through
    :func:`seq2seq_logits`. ``on_step(t)``, if given, is called after step ``t = 1, 2, ...``
    (e.g. to measure held-out accuracy during training); the model is put back in training mode
    after it returns, so it may evaluate.

    Returns:
        the loss of every step (a list of ``steps`` floats; the smoothed loss when
        ``label_smoothing`` > 0). If ``lrs`` is a list, each step's learning rate is appended.
    """
    check_positive_int("steps", steps)
    check_positive_int("batch_size", batch_size)
    if schedule is not None and not callable(schedule):
        raise TypeError(f"schedule must be a function of the step or None, got "
                        f"{type(schedule).__name__}")
    if (isinstance(label_smoothing, bool) or not isinstance(label_smoothing, numbers.Real)
            or not 0.0 <= label_smoothing < 1.0):
        raise ValueError(f"label_smoothing must be a number in [0, 1), got {label_smoothing!r}")
    if lrs is not None and not isinstance(lrs, list):
        raise TypeError(f"lrs must be a list or None, got {type(lrs).__name__}")
    if on_step is not None and not callable(on_step):
        raise TypeError(f"on_step must be a function of the step or None, got "
                        f"{type(on_step).__name__}")
    generator = torch.Generator().manual_seed(seed)
    device = module_device(model)
    optimizer = Adam(model.parameters(), lr=lr, betas=betas, eps=eps)
    model.train()
    losses = []
    for step in range(steps):
        if schedule is not None:
            rate = lr * schedule(step + 1)
            if not math.isfinite(rate) or rate < 0:
                raise ValueError(f"schedule({step + 1}) gave the learning rate {rate}")
            optimizer.lr = rate
        if lrs is not None:
            lrs.append(optimizer.lr)
        idx = torch.randint(len(data), (min(batch_size, len(data)),), generator=generator)
        batch = data.subset(idx.to(data.src.device)).to(device)
        logits = seq2seq_logits(model, batch)  # (B, L_t, V)
        loss = F.cross_entropy(logits.transpose(1, 2), batch.tgt_out, ignore_index=pad_id,
                               label_smoothing=label_smoothing)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        losses.append(loss.item())
        if log_every and (step + 1) % log_every == 0:
            print(f"step {step + 1:5d}  loss {sum(losses[-log_every:]) / log_every:.4f}")
        if on_step is not None:
            on_step(step + 1)
            model.train()
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
            logits = seq2seq_logits(model, batch)  # (B, L_t, V)
            total += float(F.cross_entropy(logits.transpose(1, 2), batch.tgt_out,
                                           ignore_index=pad_id, reduction="sum"))
            count += int((batch.tgt_out != pad_id).sum())
        if count == 0:
            raise ValueError(f"every target token of data is pad_id={pad_id}: nothing to score")
        return total / count


def seq2seq_accuracy(
    model: nn.Module, data: SequencePairs, bos_id: int = 1, pad_id: int = 0,
    batch_size: int = 512, eos_id: int = 2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy-decode every source and compare with its target.

    The decoder runs for the target's padded length and is scored on the real target tokens
    (including ``<eos>``), so a model cannot gain by stopping early. Each batch is decoded on
    the model's device; the results come back on the device of ``data``. A
    :class:`~attention_src.transformer.Transformer` is decoded by
    :func:`~attention_src.decoding.greedy_decode` (with KV caches, ``eos_id`` repeated after
    the end); other models by their own ``greedy_decode``.

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
            tokens = _greedy_tokens(model, batch, steps, bos_id, eos_id)  # (B, steps)
            real = batch.tgt_out != pad_id  # (B, L_t)
            correct = (tokens == batch.tgt_out) & real
            token_acc.append(correct.sum(1) / real.sum(1))
            exact.append(correct.sum(1) == real.sum(1))
        home = data.src.device
        return torch.cat(token_acc).to(home), torch.cat(exact).to(home)


def _greedy_tokens(model, batch: SequencePairs, steps: int, bos_id: int,
                   eos_id: int) -> torch.Tensor:
    """``steps`` greedily decoded tokens per source, ``(B, steps)``."""
    if not isinstance(model, Transformer):
        tokens, _ = model.greedy_decode(batch.src, batch.src_len, steps, bos_id)
        return tokens
    from attention_src.decoding import greedy_decode

    S = batch.src.shape[1]
    padding = torch.arange(S, device=batch.src.device) < batch.src_len.to(
        batch.src.device)[:, None]  # (B, S)
    out = greedy_decode(model, batch.src, bos_id, eos_id, steps, src_padding=padding)[:, 1:]
    # stopped early (every row ended): the rows hold eos_id from their end on
    return F.pad(out, (0, steps - out.shape[1]), value=eos_id)


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
