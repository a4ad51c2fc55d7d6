"""Sphinx extension: fixes for two console errors the browser tests found.

* ``sphinx_thebe`` (always loaded by Jupyter Book 1, even with thebe off)
  registers its inline configuration script twice, so every page declared
  ``const THEBE_JS_URL`` twice: "Identifier 'THEBE_JS_URL' has already been
  declared". Each page now gets each script once.
* The theme's colour mode defaulted to the empty string, which its script
  rejects: "Got invalid theme mode: . Resetting to auto." The default is now
  ``auto`` (follow the reader's system setting), what the script fell back to
  anyway. This theme version reads it from ``html_context["default_mode"]``,
  which is merged, not replaced.
"""

from __future__ import annotations

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


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", _default_mode, priority=900)
    # late, after every handler that adds scripts to the page
    app.connect("html-page-context", _unique_scripts, priority=900)
    return {"version": "1.0", "parallel_read_safe": True,
            "parallel_write_safe": True}
