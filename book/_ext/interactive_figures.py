"""Sphinx extension: the site serves the figures' renderer once, as a file.

A notebook cell that shows an interactive figure (``attention_src.interactive``)
stores, in its ``text/html`` output, the figure's ``<div data-interactive=...>``
with its JSON *and* the whole renderer inline
(``<script data-interactive-renderer>``, about 11 kB), so that a downloaded,
trusted notebook draws the figure with no site around it. On the site that
inline copy would be repeated in every figure of every page. This extension

* removes the inline renderer from every figure's HTML on the built page (the
  figure's ``div`` and JSON stay as the cell wrote them), and
* writes the renderer once, as ``_static/interactive.js`` of the built site
  (the text of ``attention_src.interactive.RENDERER_JS``, by
  ``write_site_script``: the repository holds the script in one place only),
  and loads it on the pages that hold a figure, and on no other page. It is
  not kept in the book's ``_static`` folder: Jupyter Book loads every script
  found there on every page.

The renderer is idempotent, so a page that somehow had both copies would still
draw each figure once.
"""

from __future__ import annotations

import re
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx

from attention_src.interactive import write_site_script

#: The inline renderer a figure's HTML carries (non-greedy: one element).
INLINE_RENDERER = re.compile(
    r"<script data-interactive-renderer>.*?</script>", re.DOTALL)
#: The marker of an interactive figure in a cell's HTML output.
FIGURE = "data-interactive="
SCRIPT = "interactive.js"


def strip_inline_renderer(html: str) -> str:
    """``html`` without its inline ``<script data-interactive-renderer>``."""
    return INLINE_RENDERER.sub("", html)


def _raw_figures(doctree) -> list[nodes.raw]:
    return [n for n in doctree.findall(nodes.raw)
            if "html" in n.get("format", "").split()
            and FIGURE in n.astext()]


def _strip(app: Sphinx, doctree, docname: str) -> None:
    for node in _raw_figures(doctree):
        text = strip_inline_renderer(node.astext())
        node.children = [nodes.Text(text)]
        node.rawsource = text


def _add_script(app: Sphinx, pagename: str, templatename: str, context: dict,
                doctree) -> None:
    if doctree is not None and _raw_figures(doctree):
        app.add_js_file(SCRIPT, loading_method="defer")


def _write_script(app: Sphinx) -> None:
    """Write the renderer into a folder of the build's own, which the site
    serves as part of its ``_static``."""
    folder = Path(app.doctreedir).parent / "interactive_static"
    folder.mkdir(parents=True, exist_ok=True)
    write_site_script(folder / SCRIPT)
    app.config.html_static_path.append(str(folder))


def setup(app: Sphinx) -> dict:
    app.connect("builder-inited", _write_script)
    app.connect("doctree-resolved", _strip)
    app.connect("html-page-context", _add_script)
    return {"version": "1.0", "parallel_read_safe": True,
            "parallel_write_safe": True}
