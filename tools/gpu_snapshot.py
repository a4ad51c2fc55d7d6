"""Turn a GPU session's archive into chapter 12's saved data, and print its closing-note table.

``benchmarks/gpu_session.sh OUT`` packs everything a lent GPU machine measured into
``OUT/session.tar.gz`` (folder ``gpu_session/``). This script reads that archive and

* copies its measurements into ``attention_src/saved_data/`` under chapter 12's names
  (:data:`FILES`: ``ch12_gpu.csv``, ``ch12_gpu_meta.json``, ``ch12_gpu_targets.csv`` ...),
  recording each file's SHA-256 in ``SHA256SUMS``, as the book's other saved files are;
* prints, in Markdown, the device, the native test run's result, the autotune's best
  settings (lines to paste into ``attention_src/flash_triton.py``) and the targets with
  their verdicts: what the closing note of issue 25 has to give.

A file the session did not produce (a step cut short) is reported and skipped; nothing is
written with ``--dry-run``.

Usage: python tools/gpu_snapshot.py PATH/session.tar.gz [--dry-run] [--saved-dir DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

from attention_src.saved import SAVED_DIR, record_checksum

ROOT = Path(__file__).resolve().parents[1]

#: archive member (under ``gpu_session/``) -> saved file name
FILES = {
    "table/gpu.csv": "ch12_gpu.csv",
    "table/gpu_meta.json": "ch12_gpu_meta.json",
    "targets/targets.csv": "ch12_gpu_targets.csv",
    "targets/targets.json": "ch12_gpu_targets.json",
    "autotune/autotune.csv": "ch12_gpu_autotune.csv",
    "extra/masked_rows.csv": "ch12_gpu_masked_rows.csv",
    "extra/decode.csv": "ch12_gpu_decode.csv",
}


def extract(archive: Path, into: Path) -> Path:
    """Unpack ``archive`` into ``into``; return its ``gpu_session`` folder."""
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")  # plain files only, nothing outside ``into``
    session = into / "gpu_session"
    if not session.is_dir():
        raise ValueError(f"{archive} holds no gpu_session/ folder: not an archive written by "
                         "benchmarks/gpu_session.sh")
    return session


def copy_measurements(session: Path, saved_dir: Path, dry_run: bool = False) -> list[str]:
    """Copy the :data:`FILES` found in ``session`` to ``saved_dir`` and record their
    checksums; return a line per file (copied, or missing)."""
    lines = []
    for member, name in FILES.items():
        source = session / member
        if not source.is_file():
            lines.append(f"- missing: {member} (that step did not finish)")
            continue
        if not dry_run:
            shutil.copyfile(source, saved_dir / name)
            record_checksum(saved_dir / name)
        lines.append(f"- {member} -> {name}" + (" (dry run)" if dry_run else ""))
    return lines


def report(session: Path) -> str:
    """The closing note's Markdown: device, tests, best settings, targets."""
    out = ["## GPU session"]

    def read(member: str) -> str | None:
        path = session / member
        return path.read_text() if path.is_file() else None

    device = read("device.txt")
    out += ["", "Device:", "```", (device or "(no device.txt)").strip(), "```"]
    tests = read("tests.log")
    results = [line for line in (tests or "").splitlines()
               if " passed" in line or " failed" in line or " error" in line]
    out += ["", f"Native tests of the kernels: {results[-1] if results else 'no result line'}"]
    out += ["", sources_line(session)]
    settings = []
    if (session / "autotune" / "autotune.csv").is_file():
        bench = _bench_gpu()
        rows = bench.read_csv(session / "autotune" / "autotune.csv")
        settings = bench.config_lines(bench.best_configs(rows))
        wrong = sum(r["status"].startswith("wrong") for r in rows)
        failed = sum(r["status"].startswith("failed") for r in rows)
        settings.append(f"# {len(rows)} settings timed: {wrong} wrong against SDPA, "
                        f"{failed} failed")
    out += ["", "Autotuned launch settings (to paste into attention_src/flash_triton.py):",
            "```", *(settings or ["(none)"]), "```"]
    verdicts = read("targets/targets.json")
    out += ["", "| target | value | bound | verdict | detail |", "|---|---|---|---|---|"]
    for v in json.loads(verdicts) if verdicts else []:
        value = "—" if v["value"] is None else f"{v['value']:.3f}"
        out.append(f"| {v['target']} | {value} | {v['bound']} | "
                   f"{'PASS' if v['passed'] else 'FAIL'} | {v['detail']} |")
    if not verdicts:
        out.append("| (no targets.json: the targets step did not finish) | | | | |")
    return "\n".join(out)


def _bench_gpu():
    """``benchmarks/bench_gpu.py`` as a module (its best_configs and config_lines)."""
    spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "benchmarks" / "bench_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sources_line(session: Path, root: Path = ROOT) -> str:
    """Whether the sources the session measured (its ``sources.sha256``) are this checkout's."""
    listing = session / "sources.sha256"
    if not listing.is_file():
        return "Sources: no sources.sha256 in the archive"
    changed = []
    lines = [line for line in listing.read_text().splitlines() if line.strip()]
    for line in lines:
        sha, _, name = line.partition("  ")
        path = root / name
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != sha:
            changed.append(name)
    if changed:
        return f"Sources: {len(changed)} of {len(lines)} files differ from this checkout: " + \
            ", ".join(changed)
    return f"Sources: all {len(lines)} measured files are this checkout's"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("archive", type=Path, help="session.tar.gz from benchmarks/gpu_session.sh")
    p.add_argument("--dry-run", action="store_true", help="report only, copy nothing")
    p.add_argument("--saved-dir", type=Path, default=SAVED_DIR,
                   help="where the saved files go (default: the package's saved_data)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        session = extract(args.archive, Path(tmp))
        print("\n".join(copy_measurements(session, args.saved_dir, args.dry_run)))
        print()
        print(report(session))
    return 0


if __name__ == "__main__":
    sys.exit(main())
