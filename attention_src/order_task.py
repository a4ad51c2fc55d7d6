"""A task only order can solve, and a one-layer self-attention model with optional positions.

The *previous-token task* (chapter 4): each sequence holds ``L`` distinct tokens drawn from a
vocabulary of ``V``; the target at position ``i >= 1`` is the token at position ``i - 1``.
Self-attention without positional information is permutation-equivariant, so its output at
position ``i`` is a function of the token ``x_i`` and of the *set* of tokens only. Given those,
the previous token is equally likely to be any of the other ``L - 1`` tokens of the set, so no
such model can be right more often than ``1 / (L - 1)`` on average. With positions (sinusoidal
or rotary) one attention layer can look one step back and solve it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attention_src.attention import scaled_dot_product_attention
from attention_src.optim import Adam
from attention_src.positional import apply_rotary, sinusoidal_positional_encoding
from attention_src.utils import module_device, place
from attention_src.validation import check_device, check_positive_int

__all__ = [
    "IGNORE",
    "POSITIONS",
    "previous_token_task",
    "OrderSelfAttention",
    "train_order_model",
    "order_accuracy",
]

#: Target of position 0, which has no previous token (``cross_entropy``'s ``ignore_index``).
IGNORE = -100
#: The kinds of positional information :class:`OrderSelfAttention` accepts.
POSITIONS = ("none", "sinusoidal", "rotary")


def previous_token_task(
    n: int, length: int, vocab_size: int, generator: torch.Generator | None = None, *,
    device: str | torch.device | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences of distinct random tokens and their previous-token targets.

    Args:
        n: number of sequences.
        length: ``L``, at most ``vocab_size`` (the tokens of a sequence are distinct).
        vocab_size: ``V``.
        generator: a (CPU) ``torch.Generator`` for reproducible draws (default: the global
            one).
        device: where the tensors go; drawn on the CPU and then moved, so a generator's seed
            gives the same data on every device.

    Returns:
        tokens: ``(n, L)`` int64, each row ``L`` distinct tokens in ``0 .. V - 1``.
        targets: ``(n, L)`` int64; ``targets[:, i] = tokens[:, i - 1]`` for ``i >= 1`` and
        :data:`IGNORE` at position 0.
    """
    for name, value in (("n", n), ("length", length), ("vocab_size", vocab_size)):
        check_positive_int(name, value)
    device = check_device(device)
    if length > vocab_size:
        raise ValueError(
            f"length ({length}) must be at most vocab_size ({vocab_size}): the tokens of a "
            "sequence are distinct"
        )
    # A random permutation of the vocabulary per row, cut to L: L distinct tokens.
    draw = torch.rand(n, vocab_size, generator=generator)  # (n, V)
    tokens = draw.argsort(dim=-1)[:, :length]  # (n, L)
    targets = torch.full_like(tokens, IGNORE)  # (n, L)
    targets[:, 1:] = tokens[:, :-1]
    if device is not None:
        tokens, targets = tokens.to(device), targets.to(device)
    return tokens, targets


