"""Saving what the `tools/train_*.py` scripts compute for the notebooks.

The files go to `attention_src/saved_data/`, their SHA-256 to its `SHA256SUMS`.
"""

from __future__ import annotations

from pathlib import Path

import torch

from attention_src.saved import record_checksum


def save(saved: dict, out: Path) -> None:
    """``torch.save`` ``saved`` to ``out`` (creating its folder) and print the file's size."""
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(saved, out)
    record_checksum(out)
    print(f"saved {out.relative_to(out.parents[2])} ({out.stat().st_size / 1e3:.0f} kB)")
