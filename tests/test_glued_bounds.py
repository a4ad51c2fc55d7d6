"""A glued extreme that the prose states as a bound is rounded towards it.

The pages quote measured minimums and maximums as bounds: "at least 0.96 at every position",
"up to 43 %", "between 0.989 and 1.007 at every width". Rounded to nearest, such a number can
cross the value it bounds (a minimum of 0.969 printed as "at least 0.97" is false), so the book
rounds a lower bound down and an upper bound up (``attention_src.stats.round_down``,
``round_up``, ``round_up_sci``; chapter 6's ``span``). This test reads every notebook's glue
calls and the markdown that quotes them, and fails where a glued value computed from a
``min``/``max`` follows a bound's wording but is rounded to nearest: by ``round``, by a format
with a precision, or by the page's format applied to a float.

It is a static check, and a narrow one: it sees only glues named literally (``glue("name",
...)``) and the phrasings listed below. Constants (no ``min``/``max`` in the expression) are
not checked, since a threshold set by the page is a bound by definition; nor are counts and
other values glued exactly (no ``round``, no precision).
"""

from __future__ import annotations

import json
import re

import pytest

from tests.toc import toc_notebooks

NOTEBOOKS = toc_notebooks()

GLUE_REF = r"\{glue(?::text)?\}`(?P<NAME>[A-Za-z0-9_]+)(?::[^`]*)?`"
MATH = r"(?:\$[^$]*\$\s*)?[+\u2212-]?"  # "at least $x =$ {glue}", "up to +{glue}"
#: Wording before a glued value that makes it a lower bound.
LOWER_BEFORE = re.compile(
    r"\b(?:at least|no less than|never less than|never below|to at least|between)\s+" + MATH
    + GLUE_REF.replace("NAME", "name"), re.IGNORECASE)
#: Wording after a glued value that makes it a lower bound.
LOWER_AFTER = re.compile(GLUE_REF.replace("NAME", "name") + r"\s*%?\s*(?:[a-z]+\s+)?or more\b")
#: Wording before a glued value that makes it an upper bound.
UPPER_BEFORE = re.compile(
    r"\b(?:at most|up to|no more than|never more than|within)\s+" + MATH
    + GLUE_REF.replace("NAME", "name"), re.IGNORECASE)
UPPER_AFTER = re.compile(GLUE_REF.replace("NAME", "name") + r"\s*%?\s*(?:[a-z]+\s+)?or less\b")
#: "between {a} and {b}": b is the upper bound.
BETWEEN_UPPER = re.compile(
    r"\bbetween\s+" + MATH + GLUE_REF.replace("NAME", "low") + r"\s*%?\s*and\s+" + MATH
    + GLUE_REF.replace("NAME", "name"))

EXTREME = re.compile(r"\bmin\(|\.min\(|\bmax\(|\.max\(|\.amin\(|\.amax\(|_min\b|_max\b")
#: Rounded to nearest: ``round``, a format with a precision, or a float left to the page's format.
NEAREST = re.compile(r"\bround\(|:[,+]?\.\d+[efg%]|\bfloat\(")
SAFE_LOWER = re.compile(r"round_down|floor|\bspan\(")
SAFE_UPPER = re.compile(r"round_up|ceil|\bspan\(")
#: Rounding towards the other side: a lower bound rounded up, an upper bound rounded down.
WRONG = {"lower": re.compile(r"round_up|ceil"), "upper": re.compile(r"round_down|floor")}


def glue_definitions(cells: list[dict]) -> dict[str, str]:
    """name -> the source text of its ``glue("name", ...)`` call, for literal names."""
    defs = {}
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        for match in re.finditer(r'\bglue\(\s*"([A-Za-z0-9_]+)"\s*,', source):
            depth, end = 1, match.end()
            while end < len(source) and depth:
                depth += {"(": 1, ")": -1}.get(source[end], 0)
                end += 1
            defs[match.group(1)] = source[match.end():end - 1]
    return defs


