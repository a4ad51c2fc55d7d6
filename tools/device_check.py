"""Run the book's checks on whatever machine this is (a GPU machine, a new Python or PyTorch).

What it does, from the repository root:

1. prints the machine: Python, PyTorch, the device ``attention_src.utils.pick_device`` picks;
2. runs the unit tests (``pytest tests -m "not browser"``, minus the ones that need the built
   site or the network) with the ``device`` fixture covering CUDA where PyTorch sees it;
3. executes chapter notebooks the way a reader's downloaded copy runs: each copied into an
   empty folder of its own, run by a fresh kernel (``nbclient``) with that folder as its working
   directory, on the device ``pick_device`` picks; no stored output is compared (the numbers of
   a GPU differ from the CPU's in the last bits), only that every cell runs.

It writes a JSON summary (``--out``) with the versions, the pytest counts and, per notebook,
``ok`` or the error and the wall time. Usage::

    python tools/device_check.py --out summary.json [--workers 8] [--notebooks book/01_*.ipynb]

Needs ``pytest``, ``pytest-xdist``, ``nbclient`` and ``ipykernel`` besides the package.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Test files that need the built site, a browser or the package index: not run here.
SKIPPED_TESTS = ("tests/test_site.py", "tests/test_wheel.py")


def environment() -> dict:
    import torch

    from attention_src.utils import pick_device

    info = {"python": platform.python_version(), "torch": torch.__version__,
            "device": str(pick_device()), "cuda": torch.cuda.is_available()}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


def run_tests(workers: int) -> dict:
    cmd = [sys.executable, "-m", "pytest", "tests", "-m", "not browser", "-q", "-p",
           "no:cacheprovider", "-n", str(workers), "-o", "addopts="]
    cmd += [f"--ignore={t}" for t in SKIPPED_TESTS]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    tail = proc.stdout.strip().splitlines()[-40:]
    counts = {}
    if tail:
        for number, what in re.findall(r"(\d+) (passed|failed|skipped|errors?|xfailed)",
                                       tail[-1]):
            counts[what] = int(number)
    return {"returncode": proc.returncode, "counts": counts, "seconds": time.perf_counter() - start,
            "tail": tail, "stderr_tail": proc.stderr.strip().splitlines()[-20:]}


def run_notebook(path: Path, timeout: int) -> dict:
    import nbformat
    from nbclient import NotebookClient

    start = time.perf_counter()
    folder = Path(tempfile.mkdtemp(prefix="chapter-"))  # empty: no book, no data beside it
    copy = folder / path.name
    shutil.copyfile(path, copy)
    nb = nbformat.read(copy, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(folder)}})
    try:
        client.execute()
        result = {"ok": True}
    except Exception as err:  # noqa: BLE001 - the summary records any failure of a cell
        result = {"ok": False, "error": f"{type(err).__name__}: {str(err)[-1500:]}"}
    devices = [line for cell in nb.cells if cell.cell_type == "code"
               for out in cell.get("outputs", []) if out.get("output_type") == "stream"
               for line in out.get("text", "").splitlines() if "device" in line.lower()][:3]
    result.update(seconds=round(time.perf_counter() - start, 1), device_lines=devices)
    shutil.rmtree(folder, ignore_errors=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    parser.add_argument("--notebooks", nargs="*", type=Path, default=None,
                        help="default: every chapter and solutions notebook in _toc.yml")
    parser.add_argument("--no-tests", action="store_true")
    parser.add_argument("--timeout", type=int, default=600, help="per cell, seconds")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    summary = {"environment": environment()}
    print(json.dumps(summary["environment"]), flush=True)
    if args.notebooks is None:
        toc = subprocess.run([sys.executable, "tests/toc.py"], cwd=ROOT, capture_output=True,
                             text=True, check=True)
        args.notebooks = [ROOT / p for p in toc.stdout.split()]
    with ThreadPoolExecutor(max_workers=args.workers) as pool:
        futures = {nb.name: pool.submit(run_notebook, nb, args.timeout) for nb in args.notebooks}
        summary["notebooks"] = {}
        for name, future in futures.items():
            summary["notebooks"][name] = future.result()
            print(name, json.dumps(summary["notebooks"][name])[:300], flush=True)
    if not args.no_tests:
        summary["tests"] = run_tests(args.workers)
        print("tests:", summary["tests"]["counts"], f"{summary['tests']['seconds']:.0f} s",
              flush=True)
        print("\n".join(summary["tests"]["tail"][-15:]), flush=True)
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    failed = [n for n, r in summary["notebooks"].items() if not r["ok"]]
    print("notebooks failed:", failed or "none")
    sys.exit(1 if failed or summary.get("tests", {}).get("returncode", 0) else 0)


if __name__ == "__main__":
    main()
