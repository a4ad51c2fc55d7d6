"""``glue``: hand a value computed in a notebook cell to the book's prose.

Inside the book's build, this is MyST-NB's ``myst_nb.glue``: the value is recorded in the
cell's output and the page's prose shows it where it says ``{glue:text}`name```. A chapter
run anywhere else (plain Jupyter, Colab, a downloaded notebook) has no MyST-NB; there
``glue(name, value)`` shows the value the way the cell's last expression would, and
``glue(name, value, display=False)`` does nothing, so the chapter runs unchanged (in a plain
Python script, without IPython, the value is printed).
"""

from __future__ import annotations

__all__ = ["glue", "book_build_glue"]


def book_build_glue():
    """MyST-NB's ``glue`` function, or ``None`` where MyST-NB is not installed."""
    try:
        from myst_nb import glue as myst_glue
    except ImportError:
        return None
    return myst_glue


def glue(name: str, variable: object, display: bool = True) -> None:
    """Record ``variable`` under ``name`` for the page's prose (MyST-NB's ``glue``).

    Args:
        name: the key the prose refers to, ``{glue:text}`name```; a non-empty string.
        variable: any object; MyST-NB records its display forms (text, image, ...).
        display: show the value in the cell's output too (as MyST-NB does).
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str, got {name!r}")
    if not isinstance(display, bool):
        raise TypeError(f"display must be a bool, got {type(display).__name__}")
    myst_glue = book_build_glue()
    if myst_glue is not None:
        myst_glue(name, variable, display=display)
    elif display:
        try:
            from IPython.display import display as show
        except ImportError:  # a plain Python script: no notebook to show it in
            show = print
        show(variable)
