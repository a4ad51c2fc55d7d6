"""The package as a reader gets it: a wheel, installed in a fresh environment, runs chapters.

Built from a copy of the working tree with the standard tools (``python -m build --wheel``),
the wheel is checked for what a reader's pip reads (Requires-Python, dependencies, the saved
data and its SHA-256 list), then installed with pip into a new virtual environment outside the
repository (torch from the machine's CPU wheel in ``/opt/wheels`` where it exists, every
version held to ``constraints.txt``). Chapters 1, 6 and 9, which load saved results, are copied
into an empty folder and executed there by that environment's Python and kernel, with no
``PYTHONPATH``: a chapter that still reads a file through a relative path, imports a module the
wheel does not declare, or finds the repository's ``attention_src`` instead of the installed one
fails here.

It takes about three minutes on the 2-core machine (168 s with other jobs running: 37 s to
install, 34 to 44 s a chapter), so it builds and installs once per session.
``ATTENTION_WHEEL_NOTEBOOKS=<folder>`` executes the three chapters from another folder (a
patched copy) instead of ``book/``.
"""

from __future__ import annotations

import email.parser
import hashlib
import json
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parent.parent
WHEELS = Path("/opt/wheels")
#: The chapters that load saved results: chapter 1 (trained models), 6 (induction-head runs),
#: 9 (benchmark snapshots).
CHAPTERS = ["01_motivation.ipynb", "06_multi_head_self_attention.ipynb",
            "09_efficient_attention.ipynb"]
#: What a build needs from the tree: the package, its metadata and the files that name.
BUILD_INPUTS = ["pyproject.toml", "README.md", "LICENSE", "attention_src"]

