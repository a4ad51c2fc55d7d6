"""What a reader gets on each page of the built site: length, width, code shown, weight.

Run after ``make book``::

    .venv/bin/python tools/page_report.py [--shots DIR] [--json FILE] [PAGE ...]

For each page of ``_toc.yml`` (or the pages named, e.g. ``book/05_multi_head``) it prints:

* ``screens``: the page's height at 1280x800 divided by 800 (how many screens a laptop reader
  scrolls), and the same at 390x844 (a phone);
* ``width390``: the page's scroll width at 390 px (390 means no sideways scrolling);
* ``code``: the lines of code a reader sees (code cells whose input is not removed or folded);
* ``first`` and ``cached``: the bytes a first visit loads (every file the page requests) and
  the bytes that are the page's own (its HTML and images; what a visit costs once the shared
  scripts and styles are cached).

``--shots DIR`` keeps a phone (390x844) screenshot of each page's first screen there. The site
is opened from disk with the network cut off, as in ``tests/browser.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.toc import toc_entries  # noqa: E402

SITE = ROOT / "_build" / "html"
HIDDEN_INPUT = {"remove-input", "remove-cell", "hide-input", "hide-cell", "remove_input",
                "remove_cell"}


def visible_code_lines(notebook: Path) -> int:
    """Lines of code a reader sees in ``notebook`` (blank lines not counted)."""
    if notebook.suffix != ".ipynb":
        return 0
    cells = json.loads(notebook.read_text())["cells"]
    lines = 0
    for cell in cells:
        tags = set(cell.get("metadata", {}).get("tags", []))
        if cell["cell_type"] != "code" or tags & HIDDEN_INPUT:
            continue
        lines += sum(1 for line in "".join(cell["source"]).splitlines() if line.strip())
    return lines


def measure(browser, rel: Path, shots: Path | None) -> dict:
    from tests.browser import page_weight

    url = (SITE / rel).as_uri()
    row: dict = {"page": str(rel.with_suffix(""))}
    requested: list[str] = []
    for width, height in ((1280, 800), (390, 844)):
        page = browser.new_page(viewport={"width": width, "height": height})
        if width == 1280:
            page.on("request", lambda r: requested.append(r.url))

        def gate(route):
            if route.request.url.startswith(("file://", "data:", "blob:")):
                route.continue_()
            else:
                route.abort()

        page.route("**/*", gate)
        page.goto(url, wait_until="load")
        page.wait_for_timeout(500)
        h = page.evaluate("document.documentElement.scrollHeight")
        row[f"screens{width}"] = round(h / height, 1)
        if width == 390:
            row["width390"] = page.evaluate("document.documentElement.scrollWidth")
            if shots is not None:
                shots.mkdir(parents=True, exist_ok=True)
                shot = shots / f"{rel.stem}_390.png"
                page.screenshot(path=str(shot))
                row["shot"] = str(shot)
        page.close()
    row["first"], row["cached"] = page_weight(requested)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("pages", nargs="*", help="pages such as book/05_multi_head")
    parser.add_argument("--shots", type=Path, help="keep a 390 px screenshot of each page here")
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    from tests.browser import CHROMIUM, CHROMIUM_ARGS

    entries = toc_entries()
    if args.pages:
        wanted = {p.removesuffix(".ipynb").removesuffix(".md") for p in args.pages}
        entries = [e for e in entries
                   if str(e.relative_to(ROOT).with_suffix("")) in wanted]
    rows = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        for entry in entries:
            rel = entry.relative_to(ROOT).with_suffix(".html")
            row = measure(browser, rel, args.shots)
            row["code"] = visible_code_lines(entry)
            rows.append(row)
            print(f"{row['page']:45s} screens {row['screens1280']:5.1f} (phone "
                  f"{row['screens390']:5.1f})  width390 {row['width390']:4d}  code "
                  f"{row['code']:4d}  first {row['first'] / 1e6:4.2f} MB  cached "
                  f"{row['cached'] / 1e6:4.2f} MB", flush=True)
        browser.close()
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
