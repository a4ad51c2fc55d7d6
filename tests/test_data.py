"""Tests of ``attention_src.data``: vocabularies, padding, and the two generated tasks.

The date task is checked against an independent parser: Python's ``datetime.strptime`` reads
each human-written date back, and the result must equal the ISO target.
"""

from __future__ import annotations

import datetime as dt

import pytest
import torch

from attention_src import data
from attention_src.data import DATE_FORMATS, Vocab, date_pairs, encode_pairs, reverse_task

# ---------------------------------------------------------------------------------- Vocab


def test_vocab_specials_come_first_then_sorted_symbols():
    v = Vocab("cabbage")
    assert v.itos[:3] == [data.PAD, data.BOS, data.EOS]
    assert (v.pad_id, v.bos_id, v.eos_id) == (0, 1, 2)
    assert v.itos[3:] == ["a", "b", "c", "e", "g"]
    assert len(v) == 8
    assert all(v.stoi[s] == i for i, s in enumerate(v.itos))


def test_vocab_ignores_specials_among_its_symbols():
    v = Vocab(["x", data.PAD, data.EOS, "y"])
    assert v.itos == [data.PAD, data.BOS, data.EOS, "x", "y"]


def test_vocab_encode_decode_round_trip():
    v = Vocab("abc")
    ids = v.encode("cab")
    assert ids == [5, 3, 4]
    assert v.decode(ids) == ["c", "a", "b"]
    assert v.decode(torch.tensor(ids)) == ["c", "a", "b"]  # tensors of ids work too


def test_vocab_decode_strip_stops_at_eos_and_drops_pad_and_bos():
    v = Vocab("ab")
    ids = [v.bos_id, 3, v.pad_id, 4, v.eos_id, 3, 3]
    assert v.decode(ids) == ["a", "b"]
    assert v.decode(ids, strip=False) == [data.BOS, "a", data.PAD, "b", data.EOS, "a", "a"]


def test_vocab_unknown_symbol_is_a_key_error_naming_it():
    v = Vocab("ab")
    with pytest.raises(KeyError, match="'z' is not in the vocabulary"):
        v.encode("abz")


# ---------------------------------------------------------------------------- encode_pairs


def test_encode_pairs_pads_and_places_bos_and_eos():
    src_vocab, tgt_vocab = Vocab("abc"), Vocab("xyz")
    pairs = [("abc", "xy"), ("a", "zzzx")]
    batch = encode_pairs(pairs, src_vocab, tgt_vocab)
    a, b, c = src_vocab.encode("abc")
    x, y, z = tgt_vocab.encode("xyz")
    bos, eos, pad = 1, 2, 0
    assert batch.src.dtype == torch.long
    assert batch.src.tolist() == [[a, b, c], [a, pad, pad]]
    assert batch.src_len.tolist() == [3, 1]
    # longest target has 4 symbols -> length 5 with <bos> (inputs) or <eos> (outputs)
    assert batch.tgt_in.tolist() == [[bos, x, y, pad, pad], [bos, z, z, z, x]]
    assert batch.tgt_out.tolist() == [[x, y, eos, pad, pad], [z, z, z, x, eos]]
    assert len(batch) == 2


def test_tgt_in_is_tgt_out_shifted_right_by_one():
    pairs = reverse_task(20, 1, 6, seed=3)
    v = Vocab("abcdefghij")
    batch = encode_pairs(pairs, v, v)
    real = batch.tgt_out != v.pad_id
    symbol = real & (batch.tgt_out != v.eos_id)  # a target symbol (not <eos>, not padding)
    # teacher forcing: the input at step t+1 is the target at step t
    assert torch.equal(batch.tgt_in[:, 1:][symbol[:, :-1]], batch.tgt_out[:, :-1][symbol[:, :-1]])
    assert (batch.tgt_in[:, 0] == v.bos_id).all()
    assert real.sum(1).tolist() == [len(t) + 1 for _, t in pairs]


