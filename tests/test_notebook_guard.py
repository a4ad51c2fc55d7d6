"""Guards that make nbval's checks mean something.

nbval silently skips a code cell that was never executed and happily compares a stored error,
so these tests fail first: every notebook in the table of contents is stored fully executed,
in order, with no error, warning or machine path in its outputs; and the table of contents and
the ``book/`` folder agree.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.nbtiming import MARGIN, over_budget
from tests.toc import ROOT, toc_entries, toc_notebooks

NOTEBOOKS = toc_notebooks()
MACHINE_PATH = re.compile(r"/(tmp|root|work|home)/[\w.-]+")


def _code_cells(nb_path: Path) -> list[dict]:
    nb = json.loads(nb_path.read_text())
    return [
        c for c in nb["cells"] if c["cell_type"] == "code" and "".join(c["source"]).strip()
    ]


def test_book_has_notebooks():
    assert NOTEBOOKS, "_toc.yml lists no notebook"


def test_every_book_page_is_in_the_toc():
    listed = {p.resolve() for p in toc_entries()}
    pages = [
        p for p in (ROOT / "book").rglob("*")
        if p.suffix in (".ipynb", ".md")
        and not any(part.startswith(("_", ".")) for part in p.relative_to(ROOT / "book").parts)
    ]
    missing = sorted(str(p.relative_to(ROOT)) for p in pages if p.resolve() not in listed)
    assert not missing, f"in book/ but not in _toc.yml: {missing}"


def test_toc_entry_that_does_not_exist_is_an_error(tmp_path):
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n- file: gone\n")
    (tmp_path / "intro.md").write_text("# Intro\n")
    with pytest.raises(ValueError, match="gone"):
        toc_entries(tmp_path)


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_code_cell_was_executed_in_order(nb_path):
    counts = [c["execution_count"] for c in _code_cells(nb_path)]
    never = [i for i, n in enumerate(counts) if n is None]
    assert not never, f"{nb_path.name}: code cells {never} were never executed (run make execute)"
    assert counts == list(range(1, len(counts) + 1)), (
        f"{nb_path.name}: execution counts {counts} are not 1..n; re-run the whole notebook"
    )


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_error_warning_or_machine_path_in_outputs(nb_path):
    for i, cell in enumerate(_code_cells(nb_path)):
        for out in cell["outputs"]:
            assert out["output_type"] != "error", f"{nb_path.name} cell {i}: stored {out['ename']}"
            if out["output_type"] == "stream":
                assert out["name"] == "stdout", (
                    f"{nb_path.name} cell {i}: stderr output {''.join(out['text'])[:200]!r}"
                )
            text = json.dumps(out.get("text", "")) + json.dumps(out.get("data", {}).get(
                "text/plain", ""))
            assert not MACHINE_PATH.search(text), f"{nb_path.name} cell {i}: machine path"


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_notebook_uses_the_python3_kernel(nb_path):
    meta = json.loads(nb_path.read_text())["metadata"]
    assert meta.get("kernelspec", {}).get("name") == "python3", nb_path.name


def test_time_budget_flags_a_slow_notebook_and_a_slow_book():
    assert over_budget({"a.ipynb": 10.0, "b.ipynb": 20.0}) == []
    slow = over_budget({"a.ipynb": MARGIN * 60 + 1})
    assert len(slow) == 1 and "a.ipynb" in slow[0]
    many = {f"{i}.ipynb": MARGIN * 60 - 1 for i in range(6)}
    assert any("all notebooks" in r for r in over_budget(many))


def _tags(cell: dict) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


GLUE_CALL = re.compile(r"^\s*glue\(", re.MULTILINE)
NOTE_CITATION = re.compile(r"\b[Nn]otes? 00[0-4]\b")
#: A link to the page describing the notes: to the page, or to one note's label on it.
NOTES_LINK = re.compile(r"source_notes|\]\(#note-00[0-4]\)")


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_glue_cells_are_out_of_the_readers_way(nb_path):
    """A cell that glues numbers into the prose is plumbing: its input is removed or hidden."""
    exposed = [
        i for i, c in enumerate(_code_cells(nb_path))
        if GLUE_CALL.search("".join(c["source"]))
        and not _tags(c) & {"remove-input", "hide-input", "remove-cell"}
    ]
    assert not exposed, (
        f"{nb_path.name}: code cells {exposed} call glue() but are not tagged remove-input or "
        "hide-input; move the glue calls to a tagged cell after the cell the reader should see"
    )


def test_a_page_that_cites_the_source_notes_links_to_their_description():
    """Readers never see the notes: a page that cites one points to the appendix describing them."""
    unlinked = []
    for page in toc_entries():
        if page.suffix == ".ipynb":
            cells = json.loads(page.read_text())["cells"]
            text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        else:
            text = page.read_text()
        if page.stem != "source_notes" and NOTE_CITATION.search(text) and (
                not NOTES_LINK.search(text)):
            unlinked.append(str(page.relative_to(ROOT)))
    assert not unlinked, f"pages that cite a source note but never link to source_notes: {unlinked}"


def test_note_links_use_the_labels():
    """``source_notes.md#note-004`` does not resolve in MyST (it anchors only headings that way,
    and only with myst_heading_anchors); the working form is the label, ``(#note-004)``."""
    broken = []
    for page in toc_entries():
        text = page.read_text()
        if re.search(r"source_notes\.md#", text):
            broken.append(str(page.relative_to(ROOT)))
    assert not broken, f"write [note 004](#note-004), not source_notes.md#note-004, in: {broken}"


#: A printed float whose exponent is -13 or below is float64 rounding noise: its digits change
#: with the CPU's vector instructions (seen: 4.4e-16 on AVX-512, 8.9e-16 on AVX2 for one cell),
#: so a stored output that shows one is not reproducible. Print the asserted bound instead.
ROUNDING_NOISE = re.compile(r"\b\d(?:\.\d+)?e-(?:1[3-9]|[2-9]\d)\b")


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_rounding_noise_in_outputs(nb_path):
    shown = []
    for i, cell in enumerate(_code_cells(nb_path)):
        for out in cell["outputs"]:
            data = out.get("data", {})  # text/plain, and glued values (papermill records)
            text = "".join(out.get("text", "")) + "".join(
                "".join(v) for k, v in data.items() if k.endswith("text/plain"))
            shown += [(i, m) for m in ROUNDING_NOISE.findall(text)]
    assert not shown, (
        f"{nb_path.name}: outputs show float rounding noise (cell, value): {shown[:6]}; it "
        "differs between CPUs. Print or glue the bound the cell asserts (e.g. '< 1e-12')"
    )


def test_rounding_noise_pattern():
    assert ROUNDING_NOISE.findall("max |difference| 4.4e-16, 1e-13 and 2.0e-20") == [
        "4.4e-16", "1e-13", "2.0e-20"]
    assert not ROUNDING_NOISE.findall("tolerance 1e-12, loss 3.1e-05, rate 1e-3, 0.5")


#: The site's output column fits about 80 characters at 1280 px (see _static/book.css); a longer
#: printed line hides behind a scroll bar, as a long code line would.
OUTPUT_COLUMNS = 80


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_printed_output_fits_the_column(nb_path):
    wide = []
    for i, cell in enumerate(_code_cells(nb_path)):
        if _tags(cell) & {"remove-output", "remove-cell"}:
            continue
        for out in cell["outputs"]:
            data = out.get("data", {})
            if out["output_type"] == "stream":
                text = "".join(out["text"])
            elif {"image/png", "image/svg+xml", "text/html"} & data.keys():
                continue  # a figure or a table: drawn, not printed
            else:
                text = "".join(data.get("text/plain", ""))
            wide += [(i, len(line)) for line in text.splitlines() if len(line) > OUTPUT_COLUMNS]
    assert not wide, (
        f"{nb_path.name}: printed lines wider than {OUTPUT_COLUMNS} columns (cell, width): "
        f"{wide[:8]}; shorten labels or wrap the print"
    )
