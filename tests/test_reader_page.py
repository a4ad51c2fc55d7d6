"""The page a reader sees is a book, not a lab notebook: checks on the stored pages.

* The code a reader sees teaches: no visible cell imports ``myst_nb`` (the machinery that puts
  computed numbers into the prose), and no visible cell consists only of ``assert`` lines (a
  guard of stored results runs in a cell whose input is removed).
* The code a reader sees can be read on its own: a name it uses is defined or imported in
  code the page shows, is imported from another library than the book's own (``torch``,
  ``np``), or is one of the two conventions the introduction explains (``DEVICE``, and the
  palette's colour names such as ``BLUE``). :data:`NAMES_NOT_YET_SHOWN` lists, chapter by
  chapter, the names still defined, or imported from ``attention_src``, only in set-up code
  the page leaves out; a new one fails, and so does an entry no longer needed.
* The prose speaks to a reader: no build or test vocabulary ("hidden cell", "time budget",
  "nbval", ``make …`` or a ``tools/`` script outside a section on how to run the book).
* Paragraphs are short enough to read on a phone: at most :data:`MAX_WORDS` words.
* Colours come from ``attention_src.OKABE_ITO``, not from hex strings typed into a notebook.
* Chapters do not argue with the source notes (the reader never saw them): no "From the source
  notes" box, no "note 004" citation; one link to the appendix that lists the corrections.
* Figures are stored at twice their size and are at most ``MAX_FIGURE_WIDTH`` inches wide, so
  their text stays legible once a phone scales them to its text column.

Each rule has a test that plants a violation and sees it caught.
"""

from __future__ import annotations

import ast
import base64
import json
import re
import struct
from pathlib import Path

import pytest

import attention_src as att
from tests.toc import ROOT, toc_entries, toc_notebooks

NOTEBOOKS = toc_notebooks()
PAGES = toc_entries()
CHAPTERS = [p for p in NOTEBOOKS if re.match(r"\d\d_", p.name) and p.parent.name == "book"
            and not p.name.startswith("00_")]
#: Cells whose input the reader does not see.
HIDDEN = {"remove-input", "remove-cell", "hide-input", "hide-cell"}
#: Cells whose code the page leaves out (a folded cell is still there, a click away).
LEFT_OUT = {"remove-input", "remove-cell"}
#: The longest paragraph, in words; a phone shows about 60 words a screen.
MAX_WORDS = 120
#: Pages written for maintainers: build commands are their subject.
MAINTAINER_PAGES = {"maintainers"}
#: Build and test words a reader should not meet (case-insensitive).
BUILD_VOCABULARY = re.compile(
    r"hidden cells?|time budget|this page's (?:time|budget)|\bnbval\b|\bpytest\b|"
    r"the issue's|\bissue \d+|\bglued?\b|`make [a-z]|\bmake (?:execute|test|book)\b|"
    r"tools/[a-z_0-9]+\.py|\bCI\b",
    re.IGNORECASE,
)
#: MyST-NB's roles that put a computed value into the prose: ``{glue:text}`name```.
GLUE_ROLE = re.compile(r"\{glue(?::[a-z]+)?\}`[^`]*`")
#: A heading that opens a section on running the book, where commands belong.
HOW_TO_RUN = re.compile(r"^#+\s.*\b(run|reproduc|install)", re.IGNORECASE)
NOTE_CITATION = re.compile(r"\b[Nn]otes? 00[0-4]\b")
SOURCE_NOTES_BOX = re.compile(r"\{admonition\}\s*From the source notes", re.IGNORECASE)
SOURCE_NOTES_LINK = re.compile(r"source_notes(?:\.md)?\b")


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _tags(cell: dict) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


def _visible_code(path: Path) -> list[tuple[int, str]]:
    """(index, source) of each code cell whose input the reader sees."""
    return [(i, "".join(c["source"])) for i, c in enumerate(_cells(path))
            if c["cell_type"] == "code" and not _tags(c) & HIDDEN]


