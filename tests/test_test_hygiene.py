"""Guards on the tests themselves (issue 13): a bad-input test must say which error it expects.

``pytest.raises(ValueError)`` alone passes on *any* ValueError, including one raised deeper
down after the check under test was removed (an audit found exactly that survivor in
``build_gru_seq2seq``). So every ``pytest.raises(...)`` in tests/ names its message with
``match=``. The check reads the syntax tree, so calls split over several lines count.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def _raises_without_match(source: str, filename: str) -> list[int]:
    """Line numbers of ``pytest.raises(...)`` / ``raises(...)`` calls with no ``match=``."""
    lines = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        is_raises = (
            isinstance(func, ast.Attribute) and func.attr == "raises"
            and isinstance(func.value, ast.Name) and func.value.id == "pytest"
        ) or (isinstance(func, ast.Name) and func.id == "raises")
        if is_raises and not any(kw.arg == "match" for kw in node.keywords):
            lines.append(node.lineno)
    return lines


def test_every_pytest_raises_in_tests_names_its_message():
    offenders = {
        path.name: bad
        for path in sorted(TESTS.glob("*.py"))
        if (bad := _raises_without_match(path.read_text(encoding="utf-8"), str(path)))
    }
    assert not offenders, (
        "pytest.raises without match= (file: lines); add match= naming the message: "
        f"{offenders}"
    )


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import pytest\nwith pytest.raises(ValueError):\n    pass\n", [2]),
        ("from pytest import raises\nwith raises(TypeError):\n    pass\n", [2]),
        ("import pytest\nwith pytest.raises(\n    ValueError,\n    match='x'):\n    pass\n", []),
        ("import pytest\npytest.raises(ValueError, f, 1)\n", [2]),
        ("import pytest\nwith pytest.raises(ValueError, match='a'), pytest.raises(KeyError):\n"
         "    pass\n", [2]),
    ],
    ids=["bare", "imported-name", "multi-line-with-match", "call-form", "second-of-two"],
)
def test_the_guard_finds_a_raises_without_match(source, expected):
    assert _raises_without_match(source, "<example>") == expected
