"""The saved results the chapters load: trained weights, seed sweeps, benchmark snapshots.

Some experiments take longer to run than a chapter may (training 60 models, a 10-minute
benchmark), so a script in the book's ``tools/`` or ``benchmarks/`` ran them once and saved
what they computed. The files ship inside this package, in ``attention_src/saved_data/``,
listed with their SHA-256 in ``saved_data/SHA256SUMS``, so a chapter finds them from any
folder, in a clone of the book or with the package installed from a wheel:

>>> from attention_src import saved
>>> models = saved.load_torch("ch01_models.pt")      # doctest: +SKIP

Each file is checked against its recorded SHA-256 the first time it is read, and a file that
is missing or differs raises an error that names it, instead of a chapter computing from a
truncated or stale file.
"""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path

import torch

__all__ = ["SAVED_DIR", "CHECKSUM_FILE", "checksums", "saved_path", "load_torch", "load_json",
           "load_csv", "file_sha256", "record_checksum"]

#: Where the saved files live: a folder inside the installed package.
SAVED_DIR = Path(__file__).resolve().parent / "saved_data"
#: The manifest: one ``<sha256>  <file name>`` line per saved file, sorted by name.
CHECKSUM_FILE = "SHA256SUMS"

_verified: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256 already checked


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a file's bytes, as 64 hex digits."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def checksums(folder: Path | None = None) -> dict[str, str]:
    """``{file name: sha256}`` as recorded in ``folder / SHA256SUMS``.

    ``folder`` defaults to :data:`SAVED_DIR`.
    """
    folder = SAVED_DIR if folder is None else Path(folder)
    manifest = folder / CHECKSUM_FILE
    if not manifest.is_file():
        raise FileNotFoundError(f"the list of saved files, {manifest}, is missing: the package "
                                "was installed without its data; reinstall it")
    recorded = {}
    for number, line in enumerate(manifest.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        sha, sep, name = line.partition("  ")
        if not sep or len(sha) != 64 or not name:
            raise ValueError(f"{manifest}, line {number}: expected '<sha256>  <name>', "
                             f"got {line!r}")
        recorded[name] = sha
    return recorded


def saved_path(name: str, folder: Path | None = None) -> Path:
    """The path of the saved file ``name`` (e.g. ``"ch01_models.pt"``), checked.

    Raises ``TypeError`` when ``name`` is not a string, ``ValueError`` when no such file is
    recorded (the message lists the recorded ones) or when the file's bytes differ from its
    recorded SHA-256, ``FileNotFoundError`` when a recorded file is missing.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a file name (str), got {type(name).__name__}")
    folder = SAVED_DIR if folder is None else Path(folder)
    recorded = checksums(folder)
    if name not in recorded:
        raise ValueError(f"no saved file named {name!r}; the saved files are: "
                         f"{', '.join(sorted(recorded))}")
    path = folder / name
    if not path.is_file():
        raise FileNotFoundError(f"the saved file {name!r} is missing from {folder}: the "
                                "package was installed without its data; reinstall it")
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if _verified.get(key) != recorded[name]:
        actual = file_sha256(path)
        if actual != recorded[name]:
            raise ValueError(
                f"the saved file {path} has SHA-256 {actual}, but {recorded[name]} is recorded "
                f"in {CHECKSUM_FILE}: it was altered or truncated; reinstall the package, or "
                "re-run the script that writes it")
        _verified[key] = actual
    return path


def load_torch(name: str, *, weights_only: bool = True, folder: Path | None = None):
    """``torch.load`` a saved ``.pt`` file onto the CPU (see :func:`saved_path`).

    ``weights_only=False`` only for a file the book wrote that holds more than tensors and
    plain containers (chapter 8's results); PyTorch then unpickles arbitrary objects.
    """
    return torch.load(saved_path(name, folder), map_location="cpu", weights_only=weights_only)


def load_json(name: str, *, folder: Path | None = None):
    """The parsed content of a saved ``.json`` file (see :func:`saved_path`)."""
    return json.loads(saved_path(name, folder).read_text())


def load_csv(name: str, *, folder: Path | None = None) -> list[dict[str, str]]:
    """The rows of a saved ``.csv`` file as dictionaries of strings (see :func:`saved_path`)."""
    with open(saved_path(name, folder), newline="") as f:
        return list(csv.DictReader(f))


def record_checksum(path: str | Path) -> str:
    """Record the SHA-256 of the file at ``path`` in its folder's ``SHA256SUMS`` and return it.

    For the scripts that write the saved files: call it after each write. Other lines are
    kept; the manifest stays sorted by name.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"cannot record the checksum of {path}: no such file")
    manifest = path.parent / CHECKSUM_FILE
    recorded = checksums(path.parent) if manifest.is_file() else {}
    recorded[path.name] = file_sha256(path)
    manifest.write_text("".join(f"{sha}  {name}\n" for name, sha in sorted(recorded.items())))
    return recorded[path.name]