#: Names visible code may use without the page defining them: the device every chapter runs
#: on, and the Okabe-Ito colours by name (the introduction, "Running a chapter yourself").
CONVENTIONS = {"DEVICE", "BLUE", "ORANGE", "GREEN", "VERMILION", "PURPLE", "SKY", "BLACK",
               "GREY"}
#: Names the page's visible code uses while only set-up code the page leaves out defines or
#: imports them from the book's package: left to do, chapter by chapter (a visible import cell,
#: or the definition beside its use; chapters 3, 5, 7, 9 and 12 are near the 30-screen limit).
NAMES_NOT_YET_SHOWN = {
    "book/01_motivation.ipynb": {"binomial_se", "load_torch"},
    "book/02a_scoring_bakeoff.ipynb": {"load_torch", "paired_t_interval", "t_quantile"},
    "book/04_self_attention.ipynb": {
        "IGNORE", "POSITIONS", "band_to_dense", "best_ms", "data", "mean_se", "order_accuracy",
        "previous_token_task", "shift_rotation", "train_order_model", "windowed_attention"},
    "book/05_multi_head.ipynb": {
        "data", "glue", "head_metrics", "load_torch", "round_down", "round_up", "round_up_sci"},
    "book/06_multi_head_self_attention.ipynb": {
        "PINK", "big", "data", "designs", "kinds_match", "lm", "load_torch", "mean_se", "more",
        "same_heads"},
    "book/07_cnn_rnn_comparison.ipynb": {"COLOR", "G_SEEDS", "P", "load_json", "slope"},
    "book/08_graph_attention.ipynb": {
        "exact_share", "load_json", "load_torch", "round_down", "round_up"},
    "book/09_efficient_attention.ipynb": {
        "ALL_THREADS", "AttentionOnlyTransformer", "TensorMemory", "bench", "best_ms",
        "efficient", "median_cost", "peak_bytes", "windowed_attention"},
    "book/09a_benchmark_method.ipynb": {
        "B_LENGTHS", "efficient", "huge_page_mode", "median_cost", "mem_row"},
    "book/10_transformer_end_to_end.ipynb": {
        "ISO_OUTPUT_STEPS", "causal_mask", "field_attention_mass", "scoring", "seq2seq"},
    "book/12_flash_attention_triton.ipynb": {"BW", "PEAK", "TARGETS", "run_tflops", "settings"},
    "book/solutions/01_motivation_solutions.ipynb": {"glue", "load_torch", "round_up"},
    "book/solutions/02_scoring_functions_solutions.ipynb": {"load_torch"},
    "book/solutions/04_self_attention_solutions.ipynb": {
        "data", "shift_rotation", "windowed_attention"},
    "book/solutions/05_multi_head_solutions.ipynb": {"data", "head_metrics", "load_torch"},
    "book/solutions/06_multi_head_self_attention_solutions.ipynb": {
        "data", "glue", "lm", "load_torch", "mean_se"},
    "book/solutions/09_efficient_attention_solutions.ipynb": {"efficient", "median_cost", "slope"},
    "book/solutions/10_transformer_end_to_end_solutions.ipynb": {"load_torch"},
    "book/solutions/11_pretrained_transformer_solutions.ipynb": {"OKABE_ITO"},
    "book/solutions/12_flash_attention_triton_solutions.ipynb": {"OKABE_ITO"},
}