def test_sequence_pairs_subset_by_slice_index_and_mask():
    v = Vocab("abcdefghij")
    batch = encode_pairs(reverse_task(5, 1, 4, seed=1), v, v)
    part = batch.subset(slice(1, 3))
    assert len(part) == 2 and torch.equal(part.src, batch.src[1:3])
    picked = batch.subset(torch.tensor([4, 0]))
    assert torch.equal(picked.tgt_out, batch.tgt_out[[4, 0]])
    masked = batch.subset(batch.src_len > 2)
    assert len(masked) == int((batch.src_len > 2).sum())


def test_encode_pairs_rejects_empty_input_and_empty_sources():
    v = Vocab("ab")
    with pytest.raises(ValueError, match="pairs is empty"):
        encode_pairs([], v, v)
    with pytest.raises(ValueError, match="at least one symbol"):
        encode_pairs([("ab", "a"), ("", "b")], v, v)


def test_encode_pairs_unknown_symbol_is_a_key_error():
    with pytest.raises(KeyError, match="'q'"):
        encode_pairs([("aq", "a")], Vocab("ab"), Vocab("ab"))


# ---------------------------------------------------------------------------- reverse_task


def test_reverse_task_reverses_within_length_and_alphabet():
    pairs = reverse_task(200, 2, 5, num_symbols=4, seed=7)
    assert len(pairs) == 200
    lengths = set()
    for s, t in pairs:
        assert t == s[::-1]
        assert 2 <= len(s) <= 5
        assert set(s) <= set("abcd")
        lengths.add(len(s))
    assert lengths == {2, 3, 4, 5}  # every allowed length occurs


def test_reverse_task_is_deterministic_by_seed():
    assert reverse_task(30, 1, 8, seed=5) == reverse_task(30, 1, 8, seed=5)
    assert reverse_task(30, 1, 8, seed=5) != reverse_task(30, 1, 8, seed=6)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"n": 0}, ValueError, "n must be positive"),
        ({"min_len": 0}, ValueError, "min_len must be positive"),
        ({"min_len": 4, "max_len": 3}, ValueError, r"max_len \(3\) must be >= min_len \(4\)"),
        ({"num_symbols": 27}, ValueError, "at most 26"),
        ({"num_symbols": 2.0}, TypeError, "num_symbols must be an int"),
    ],
)
def test_reverse_task_bad_arguments(kwargs, error, message):
    args = {"n": 3, "min_len": 1, "max_len": 4} | kwargs
    with pytest.raises(error, match=message):
        reverse_task(**args)


# ------------------------------------------------------------------------------ date_pairs

#: The same patterns written for ``datetime.strptime`` (which matches names case-insensitively).
STRPTIME = {
    "medium": "%b %d, %Y",
    "long": "%B %d, %Y",
    "full": "%A, %B %d, %Y",
    "d MMM y": "%d %b %Y",
    "d MMMM y": "%d %B %Y",
    "EEEE d MMMM y": "%A %d %B %Y",
    "dd.MM.y": "%d.%m.%Y",
    "MMMM d y": "%B %d %Y",
}


def test_every_date_format_has_an_independent_parser():
    assert set(STRPTIME) == set(DATE_FORMATS)


@pytest.mark.parametrize("fmt", DATE_FORMATS)
def test_iso_target_equals_the_date_parsed_back_from_the_human_form(fmt):
    for human, iso in date_pairs(40, seed=11, formats=[fmt]):
        assert human == human.lower()
        parsed = dt.datetime.strptime(human, STRPTIME[fmt]).date()
        assert parsed.isoformat() == iso, (fmt, human, iso)


def test_weekday_in_the_human_form_is_the_true_weekday():
    for human, iso in date_pairs(30, seed=2, formats=["EEEE d MMMM y"]):
        weekday = dt.date.fromisoformat(iso).strftime("%A").lower()
        assert human.split()[0] == weekday


