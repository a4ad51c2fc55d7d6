"""Chapter 10's multilingual dates (attention_src.data.multilocale_date_pairs / _task).

Independent reference: the ``long`` format of each locale rebuilt from month names typed here
by hand and the locale's word order (CLDR's patterns as published), never from Babel.
Properties: one ISO date per source (no source is ambiguous across locales), the split keeps
held-out sources out of training, the length limit holds for training only, seeds reproduce.
Bad input: named errors.
"""

from __future__ import annotations

import datetime as dt

import pytest
import torch

from attention_src.data import (
    DATE_LOCALES,
    multilocale_date_pairs,
    multilocale_date_task,
)

MONTHS = {
    "en_US": "january february march april may june july august september october november "
             "december",
    "fr_FR": "janvier février mars avril mai juin juillet août septembre octobre novembre "
             "décembre",
    "de_DE": "januar februar märz april mai juni juli august september oktober november "
             "dezember",
    "es_ES": "enero febrero marzo abril mayo junio julio agosto septiembre octubre noviembre "
             "diciembre",
}
LONG = {
    "en_US": "{month} {day}, {year}",
    "fr_FR": "{day} {month} {year}",
    "de_DE": "{day}. {month} {year}",
    "es_ES": "{day} de {month} de {year}",
}


def test_the_issues_example_in_every_language():
    day = dt.date(2026, 9, 3)
    got = {lo: multilocale_date_pairs(1, locales=[lo], formats=["long"], start=day, end=day)[0]
           for lo in DATE_LOCALES}
    assert got["fr_FR"] == ("3 septembre 2026", "2026-09-03", "fr_FR")
    assert got["de_DE"] == ("3. september 2026", "2026-09-03", "de_DE")
    assert got["es_ES"] == ("3 de septiembre de 2026", "2026-09-03", "es_ES")
    assert got["en_US"] == ("september 3, 2026", "2026-09-03", "en_US")


@pytest.mark.parametrize("locale", DATE_LOCALES)
def test_long_dates_match_hand_written_month_names_and_word_order(locale):
    months = MONTHS[locale].split()
    for source, iso, lo in multilocale_date_pairs(60, seed=4, locales=[locale],
                                                  formats=["long"]):
        date = dt.date.fromisoformat(iso)
        assert lo == locale
        assert source == LONG[locale].format(month=months[date.month - 1], day=date.day,
                                             year=date.year)


def test_no_source_is_ambiguous_and_every_locale_and_format_is_drawn():
    triples = multilocale_date_pairs(6000, seed=9)
    meaning: dict[str, str] = {}
    for source, iso, _ in triples:
        assert meaning.setdefault(source, iso) == iso, f"{source!r} means two dates"
    assert {lo for _, _, lo in triples} == set(DATE_LOCALES)
    german_numeric = [s for s, _, lo in triples if lo == "de_DE" and s[:2].isdigit()
                      and s[2] == "."]
    assert german_numeric  # de_DE's medium format: 03.09.2026
    assert triples == multilocale_date_pairs(6000, seed=9)


def test_task_split_length_limit_and_encoding():
    task = multilocale_date_task(n_train=600, n_test=200, max_train_length=20)
    assert len(task.train_pairs) == 600 and len(task.test_pairs) == 200
    assert len(task.train_locales) == 600 and len(task.test_locales) == 200
    assert max(len(s) for s, _ in task.train_pairs) <= 20
    assert max(len(s) for s, _ in task.test_pairs) > 20  # longer than any in training
    assert not {s for s, _ in task.test_pairs} & {s for s, _ in task.train_pairs}
    assert task.train_set.src.shape == (600, 20)
    assert task.train_set.tgt_in.shape == (600, 11)  # <bos> + 10 characters
    decoded = task.src_vocab.decode(task.test_set.src[0, :task.test_set.src_len[0]].tolist())
    assert "".join(decoded) == task.test_pairs[0][0]
    again = multilocale_date_task(n_train=600, n_test=200, max_train_length=20)
    assert again.train_pairs == task.train_pairs and torch.equal(again.test_set.src,
                                                                 task.test_set.src)


def test_task_without_a_length_limit_and_on_a_device(device):
    task = multilocale_date_task(n_train=50, n_test=20, device=device)
    assert task.max_train_length is None
    assert task.train_set.src.device.type == torch.device(device).type


@pytest.mark.parametrize("kwargs, match", [
    ({"n_train": 0}, "n_train"),
    ({"max_train_length": 0}, "max_train_length"),
    ({"max_train_length": 5}, "found only 0 of 10 pairs"),
])
def test_bad_task_arguments_are_named(kwargs, match):
    args = {"n_train": 10, "n_test": 5}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        multilocale_date_task(**args)


@pytest.mark.parametrize("kwargs, match", [
    ({"locales": "fr_FR"}, "locales must be a non-empty sequence"),
    ({"locales": []}, "locales must be a non-empty sequence"),
    ({"formats": ()}, "formats must be a non-empty sequence"),
    ({"start": dt.date(2000, 1, 2), "end": dt.date(2000, 1, 1)}, "is before start"),
    ({"n": 0}, "n must be"),
])
def test_bad_pair_arguments_are_named(kwargs, match):
    args = {"n": 3}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        multilocale_date_pairs(**args)
