"""attention_src.date_alignment: the fields of a date, and the attention on them.

References: positions counted by hand in the strings; masses computed by hand on planted
weights; every format ``data.date_pairs`` writes is parsed back to the ISO date it came from
(an independent check: the ISO string is produced by ``datetime``, not by this module).
"""

from __future__ import annotations

import pytest
import torch

from attention_src import data
from attention_src.date_alignment import (
    ISO_OUTPUT_STEPS,
    MONTHS,
    date_fields,
    field_attention_mass,
)


def test_fields_counted_by_hand():
    #                     0123456789012345678
    assert date_fields("sunday 19 july 2020") == {
        "year": [15, 16, 17, 18], "month": [10, 11, 12, 13], "day": [7, 8]}
    #                     0123456789
    assert date_fields("19.07.2020") == {"year": [6, 7, 8, 9], "month": [3, 4], "day": [0, 1]}
    assert date_fields("jul 5, 1999") == {"year": [7, 8, 9, 10], "month": [0, 1, 2], "day": [4]}


@pytest.mark.parametrize("seed", range(3))
def test_every_generated_format_parses_back_to_its_iso_date(seed):
    for human, iso in data.date_pairs(200, seed=seed):
        f = date_fields(human)
        year, month, day = (human[f[k][0]:f[k][-1] + 1] for k in ("year", "month", "day"))
        month_number = (int(month) if month.isdigit()
                        else MONTHS.index(month[:3]) + 1)
        assert f"{int(year):04d}-{month_number:02d}-{int(day):02d}" == iso, human


def test_mass_computed_by_hand():
    source = "19.07.2020"  # day 0-1, month 3-4, year 6-9
    weights = torch.zeros(1, 10, 10)
    weights[0, [0, 1, 2, 3], 6] = 1.0  # year steps: all weight on the year
    weights[0, 5, 3], weights[0, 5, 0] = 0.5, 0.5  # month step 5: half on the month
    weights[0, 6, 4] = 1.0  # month step 6: all on the month
    weights[0, 8, 9] = 1.0  # day steps: nothing on the day
    weights[0, 9, 9] = 1.0
    mass, chance = field_attention_mass(weights, [source])
    assert float(mass["year"][0]) == 1.0
    assert float(mass["month"][0]) == 0.75
    assert float(mass["day"][0]) == 0.0
    assert chance == {"year": 0.4, "month": 0.2, "day": 0.2}


def test_uniform_weights_give_the_uniform_share():
    sources = [s for s, _ in data.date_pairs(20, seed=4)]
    L_s = max(len(s) for s in sources)
    weights = torch.zeros(len(sources), 11, L_s)
    for b, s in enumerate(sources):
        weights[b, :, :len(s)] = 1 / len(s)
    mass, chance = field_attention_mass(weights, sources)
    for name in ISO_OUTPUT_STEPS:
        assert float(mass[name].mean()) == pytest.approx(chance[name], abs=1e-6)
        assert mass[name].shape == (len(sources),)


def test_bad_input_is_named():
    with pytest.raises(TypeError, match="source must be a str"):
        date_fields(2020)
    with pytest.raises(ValueError, match="four-digit year"):
        date_fields("19 july 20")
    with pytest.raises(ValueError, match="month and the day"):
        date_fields("19 2020")
    with pytest.raises(TypeError, match="torch.Tensor"):
        field_attention_mass([[0.0]], ["19.07.2020"])
    with pytest.raises(ValueError, match=r"\(B, L_t, L_s\)"):
        field_attention_mass(torch.zeros(11, 10), ["19.07.2020"])
    with pytest.raises(ValueError, match="batch 2 but there are 1"):
        field_attention_mass(torch.zeros(2, 11, 10), ["19.07.2020"])
    with pytest.raises(ValueError, match="L_s = 5"):
        field_attention_mass(torch.zeros(1, 11, 5), ["19.07.2020"])
    with pytest.raises(ValueError, match="L_t = 4"):
        field_attention_mass(torch.zeros(1, 4, 10), ["19.07.2020"])



def _text(source, positions):
    return "".join(source[i] for i in positions)


@pytest.mark.parametrize("source, locale, year, month, day", [
    ("3 septembre 2026", "fr_FR", "2026", "septembre", "3"),
    ("mardi 2 juillet 2030", "fr_FR", "2030", "juillet", "2"),
    ("7 avr. 1952", "fr_FR", "1952", "avr", "7"),
    ("10 août 2021", "fr_FR", "2021", "août", "10"),
    ("3. september 2026", "de_DE", "2026", "september", "3"),
    ("dienstag, 13. februar 2007", "de_DE", "2007", "februar", "13"),
    ("17.10.1977", "de_DE", "1977", "10", "17"),
    ("3 de septiembre de 2026", "es_ES", "2026", "septiembre", "3"),
    ("miércoles, 6 de septiembre de 1978", "es_ES", "1978", "septiembre", "6"),
    ("9 ene 2037", "es_ES", "2037", "ene", "9"),
    ("sunday, december 15, 2047", "en_US", "2047", "december", "15"),
    ("jun 14, 1973", "en_US", "1973", "jun", "14"),
])
def test_fields_of_dates_in_four_languages_by_hand(source, locale, year, month, day):
    fields = date_fields(source, locale)
    assert {name: _text(source, positions) for name, positions in fields.items()} == {
        "year": year, "month": month, "day": day}


@pytest.mark.parametrize("seed", [0, 1])
def test_every_multilocale_date_parses_back_to_its_iso_date(seed):
    """The reference is the ISO target and Babel's own month names for the target's month."""
    from babel.dates import get_month_names

    for source, iso, locale in data.multilocale_date_pairs(300, seed=seed):
        fields = date_fields(source, locale)
        year, month, day = (int(part) for part in iso.split("-"))
        assert int(_text(source, fields["year"])) == year
        assert int(_text(source, fields["day"])) == day
        said = _text(source, fields["month"])
        names = {get_month_names(width, locale=locale)[month].lower().rstrip(".")
                 for width in ("wide", "abbreviated")}
        assert (said.isdigit() and int(said) == month) or said in names, (source, said)


def test_multilocale_mass_uses_each_source_locale():
    sources, locales = ["3 mai 2026", "3. mai 2026"], ["fr_FR", "de_DE"]
    weights = torch.zeros(2, 11, 11)
    weights[:, 5:7, 2:5] = 1 / 3  # the month steps read "mai" only
    mass, _ = field_attention_mass(weights, sources, locales=locales)
    # "3 mai": "mai" is at 2..4, all the weight; "3. mai": at 3..5, two of the three columns
    assert mass["month"].tolist() == pytest.approx([1.0, 2 / 3])
    with pytest.raises(ValueError, match="2 sources but 1 locales"):
        field_attention_mass(weights, sources, locales=locales[:1])


def test_bad_locales_are_named():
    with pytest.raises(ValueError, match="unknown locale 'xx_YY'"):
        date_fields("3 mai 2026", "xx_YY")
    with pytest.raises(TypeError, match="locale must be a str or None"):
        date_fields("3 mai 2026", 7)
    with pytest.raises(ValueError, match="month and the day"):
        date_fields("3 septembre 2026", "de_DE")  # not a German month name