def test_a_known_date_in_each_example_format():
    one_day = dt.date(2020, 7, 19)
    pairs = date_pairs(3, seed=0, formats=["long"], start=one_day, end=one_day)
    assert pairs == [("july 19, 2020", "2020-07-19")] * 3
    numeric = date_pairs(1, formats=["dd.MM.y"], start=one_day, end=one_day)
    assert numeric == [("19.07.2020", "2020-07-19")]
    full = date_pairs(1, formats=["full"], start=one_day, end=one_day)
    assert full == [("sunday, july 19, 2020", "2020-07-19")]


def test_date_pairs_stay_in_range_and_use_every_format():
    start, end = dt.date(2001, 3, 1), dt.date(2001, 3, 31)
    pairs = date_pairs(300, seed=4, start=start, end=end)
    dates = [dt.date.fromisoformat(iso) for _, iso in pairs]
    assert min(dates) >= start and max(dates) <= end
    assert min(dates) == start and max(dates) == end  # both ends are inclusive and reachable
    # each format leaves a recognisable trace: all eight occur among 300 draws
    parsed_with = {
        fmt for human, _ in pairs for fmt, pattern in STRPTIME.items()
        if _parses(human, pattern)
    }
    assert parsed_with == set(DATE_FORMATS)


def _parses(text: str, pattern: str) -> bool:
    try:
        dt.datetime.strptime(text, pattern)
    except ValueError:
        return False
    return True


def test_date_pairs_are_deterministic_by_seed():
    assert date_pairs(50, seed=9) == date_pairs(50, seed=9)
    assert date_pairs(50, seed=9) != date_pairs(50, seed=10)


def test_date_pairs_other_locale():
    day = dt.date(2020, 7, 19)
    assert date_pairs(1, formats=["d MMMM y"], start=day, end=day, locale="de_DE") == [
        ("19 juli 2020", "2020-07-19")
    ]


def test_date_pairs_encode_with_a_character_vocabulary():
    pairs = date_pairs(64, seed=1)
    src_vocab = Vocab(ch for s, _ in pairs for ch in s)
    tgt_vocab = Vocab("0123456789-")
    batch = encode_pairs(pairs, src_vocab, tgt_vocab)
    assert batch.tgt_out.shape == (64, 11)  # "yyyy-mm-dd" + <eos>
    assert (batch.tgt_out[:, -1] == tgt_vocab.eos_id).all()
    assert "".join(tgt_vocab.decode(batch.tgt_out[0])) == pairs[0][1]
    assert "".join(src_vocab.decode(batch.src[0])) == pairs[0][0]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"n": 0}, ValueError, "n must be positive"),
        ({"n": "5"}, TypeError, "n must be an int"),
        ({"start": dt.date(2000, 1, 2), "end": dt.date(2000, 1, 1)}, ValueError,
         r"end \(2000-01-01\) is before start \(2000-01-02\)"),
        ({"formats": []}, ValueError, "formats is empty"),
    ],
)
def test_date_pairs_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        date_pairs(**({"n": 3} | kwargs))


def test_running_example_is_the_sentence_of_note_003_with_labelled_features():
    from attention_src.data import running_example

    ex = running_example()
    assert ex.tokens == ("Jane", "visite", "l'Afrique", "en", "septembre")
    assert ex.embeddings.shape == (len(ex.tokens), len(ex.features)) == (5, 6)
    assert ex.embeddings.dtype == torch.float64
    # every token has its own embedding, and each labelled feature means what it says
    assert torch.linalg.matrix_rank(ex.embeddings) == 5
    col = {name: i for i, name in enumerate(ex.features)}
    assert ex.embeddings[ex.tokens.index("Jane"), col["person"]] == 1.0
    assert ex.embeddings[ex.tokens.index("septembre"), col["time"]] == 1.0
    assert ex.embeddings[ex.tokens.index("visite"), col["action"]] == 1.0
    # a fresh copy each call: a chapter that edits it cannot change the next chapter's
    ex.embeddings[0, 0] = 99.0
    assert running_example().embeddings[0, 0] == 1.0


# --- defaults, boundaries and anchored messages (issue 13) ----------------------------------


def test_vocab_unknown_symbol_message_is_anchored():
    # KeyError's text is the repr of its message, hence the quotes around it
    with pytest.raises(KeyError, match=r"""^"symbol 'z' is not in the vocabulary"$"""):
        Vocab("ab").encode("abz")