def names_used_and_defined(source: str) -> tuple[set[str], set[str], set[str], set[str]]:
    """(used, bound, top_level, library): the names ``source`` reads; those it binds anywhere
    (assignment, loop or comprehension target, function or lambda argument, def, class,
    import); those it binds at the cell's top level, which later cells see (not a function's
    arguments or locals); and those its imports take from other libraries than the book's own
    ``attention_src`` (``import attention_src as att`` counts as such: ``att.`` names its
    source). A line starting with ``%`` or ``!`` (IPython) stands for ``pass``."""
    code = "\n".join(line[:len(line) - len(line.lstrip())] + "pass"
                      if line.lstrip().startswith(("%", "!")) else line
                      for line in source.splitlines())
    tree = ast.parse(code)
    used, bound, top_level, library = set(), set(), set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (used if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = {(a.asname or a.name).split(".")[0] for a in node.names}
            bound |= names
            if isinstance(node, ast.ImportFrom):
                books = [node.module or ""]
            else:  # `import attention_src as att` names its source; a submodule does not
                books = [a.name for a in node.names if a.name != "attention_src"]
            if not any(m.startswith("attention_src") for m in books):
                library |= names
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)

    def top(nodes) -> None:  # the statements of the cell's own scope
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                top_level.add(node.name)
                continue
            for sub in ast.walk(node):
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    top_level.add(sub.name)
                elif isinstance(sub, ast.Name) and not isinstance(sub.ctx, ast.Load):
                    top_level.add(sub.id)
                elif isinstance(sub, (ast.Import, ast.ImportFrom)):
                    top_level.update((a.asname or a.name).split(".")[0] for a in sub.names)
                elif isinstance(sub, ast.ExceptHandler) and sub.name:
                    top_level.add(sub.name)

    top(tree.body)
    return used, bound, top_level, library


def names_from_left_out_code(cells: list[dict]) -> set[str]:
    """The names visible code cells use that only code the page leaves out defined before
    them. Names a left-out cell imports from other libraries are let through (a reader knows
    ``torch``, ``np`` and ``partial``); the book's own functions are not: a page that calls
    ``train_order_model`` shows where it comes from."""
    import builtins

    shown, left_out, library_out, found = set(), set(), set(), set()
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        used, bound, top_level, library = names_used_and_defined(source)
        if _tags(cell) & LEFT_OUT:
            left_out |= top_level
            library_out |= library
            continue
        found |= {n for n in used - bound - shown - (library_out - shown)
                  if n in left_out and not hasattr(builtins, n)}
        shown |= top_level
    return found


def _prose(path: Path) -> str:
    if path.suffix == ".ipynb":
        return "\n\n".join("".join(c["source"]) for c in _cells(path)
                           if c["cell_type"] == "markdown")
    return path.read_text(encoding="utf-8")


# --- the scans ---------------------------------------------------------------------------


def imports_myst_nb(source: str) -> bool:
    return bool(re.search(r"^\s*(from\s+myst_nb\b|import\s+myst_nb\b)", source, re.MULTILINE))


def only_asserts(source: str) -> bool:
    """True when the cell's statements are all ``assert`` (comments and blanks aside)."""
    try:
        body = ast.parse(source).body
    except SyntaxError:  # IPython magics: not a pure-assert cell
        return False
    return bool(body) and all(isinstance(node, ast.Assert) for node in body)


def build_words(markdown: str) -> list[str]:
    """Build or test vocabulary in ``markdown``, outside sections on how to run the book."""
    found, exempt_level = [], None
    in_fence = False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        heading = None if in_fence else re.match(r"^(#+)\s", line)
        if heading:
            level = len(heading.group(1))
            if exempt_level is not None and level <= exempt_level:
                exempt_level = None
            if exempt_level is None and HOW_TO_RUN.match(line):
                exempt_level = level
        if exempt_level is None:
            prose = GLUE_ROLE.sub("N", line)  # a computed number, not the word "glue"
            found += [m.group(0) for m in BUILD_VOCABULARY.finditer(prose)]
    return found


def paragraphs(markdown: str) -> list[str]:
    """The prose paragraphs of ``markdown``: runs of text lines; a list item, heading, table,
    fence, directive option or display formula ends one. Text inside admonitions and dropdowns
    counts (it is prose); code fences and display math do not."""
    result, current = [], []
    in_code = in_math = False

    def close():
        if current:
            result.append(" ".join(current))
            current.clear()

    for raw in markdown.splitlines():
        line = raw.strip()
        if line.startswith("```") or line.startswith("~~~"):
            close()
            is_directive = re.match(r"^(```+|~~~+)\{", line) is not None
            if not in_code and not is_directive and line.strip("`~"):
                in_code = True  # a fenced code block with a language
            elif in_code:
                in_code = False
            continue
        if in_code:
            continue
        if line.startswith("$$"):
            close()
            if not (line.endswith("$$") and len(line) > 2):
                in_math = not in_math
            continue
        if in_math:
            continue
        if (not line or line.startswith(("#", "|", ":", "<", "!["))
                or re.match(r"^([-*+]|\d+[.)])\s", line)):
            close()
            if re.match(r"^([-*+]|\d+[.)])\s", line):
                current.append(re.sub(r"^([-*+]|\d+[.)])\s", "", line))
            continue
        current.append(line)
    close()
    return result


