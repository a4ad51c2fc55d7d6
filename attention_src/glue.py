"""``glue``: hand a value computed in a notebook cell to the book's prose.

Inside the book's build, this records a value exactly as MyST-NB's ``myst_nb.glue`` does: the
value's display forms go into the cell's output under MyST-NB's glue keys, and the page's prose
shows it where it says ``{glue:text}`name```. A chapter run anywhere else (plain Jupyter,
Colab, a downloaded notebook) has no MyST-NB; there ``glue(name, value)`` shows the value the
way the cell's last expression would, and ``glue(name, value, display=False)`` does nothing, so
the chapter runs unchanged (in a plain Python script, without IPython, the value is printed).

Why not call ``myst_nb.glue`` itself: the module that defines it imports ``nbformat`` for a
type annotation, and ``nbformat`` imports ``jsonschema``, which builds dozens of grammars when
``rfc3987-syntax`` is installed (as Jupyter's own dependencies install it): about 1.7 s of CPU
in every chapter's kernel. ``record_glue`` is MyST-NB's function body (MyST-NB 1.x), and
tests/test_glue.py checks that it displays exactly what ``myst_nb.glue`` displays.
"""

from __future__ import annotations

import importlib.util
import sys

__all__ = ["glue", "book_build_glue", "record_glue", "GLUE_PREFIX"]

#: The prefix MyST-NB puts before a glued value's MIME types when the value is not shown.
GLUE_PREFIX = "application/papermill.record/"


def _myst_nb_installed() -> bool:
    """Whether ``import myst_nb`` would find MyST-NB (checked without importing it)."""
    if "myst_nb" in sys.modules:
        return sys.modules["myst_nb"] is not None  # None: imports of it are blocked
    return importlib.util.find_spec("myst_nb") is not None


def record_glue(name: str, variable: object, display: bool = True) -> None:
    """Display ``variable`` with the MIME types and metadata MyST-NB's ``glue`` gives it.

    The value's display forms (``text/plain``, ``image/png``, ...), prefixed with
    :data:`GLUE_PREFIX` unless ``display``, and ``{"scrapbook": {"name": name,
    "mime_prefix": ...}}`` in the output's metadata: what the book's build reads back.
    """
    import IPython
    from IPython.display import display as ipy_display

    mimebundle, metadata = IPython.core.formatters.format_display_data(variable)
    mime_prefix = "" if display else GLUE_PREFIX
    metadata["scrapbook"] = dict(name=name, mime_prefix=mime_prefix)
    ipy_display({mime_prefix + k: v for k, v in mimebundle.items()}, raw=True,
                metadata=metadata)


def book_build_glue():
    """:func:`record_glue` where MyST-NB is installed (the book's build), else ``None``."""
    return record_glue if _myst_nb_installed() else None


def glue(name: str, variable: object, display: bool = True) -> None:
    """Record ``variable`` under ``name`` for the page's prose (MyST-NB's ``glue``).

    Args:
        name: the key the prose refers to, ``{glue:text}`name```; a non-empty string.
        variable: any object; its display forms (text, image, ...) are recorded.
        display: show the value in the cell's output too (as MyST-NB does).
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str, got {name!r}")
    if not isinstance(display, bool):
        raise TypeError(f"display must be a bool, got {type(display).__name__}")
    build_glue = book_build_glue()
    if build_glue is not None:
        build_glue(name, variable, display=display)
    elif display:
        try:
            from IPython.display import display as show
        except ImportError:  # a plain Python script: no notebook to show it in
            show = print
        show(variable)
