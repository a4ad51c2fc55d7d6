"""Sphinx extension: fixes for two console errors the browser tests found, and
a lighter page.

* ``sphinx_thebe`` (always loaded by Jupyter Book 1, even with thebe off)
  registers its inline configuration script twice, so every page declared
  ``const THEBE_JS_URL`` twice: "Identifier 'THEBE_JS_URL' has already been
  declared". Each page now gets each script once.
* The theme's colour mode defaulted to the empty string, which its script
  rejects: "Got invalid theme mode: . Resetting to auto." The default is now
  ``auto`` (follow the reader's system setting), what the script fell back to
  anyway. This theme version reads it from ``html_context["default_mode"]``,
  which is merged, not replaced.
* Every page loaded the theme's ``fontawesome.js`` (1.5 MB), which the theme
  includes only "so that users can add custom icons"; its own icons are drawn
  by the Font Awesome web font its stylesheet loads. The book adds no custom
  icon, so the script tag is removed from the built pages (a first visit of a
  chapter drops from about 4 MB to about 2.5 MB).
* Every page also loaded the search index (0.18 MB), used only by the theme's
  search-as-you-type, which is off (``search_as_you_type = False``): the search
  box sends the reader to ``search.html``, which loads the index itself. The
  tag is removed from every other page.
"""

from __future__ import annotations

import re
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.config import Config


def _default_mode(app: Sphinx, config: Config) -> None:
    context = dict(config.html_context or {})
    context.setdefault("default_mode", "auto")
    config.html_context = context


def _script_key(script) -> tuple:
    """What the page renders for a script: its file and attributes (an inline
    script's body is an attribute). An inline script's file is ``None`` or
    ``""`` depending on who added it (the two copies differ only in that), and
    both render the same tag."""
    attributes = getattr(script, "attributes", {}) or {}
    filename = getattr(script, "filename", str(script)) or ""
    return filename, tuple(sorted((k, str(v)) for k, v in attributes.items()))


def _unique_scripts(app: Sphinx, pagename: str, templatename: str,
                    context: dict, doctree) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen: set[tuple] = set()
    unique = []
    for script in scripts:
        key = _script_key(script)
        if key not in seen:
            seen.add(key)
            unique.append(script)
    # in place: the list is the builder's own, to which later handlers
    # (MathJax, on pages with formulas) still add their scripts
    scripts[:] = unique


#: The theme's script tag for the icon script (any digest, any relative path).
ICON_SCRIPT = re.compile(
    r'[ \t]*<script defer src="[^"]*_static/scripts/fontawesome\.js[^"]*">'
    r'</script>\n?')


#: The search index's script tag (any relative path).
SEARCH_INDEX = re.compile(r'[ \t]*<script src="[^"]*searchindex\.js[^"]*">'
                          r'</script>\n?')


def strip_unused_scripts(html: str, search_page: bool = False) -> str:
    """``html`` without the theme's ``fontawesome.js`` script tag, and without
    the search index unless it is the search page."""
    html = ICON_SCRIPT.sub("", html)
    return html if search_page else SEARCH_INDEX.sub("", html)


def _strip_unused_scriptss(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    for page in Path(app.outdir).rglob("*.html"):
        if "_static" in page.relative_to(app.outdir).parts:
            continue
        text = page.read_text(encoding="utf-8")
        search = page.name == "search.html"
        stripped = strip_unused_scripts(text, search_page=search)
        if stripped != text:
            page.write_text(stripped, encoding="utf-8")


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", _default_mode, priority=900)
    app.connect("build-finished", _strip_unused_scriptss)
    # late, after every handler that adds scripts to the page
    app.connect("html-page-context", _unique_scripts, priority=900)
    return {"version": "1.0", "parallel_read_safe": True,
            "parallel_write_safe": True}