def word_count(paragraph: str) -> int:
    """Words as a reader counts them: a role such as ``{term}`x <y>``` or an inline formula
    ``$...$`` counts as one word."""
    text = re.sub(r"\{[a-z:]+\}`[^`]*`", "W", paragraph)
    text = re.sub(r"\$[^$]+\$", "W", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return len(re.findall(r"\S+", text))


def typed_palette_colours(source: str) -> set[str]:
    palette = {c.upper() for c in att.OKABE_ITO.values()}
    return {h.upper() for h in re.findall(r"[\"'](#[0-9A-Fa-f]{6})[\"']", source)} & palette


def png_size(data: str) -> tuple[int, int]:
    """(width, height) in pixels of a base64 PNG."""
    raw = base64.b64decode(data[:64])
    return struct.unpack(">II", raw[16:24])


# --- the tests over the book ------------------------------------------------------------


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=_rel)
def test_visible_code_neither_imports_myst_nb_nor_only_asserts(nb_path):
    myst = [i for i, src in _visible_code(nb_path) if imports_myst_nb(src)]
    assert not myst, (f"{_rel(nb_path)}: visible cells {myst} import myst_nb; move the import "
                      "to a cell tagged remove-input")
    asserts = [i for i, src in _visible_code(nb_path) if only_asserts(src)]
    assert not asserts, (f"{_rel(nb_path)}: visible cells {asserts} hold only asserts; tag them "
                         "remove-input (they still run) or make them teach")


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=_rel)
def test_visible_code_uses_names_the_page_shows(nb_path):
    found = names_from_left_out_code(_cells(nb_path)) - CONVENTIONS
    expected = NAMES_NOT_YET_SHOWN.get(_rel(nb_path), set())
    new, done = sorted(found - expected), sorted(expected - found)
    assert not new, (f"{_rel(nb_path)}: visible code uses {new}, defined only in code the page "
                     "leaves out; define them where the reader sees it, or import them from "
                     "attention_src")
    assert not done, f"{_rel(nb_path)}: {done} are shown now; drop them from NAMES_NOT_YET_SHOWN"


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_prose_has_no_build_vocabulary(page):
    if page.stem in MAINTAINER_PAGES:
        pytest.skip("a page for maintainers")
    words = build_words(_prose(page))
    assert not words, f"{_rel(page)}: build or test vocabulary in the prose: {words}"


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_paragraphs_are_short(page):
    if page.stem in MAINTAINER_PAGES | {"references"}:
        pytest.skip("not a page a reader reads through")
    long = [(word_count(p), p[:60]) for p in paragraphs(_prose(page))
            if word_count(p) > MAX_WORDS]
    assert not long, f"{_rel(page)}: paragraphs over {MAX_WORDS} words: {long}"


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=_rel)
def test_colours_come_from_the_package(nb_path):
    typed = set()
    for cell in _cells(nb_path):
        if cell["cell_type"] == "code":
            typed |= typed_palette_colours("".join(cell["source"]))
    assert not typed, f"{_rel(nb_path)}: palette colours typed by hand (use att.OKABE_ITO): " \
                      f"{sorted(typed)}"