def misrounded_bounds(cells: list[dict]) -> list[str]:
    """The glued extremes quoted as bounds but not rounded towards them."""
    defs = glue_definitions(cells)
    problems = []
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        text = " ".join("".join(cell["source"]).split())
        for kind, patterns, safe in (("lower", (LOWER_BEFORE, LOWER_AFTER), SAFE_LOWER),
                                     ("upper", (UPPER_BEFORE, UPPER_AFTER, BETWEEN_UPPER),
                                      SAFE_UPPER)):
            for pattern in patterns:
                for match in pattern.finditer(text):
                    name = match.group("name")
                    expression = defs.get(name)
                    if expression is None or not EXTREME.search(expression):
                        continue  # not glued here by name, or not a measured extreme
                    if WRONG[kind].search(expression) and not safe.search(expression):
                        problems.append(f"markdown cell {index}: {name} is a {kind} bound "
                                        f"({match.group(0)!r}) but rounded the other way: "
                                        f"{expression.strip()!r}")
                        continue
                    if not (NEAREST.search(expression) or ":." in match.group(0)):
                        continue  # a count or another exact value
                    if not safe.search(expression):
                        problems.append(f"markdown cell {index}: {name} is a {kind} bound "
                                        f"({match.group(0)!r}) but glued as {expression.strip()!r}")
    return problems


def _cells(markdown: str, code: str) -> list[dict]:
    return [{"cell_type": "code", "source": [code]},
            {"cell_type": "markdown", "source": [markdown]}]


def test_the_check_finds_bounds_rounded_to_nearest():
    code = ('glue("lo", round(min(xs), 2), display=False)\n'
            'glue("hi", f"{max(xs):.1f}", display=False)\n'
            'glue("top", round(max(xs), 2))\n'
            'glue("raw", max(xs))\n')
    found = misrounded_bounds(_cells(
        "at least {glue:text}`lo` and up to +{glue:text}`hi`; {glue:text}`top` or less; "
        "at most {glue:text}`raw:.2f`", code))
    assert sorted(p.split(":")[1].split()[0] for p in found) == ["hi", "lo", "raw", "top"]
    between = misrounded_bounds(_cells("between {glue:text}`lo` and {glue:text}`top`", code))
    assert len(between) == 2  # both ends


def test_the_check_finds_bounds_rounded_the_other_way():
    code = ('glue("lo", round_up(min(xs), 2))\nglue("hi", round_down(max(xs), 2))\n'
            'glue("top", f"{math.floor(100 * max(xs))} %")\n')
    found = misrounded_bounds(_cells(
        "At least {glue:text}`lo`, at most {glue:text}`hi` and up to {glue:text}`top`", code))
    assert sorted(p.split(":")[1].split()[0] for p in found) == ["hi", "lo", "top"]
    assert all("the other way" in p for p in found)


def test_the_check_accepts_safe_rounding_constants_and_point_values():
    code = ('glue("lo", round_down(min(xs), 2), display=False)\n'
            'glue("hi", f"{round_up(max(xs), 1):.1f}", display=False)\n'
            'glue("tol", TOL)\nglue("best", round(max(xs), 2))\n'
            'glue("steps", max(step_counts))\n')
    text = ("at least {glue:text}`lo`, at most {glue:text}`hi`, within {glue:text}`tol`; "
            "the best seed reaches {glue:text}`best`, after up to {glue:text}`steps` steps")
    assert misrounded_bounds(_cells(text, code)) == []


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.name)
def test_glued_bounds_are_rounded_towards_the_bound(nb_path):
    cells = json.loads(nb_path.read_text(encoding="utf-8"))["cells"]
    problems = misrounded_bounds(cells)
    assert not problems, (
        f"{nb_path.name}: round a lower bound down and an upper bound up "
        f"(attention_src.stats.round_down, round_up): {problems}")
