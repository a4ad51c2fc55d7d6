"""``attention_src.glue``: MyST-NB's ``glue`` in the book's build, a stand-in elsewhere.

The build's side is compared with the real ``myst_nb.glue`` (the same display call) and with a
hand-written expectation; the other side by making ``import myst_nb`` fail
(``sys.modules["myst_nb"] = None``), as in a reader's environment.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
import torch

from attention_src import glue as glue_module
from attention_src.glue import GLUE_PREFIX, book_build_glue, glue, record_glue


@pytest.fixture
def stand_in_myst_nb(monkeypatch):
    """An installed MyST-NB (a stand-in module), and every display call recorded."""
    monkeypatch.setitem(sys.modules, "myst_nb", types.ModuleType("myst_nb"))
    shown = []
    import IPython.display

    monkeypatch.setattr(IPython.display, "display",
                        lambda *objs, **kw: shown.append((objs, kw)))
    return shown


@pytest.fixture
def no_myst_nb(monkeypatch):
    monkeypatch.setitem(sys.modules, "myst_nb", None)  # `import myst_nb` raises ImportError
    shown = []
    import IPython.display

    monkeypatch.setattr(IPython.display, "display", lambda *objs, **kw: shown.append(objs))
    return shown


def test_in_the_book_build_glue_records_the_value_under_its_name(stand_in_myst_nb):
    assert book_build_glue() is record_glue
    glue("a_name", 12, display=False)
    glue("shown", "x")
    assert stand_in_myst_nb == [
        (({GLUE_PREFIX + "text/plain": "12"},),
         {"raw": True, "metadata": {"scrapbook": {"name": "a_name",
                                                  "mime_prefix": GLUE_PREFIX}}}),
        (({"text/plain": "'x'"},),
         {"raw": True, "metadata": {"scrapbook": {"name": "shown", "mime_prefix": ""}}}),
    ]


@pytest.mark.parametrize("display", [False, True])
@pytest.mark.parametrize("value", [3, 0.125, "1e-05", "to the last bit", {"a": [1, 2]},
                                   np.arange(4) / 3, torch.tensor([1.5, 2.0])])
def test_it_displays_exactly_what_myst_nbs_glue_displays(monkeypatch, value, display):
    """The real MyST-NB as the reference: the same display call, argument for argument."""
    pytest.importorskip("myst_nb")
    import IPython.display
    import myst_nb
    import myst_nb.ext.glue

    theirs, ours = [], []
    monkeypatch.setattr(myst_nb.ext.glue, "ipy_display",
                        lambda *objs, **kw: theirs.append((objs, kw)))
    monkeypatch.setattr(IPython.display, "display", lambda *objs, **kw: ours.append((objs, kw)))
    myst_nb.glue("name", value, display=display)
    glue("name", value, display=display)
    assert ours == theirs and len(ours) == 1


def test_with_myst_nb_installed_the_build_function_is_returned_without_importing_it():
    """Importing MyST-NB's glue module costs about 1.7 s of CPU (nbformat, jsonschema): the
    reason ``record_glue`` exists. It must not be imported on the way."""
    import subprocess

    pytest.importorskip("myst_nb")
    code = ("import sys; from attention_src.glue import book_build_glue, record_glue; "
            "assert book_build_glue() is record_glue; "
            "assert 'myst_nb' not in sys.modules and 'nbformat' not in sys.modules")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


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
def test_a_name_that_is_not_a_non_empty_string_is_refused(stand_in_myst_nb, name):
    with pytest.raises(TypeError, match="name must be a non-empty str"):
        glue(name, 1)
    assert stand_in_myst_nb == []


@pytest.mark.parametrize("display", [0, 1, "yes", None])
def test_display_must_be_a_bool(stand_in_myst_nb, display):
    with pytest.raises(TypeError, match="display must be a bool"):
        glue("x", 1, display=display)
    assert stand_in_myst_nb == []


def test_the_module_exports_both_functions():
    assert glue_module.__all__ == ["glue", "book_build_glue", "record_glue", "GLUE_PREFIX"]


def test_myst_nb_is_found_without_being_imported(monkeypatch):
    pytest.importorskip("myst_nb")
    monkeypatch.delitem(sys.modules, "myst_nb")
    assert glue_module._myst_nb_installed()
    assert "myst_nb" not in sys.modules
