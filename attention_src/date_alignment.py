"""Where a date translator's attention goes: the fields of a date and the weight on them.

Chapter 2 trains an encoder-decoder with attention to turn dates written by people ("sunday 19
july 2020", "19.07.2020") into ISO 8601 ("2020-07-19"). A trained model should look, while it
writes the year, at the year in the source, and so on. This module finds the source positions
of each field (:func:`date_fields`) and measures how much of each output field's attention
falls on them (:func:`field_attention_mass`), against the share a uniform weighting would
give (the positions of the field over the length of the source).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import torch

__all__ = ["MONTHS", "ISO_OUTPUT_STEPS", "date_fields", "field_attention_mass"]

#: The first three letters of each English month name (weekday names never start so).
MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
#: The decoder steps that write each field of ``yyyy-mm-dd`` (step 4 and 7 write the dashes).
ISO_OUTPUT_STEPS = {"year": [0, 1, 2, 3], "month": [5, 6], "day": [8, 9]}


def _locale_month_names(locale: str) -> frozenset[str]:
    """The lower-case month names of ``locale`` (wide and abbreviated, without a final dot),
    from Babel's CLDR data: the words that name a month in :func:`date_fields`."""
    from babel import Locale, UnknownLocaleError
    from babel.dates import get_month_names

    try:
        Locale.parse(locale)
    except (UnknownLocaleError, ValueError) as error:
        raise ValueError(f"unknown locale {locale!r}: {error}") from None
    return frozenset(name.lower().rstrip(".") for width in ("wide", "abbreviated")
                     for name in get_month_names(width, locale=locale).values())


def date_fields(source: str, locale: str | None = None) -> dict[str, list[int]]:
    """The character positions of the year, month and day in a date written by a person.

    Handles the formats of :func:`attention_src.data.date_pairs`: a month written as a name
    (with or without a weekday; the day is the number that is not the year), or
    ``dd.mm.yyyy``. With ``locale`` (e.g. ``"fr_FR"``), the dates of
    :func:`attention_src.data.multilocale_date_pairs`: a word names the month if it is one of
    the locale's month names, wide or abbreviated (``"septembre"``, ``"sept"``); other words
    (weekdays, Spanish "de") belong to no field.

    Args:
        source: a lower-case date, e.g. ``"sunday 19 july 2020"``, ``"3 septembre 2026"``.
        locale: ``None`` (English month names, chapter 2) or a Babel locale name.

    Returns:
        ``{"year": [...], "month": [...], "day": [...]}``, each a list of positions in
        ``source``.

    Raises:
        TypeError: ``source`` is not a string.
        ValueError: no four-digit year, or no month and day can be found.
    """
    if not isinstance(source, str):
        raise TypeError(f"source must be a str, got {type(source).__name__}")
    if locale is None:
        tokens = [(m.group(), range(m.start(), m.end()))
                  for m in re.finditer(r"[a-z]+|\d+", source)]
        names = [span for text, span in tokens if text[:3] in MONTHS]
    else:
        if not isinstance(locale, str):
            raise TypeError(f"locale must be a str or None, got {type(locale).__name__}")
        months = _locale_month_names(locale)
        # words (any alphabet, accents included) and digit runs
        tokens = [(m.group(), range(m.start(), m.end()))
                  for m in re.finditer(r"[^\W\d_]+|\d+", source)]
        names = [span for text, span in tokens if text in months]
    numbers = [span for text, span in tokens if text.isdigit()]
    years = [span for text, span in tokens if text.isdigit() and len(text) == 4]
    if len(years) != 1:
        raise ValueError(f"expected one four-digit year in {source!r}, found {len(years)}")
    year = years[0]
    others = [span for span in numbers if span != year]
    if names and len(others) == 1:  # a month name; the day is the other number
        month, day = names[0], others[0]
    elif not names and len(others) == 2:  # dd.mm.yyyy
        day, month = others
    else:
        raise ValueError(f"cannot tell the month and the day apart in {source!r}")
    return {"year": list(year), "month": list(month), "day": list(day)}


def field_attention_mass(
    weights: torch.Tensor,
    sources: Sequence[str],
    output_steps: Mapping[str, Sequence[int]] = ISO_OUTPUT_STEPS,
    locales: Sequence[str] | None = None,
) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """How much attention each output field puts on its own source field.

    Args:
        weights: ``(B, L_t, L_s)`` attention weights of a decoder, one row per output step
            (padding positions of a source carry weight 0 and are never in a field).
        sources: the ``B`` source strings; position ``j`` of ``sources[b]`` is column ``j``.
        output_steps: for each field, the output steps that write it.
        locales: ``None`` (chapter 2's English dates) or the ``B`` sources' locales, passed
            to :func:`date_fields`.

    Returns:
        ``(mass, chance)``: ``mass[field]`` is a ``(B,)`` tensor on the device of ``weights``,
        the weight the field's output steps put on the field's source positions (summed over
        positions, averaged over the steps); ``chance[field]`` is the mean over sources of
        the share a uniform weighting would give, ``len(positions) / len(source)``.

    Raises:
        TypeError: ``weights`` is not a tensor.
        ValueError: ``weights`` is not 3-D, its batch is not ``len(sources)``, a source is
            longer than ``L_s``, or an output step is out of range.
    """
    if not isinstance(weights, torch.Tensor):
        raise TypeError(f"weights must be a torch.Tensor, got {type(weights).__name__}")
    if weights.dim() != 3:
        raise ValueError(f"weights must be (B, L_t, L_s), got shape {tuple(weights.shape)}")
    B, L_t, L_s = weights.shape
    if B != len(sources):
        raise ValueError(f"weights has batch {B} but there are {len(sources)} sources")
    if locales is not None and len(locales) != B:
        raise ValueError(f"there are {B} sources but {len(locales)} locales")
    longest = max((len(s) for s in sources), default=0)
    if longest > L_s:
        raise ValueError(f"a source has {longest} characters but weights has L_s = {L_s}")
    steps = [step for field_steps in output_steps.values() for step in field_steps]
    if steps and not all(0 <= step < L_t for step in steps):
        raise ValueError(f"output steps {sorted(steps)} out of range for L_t = {L_t}")
    mass: dict[str, list[float]] = {name: [] for name in output_steps}
    chance: dict[str, list[float]] = {name: [] for name in output_steps}
    for b, source in enumerate(sources):
        locale = None if locales is None else locales[b]
        for name, positions in date_fields(source, locale).items():
            if name not in output_steps:
                continue
            rows = weights[b, list(output_steps[name])]  # (steps of the field, L_s)
            mass[name].append(float(rows[:, positions].sum(-1).mean()))
            chance[name].append(len(positions) / len(source))
    return ({name: torch.tensor(v, device=weights.device) for name, v in mass.items()},
            {name: sum(v) / len(v) if v else float("nan") for name, v in chance.items()})