@pytest.mark.parametrize("nb_path", CHAPTERS, ids=_rel)
def test_chapters_link_the_source_notes_once_and_do_not_argue_with_them(nb_path):
    prose = _prose(nb_path)
    assert not SOURCE_NOTES_BOX.search(prose), f"{_rel(nb_path)}: a 'From the source notes' box"
    cited = NOTE_CITATION.findall(prose)
    assert not cited, f"{_rel(nb_path)}: cites source notes the reader never saw: {cited}"
    links = SOURCE_NOTES_LINK.findall(prose)
    assert len(links) == 1, f"{_rel(nb_path)}: {len(links)} links to the source-notes page, " \
                            "expected one"


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=_rel)
def test_figures_are_sharp_and_fit_a_phone(nb_path):
    """Every stored figure is at 2x (its metadata width is half its pixel width) and at most
    ``MAX_FIGURE_WIDTH`` inches wide at 100 dpi, plus 0.4 inch for a tight bounding box."""
    widest = (att.MAX_FIGURE_WIDTH + 0.4) * 100
    bad = []
    for i, cell in enumerate(_cells(nb_path)):
        for out in cell.get("outputs", []):
            png = out.get("data", {}).get("image/png")
            if png is None:
                continue
            width, _ = png_size(png)
            shown = out.get("metadata", {}).get("image/png", {}).get("width")
            if shown is None or abs(2 * shown - width) > 2:
                bad.append(f"cell {i}: not stored at 2x ({width} px, shown at {shown})")
            elif shown > widest:
                bad.append(f"cell {i}: {shown / 100:.1f} inches wide")
    assert not bad, f"{_rel(nb_path)}: {bad}"


# --- each scan catches what it is for ----------------------------------------------------


def test_the_scans_catch_planted_violations():
    assert imports_myst_nb("import math\nfrom myst_nb import glue\n")
    assert not imports_myst_nb("x = 'myst_nb'\n")
    assert only_asserts("# guard\nassert x == 1\nassert y, 'msg'\n")
    assert not only_asserts("assert x\nprint(x)\n")
    assert not only_asserts("%timeit f()\n")
    assert not only_asserts("# only a comment\n")
    assert build_words("The hidden cell asserts it.") == ["hidden cell"]
    assert build_words("Run `make execute` first.") == ["`make e"]
    assert build_words("Trained by tools/train_ch01.py.") == ["tools/train_ch01.py"]
    assert build_words("## Running a chapter\n`make execute`\n## Next\nfine") == []
    assert build_words("## Running a chapter\n`make execute`\n## Next\n`make book`") == [
        "`make b"]
    assert build_words("A model may make decisions; an issue arises.") == []
    assert build_words("It scores {glue:text}`acc:.1%` and {glue}`n` of them.") == []
    assert build_words("The numbers are glued in.") == ["glued"]
    assert typed_palette_colours('c = "#D55E00"; d = "#123456"') == {"#D55E00"}
    hidden = {"cell_type": "code", "metadata": {"tags": ["remove-input"]},
              "source": ["import torch\nsteps = 10\ndef helper(x):\n    return x\n"]}
    shown = {"cell_type": "code", "metadata": {},
             "source": ["f = lambda r: r + steps\nhelper(torch.ones(1))\nfor s in [1]:\n"
                        "    print(s, len([k for k in {}]))\n%timeit f(1)\n"]}
    assert names_from_left_out_code([hidden, shown]) == {"steps", "helper"}
    defined_first = {"cell_type": "code", "metadata": {}, "source": ["steps = 3\n"]}
    assert names_from_left_out_code([hidden, defined_first, shown]) == {"helper"}
    # the book's own imports are not let through; a function's argument is not shown later
    book_import = {"cell_type": "code", "metadata": {"tags": ["remove-cell"]},
                   "source": ["from attention_src.training import train\nimport numpy as np\n"]}
    argument = {"cell_type": "code", "metadata": {},
                "source": ["def f(train):\n    return train\n"]}
    uses = {"cell_type": "code", "metadata": {}, "source": ["train(np.ones(2))\n"]}
    assert names_from_left_out_code([book_import, argument, uses]) == {"train"}
    submodule = {"cell_type": "code", "metadata": {"tags": ["remove-cell"]},
                 "source": ["import attention_src as att\nimport attention_src.efficient as E\n"]}
    shown_uses = {"cell_type": "code", "metadata": {}, "source": ["att.set_seed(0)\nE.f()\n"]}
    assert names_from_left_out_code([submodule, shown_uses]) == {"E"}


