"""tools/gpu_snapshot.py: a GPU session's archive becomes chapter 12's saved files and the
closing note's table. The archive is built here as benchmarks/gpu_session.sh lays it out,
with verdicts computed by bench_gpu's own ``target_verdicts`` from hand-made rows."""

from __future__ import annotations

import importlib.util
import json
import tarfile
from pathlib import Path

import pytest

from attention_src.saved import checksums, file_sha256

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gpu_snapshot = _load("gpu_snapshot", ROOT / "tools" / "gpu_snapshot.py")
bench_gpu = _load("bench_gpu_for_snapshot", ROOT / "benchmarks" / "bench_gpu.py")


def _session(tmp_path: Path, with_table: bool = True) -> Path:
    """A session.tar.gz as gpu_session.sh packs it (the table step optional)."""
    root = tmp_path / "build" / "gpu_session"
    for folder in ("autotune", "targets", "extra", "table"):
        (root / folder).mkdir(parents=True)
    (root / "device.txt").write_text("name, memory.total [MiB]\nNVIDIA H200, 143771 MiB\n")
    (root / "tests.log").write_text("....\n76 passed in 41.2s\n== tests: exit 0 at 60 s\n")
    (root / "autotune.log").write_text(
        "compiled 224 settings in 35 s\nGPU_CONFIGS:\n    64: FlashConfig(block_m=128, "
        "block_n=64, num_warps=8, num_stages=3),  # 1.234 ms\nGPU_BACKWARD_CONFIGS:\n"
        "    64: FlashConfig(block_m=32, block_n=128, num_warps=4, num_stages=1),  # 4.5 ms\n")
    tuned = [{"direction": "forward", "d": 64, "causal": c, "L": 8192, "block_m": 128,
              "block_n": 64, "num_warps": 8, "num_stages": 3, "forward": "split",
              "status": "ok", "ms": 0.6, "error": 1e-3} for c in (False, True)]
    tuned.append(dict(tuned[0], block_m=64, status="wrong: relative error 1"))
    bench_gpu.write_csv(tuned, root / "autotune" / "autotune.csv", bench_gpu.AUTOTUNE_FIELDS)
    (root / "sources.sha256").write_text(
        f"{file_sha256(ROOT / 'benchmarks' / 'bench_gpu.py')}  benchmarks/bench_gpu.py\n"
        f"{'0' * 64}  attention_src/flash_triton.py\n")  # measured another version of it
    rows = [{"kind": "speed", "method": m, "causal": False, "L": 16384, "mode": "forward",
             "status": "ok", "ms": ms} for m, ms in (("triton", 10.0), ("sdpa_cudnn", 9.0))]
    rows += [{"kind": "memory", "method": "triton", "causal": False, "L": L,
              "mode": "forward_backward", "status": "ok", "peak_mib": L / 64}
             for L in (4096, 8192)]
    bench_gpu.write_csv(rows, root / "targets" / "targets.csv", bench_gpu.TARGET_FIELDS)
    (root / "targets" / "targets.json").write_text(
        json.dumps(bench_gpu.target_verdicts(rows)))
    (root / "extra" / "decode.csv").write_text("method,kv_heads\nsdpa_gqa,8\n")
    (root / "extra" / "masked_rows.csv").write_text("backend,dtype\nsdpa_math,float16\n")
    if with_table:
        (root / "table" / "gpu.csv").write_text("method,L\ntriton,512\n")
        (root / "table" / "gpu_meta.json").write_text('{"gpu": "NVIDIA H200"}\n')
    archive = tmp_path / "session.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(root, arcname="gpu_session")
    return archive


def test_the_measurements_are_saved_with_their_checksums(tmp_path, capsys):
    archive = _session(tmp_path)
    saved = tmp_path / "saved"
    saved.mkdir()
    assert gpu_snapshot.main([str(archive), "--saved-dir", str(saved)]) == 0
    names = sorted(gpu_snapshot.FILES.values())
    assert sorted(p.name for p in saved.iterdir()) == sorted([*names, "SHA256SUMS"])
    recorded = checksums(saved)
    assert sorted(recorded) == names
    assert all(recorded[n] == file_sha256(saved / n) for n in names)
    assert (saved / "ch12_gpu.csv").read_text() == "method,L\ntriton,512\n"
    out = capsys.readouterr().out
    assert "NVIDIA H200, 143771 MiB" in out
    assert "Native tests of the kernels: 76 passed in 41.2s" in out
    assert ("    64: FlashConfig(block_m=128, block_n=64, num_warps=8, num_stages=3, "
            "forward='split'),  # 1.200 ms") in out  # from autotune.csv, the wrong row left out
    assert "# 3 settings timed: 1 wrong against SDPA, 0 failed" in out
    assert ("Sources: 1 of 2 files differ from this checkout: attention_src/flash_triton.py"
            in out)
    # 9 ms over 10 ms: 0.900 >= 0.8; the causal and backward rows were never measured
    assert "| forward causal=False | 0.900 | >= 0.8 | PASS | triton 10.000 ms, fastest " \
           "sdpa_cudnn 9.000 ms |" in out
    assert "| backward causal=True | — | >= 0.6 | FAIL | not measured |" in out
    assert "| memory linear in L | 0.000 | <= 0.1 | PASS |" in out


def test_a_step_cut_short_is_reported_and_a_dry_run_writes_nothing(tmp_path, capsys):
    archive = _session(tmp_path, with_table=False)
    saved = tmp_path / "saved"
    saved.mkdir()
    gpu_snapshot.main([str(archive), "--saved-dir", str(saved), "--dry-run"])
    assert not any(saved.iterdir())
    out = capsys.readouterr().out
    assert "- missing: table/gpu.csv (that step did not finish)" in out
    assert "- targets/targets.json -> ch12_gpu_targets.json (dry run)" in out


def test_an_archive_without_a_session_folder_is_refused(tmp_path):
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.txt").write_text("x")
    archive = tmp_path / "wrong.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "other", arcname="other")
    with pytest.raises(ValueError, match="holds no gpu_session/ folder"):
        gpu_snapshot.main([str(archive), "--saved-dir", str(tmp_path)])
