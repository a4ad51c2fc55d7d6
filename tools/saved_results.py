"""Saving what the `tools/train_*.py` scripts compute for the notebooks, in `book/data/`."""

from __future__ import annotations

from pathlib import Path

import torch


def save(saved: dict, out: Path) -> None:
    """``torch.save`` ``saved`` to ``out`` (creating its folder) and print the file's size."""
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(saved, out)
    print(f"saved {out.relative_to(out.parents[2])} ({out.stat().st_size / 1e3:.0f} kB)")
