"""``attention_src.saved``: the saved results ship in the package, listed with their SHA-256.

The shipped folder is checked against its manifest (exactly the files listed, each with the
recorded digest, computed here with hashlib independently of the module); a copy of it in a
temporary folder is then altered, truncated, emptied of a file or given a broken manifest, and
each case must raise an error that names the file at fault.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import pickle
import shutil

import pytest
import torch

from attention_src import saved


def _sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _manifest(folder) -> dict[str, str]:
    lines = (folder / "SHA256SUMS").read_text().splitlines()
    return {line[66:]: line[:64] for line in lines if line}


def test_the_manifest_lists_exactly_the_files_in_the_folder_with_their_sha256():
    folder = saved.SAVED_DIR
    assert folder.parent.name == "attention_src" and folder.name == "saved_data"
    on_disk = {p.name for p in folder.iterdir() if p.name != saved.CHECKSUM_FILE}
    recorded = _manifest(folder)
    assert set(recorded) == on_disk
    assert saved.checksums() == recorded
    for name, sha in recorded.items():
        assert _sha256(folder / name) == sha, name
    # sorted by name, two spaces, one line each (the format of sha256sum, so `sha256sum -c`
    # checks the folder too)
    text = (folder / "SHA256SUMS").read_text()
    assert text == "".join(f"{recorded[n]}  {n}\n" for n in sorted(recorded))


def test_every_chapter_file_named_in_the_brief_is_shipped():
    for name in ("ch01_models.pt", "ch06_induction.pt", "ch06_seeds.pt", "ch07_digits.json",
                 "ch08_results.pt", "ch09_bench_attention.csv", "ch09_bench_memory.csv",
                 "ch09_bench_attention_meta.json"):
        assert saved.saved_path(name).is_file()


@pytest.fixture
def copy(tmp_path):
    """A copy of the shipped folder, free to damage."""
    target = tmp_path / "saved_data"
    shutil.copytree(saved.SAVED_DIR, target)
    return target


def test_loaders_return_the_files_content(copy):
    rows = saved.load_csv("ch09_bench_memory.csv", folder=copy)
    with open(copy / "ch09_bench_memory.csv", newline="") as f:
        assert rows == list(csv.DictReader(f)) and len(rows) > 0
    assert saved.load_json("ch05_side.json", folder=copy) == json.loads(
        (copy / "ch05_side.json").read_text())
    models = saved.load_torch("ch01_models.pt", folder=copy)
    reference = torch.load(copy / "ch01_models.pt", weights_only=True)
    assert models.keys() == reference.keys()
    tensors = [t for t in _tensors(models)]
    assert tensors and all(t.device.type == "cpu" for t in tensors)
    for got, want in zip(tensors, _tensors(reference), strict=True):
        assert torch.equal(got, want)


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _tensors(value)
    elif isinstance(obj, list | tuple):
        for value in obj:
            yield from _tensors(value)


def test_weights_only_refuses_a_file_that_holds_objects(copy):
    torch.save({"when": __import__("datetime").date(2026, 1, 1)}, copy / "obj.pt")
    saved.record_checksum(copy / "obj.pt")
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        saved.load_torch("obj.pt", folder=copy)
    assert saved.load_torch("obj.pt", folder=copy, weights_only=False)["when"].year == 2026


def test_the_default_folder_is_the_package_s(monkeypatch, copy):
    monkeypatch.setattr(saved, "SAVED_DIR", copy)
    (copy / "ch05_side.json").write_text("{}")
    with pytest.raises(ValueError, match="ch05_side.json"):
        saved.load_json("ch05_side.json")


def test_an_altered_file_is_named_with_both_digests(copy):
    path = copy / "ch05_side.json"
    recorded = _manifest(copy)["ch05_side.json"]
    path.write_bytes(path.read_bytes().replace(b"1", b"2", 1))
    with pytest.raises(ValueError, match=rf"ch05_side\.json has SHA-256 {_sha256(path)}, but "
                                         rf"{recorded} is recorded"):
        saved.saved_path("ch05_side.json", folder=copy)


def test_a_truncated_file_is_caught_even_after_a_good_read(copy):
    path = copy / "ch09_bench_memory.csv"
    saved.saved_path("ch09_bench_memory.csv", folder=copy)  # verified once, then truncated
    stat = path.stat()
    path.write_bytes(path.read_bytes()[:-10])
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same mtime, other size
    with pytest.raises(ValueError, match=r"ch09_bench_memory\.csv has SHA-256"):
        saved.load_csv("ch09_bench_memory.csv", folder=copy)


def test_a_missing_file_is_named(copy):
    (copy / "ch06_seeds.pt").unlink()
    with pytest.raises(FileNotFoundError, match=r"'ch06_seeds\.pt' is missing from"):
        saved.load_torch("ch06_seeds.pt", folder=copy)


def test_a_missing_manifest_says_the_data_was_not_installed(copy):
    (copy / "SHA256SUMS").unlink()
    with pytest.raises(FileNotFoundError, match="installed without its data"):
        saved.saved_path("ch01_models.pt", folder=copy)


@pytest.mark.parametrize("line", ["abc  ch01_models.pt", "0" * 64 + " ch01_models.pt",
                                  "0" * 64 + "  "], ids=["short-sha", "one-space", "no-name"])
def test_a_malformed_manifest_line_is_reported_with_its_number(copy, line):
    manifest = copy / "SHA256SUMS"
    manifest.write_text(manifest.read_text() + line + "\n")
    number = len(manifest.read_text().splitlines())
    with pytest.raises(ValueError, match=rf"SHA256SUMS, line {number}: expected"):
        saved.checksums(copy)


@pytest.mark.parametrize("name", ["ch01_model.pt", "../ch01_models.pt", "SHA256SUMS", ""])
def test_a_name_not_recorded_is_refused_with_the_list(copy, name):
    with pytest.raises(ValueError, match=r"no saved file named .*; the saved files are: "
                                         r"ch01_models\.pt, "):
        saved.saved_path(name, folder=copy)


@pytest.mark.parametrize("name", [None, 1, b"ch01_models.pt"])
def test_a_name_that_is_not_a_string_is_a_type_error(name):
    with pytest.raises(TypeError, match="name must be a file name"):
        saved.saved_path(name)


def test_record_checksum_round_trip_keeps_the_other_lines_sorted(copy):
    before = _manifest(copy)
    path = copy / "aa_new.json"
    path.write_text('{"x": 1}')
    sha = saved.record_checksum(path)
    assert sha == _sha256(path)
    after = _manifest(copy)
    assert after == {**before, "aa_new.json": sha}
    assert list(after) == sorted(after)
    assert saved.load_json("aa_new.json", folder=copy) == {"x": 1}
    path.write_text('{"x": 2}')  # rewritten by its script: recorded again
    with pytest.raises(ValueError, match="aa_new.json has SHA-256"):
        saved.load_json("aa_new.json", folder=copy)
    saved.record_checksum(path)
    assert saved.load_json("aa_new.json", folder=copy) == {"x": 2}
    assert len(_manifest(copy)) == len(before) + 1


def test_record_checksum_starts_a_manifest_and_refuses_a_missing_file(tmp_path):
    path = tmp_path / "only.csv"
    path.write_text("a,b\n1,2\n")
    saved.record_checksum(path)
    assert (tmp_path / "SHA256SUMS").read_text() == f"{_sha256(path)}  only.csv\n"
    assert saved.load_csv("only.csv", folder=tmp_path) == [{"a": "1", "b": "2"}]
    with pytest.raises(FileNotFoundError, match="no such file"):
        saved.record_checksum(tmp_path / "absent.csv")


def test_file_sha256_agrees_with_hashlib_on_a_file_larger_than_one_block(tmp_path):
    path = tmp_path / "big.bin"
    path.write_bytes(os.urandom((1 << 20) + 12345))
    assert saved.file_sha256(path) == _sha256(path)


def test_blank_lines_in_the_manifest_are_ignored(copy):
    manifest = copy / "SHA256SUMS"
    before = _manifest(copy)
    manifest.write_text("\n" + manifest.read_text().replace("\n", "\n\n", 1) + "  \n")
    assert saved.checksums(copy) == before
    assert saved.saved_path("ch01_models.pt", folder=copy).is_file()
