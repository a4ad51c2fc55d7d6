"""Data for the book's experiments, generated on the fly (nothing is downloaded).

* :class:`Vocab`: a character/token vocabulary with ``<pad>``, ``<bos>``, ``<eos>``.
* :func:`reverse_task`: random symbol strings and their reversal, a sequence-to-sequence task
  whose difficulty for a fixed-size context vector grows with the length (chapter 1).
* :func:`date_pairs`: human-written dates (``"july 19, 2020"``, ``"sunday 19 july 2020"``,
  ``"19.07.2020"`` ...) and their ISO form ``"2020-07-19"``, written by Babel's locale data
  (chapter 2).
* :func:`multilocale_date_pairs` and :func:`multilocale_date_task`: the same dates written
  in English, French, German and Spanish (``"3 septembre 2026"``, ``"3. september 2026"``,
  ``"3 de septiembre de 2026"`` -> ``"2026-09-03"``), a small translation task (chapter 10).
* :func:`encode_pairs`: turn (source, target) string pairs into padded tensors.
* :func:`noisy_curve` and :func:`curve_target`: noisy samples of a smooth 1-D function, for
  Nadaraya-Watson kernel regression (attention pooling without learning, chapter 1).
* :func:`running_example`: the sentence "Jane visite l'Afrique en septembre" with small,
  hand-written embeddings, carried through chapters 4 to 6.
* :func:`repeated_segments`: random-token sequences in which a segment repeats at a varying
  offset, for the induction-head experiment (chapter 6).
* :func:`offset_copy_task`: random tokens with, as targets, the tokens at fixed relative
  offsets (the previous one, the one two ahead), for the trained heads of chapter 5.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from babel.dates import format_date

from attention_src.validation import check_device, check_positive_int

__all__ = [
    "Vocab",
    "SequencePairs",
    "reverse_task",
    "date_pairs",
    "DATE_FORMATS",
    "DateTask",
    "date_translation_task",
    "DATE_LOCALES",
    "LOCALE_DATE_FORMATS",
    "multilocale_date_pairs",
    "MultilocaleDateTask",
    "multilocale_date_task",
    "encode_pairs",
    "curve_target",
    "noisy_curve",
    "RunningExample",
    "running_example",
    "IGNORE_INDEX",
    "offset_copy_task",
    "RepeatedSegments",
    "repeated_segments",
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

    def to(self, device: str | torch.device) -> SequencePairs:
        """The same pairs with every tensor on ``device`` (``self`` if they are there)."""
        device = check_device(device)
        if device is None:
            raise TypeError("device must be a str or a torch.device, got NoneType")
        return SequencePairs(self.src.to(device), self.src_len.to(device),
                             self.tgt_in.to(device), self.tgt_out.to(device))


def encode_pairs(
    pairs: Sequence[tuple[Sequence[str], Sequence[str]]], src_vocab: Vocab, tgt_vocab: Vocab,
    *, device: str | torch.device | None = None,
) -> SequencePairs:
    """Encode and pad (source symbols, target symbols) pairs; see :class:`SequencePairs`.

    The tensors are built on the CPU and moved to ``device`` when one is given.
    """
    device = check_device(device)
    if not pairs:
        raise ValueError("pairs is empty")
    src_len = torch.tensor([len(s) for s, _ in pairs])
    if int(src_len.min()) == 0:
        raise ValueError("every source sequence must have at least one symbol")
    src_ids = [src_vocab.encode(s) for s, _ in pairs]
    tgt_ids = [tgt_vocab.encode(t) for _, t in pairs]
    width = int(src_len.max())
    tgt_len = max(len(ids) for ids in tgt_ids) + 1  # + <bos> (inputs) or <eos> (outputs)
    src_pad, tgt_pad = src_vocab.pad_id, tgt_vocab.pad_id
    bos, eos = tgt_vocab.bos_id, tgt_vocab.eos_id
    # every row padded in Python, then one tensor each: (N, width), (N, tgt_len), (N, tgt_len)
    src = torch.tensor([ids + [src_pad] * (width - len(ids)) for ids in src_ids],
                       dtype=torch.long)
    tgt_in = torch.tensor([[bos] + ids + [tgt_pad] * (tgt_len - 1 - len(ids))
                           for ids in tgt_ids], dtype=torch.long)
    tgt_out = torch.tensor([ids + [eos] + [tgt_pad] * (tgt_len - 1 - len(ids))
                            for ids in tgt_ids], dtype=torch.long)
    pairs_out = SequencePairs(src, src_len, tgt_in, tgt_out)
    return pairs_out if device is None else pairs_out.to(device)


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


@dataclass
class DateTask:
    """Chapter 2's date translation data: pairs, vocabularies and encoded sets.

    Attributes:
        train_pairs, test_pairs: ``(source, target)`` strings, e.g.
            ``("july 19, 2020", "2020-07-19")``; no held-out source is a training source.
        src_vocab: the characters of the training sources; tgt_vocab: digits and ``-``.
        train_set, test_set: the pairs encoded and padded (:class:`SequencePairs`).
    """

    train_pairs: list[tuple[str, str]]
    test_pairs: list[tuple[str, str]]
    src_vocab: Vocab
    tgt_vocab: Vocab
    train_set: SequencePairs
    test_set: SequencePairs


def date_translation_task(
    n_train: int = 4000, n_test: int = 500, train_seed: int = 1, test_seed: int = 2,
    draw: int = 600, *, device: str | torch.device | None = None,
) -> DateTask:
    """The training and held-out dates of chapter 2 (its defaults are the chapter's).

    ``n_train`` pairs from :func:`date_pairs` with ``train_seed``; then ``draw`` pairs with
    ``test_seed``, of which those whose source is not a training source are kept, the first
    ``n_test`` of them. The encoded sets are on ``device`` (default: the CPU), the same
    numbers on every device.

    Raises:
        ValueError: a count is not positive, or fewer than ``n_test`` of the ``draw`` held-out
            dates are new (draw more).
    """
    for name, value in (("n_train", n_train), ("n_test", n_test), ("draw", draw)):
        check_positive_int(name, value)
    device = check_device(device)
    train_pairs = date_pairs(n_train, seed=train_seed)
    seen = {source for source, _ in train_pairs}
    fresh = [pair for pair in date_pairs(draw, seed=test_seed) if pair[0] not in seen]
    if len(fresh) < n_test:
        raise ValueError(f"only {len(fresh)} of the {draw} held-out dates are new, "
                         f"n_test = {n_test}: increase draw")
    test_pairs = fresh[:n_test]
    src_vocab = Vocab(ch for source, _ in train_pairs for ch in source)
    tgt_vocab = Vocab("0123456789-")
    return DateTask(train_pairs, test_pairs, src_vocab, tgt_vocab,
                    encode_pairs(train_pairs, src_vocab, tgt_vocab, device=device),
                    encode_pairs(test_pairs, src_vocab, tgt_vocab, device=device))


#: The locales of chapter 10's dates: month and weekday names in four languages.
DATE_LOCALES: tuple[str, ...] = ("en_US", "fr_FR", "de_DE", "es_ES")
#: Babel's named formats used for every locale. The numeric ``short`` format is left out: it
#: is ambiguous across locales (en_US writes 9 March 2026 as "3/9/26", es_ES writes 3
#: September 2026 the same way), so no model could translate it.
LOCALE_DATE_FORMATS: tuple[str, ...] = ("medium", "long", "full")


def multilocale_date_pairs(
    n: int,
    seed: int = 0,
    locales: Sequence[str] = DATE_LOCALES,
    formats: Sequence[str] = LOCALE_DATE_FORMATS,
    start: dt.date = dt.date(1950, 1, 1),
    end: dt.date = dt.date(2049, 12, 31),
) -> list[tuple[str, str, str]]:
    """Random dates written in several languages (lower case), their ISO form, the locale.

    Each pair draws a date, a locale and a format uniformly. E.g. 3 September 2026 in the
    ``long`` format is ``"september 3, 2026"`` (en_US), ``"3 septembre 2026"`` (fr_FR),
    ``"3. september 2026"`` (de_DE), ``"3 de septiembre de 2026"`` (es_ES).

    Returns:
        ``n`` triples ``(source, iso, locale)``.
    """
    check_positive_int("n", n)
    if isinstance(locales, str) or not locales:
        raise ValueError(f"locales must be a non-empty sequence of locale names, got "
                         f"{locales!r}")
    if isinstance(formats, str) or not formats:
        raise ValueError(f"formats must be a non-empty sequence of formats, got {formats!r}")
    if end < start:
        raise ValueError(f"end ({end}) is before start ({start})")
    rng = np.random.default_rng(seed)
    days = rng.integers(0, (end - start).days + 1, size=n)
    which_locale = rng.integers(0, len(locales), size=n)
    which_format = rng.integers(0, len(formats), size=n)
    triples = []
    for d, lo, f in zip(days, which_locale, which_format, strict=True):
        date = start + dt.timedelta(days=int(d))
        locale = locales[int(lo)]
        triples.append((format_date(date, formats[int(f)], locale=locale).lower(),
                        date.isoformat(), locale))
    return triples


@dataclass
class MultilocaleDateTask:
    """Chapter 10's data: dates in several languages -> ISO, split and encoded.

    Attributes:
        train_pairs, test_pairs: ``(source, target)`` strings; no held-out source is a
            training source.
        train_locales, test_locales: the locale of each pair.
        max_train_length: the longest training source (``None``: no limit was set); held-out
            sources may be longer, to measure length generalisation.
        src_vocab: the characters of every source, training and held-out (a character only
            held-out sources use keeps its untrained embedding); tgt_vocab: digits and ``-``.
        train_set, test_set: the pairs encoded and padded (:class:`SequencePairs`).
    """

    train_pairs: list[tuple[str, str]]
    test_pairs: list[tuple[str, str]]
    train_locales: list[str]
    test_locales: list[str]
    max_train_length: int | None
    src_vocab: Vocab
    tgt_vocab: Vocab
    train_set: SequencePairs
    test_set: SequencePairs


def multilocale_date_task(
    n_train: int = 8000, n_test: int = 1000, train_seed: int = 1, test_seed: int = 2,
    max_train_length: int | None = None, locales: Sequence[str] = DATE_LOCALES,
    formats: Sequence[str] = LOCALE_DATE_FORMATS, *,
    device: str | torch.device | None = None,
) -> MultilocaleDateTask:
    """The training and held-out dates of chapter 10.

    Training pairs are drawn with ``train_seed`` (in chunks, keeping those whose source has at
    most ``max_train_length`` characters, until there are ``n_train``); held-out pairs with
    ``test_seed``, keeping those whose source is not a training source, of any length, until
    there are ``n_test``. The encoded sets are on ``device`` (default: the CPU).

    Raises:
        ValueError: a count is not positive, ``max_train_length`` is below 1, or no draw of
            100 chunks finds enough pairs (the limit is shorter than every source).
    """
    for name, value in (("n_train", n_train), ("n_test", n_test)):
        check_positive_int(name, value)
    if max_train_length is not None:
        check_positive_int("max_train_length", max_train_length)
    device = check_device(device)

    def draw(count, seed, keep):
        kept, chunk = [], max(count, 256)
        for round_ in range(100):
            for triple in multilocale_date_pairs(chunk, seed=seed * 1000 + round_,
                                                 locales=locales, formats=formats):
                if keep(triple[0]):
                    kept.append(triple)
                    if len(kept) == count:
                        return kept
        raise ValueError(f"found only {len(kept)} of {count} pairs in 100 draws of {chunk}: "
                         f"max_train_length = {max_train_length} may be too short")

    train = draw(n_train, train_seed,
                 lambda s: max_train_length is None or len(s) <= max_train_length)
    seen = {source for source, _, _ in train}
    test = draw(n_test, test_seed, lambda s: s not in seen)
    train_pairs = [(s, t) for s, t, _ in train]
    test_pairs = [(s, t) for s, t, _ in test]
    src_vocab = Vocab(ch for source, _ in train_pairs + test_pairs for ch in source)
    tgt_vocab = Vocab("0123456789-")
    return MultilocaleDateTask(
        train_pairs, test_pairs, [lo for _, _, lo in train], [lo for _, _, lo in test],
        max_train_length, src_vocab, tgt_vocab,
        encode_pairs(train_pairs, src_vocab, tgt_vocab, device=device),
        encode_pairs(test_pairs, src_vocab, tgt_vocab, device=device))


def curve_target(x: torch.Tensor) -> torch.Tensor:
    """The smooth function behind :func:`noisy_curve`: ``f(x) = sin(2 x) + 0.6 x``."""
    return torch.sin(2 * x) + 0.6 * x


def noisy_curve(
    n: int, noise: float = 0.4, x_max: float = 5.0, seed: int = 0,
    dtype: torch.dtype = torch.float64, *, device: str | torch.device | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Noisy samples ``y = f(x) + eps`` of :func:`curve_target` at random, sorted ``x``.

    ``x`` is uniform on ``[0, x_max]`` and ``eps`` is Gaussian with standard deviation
    ``noise``; both come from ``np.random.default_rng(seed)``, so a seed fixes the data.

    Computed on the CPU and moved to ``device`` when one is given: the same numbers on every
    device.

    Returns:
        ``x``: ``(n,)`` in increasing order; ``y``: ``(n,)``; both of ``dtype``.
    """
    check_positive_int("n", n)
    device = check_device(device)
    if not (np.isfinite(noise) and noise >= 0):
        raise ValueError(f"noise must be a finite number >= 0, got {noise}")
    if not (np.isfinite(x_max) and x_max > 0):
        raise ValueError(f"x_max must be positive and finite, got {x_max}")
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(np.sort(rng.uniform(0.0, x_max, size=n))).to(dtype)
    eps = torch.from_numpy(rng.normal(0.0, noise, size=n)).to(dtype)
    y = curve_target(x) + eps
    if device is not None:
        x, y = x.to(device), y.to(device)
    return x, y


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


def running_example(*, device: str | torch.device | None = None) -> RunningExample:
    """The running example of chapters 4-6: "Jane visite l'Afrique en septembre".

    Note 003 of the source notes walks self-attention through this French sentence ("Jane
    visits Africa in September"). The embeddings are **illustrative**, written by hand so that
    each of the ``d = 6`` dimensions has a meaning (person, action, place, time, function word,
    proper noun); a trained model's embeddings have no such labels. Small enough to print, and
    ``d = 6`` splits into ``h = 2`` or ``h = 3`` heads.

    Returns:
        a :class:`RunningExample` with ``L = 5`` tokens and ``embeddings`` of shape ``(5, 6)``,
        on ``device`` (default PyTorch's default device, the CPU unless changed).
    """
    device = check_device(device)
    tokens = tuple(_RUNNING_ROWS)
    embeddings = torch.tensor([_RUNNING_ROWS[t] for t in tokens], dtype=torch.float64,
                              device=device)
    return RunningExample(tokens, _RUNNING_FEATURES, embeddings)


@dataclass
class RepeatedSegments:
    """Random-token sequences in which one segment appears twice: see :func:`repeated_segments`.

    Attributes:
        tokens: ``(N, L)`` int64 token ids in ``[0, vocab_size)``.
        repeated: ``(N, L)`` bool; ``True`` at the positions of the second copy after its first
            token, ``second + 1 .. second + segment_len - 1``: the tokens an induction rule
            ("find the earlier copy of the current token, predict what followed it") predicts
            from the tokens before them.
        first: ``(N,)`` int64 start of the first copy.
        second: ``(N,)`` int64 start of the second copy; ``second - first >= segment_len``.
    """

    tokens: torch.Tensor
    repeated: torch.Tensor
    first: torch.Tensor
    second: torch.Tensor


def repeated_segments(
    n: int, length: int = 32, vocab_size: int = 32, segment_len: int = 8, seed: int = 0, *,
    device: str | torch.device | None = None,
) -> RepeatedSegments:
    """Sequences of uniform random tokens in which a segment repeats at a varying offset.

    For each sequence, a first start ``a`` is drawn uniformly from ``[0, length - 2 s]``
    (``s = segment_len``), then a second start ``b`` uniformly from ``[a + s, length - s]``,
    and the ``s`` tokens at ``a`` are copied to ``b``. Every other token is uniform over the
    vocabulary. Because the offset ``b - a`` varies, no fixed position tells where the copy is:
    a model has to find the earlier occurrence of the current token and read what came next
    (an *induction head*, Olsson et al., 2022). The first token of the copy is not predictable
    (the token before it is random), so ``repeated`` marks the ``s - 1`` tokens after it.

    Args:
        n: number of sequences.
        length: sequence length ``L``; at least ``2 * segment_len``.
        vocab_size: number of token ids, at least 2.
        segment_len: length ``s`` of the repeated segment, at least 2.
        seed: seed of the ``torch.Generator`` that draws everything.
        device: where the tensors go; they are drawn on the CPU with the CPU generator and
            then moved, so a seed gives the same data on every device.

    Returns:
        a :class:`RepeatedSegments` with ``tokens`` and ``repeated`` of shape ``(n, length)``.
    """
    check_positive_int("n", n)
    device = check_device(device)
    check_positive_int("length", length)
    check_positive_int("vocab_size", vocab_size)
    check_positive_int("segment_len", segment_len)
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be at least 2, got {vocab_size}")
    if segment_len < 2:
        raise ValueError(f"segment_len must be at least 2, got {segment_len}")
    if length < 2 * segment_len:
        raise ValueError(
            f"length ({length}) must be at least 2 * segment_len ({2 * segment_len})"
        )
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(vocab_size, (n, length), generator=g)  # (N, L)
    # a uniform in [0, L - 2s]; b uniform in [a + s, L - s]: (L - 2s - a + 1) choices
    first = torch.randint(length - 2 * segment_len + 1, (n,), generator=g)  # (N,)
    choices = length - 2 * segment_len - first + 1  # (N,), each >= 1
    second = first + segment_len + (torch.rand(n, generator=g) * choices).long()  # (N,)
    offsets = torch.arange(segment_len)  # (s,)
    rows = torch.arange(n).unsqueeze(1)  # (N, 1)
    src = first.unsqueeze(1) + offsets  # (N, s) positions of the first copy
    dst = second.unsqueeze(1) + offsets  # (N, s) positions of the second copy
    tokens[rows, dst] = tokens[rows, src]
    repeated = torch.zeros(n, length, dtype=torch.bool)
    repeated[rows, dst[:, 1:]] = True  # (N, s - 1): the predictable tokens
    if device is not None:
        tokens, repeated = tokens.to(device), repeated.to(device)
        first, second = first.to(device), second.to(device)
    return RepeatedSegments(tokens, repeated, first, second)


#: Target value of a position that has no target (``F.cross_entropy``'s default ``ignore_index``).
IGNORE_INDEX = -100


def offset_copy_task(
    n: int, length: int = 12, vocab_size: int = 16, offsets: Sequence[int] = (-1, 2),
    seed: int | torch.Generator = 0, *, device: str | torch.device | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random tokens and, for each offset ``o``, the token ``o`` places away (chapter 5).

    Output position ``i`` has one target per offset: ``targets[:, k, i] = tokens[:, i + o_k]``,
    the token at relative offset ``o_k`` (``-1``: the previous token; ``2``: the token two
    places ahead). Where ``i + o_k`` falls outside the sequence the target is
    :data:`IGNORE_INDEX`. A model with one attention layer must look in several places at
    once: one softmax row gives one weighted average, so reading two offsets cleanly calls for
    two heads.

    Args:
        n: number of sequences.
        length: sequence length ``L``.
        vocab_size: tokens are uniform in ``[0, vocab_size)``.
        offsets: distinct non-zero relative offsets, each with ``|o| < length``.
        seed: an ``int`` seed, or a CPU ``torch.Generator`` to draw from (for a stream of
            batches).
        device: where the tensors go; drawn on the CPU and then moved, so a seed gives the
            same data on every device.

    Returns:
        tokens: ``(n, L)`` int64; targets: ``(n, len(offsets), L)`` int64.
    """
    check_positive_int("n", n)
    device = check_device(device)
    check_positive_int("length", length)
    check_positive_int("vocab_size", vocab_size)
    offsets = tuple(offsets)
    if not offsets:
        raise ValueError("offsets is empty")
    for o in offsets:
        if isinstance(o, bool) or not isinstance(o, (int, np.integer)):
            raise TypeError(f"offsets must be ints, got {o!r}")
        if o == 0 or abs(o) >= length:
            raise ValueError(f"every offset must be non-zero with |o| < length ({length}), got {o}")
    if len(set(offsets)) != len(offsets):
        raise ValueError(f"offsets must be distinct, got {offsets}")
    gen = seed if isinstance(seed, torch.Generator) else torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab_size, (n, length), generator=gen)
    targets = torch.full((n, len(offsets), length), IGNORE_INDEX, dtype=torch.long)
    positions = torch.arange(length)
    for k, o in enumerate(offsets):
        source = positions + int(o)  # (L,) position read by each output position
        valid = (source >= 0) & (source < length)
        targets[:, k, valid] = tokens[:, source[valid]]  # (n, #valid)
    if device is not None:
        tokens, targets = tokens.to(device), targets.to(device)
    return tokens, targets
