"""The notebooks and pages listed in ``_toc.yml``; run as a script it prints the notebooks.

The Makefile passes that list to nbval, so a chapter is tested exactly when it is in the book.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SUFFIXES = (".ipynb", ".md")


def _files(node) -> list[str]:
    """Every ``file:`` entry below ``node`` of a jb-book table of contents, in order."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("file", "root"):
                found.append(value)
            else:
                found.extend(_files(value))
    elif isinstance(node, list):
        for item in node:
            found.extend(_files(item))
    return found


def toc_entries(root: Path = ROOT) -> list[Path]:
    """The path of each ``_toc.yml`` entry, with its suffix resolved (ValueError if missing)."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    paths = []
    for entry in _files(toc):
        matches = [root / f"{entry}{s}" for s in SUFFIXES if (root / f"{entry}{s}").exists()]
        if (root / entry).suffix in SUFFIXES and (root / entry).exists():
            matches = [root / entry]
        if not matches:
            raise ValueError(f"_toc.yml lists {entry!r}, but no {entry}.ipynb or {entry}.md exists")
        paths.append(matches[0])
    return paths


def toc_notebooks(root: Path = ROOT) -> list[Path]:
    """The notebooks of the book, in table-of-contents order."""
    return [p for p in toc_entries(root) if p.suffix == ".ipynb"]


if __name__ == "__main__":
    sys.stdout.write(" ".join(str(p.relative_to(ROOT)) for p in toc_notebooks()) + "\n")
