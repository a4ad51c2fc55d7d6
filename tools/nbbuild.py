"""Write a notebook from a plain-text chapter source (used when a chapter is first drafted).

A chapter source is a Python file of cells separated by lines ``# %% [markdown]`` and
``# %%`` (optionally ``# %% tags=["nbval-ignore-output"]``), the "percent" format editors
understand. ``python tools/nbbuild.py src.py book/NN_name.ipynb`` writes an unexecuted notebook;
``make execute NB=book/NN_name.ipynb`` then runs it and stores the outputs. After that the
notebook itself is the source: edit it in Jupyter and re-run ``make execute``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import nbformat

MARKER = re.compile(r"^# %%(?P<md> \[markdown\])?(?: tags=(?P<tags>\[.*\]))?\s*$")


def cells_from_percent(text: str) -> list:
    cells, kind, tags, lines = [], None, [], []

    def flush():
        if kind is None:
            return
        body = "\n".join(lines).strip("\n")
        if kind == "markdown":
            body = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#")
                             for line in body.splitlines())
            cell = nbformat.v4.new_markdown_cell(body)
        else:
            cell = nbformat.v4.new_code_cell(body)
        if tags:
            cell.metadata["tags"] = tags
        cells.append(cell)

    for line in text.splitlines():
        m = MARKER.match(line)
        if m:
            flush()
            kind = "markdown" if m.group("md") else "code"
            tags = json.loads(m.group("tags")) if m.group("tags") else []
            lines = []
        else:
            lines.append(line)
    flush()
    return cells


def build(src: Path, dest: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = cells_from_percent(src.read_text())
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python",
                                 "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    nbformat.write(nb, dest)


if __name__ == "__main__":
    build(Path(sys.argv[1]), Path(sys.argv[2]))
