"""What a reader meets on the page, checked without a browser.

* Every figure a notebook of the book stores (an ``image/png`` or ``image/svg+xml`` output) has
  alt text: MyST-NB
  reads it from the cell's metadata, ``"mystnb": {"image": {"alt": "..."}}`` (see
  ``myst_nb.core.render.MditRenderMixin.render_image``), and writes it into the ``<img>`` tag.
  A screen reader, or a reader whose images do not load, gets that sentence instead of the
  figure, so it must say what the figure shows: at least 20 characters, and not a file name.
  A diagram's alt text is the diagram's own (``attention_src.diagrams``), which starts with
  "Diagram:"; an interactive figure's is its own, which starts with "Interactive figure:".
* The diagrams and interactive figures of issue 22 are each in the chapter that first needs
  them (:data:`REQUIRED_DIAGRAMS`, :data:`REQUIRED_INTERACTIVE`).
* Every ``{term}`` link in a page names a term of the glossary, ``book/glossary.md``, exactly as
  the glossary writes it (Sphinx would resolve a different capitalisation too, but the exact
  text keeps the link greppable and this check simple).
* Every glossary entry names the chapter that introduces it, and that chapter exists.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.toc import ROOT, toc_notebooks

BOOK = ROOT / "book"
GLOSSARY = BOOK / "glossary.md"
NOTEBOOKS = toc_notebooks()

#: ``{term}`text <Target>``` or ``{term}`Target```; the target may not span lines in our pages.
TERM_ROLE = re.compile(r"\{term\}`([^`]+)`")
#: A chapter link in a glossary definition: ``{doc}`04_self_attention``` or a Markdown link to
#: the notebook, ``[chapter 4](04_self_attention.ipynb)``.
CHAPTER_LINK = re.compile(
    r"\{doc\}`(?:[^`<]*<)?(?P<doc>\d\d_[a-z0-9_]+)>?`|\]\((?P<nb>\d\d_[a-z0-9_]+)\.ipynb\)"
)
#: Alt text that is only a file name ("fig3.png", "output_12_0.png").
FILE_NAME = re.compile(r"^\S+\.(png|jpe?g|svg|gif|pdf)$", re.IGNORECASE)
MIN_ALT = 20


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def glossary_entries(text: str) -> list[tuple[list[str], str]]:
    """The entries of the ``{glossary}`` directive in ``text``: (terms, definition) pairs.

    Sphinx's glossary syntax: one or more unindented lines are the terms of an entry, the
    indented lines after them its definition; options (``:sorted:``) come first.
    """
    lines = text.splitlines()
    opening = [i for i, line in enumerate(lines) if re.match(r"^(:::+|```+)\{glossary\}", line)]
    if len(opening) != 1:
        raise ValueError(f"expected one {{glossary}} directive, found {len(opening)}")
    start = opening[0]
    fence = re.match(r"^(:::+|```+)", lines[start]).group(1)
    try:
        end = next(i for i in range(start + 1, len(lines)) if lines[i].strip() == fence)
    except StopIteration:
        raise ValueError(
            f"the {{glossary}} directive opened on line {start + 1} is never closed"
        ) from None
    body = lines[start + 1:end]
    while body and body[0].startswith(":"):
        body = body[1:]
    entries: list[tuple[list[str], str]] = []
    terms: list[str] = []
    definition: list[str] = []
    for line in body:
        if not line.strip():
            continue
        if line[0] in " \t":
            if not terms:
                raise ValueError(f"definition line without a term: {line.strip()!r}")
            definition.append(line.strip())
        else:
            if definition:
                entries.append((terms, " ".join(definition)))
                terms, definition = [], []
            terms.append(line.strip())
    if terms:
        entries.append((terms, " ".join(definition)))
    return entries


def term_targets(markdown: str) -> list[str]:
    """The glossary term each ``{term}`` role in ``markdown`` points to."""
    targets = []
    for content in TERM_ROLE.findall(markdown):
        explicit = re.fullmatch(r"(?s)(.*?)\s*<(.+)>", content)
        targets.append(" ".join((explicit.group(2) if explicit else content).split()))
    return targets


def _markdown_of(page: Path) -> str:
    if page.suffix == ".ipynb":
        cells = json.loads(page.read_text(encoding="utf-8"))["cells"]
        return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return page.read_text(encoding="utf-8")


def _pages() -> list[Path]:
    """Every page of book/ (listed in the table of contents or not yet)."""
    return sorted(
        p for p in BOOK.rglob("*")
        if p.suffix in (".ipynb", ".md")
        and not any(part.startswith(("_", ".")) for part in p.relative_to(BOOK).parts)
    )


ENTRIES = glossary_entries(GLOSSARY.read_text(encoding="utf-8"))
TERMS = [term for terms, _ in ENTRIES for term in terms]


# --- the helpers themselves --------------------------------------------------------------

def test_glossary_parser_reads_terms_aliases_and_definitions():
    text = (
        "# G\n\n:::{glossary}\n:sorted:\n\nkey (键)\n  A label, {doc}`00_at_a_glance`.\n\n"
        "truncated self-attention (截断自注意力)\nwindowed attention\n"
        "  A band.\n  Second line.\n:::\n"
    )
    assert glossary_entries(text) == [
        (["key (键)"], "A label, {doc}`00_at_a_glance`."),
        (["truncated self-attention (截断自注意力)", "windowed attention"], "A band. Second line."),
    ]
    with pytest.raises(ValueError, match="never closed"):
        glossary_entries(":::{glossary}\nkey\n  A label.\n")
    with pytest.raises(ValueError, match="found 0"):
        glossary_entries("# No glossary here\n")


def test_term_targets_reads_both_forms_of_the_role():
    text = "A {term}`key (键)` and {term}`the\nqueries <query (查询)>` and {cite}`x`."
    assert term_targets(text) == ["key (键)", "query (查询)"]


# --- alt text -------------------------------------------------------------------------------

@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=_rel)
def test_every_figure_has_alt_text(nb_path):
    cells = json.loads(nb_path.read_text(encoding="utf-8"))["cells"]
    problems = []
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        if not any({"image/png", "image/svg+xml"} & set(out.get("data", {}))
                   for out in cell.get("outputs", [])):
            continue
        alt = cell.get("metadata", {}).get("mystnb", {}).get("image", {}).get("alt")
        if not isinstance(alt, str) or not alt.strip():
            problems.append(f"cell {index}: no metadata.mystnb.image.alt")
        elif len(alt.strip()) < MIN_ALT:
            problems.append(f"cell {index}: alt text {alt!r} is shorter than {MIN_ALT} characters")
        elif FILE_NAME.match(alt.strip()):
            problems.append(f"cell {index}: alt text {alt!r} is a file name, not a description")
    assert not problems, (
        f"{_rel(nb_path)}: figures without a usable alt text (say in one sentence what the "
        f"figure shows): {problems}"
    )


#: A chapter card of the landing page: its image, made from the chapter's landing figure, and
#: the alt text typed beside it.
CARD_IMAGE = re.compile(r":img-top: _landing/(?P<stem>[0-9a-z_]+)\.png\n:img-alt: (?P<alt>[^\n]*)")


def _landing_alt(stem: str) -> str | None:
    """The alt text of the cell tagged ``landing-figure`` in ``book/<stem>.ipynb``."""
    cells = json.loads((BOOK / f"{stem}.ipynb").read_text(encoding="utf-8"))["cells"]
    for cell in cells:
        if "landing-figure" in cell.get("metadata", {}).get("tags", []):
            return cell["metadata"].get("mystnb", {}).get("image", {}).get("alt")
    return None


def test_landing_cards_describe_the_figure_they_show():
    """A card's image is its chapter's landing figure, so its alt text is that figure's: a card
    typed by hand described another figure (chapters 2, 6 and 10 did)."""
    cards = list(CARD_IMAGE.finditer((BOOK / "intro.md").read_text(encoding="utf-8")))
    assert len(cards) >= 13, f"found {len(cards)} chapter cards in book/intro.md"
    wrong = [card["stem"] for card in cards if card["alt"] != _landing_alt(card["stem"])]
    assert not wrong, (f"landing cards whose :img-alt: is not their chapter's landing-figure "
                       f"alt text (copy it from the notebook): {wrong}")


def _text(data: dict, mime: str) -> str:
    value = data.get(mime, "")
    return "".join(value) if isinstance(value, list) else value


#: An interactive figure's outer element and its description.
INTERACTIVE_DIV = re.compile(r'<div data-interactive="(\w+)"[^>]*aria-label="([^"]*)"')


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=_rel)
def test_diagrams_and_interactive_figures_carry_their_own_alt_text(nb_path):
    """The cell's alt text is the one the diagram or figure was made with, so a reader of alt
    text hears what it is ("Diagram: ...", "Interactive figure: ...") and what it shows."""
    import html as html_lib

    cells = json.loads(nb_path.read_text(encoding="utf-8"))["cells"]
    problems = []
    for index, cell in enumerate(cells):
        alt = cell.get("metadata", {}).get("mystnb", {}).get("image", {}).get("alt")
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if "image/svg+xml" in data:
                own = _text(data, "text/plain").strip()
                if not own.startswith("Diagram:") or alt != own:
                    problems.append(f"cell {index}: diagram alt {alt!r}, its own is {own!r}")
            for name, label in INTERACTIVE_DIV.findall(_text(data, "text/html")):
                own = html_lib.unescape(label)
                if not own.startswith("Interactive figure:") or alt != own:
                    problems.append(f"cell {index}: {name} alt {alt!r}, its own is {own!r}")
    assert not problems, f"{_rel(nb_path)}: {problems}"


#: Issue 22's diagrams, by the chapter that first needs them (the builder's call in a cell).
REQUIRED_DIAGRAMS = {
    "01_motivation": ["rnn_encoder_decoder"],
    "02_scoring_functions": ["soft_lookup"],
    "03_scaled_dot_product": ["scaled_dot_product_graph"],
    "04_self_attention": ["self_attention_projections", "band_window"],
    "05_multi_head": ["multi_head"],
    "06_multi_head_self_attention": ["encoder_block", "decoder_block", "encoder_decoder"],
    "07_cnn_rnn_comparison": ["receptive_fields"],
    "08_graph_attention": ["node_neighbourhood"],
    "09_efficient_attention": ["flash_tiling", "kv_cache_growth"],
    "10_transformer_end_to_end": ["encoder_decoder"],
    "11_pretrained_transformer": ["pretrained_encoder"],
    "12_flash_attention_triton": ["gpu_memory_hierarchy"],
}
#: Issue 22's interactive figures, by chapter (the stored figure's ``data-interactive`` name).
REQUIRED_INTERACTIVE = {
    "03_scaled_dot_product": ["softmax_temperature"],
    "04_self_attention": ["attention_explorer"],
    "05_multi_head": ["head_explorer"],
    "09_efficient_attention": ["online_softmax_steps"],
    "11_pretrained_transformer": ["head_explorer"],
}


@pytest.mark.parametrize("stem", sorted(REQUIRED_DIAGRAMS.keys() | REQUIRED_INTERACTIVE.keys()))
def test_each_chapter_shows_its_diagrams_and_interactive_figures(stem):
    cells = json.loads((BOOK / f"{stem}.ipynb").read_text(encoding="utf-8"))["cells"]
    shown_diagrams, shown_figures = set(), set()
    for cell in cells:
        outputs = cell.get("outputs", [])
        source = "".join(cell["source"])
        if any("image/svg+xml" in out.get("data", {}) for out in outputs):
            shown_diagrams |= set(re.findall(r"diagrams\.(\w+)\(", source))
        for out in outputs:
            shown_figures |= {name for name, _ in
                              INTERACTIVE_DIV.findall(_text(out.get("data", {}), "text/html"))}
    missing = ([d for d in REQUIRED_DIAGRAMS.get(stem, []) if d not in shown_diagrams]
               + [f for f in REQUIRED_INTERACTIVE.get(stem, []) if f not in shown_figures])
    assert not missing, f"book/{stem}.ipynb does not show {missing}"


# --- glossary -------------------------------------------------------------------------------

def test_glossary_is_sorted_and_has_no_duplicate_terms():
    text = GLOSSARY.read_text(encoding="utf-8")
    assert re.search(r"^:sorted:\s*$", text, re.MULTILINE), "the glossary should be :sorted:"
    assert len(ENTRIES) >= 40, f"only {len(ENTRIES)} glossary entries"
    lowered = [t.lower() for t in TERMS]  # Sphinx matches terms case-insensitively
    duplicates = sorted({t for t in lowered if lowered.count(t) > 1})
    assert not duplicates, f"terms defined twice in the glossary: {duplicates}"


def test_every_glossary_entry_names_a_chapter():
    missing = [terms[0] for terms, definition in ENTRIES if not CHAPTER_LINK.search(definition)]
    assert not missing, f"glossary entries that link no chapter: {missing}"


def test_every_chapter_the_glossary_links_exists():
    """Fails while a linked chapter is still being written (08, 09): the build would warn."""
    linked = set()
    for _, definition in ENTRIES:
        for match in CHAPTER_LINK.finditer(definition):
            linked.add(match.group("doc") or match.group("nb"))
    absent = sorted(
        d for d in linked if not any((BOOK / f"{d}{s}").exists() for s in (".ipynb", ".md"))
    )
    assert not absent, f"the glossary links chapters that do not exist in book/: {absent}"


@pytest.mark.parametrize("page", _pages(), ids=_rel)
def test_every_term_link_names_a_glossary_term(page):
    unknown = sorted(set(t for t in term_targets(_markdown_of(page)) if t not in TERMS))
    assert not unknown, (
        f"{_rel(page)}: {{term}} links to terms that book/glossary.md does not define "
        f"(the target must be the glossary term exactly): {unknown}"
    )


def test_term_links_stay_out_of_headings():
    in_headings = []
    for page in _pages():
        for line in _markdown_of(page).splitlines():
            if re.match(r"^\s{0,3}#{1,6}\s", line) and "{term}" in line:
                in_headings.append(f"{_rel(page)}: {line.strip()}")
    assert not in_headings, f"{{term}} links in headings: {in_headings}"
