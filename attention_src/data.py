"""Data for the book's experiments, generated on the fly (nothing is downloaded).

* :class:`Vocab`: a character/token vocabulary with ``<pad>``, ``<bos>``, ``<eos>``.
* :func:`reverse_task`: random symbol strings and their reversal, a sequence-to-sequence task
  whose difficulty for a fixed-size context vector grows with the length (chapter 1).
* :func:`date_pairs`: human-written dates (``"july 19, 2020"``, ``"sunday 19 july 2020"``,
  ``"19.07.2020"`` ...) and their ISO form ``"2020-07-19"``, written by Babel's locale data
  (chapter 2).
* :func:`encode_pairs`: turn (source, target) string pairs into padded tensors.
* :func:`noisy_curve` and :func:`curve_target`: noisy samples of a smooth 1-D function, for
  Nadaraya-Watson kernel regression (attention pooling without learning, chapter 1).
* :func:`running_example`: the sentence "Jane visite l'Afrique en septembre" with small,
  hand-written embeddings, carried through chapters 4 to 6.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from babel.dates import format_date

from attention_src.validation import check_positive_int

__all__ = [
    "Vocab",
    "SequencePairs",
    "reverse_task",
    "date_pairs",
    "DATE_FORMATS",
    "encode_pairs",
    "curve_target",
    "noisy_curve",
    "RunningExample",
    "running_example",
]

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"


class Vocab:
    """A vocabulary of symbols (characters or tokens) with three specials.

    ``pad_id = 0``, ``bos_id = 1``, ``eos_id = 2``; the symbols follow in sorted order.
    """

    def __init__(self, symbols: Iterable[str]):
        self.itos: list[str] = [PAD, BOS, EOS] + sorted(set(symbols) - {PAD, BOS, EOS})
        self.stoi: dict[str, int] = {s: i for i, s in enumerate(self.itos)}
        self.pad_id, self.bos_id, self.eos_id = 0, 1, 2

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, symbols: Sequence[str]) -> list[int]:
        """Ids of ``symbols``; an unknown symbol is a ``KeyError`` naming it."""
        try:
            return [self.stoi[s] for s in symbols]
        except KeyError as err:
            raise KeyError(f"symbol {err.args[0]!r} is not in the vocabulary") from None

    def decode(self, ids: Iterable[int], strip: bool = True) -> list[str]:
        """Symbols of ``ids``; with ``strip`` stop at ``<eos>`` and drop ``<pad>``/``<bos>``."""
        out = []
        for i in ids:
            i = int(i)
            if strip and i == self.eos_id:
                break
            if strip and i in (self.pad_id, self.bos_id):
                continue
            out.append(self.itos[i])
        return out


@dataclass
class SequencePairs:
    """A padded batch of (source, target) sequences for teacher-forced training.

    Attributes:
        src: ``(N, L_src)`` source ids, right-padded with ``pad_id``.
        src_len: ``(N,)`` true source lengths.
        tgt_in: ``(N, L_tgt)`` decoder inputs: ``<bos>`` followed by the target.
        tgt_out: ``(N, L_tgt)`` decoder targets: the target followed by ``<eos>``, then pads.
    """

    src: torch.Tensor
    src_len: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor

    def __len__(self) -> int:
        return self.src.shape[0]

    def subset(self, index: torch.Tensor | slice) -> SequencePairs:
        """The pairs selected by ``index`` (a slice, index or boolean tensor)."""
        return SequencePairs(self.src[index], self.src_len[index], self.tgt_in[index],
                             self.tgt_out[index])


def encode_pairs(
    pairs: Sequence[tuple[Sequence[str], Sequence[str]]], src_vocab: Vocab, tgt_vocab: Vocab
) -> SequencePairs:
    """Encode and pad (source symbols, target symbols) pairs; see :class:`SequencePairs`."""
    if not pairs:
        raise ValueError("pairs is empty")
    n = len(pairs)
    src_len = torch.tensor([len(s) for s, _ in pairs])
    if int(src_len.min()) == 0:
        raise ValueError("every source sequence must have at least one symbol")
    tgt_len = max(len(t) for _, t in pairs) + 1  # + <bos> (inputs) or <eos> (outputs)
    src = torch.full((n, int(src_len.max())), src_vocab.pad_id, dtype=torch.long)
    tgt_in = torch.full((n, tgt_len), tgt_vocab.pad_id, dtype=torch.long)
    tgt_out = torch.full((n, tgt_len), tgt_vocab.pad_id, dtype=torch.long)
    for i, (s, t) in enumerate(pairs):
        src[i, : len(s)] = torch.tensor(src_vocab.encode(s))
        ids = tgt_vocab.encode(t)
        tgt_in[i, : len(ids) + 1] = torch.tensor([tgt_vocab.bos_id] + ids)
        tgt_out[i, : len(ids) + 1] = torch.tensor(ids + [tgt_vocab.eos_id])
    return SequencePairs(src, src_len, tgt_in, tgt_out)


def reverse_task(
    n: int, min_len: int, max_len: int, num_symbols: int = 10, seed: int = 0
) -> list[tuple[list[str], list[str]]]:
    """Random strings over ``num_symbols`` letters and their reversals.

    Lengths are uniform in ``[min_len, max_len]``. Reversal needs the *first* source symbol
    for the *last* output and vice versa, so a decoder that sees only one fixed-size summary of
    the source must hold the whole string in it; with attention it can look each symbol up.

    Returns:
        ``n`` pairs ``(source symbols, reversed symbols)``.
    """
    check_positive_int("n", n)
    check_positive_int("min_len", min_len)
    check_positive_int("num_symbols", num_symbols)
    if max_len < min_len:
        raise ValueError(f"max_len ({max_len}) must be >= min_len ({min_len})")
    if num_symbols > 26:
        raise ValueError(f"num_symbols must be at most 26 (letters a-z), got {num_symbols}")
    rng = np.random.default_rng(seed)
    letters = [chr(ord("a") + i) for i in range(num_symbols)]
    pairs = []
    for length in rng.integers(min_len, max_len + 1, size=n):
        s = [letters[i] for i in rng.integers(0, num_symbols, size=int(length))]
        pairs.append((s, s[::-1]))
    return pairs


#: Babel (CLDR) date patterns for the date-normalisation task; all unambiguous.
DATE_FORMATS: tuple[str, ...] = (
    "medium",          # jul 19, 2020
    "long",            # july 19, 2020
    "full",            # sunday, july 19, 2020
    "d MMM y",         # 19 jul 2020
    "d MMMM y",        # 19 july 2020
    "EEEE d MMMM y",   # sunday 19 july 2020
    "dd.MM.y",         # 19.07.2020
    "MMMM d y",        # july 19 2020
)


def date_pairs(
    n: int,
    seed: int = 0,
    formats: Sequence[str] = DATE_FORMATS,
    start: dt.date = dt.date(1950, 1, 1),
    end: dt.date = dt.date(2049, 12, 31),
    locale: str = "en_US",
) -> list[tuple[str, str]]:
    """Random dates written by people (lower case) and their ISO 8601 form.

    Args:
        n: number of pairs.
        seed: seed of the generator (dates and formats).
        formats: Babel date patterns or the names ``short``/``medium``/``long``/``full``.
        start, end: inclusive range of dates.
        locale: Babel locale for month and weekday names.

    Returns:
        ``n`` pairs such as ``("july 19, 2020", "2020-07-19")``.
    """
    check_positive_int("n", n)
    if end < start:
        raise ValueError(f"end ({end}) is before start ({start})")
    if not formats:
        raise ValueError("formats is empty")
    rng = np.random.default_rng(seed)
    span = (end - start).days + 1
    days = rng.integers(0, span, size=n)
    which = rng.integers(0, len(formats), size=n)
    pairs = []
    for d, f in zip(days, which, strict=True):
        date = start + dt.timedelta(days=int(d))
        human = format_date(date, formats[int(f)], locale=locale).lower()
        pairs.append((human, date.isoformat()))
    return pairs


def curve_target(x: torch.Tensor) -> torch.Tensor:
    """The smooth function behind :func:`noisy_curve`: ``f(x) = sin(2 x) + 0.6 x``."""
    return torch.sin(2 * x) + 0.6 * x


def noisy_curve(
    n: int, noise: float = 0.4, x_max: float = 5.0, seed: int = 0,
    dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Noisy samples ``y = f(x) + eps`` of :func:`curve_target` at random, sorted ``x``.

    ``x`` is uniform on ``[0, x_max]`` and ``eps`` is Gaussian with standard deviation
    ``noise``; both come from ``np.random.default_rng(seed)``, so a seed fixes the data.

    Returns:
        ``x``: ``(n,)`` in increasing order; ``y``: ``(n,)``; both of ``dtype``.
    """
    check_positive_int("n", n)
    if not (np.isfinite(noise) and noise >= 0):
        raise ValueError(f"noise must be a finite number >= 0, got {noise}")
    if not (np.isfinite(x_max) and x_max > 0):
        raise ValueError(f"x_max must be positive and finite, got {x_max}")
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(np.sort(rng.uniform(0.0, x_max, size=n))).to(dtype)
    eps = torch.from_numpy(rng.normal(0.0, noise, size=n)).to(dtype)
    return x, curve_target(x) + eps


