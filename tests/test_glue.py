"""``attention_src.glue``: MyST-NB's ``glue`` in the book's build, a stand-in elsewhere.

Both sides are tested by choosing what ``import myst_nb`` finds: a recording stand-in module
(the build's side: every argument must reach it unchanged), and nothing at all
(``sys.modules["myst_nb"] = None`` makes the import fail, as in a reader's environment).
"""

from __future__ import annotations

import sys
import types

import pytest

from attention_src import glue as glue_module
from attention_src.glue import book_build_glue, glue


@pytest.fixture
def recording_myst_nb(monkeypatch):
    calls = []
    fake = types.ModuleType("myst_nb")
    fake.glue = lambda name, variable, display=True: calls.append((name, variable, display))
    monkeypatch.setitem(sys.modules, "myst_nb", fake)
    return fake, calls


@pytest.fixture
def no_myst_nb(monkeypatch):
    monkeypatch.setitem(sys.modules, "myst_nb", None)  # `import myst_nb` raises ImportError
    shown = []
    import IPython.display

    monkeypatch.setattr(IPython.display, "display", lambda *objs, **kw: shown.append(objs))
    return shown


def test_in_the_book_build_glue_is_myst_nbs_and_passes_everything_on(recording_myst_nb):
    fake, calls = recording_myst_nb
    assert book_build_glue() is fake.glue
    value = object()
    glue("a_name", value, display=False)
    glue("other", 3.5)
    glue("shown", "x", display=True)
    assert calls == [("a_name", value, False), ("other", 3.5, True), ("shown", "x", True)]


def test_with_the_real_myst_nb_installed_the_build_function_is_returned():
    myst_nb = pytest.importorskip("myst_nb")
    assert book_build_glue() is myst_nb.glue


def test_without_myst_nb_display_false_does_nothing(no_myst_nb):
    assert book_build_glue() is None
    assert glue("hidden", 42, display=False) is None
    assert no_myst_nb == []


def test_without_myst_nb_the_value_is_shown_as_a_cell_would(no_myst_nb):
    value = {"accuracy": 0.97}
    glue("shown", value)
    glue("also", "text", display=True)
    assert no_myst_nb == [(value,), ("text",)]
    assert no_myst_nb[0][0] is value


def test_without_myst_nb_outside_a_kernel_the_value_is_printed(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "myst_nb", None)
    glue("n", 12345)
    glue("m", 678, display=False)
    assert capsys.readouterr().out == "12345\n"


@pytest.mark.parametrize("name", ["", None, 3, b"name"])
def test_a_name_that_is_not_a_non_empty_string_is_refused(recording_myst_nb, name):
    with pytest.raises(TypeError, match="name must be a non-empty str"):
        glue(name, 1)
    assert recording_myst_nb[1] == []


@pytest.mark.parametrize("display", [0, 1, "yes", None])
def test_display_must_be_a_bool(recording_myst_nb, display):
    with pytest.raises(TypeError, match="display must be a bool"):
        glue("x", 1, display=display)
    assert recording_myst_nb[1] == []


def test_the_module_exports_both_functions():
    assert glue_module.__all__ == ["glue", "book_build_glue"]