def test_sequence_pairs_subset_keeps_every_field_aligned():
    v = Vocab("abcdefghij")
    batch = encode_pairs(reverse_task(6, 1, 5, seed=2), v, v)
    for index in (slice(1, 4), torch.tensor([5, 0, 2]), batch.src_len > 2):
        part = batch.subset(index)
        for field in ("src", "src_len", "tgt_in", "tgt_out"):
            assert torch.equal(getattr(part, field), getattr(batch, field)[index]), field
        assert len(part) == len(part.src_len)


def test_encode_pairs_with_an_empty_target_and_one_symbol_sources():
    v = Vocab("ab")
    batch = encode_pairs([("a", ""), ("b", "")], v, v)
    a, b = v.encode("ab")
    assert batch.src.tolist() == [[a], [b]] and batch.src_len.tolist() == [1, 1]
    assert batch.tgt_in.tolist() == [[v.bos_id]] * 2
    assert batch.tgt_out.tolist() == [[v.eos_id]] * 2


def test_encode_pairs_messages_are_anchored():
    v = Vocab("ab")
    with pytest.raises(ValueError, match=r"^pairs is empty$"):
        encode_pairs([], v, v)
    with pytest.raises(ValueError, match=r"^every source sequence must have at least one symbol$"):
        encode_pairs([("ab", "a"), ("", "b")], v, v)


def test_reverse_task_defaults_and_boundaries():
    assert reverse_task(20, 1, 6) == reverse_task(20, 1, 6, num_symbols=10, seed=0)
    assert {ch for s, _ in reverse_task(300, 1, 6) for ch in s} == set("abcdefghij")
    # min_len == max_len: every string has that length
    assert {len(s) for s, _ in reverse_task(30, 3, 3, seed=1)} == {3}
    # 26 symbols, the whole alphabet, is the largest allowed
    assert {ch for s, _ in reverse_task(400, 5, 5, num_symbols=26, seed=2) for ch in s} == set(
        "abcdefghijklmnopqrstuvwxyz")
    with pytest.raises(ValueError, match=r"^num_symbols must be at most 26 \(letters a-z\), "
                                         r"got 27$"):
        reverse_task(3, 1, 4, num_symbols=27)
    with pytest.raises(ValueError, match=r"^max_len \(3\) must be >= min_len \(4\)$"):
        reverse_task(3, 4, 3)


def test_date_pairs_defaults():
    assert date_pairs(40) == date_pairs(40, seed=0, formats=DATE_FORMATS,
                                        start=dt.date(1950, 1, 1), end=dt.date(2049, 12, 31),
                                        locale="en_US")


def test_date_pairs_messages_are_anchored():
    with pytest.raises(ValueError, match=r"^formats is empty$"):
        date_pairs(3, formats=())
    with pytest.raises(ValueError, match=r"^n must be positive, got 0$"):
        date_pairs(0)


def test_date_translation_task_is_chapter_2s_split():
    """Reference: the split written out by hand, as chapter 2 first wrote it."""
    task = data.date_translation_task()
    train_pairs = data.date_pairs(4000, seed=1)
    seen = {s for s, _ in train_pairs}
    test_pairs = [p for p in data.date_pairs(600, seed=2) if p[0] not in seen][:500]
    assert task.train_pairs == train_pairs and task.test_pairs == test_pairs
    assert not {s for s, _ in task.test_pairs} & seen  # held out means unseen
    assert len(task.train_set) == 4000 and len(task.test_set) == 500
    assert set(task.tgt_vocab.encode("2020-07-19")) <= set(range(len(task.tgt_vocab)))
    assert torch.equal(task.test_set.src_len,
                       torch.tensor([len(s) for s, _ in test_pairs]))


def test_date_translation_task_bad_input():
    with pytest.raises(ValueError, match="n_test"):
        data.date_translation_task(n_train=10, n_test=50, draw=20)
    with pytest.raises((ValueError, TypeError), match="draw"):
        data.date_translation_task(draw=0)