@dataclass(frozen=True)
class RunningExample:
    """A sentence with illustrative embeddings: see :func:`running_example`.

    Attributes:
        tokens: the ``L`` words of the sentence.
        features: the names of the ``d`` embedding dimensions.
        embeddings: ``(L, d)`` float64; row ``j`` is the embedding of ``tokens[j]``.
    """

    tokens: tuple[str, ...]
    features: tuple[str, ...]
    embeddings: torch.Tensor


#: Hand-written feature values of the running example (rows: tokens; columns: features).
_RUNNING_FEATURES = ("person", "action", "place", "time", "function word", "proper noun")
_RUNNING_ROWS = {
    "Jane": (1.0, 0.0, 0.0, 0.0, 0.0, 1.0),
    "visite": (0.0, 1.0, 0.0, 0.0, 0.0, 0.0),
    "l'Afrique": (0.0, 0.0, 1.0, 0.0, 0.5, 1.0),  # a place, with its article l'
    "en": (0.0, 0.0, 0.0, 0.3, 1.0, 0.0),          # a preposition, here of time
    "septembre": (0.0, 0.0, 0.0, 1.0, 0.0, 0.0),
}


def running_example() -> RunningExample:
    """The running example of chapters 4-6: "Jane visite l'Afrique en septembre".

    Note 003 of the source notes walks self-attention through this French sentence ("Jane
    visits Africa in September"). The embeddings are **illustrative**, written by hand so that
    each of the ``d = 6`` dimensions has a meaning (person, action, place, time, function word,
    proper noun); a trained model's embeddings have no such labels. Small enough to print, and
    ``d = 6`` splits into ``h = 2`` or ``h = 3`` heads.

    Returns:
        a :class:`RunningExample` with ``L = 5`` tokens and ``embeddings`` of shape ``(5, 6)``.
    """
    tokens = tuple(_RUNNING_ROWS)
    embeddings = torch.tensor([_RUNNING_ROWS[t] for t in tokens], dtype=torch.float64)
    return RunningExample(tokens, _RUNNING_FEATURES, embeddings)