def test_paragraph_splitting_and_counting():
    text = ("One two three.\nFour five.\n\n- item one\n- item two words\n\n"
            "```python\nnot prose at all\n```\n$$\nx = y\n$$\n"
            ":::{dropdown} Going deeper\nInside words here.\n:::\n")
    assert paragraphs(text) == ["One two three. Four five.", "item one", "item two words",
                                "Inside words here."]
    assert word_count("A {term}`long term <x (y)>` and $a + b = c$ here.") == 5
    long = " ".join(["word"] * (MAX_WORDS + 1))
    assert [word_count(p) for p in paragraphs(long)] == [MAX_WORDS + 1]


def test_png_size_reads_the_header():
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(3, 2), dpi=50)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=50)
    plt.close(fig)
    assert png_size(base64.b64encode(buf.getvalue()).decode()) == (150, 100)


def test_the_icon_is_what_its_script_draws():
    """Consistency check: the stored ``_static/favicon.svg`` is the output of
    ``tools/make_favicon.py`` (re-run the script after changing it)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_favicon",
                                                  ROOT / "tools" / "make_favicon.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (ROOT / "_static" / "favicon.svg").read_text() == module.favicon_svg()
    weights = module.causal_weights(4)
    assert weights[0] == [1.0, 0.0, 0.0, 0.0]  # the first query sees only itself
    assert all(abs(sum(row) - 1) < 1e-12 for row in weights)
    assert weights[3][3] > weights[3][2] > weights[3][1] > weights[3][0]  # nearer weighs more


def test_landing_cards_get_small_sharp_copies_of_the_figures():
    """The landing page's card images: scaled to 640 px wide at most, 256 colours."""
    pytest.importorskip("sphinx.application")  # the book's build tools, not the package's
    import importlib.util
    import io

    from PIL import Image

    spec = importlib.util.spec_from_file_location(
        "landing_figures", ROOT / "book" / "_ext" / "landing_figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def png(width, height):
        buf = io.BytesIO()
        Image.linear_gradient("L").resize((width, height)).convert("RGB").save(buf, "PNG")
        return buf.getvalue()

    big = Image.open(io.BytesIO(module.card_png(png(1200, 600))))
    assert big.size == (640, 320) and big.mode == "P"
    small = Image.open(io.BytesIO(module.card_png(png(300, 200))))
    assert small.size == (300, 200)


def test_pages_drop_the_icon_script_and_all_but_the_search_page_the_index():
    pytest.importorskip("sphinx.application")  # the book's build tools, not the package's
    import importlib.util

    spec = importlib.util.spec_from_file_location("site_fixes",
                                                  ROOT / "book" / "_ext" / "site_fixes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    head = ('<head>\n  <script defer src="../_static/scripts/fontawesome.js?digest=55c2">'
            '</script>\n    <script src="../searchindex.js"></script>\n'
            '<script src="../_static/book.js"></script>\n</head>')
    page = module.strip_unused_scripts(head)
    assert "fontawesome" not in page and "searchindex" not in page and "book.js" in page
    search = module.strip_unused_scripts(head, search_page=True)
    assert "fontawesome" not in search and "searchindex.js" in search


#: The smallest text a figure may set, in points: 12 pt at 100 dpi is 16.7 px, at least 10 px
#: once a figure of the widest size is scaled to a phone's text column.
MIN_FONT_PT = 12
FONT_SIZE = re.compile(r"\b(?:fontsize|labelsize)\s*=\s*(\d+(?:\.\d+)?)")


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=_rel)
def test_no_figure_text_below_12_points(nb_path):
    small = []
    for i, cell in enumerate(_cells(nb_path)):
        if cell["cell_type"] == "code":
            small += [(i, float(m)) for m in FONT_SIZE.findall("".join(cell["source"]))
                      if float(m) < MIN_FONT_PT]
    assert not small, f"{_rel(nb_path)}: text below {MIN_FONT_PT} pt (cell, size): {small}"
    assert MIN_FONT_PT / 72 * 100 * 358 / (att.MAX_FIGURE_WIDTH * 100) >= 10