#: Run by the fresh environment's Python: execute one notebook in the current folder with a
#: kernel of that environment, then report where the kernel found Python and the package.
RUNNER = r'''
import json, sys
import nbformat
from nbclient import NotebookClient

path = sys.argv[1]
nb = nbformat.read(path, as_version=4)
nb.cells.append(nbformat.v4.new_code_cell(
    "import json as _j, sys as _s, attention_src as _a\n"
    "print(_j.dumps({'prefix': _s.prefix, 'package': _a.__file__, "
    "'version': _a.__version__}))"))
NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=False,
               resources={"metadata": {"path": "."}}).execute()
where = json.loads(nb.cells[-1].outputs[0]["text"])
stderr = [o.get("text", "") for c in nb.cells if c.cell_type == "code"
          for o in c.get("outputs", []) if o.get("name") == "stderr"]
print(json.dumps({"where": where, "stderr": stderr}))
'''


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, (
        f"{' '.join(map(str, cmd))} failed ({result.returncode}):\n"
        f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return result


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment without the repository on PYTHONPATH, without this venv's hints, and
    with Python's default of caching compiled modules (a machine may set
    PYTHONDONTWRITEBYTECODE; each chapter's kernel would then compile torch again)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "JUPYTER_PATH",
                        "PYTHONDONTWRITEBYTECODE")}
    env.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0",
                "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1",
                "JUPYTER_PLATFORM_DIRS": "1"})
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from a copy of the working tree (the tree itself stays untouched)."""
    try:
        import build  # noqa: F401  (pinned in requirements.txt)
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("python -m build is missing: requirements.txt pins it")
        pytest.skip("python -m build is not installed here (requirements.txt pins it)")
    src = tmp_path_factory.mktemp("src")
    for name in BUILD_INPUTS:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, src / name)
    dist = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist),
          str(src)], env=_clean_env())
    wheels = sorted(dist.glob("attention_src-*.whl"))
    assert len(wheels) == 1, f"expected one wheel, built {wheels}"
    return wheels[0]


def _metadata(wheel: Path):
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(zf.read(name).decode())


def test_the_wheel_accepts_python_3_11_to_3_13_and_declares_ranges(wheel):
    meta = _metadata(wheel)
    assert meta["Name"] == "attention_src"
    assert wheel.name.startswith(f"attention_src-{meta['Version']}-py3-none-any")
    requires_python = SpecifierSet(meta["Requires-Python"])
    for version in ("3.11.0", "3.12.0", "3.12.3", "3.13.0"):
        assert requires_python.contains(version), (version, str(requires_python))
    assert not requires_python.contains("3.10.14")
    classifiers = meta.get_all("Classifier")
    for minor in ("3.11", "3.12", "3.13"):
        assert f"Programming Language :: Python :: {minor}" in classifiers
    assert meta["License-Expression"] == "MIT"
    requirements = [Requirement(r) for r in meta.get_all("Requires-Dist")]
    base = {r.name: r for r in requirements if r.marker is None}
    assert {"torch", "numpy", "matplotlib", "scipy", "babel"} <= set(base)
    for req in base.values():
        assert req.specifier and not any(s.operator in ("==", "===") for s in req.specifier), (
            f"{req}: a dependency of the package is a range, never an exact pin")
    extras = set(meta.get_all("Provides-Extra"))
    assert {"graphs", "digits", "test", "all"} <= extras


def test_the_wheel_ships_every_saved_file_with_its_recorded_sha256(wheel):
    folder = ROOT / "attention_src" / "saved_data"
    recorded = {}
    for line in (folder / "SHA256SUMS").read_text().splitlines():
        sha, _, name = line.partition("  ")
        recorded[name] = sha
    assert len(recorded) >= 10
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        assert "attention_src/saved_data/SHA256SUMS" in names
        assert zf.read("attention_src/saved_data/SHA256SUMS") == (
            folder / "SHA256SUMS").read_bytes()
        shipped = {n.rsplit("/", 1)[1] for n in names
                   if n.startswith("attention_src/saved_data/")} - {"SHA256SUMS"}
        assert shipped == set(recorded), f"in the wheel but not listed, or listed but missing: "\
            f"{shipped ^ set(recorded)}"
        for name, sha in recorded.items():
            data = zf.read(f"attention_src/saved_data/{name}")
            assert hashlib.sha256(data).hexdigest() == sha, name
        assert "attention_src/saved.py" in names and "attention_src/glue.py" in names
        assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)


@pytest.fixture(scope="module")
def fresh_python(wheel, tmp_path_factory) -> Path:
    """A new virtual environment outside the repository with the wheel installed by pip."""
    env_dir = tmp_path_factory.mktemp("reader-venv")
    assert ROOT not in env_dir.parents
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    find_links = ["--find-links", str(WHEELS)] if WHEELS.is_dir() else []
    # --no-compile: torch's thousands of modules compile when first imported instead, and are
    # cached (the environment above writes byte-code, Python's default) for the next process
    # (on a loaded 2-core machine the install took 185 s with byte-compiling, 57 s without)
    _run([str(python), "-m", "pip", "install", "--quiet", "--no-compile", "--prefer-binary",
          *find_links, "-c", str(ROOT / "constraints.txt"), str(wheel), "ipykernel", "nbclient"],
         env=_clean_env(), cwd=env_dir)
    return python


def test_the_installed_wheel_imports_from_its_environment(fresh_python, tmp_path):
    code = ("import attention_src, sys; from attention_src import saved; "
            "print(attention_src.__file__); print(saved.saved_path('ch01_models.pt')); "
            "print(sorted(saved.checksums()) == sorted(p.name for p in saved.SAVED_DIR.iterdir()"
            " if p.name != 'SHA256SUMS'))")
    out = _run([str(fresh_python), "-c", code], env=_clean_env(), cwd=tmp_path).stdout.split()
    site = fresh_python.parent.parent
    assert Path(out[0]).is_relative_to(site), out[0]
    assert Path(out[1]).is_relative_to(site) and Path(out[1]).is_file(), out[1]
    assert out[2] == "True"


def _notebook_source() -> Path:
    override = os.environ.get("ATTENTION_WHEEL_NOTEBOOKS")
    return Path(override) if override else ROOT / "book"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_chapter_runs_from_an_empty_folder_with_the_installed_wheel(
        fresh_python, tmp_path, chapter):
    folder = tmp_path / "reader"
    folder.mkdir()
    shutil.copy2(_notebook_source() / chapter, folder / chapter)
    runner = tmp_path / "run_notebook.py"  # outside the folder the chapter runs in
    runner.write_text(RUNNER)
    env = _clean_env(PATH=f"{fresh_python.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    result = subprocess.run([str(fresh_python), str(runner), chapter], cwd=folder, env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, (
        f"{chapter} failed in a fresh environment from an empty folder:\n"
        f"{result.stdout[-3000:]}\n{result.stderr[-6000:]}")
    report = json.loads(result.stdout.strip().splitlines()[-1])
    site = fresh_python.parent.parent
    assert Path(report["where"]["prefix"]) == site, report["where"]
    assert Path(report["where"]["package"]).is_relative_to(site), report["where"]
    assert not report["stderr"], f"{chapter} wrote to stderr: {report['stderr']}"
    # the chapter wrote nothing into the repository's layout around it (no data/, no book/)
    assert {p.name for p in folder.iterdir()} <= {chapter, ".ipynb_checkpoints"}, (
        sorted(p.name for p in folder.iterdir()))
