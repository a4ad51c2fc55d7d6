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