class OrderSelfAttention(nn.Module):
    """Token embedding, optional positions, one self-attention layer, a linear readout.

    ``positions``: ``"none"`` (permutation-equivariant), ``"sinusoidal"`` (the fixed table
    added to the embeddings) or ``"rotary"`` (queries and keys rotated by ``apply_rotary``).
    The projections have biases: with rotary positions the rotated biases give every query a
    content-independent preference for a relative offset. There is no residual connection:
    the readout sees only the attention output ``A V``, so the current token reaches it only
    through its own weight ``alpha_ii``.

    ``forward(tokens: (B, L) integer ids in [0, V)) -> (logits: (B, L, V), weights: (B, L, L))``;
    ``forward`` raises ``TypeError`` for tokens that are not integers and ``ValueError`` for
    ids outside ``[0, V)``, naming the first one. ``device`` and ``dtype`` (keywords) place
    the model after its weights are drawn on the CPU (:func:`attention_src.utils.place`).
    """

    def __init__(
        self, vocab_size: int, d_model: int, positions: str = "none", max_len: int = 64, *,
        device: str | torch.device | None = None, dtype: torch.dtype | None = None,
    ):
        super().__init__()
        check_positive_int("vocab_size", vocab_size)
        check_positive_int("d_model", d_model)
        check_positive_int("max_len", max_len)
        if positions not in POSITIONS:
            raise ValueError(f"positions must be one of {POSITIONS}, got {positions!r}")
        if positions == "rotary" and d_model % 2:
            raise ValueError(f"rotary positions need an even d_model, got {d_model}")
        self.positions, self.max_len = positions, max_len
        self.embed = nn.Embedding(vocab_size, d_model)
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.readout = nn.Linear(d_model, vocab_size)
        self.register_buffer(
            "pe", sinusoidal_positional_encoding(max_len, d_model), persistent=False
        )  # (max_len, d_model)
        place(self, device, dtype)

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2:
            raise ValueError("tokens must be a (B, L) integer tensor")
        if tokens.dtype == torch.bool or tokens.is_floating_point() or tokens.is_complex():
            raise TypeError(f"tokens must hold integer ids, got dtype {tokens.dtype}")
        length = tokens.shape[1]
        if length > self.max_len:
            raise ValueError(f"sequence length {length} exceeds max_len {self.max_len}")
        vocab_size = self.embed.num_embeddings
        bad = (tokens < 0) | (tokens >= vocab_size)  # (B, L)
        if bool(bad.any()):
            b, i = (int(j) for j in bad.nonzero()[0])
            raise ValueError(f"token ids must lie in [0, {vocab_size}), got "
                             f"{int(tokens[b, i])} at tokens[{b}, {i}]")
        x = self.embed(tokens.long())  # (B, L, d); nn.Embedding takes int64 or int32 only
        if self.positions == "sinusoidal":
            x = x + self.pe[:length]  # (B, L, d) + (L, d)
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)  # (B, L, d) each
        if self.positions == "rotary":
            pos = torch.arange(length, device=tokens.device)  # (L,)
            q, k = apply_rotary(q, pos), apply_rotary(k, pos)
        out, weights = scaled_dot_product_attention(q, k, v)  # (B, L, d), (B, L, L)
        return self.readout(out), weights


def order_accuracy(model: nn.Module, tokens: torch.Tensor, targets: torch.Tensor) -> float:
    """Fraction of positions with a target (not :data:`IGNORE`) predicted exactly.

    ``tokens`` and ``targets`` are moved to the model's device (they may be on the CPU).
    """
    device = module_device(model)
    if isinstance(tokens, torch.Tensor) and isinstance(targets, torch.Tensor):
        tokens, targets = tokens.to(device), targets.to(device)
    with torch.no_grad():
        logits, _ = model(tokens)  # (B, L, V)
    keep = targets != IGNORE
    return float((logits.argmax(-1) == targets)[keep].double().mean())


def train_order_model(
    positions: str,
    seed: int,
    steps: int = 300,
    batch_size: int = 64,
    length: int = 8,
    vocab_size: int = 16,
    d_model: int = 32,
    lr: float = 1e-2,
    *,
    device: str | torch.device | None = None,
) -> tuple[OrderSelfAttention, list[float]]:
    """Train :class:`OrderSelfAttention` on fresh batches of the previous-token task.

    ``seed`` fixes the initial weights and the data stream. Adam, cross-entropy over the
    positions that have a target. With ``device`` the model is built on the CPU (the same
    initial weights) and trained on ``device``, on batches drawn on the CPU and moved there.

    Returns:
        the trained model (in eval mode) and the loss of each step.
    """
    check_positive_int("steps", steps)
    check_positive_int("batch_size", batch_size)
    torch.manual_seed(seed)
    model = OrderSelfAttention(vocab_size, d_model, positions, max_len=max(length, 1),
                               device=device)
    gen = torch.Generator().manual_seed(seed)
    opt = Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        tokens, targets = previous_token_task(batch_size, length, vocab_size, gen,
                                              device=device)
        logits, _ = model(tokens)  # (B, L, V)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return model.eval(), losses
