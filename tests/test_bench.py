"""Smoke tests of `dprec bench` and bench/bench_encode.py: they run and print the table and
the agreement line. No timing is asserted (timings are a benchmark, not a test)."""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dprec import bench

TINY = ["--quick", "--sizes", "10,11", "--extra", "11:8", "--repeat", "1", "--no-progress"]


def _run(argv: list[str]) -> tuple[str, bench.BenchResult]:
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    out = io.StringIO()
    result = bench.run_from_args(p.parse_args(argv), out=out)
    return out.getvalue(), result


def _check_report(text: str) -> None:
    assert "DP-REC encode benchmark" in text
    assert "native" in text and "NumPy ref*" in text and "PyTorch" in text
    assert "LLR/gen" in text and "dec/gen" in text
    assert "ISA:" in text and "threads:" in text
    assert "Performance targets at" in text
    assert "agreement native vs reference" in text
    agreement = [line for line in text.splitlines() if line.startswith("agreement native vs reference")]
    assert len(agreement) == 1
    assert agreement[0].endswith("-> OK"), agreement[0]


def test_bench_quick_no_torch():
    text, result = _run(TINY + ["--no-torch", "--threads", "1"])
    _check_report(text)
    assert [(r.d_log2, r.bits) for r in result.rows] == [(10, 7), (11, 7), (11, 8)]
    for row in result.rows:
        assert row.torch_s is None
        assert row.native_s > 0 and row.gen_s > 0 and row.ref_s > 0 and row.decode_s > 0 and row.gen_d_s > 0
    assert "PyTorch column skipped" in text
    assert result.threads == 1
    assert result.agreement.ok
    assert result.agreement.max_abs_diff <= result.agreement.tolerance
    assert result.agreement.bit_identical == result.agreement.checked


def test_bench_restores_threads():
    from dprec import runtime

    before = runtime.get_num_threads()
    _run(TINY + ["--no-torch", "--threads", "1", "--sizes", "10", "--extra", "none"])
    assert runtime.get_num_threads() == before


def test_bench_json(tmp_path):
    import json

    path = tmp_path / "bench.json"
    _run(TINY + ["--no-torch", "--sizes", "10", "--extra", "none", "--json", str(path)])
    data = json.loads(path.read_text())
    assert data["rows"][0]["d_log2"] == 10 and data["rows"][0]["native_rate"] > 0
    assert data["agreement"]["ok"] is True


def test_bench_with_torch():
    pytest.importorskip("torch")
    text, result = _run(TINY + ["--sizes", "10", "--extra", "none"])
    _check_report(text)
    assert result.rows[0].torch_s is not None and result.rows[0].vs_torch is not None
    assert "PASS" in text or "MISS" in text


def test_progress_bar():
    stream = io.StringIO()
    bar = bench.Progress(10, stream=stream)
    bar.update(5, "half")
    bar.close()
    text = stream.getvalue()
    assert "[" in text and "100.0%" in text and text.endswith("\n")


def test_parse_sizes():
    assert bench._parse_sizes("16-18,20") == [16, 17, 18, 20]
    assert bench._parse_extra("20:10") == [(20, 10)]
    assert bench._parse_extra("none") == []


def test_console_entry_point():
    """`python -m dprec bench --quick` (what the `dprec` console script runs): table on stdout,
    progress bar on stderr."""
    env = dict(os.environ, DPREC_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "dprec", "bench", "--no-torch", *[a for a in TINY if a != "--no-progress"]],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=str(Path(__file__).resolve().parent),
    )
    assert proc.returncode == 0, proc.stderr
    _check_report(proc.stdout)
    assert "100.0%" in proc.stderr


def test_cli_info_and_help():
    proc = subprocess.run([sys.executable, "-m", "dprec", "info"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "ISA:" in proc.stdout and "backends:" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "dprec", "bench", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "--threads" in proc.stdout and "--quick" in proc.stdout


def test_bench_encode_script():
    script = Path(__file__).resolve().parents[1] / "bench" / "bench_encode.py"
    if not script.exists():
        pytest.skip("bench/ is not shipped beside the tests")
    proc = subprocess.run(
        [sys.executable, str(script), *TINY, "--no-torch", "--per-isa", "--sweep-d", "12"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    _check_report(proc.stdout)
    isa_lines = [line for line in proc.stdout.split("Per-ISA", 1)[1].splitlines()[2:] if "|" in line]
    assert isa_lines and all(line.rstrip().endswith("yes") for line in isa_lines), isa_lines


def test_bench_gpu_sketch_script():
    """Runs where there is a GPU (a quick table, GPU/CPU agreement OK); elsewhere it must
    say why it cannot run and exit 0."""
    script = Path(__file__).resolve().parents[1] / "bench" / "bench_gpu_sketch.py"
    if not script.exists():
        pytest.skip("bench/ is not shipped beside the tests")
    proc = subprocess.run(
        [sys.executable, str(script), "--quick", "--min-time-ms", "5", "--agree-log2-d", "12"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    if "cannot run here:" in proc.stdout:
        assert len(proc.stdout.strip().splitlines()) == 1
    else:
        assert "-> OK" in proc.stdout and "| 2^20 | 5 |" in proc.stdout


def test_bench_secagg_script():
    """bench/bench_secagg.py at the tiniest sizes, every section (the MSE table too): it runs, the samplers'
    statistical checks and the server's NumPy agreement pass, and every table is printed."""
    script = Path(__file__).resolve().parents[1] / "bench" / "bench_secagg.py"
    if not script.exists():
        pytest.skip("bench/ is not shipped beside the tests")
    tiny = [
        "--quick", "--repeat", "1", "--min-time", "0", "--log2-n", "12", "--ref-n", "64", "--sigmas", "0.5", "30",
        "--log2-d", "10", "--server-log2-d", "10", "--clients", "20",
        "--mse", "--mse-clients", "20", "--mse-dim", "300", "--mse-sketch", "3", "64", "--epsilons", "4",
        "--mse-bits", "20",
    ]
    proc = subprocess.run([sys.executable, str(script), *tiny], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    for title in ("### Samplers", "### Client", "### Server", "### End-to-end MSE"):
        assert title in out, out
    assert "sampler statistics: OK" in out
    assert "server agreement (sums equal, decodes within 1e-12): OK" in out
    assert "| Skellam |" in out and "(sum of stages)" in out


def test_bench_qmgeo_script():
    """bench/bench_qmgeo.py at tiny sizes: it runs, prints both tables, and native and reference agree."""
    script = Path(__file__).resolve().parents[1] / "bench" / "bench_qmgeo.py"
    if not script.exists():
        pytest.skip("bench/ is not shipped beside the tests")
    tiny = ["--log2-n", "12", "20", "--server-log2-n", "10", "--clients", "3", "--repeat", "1", "--min-time", "0"]
    proc = subprocess.run([sys.executable, str(script), *tiny], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for title in ("### Client", "### Server"):
        assert title in proc.stdout, proc.stdout
    assert "| 2^20 | 65536 |" in proc.stdout and "native vs reference bit-identical: OK" in proc.stdout


def test_pytest_benchmark_harness_runs():
    """`pytest bench/` (the pytest-benchmark harness of the performance targets) collects and runs every body once
    (--benchmark-disable: no timing, no target check) at the quick sizes."""
    pytest.importorskip("pytest_benchmark")
    bench_dir = Path(__file__).resolve().parents[1] / "bench"
    if not (bench_dir / "conftest.py").exists():
        pytest.skip("bench/ is not shipped beside the tests")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(bench_dir), "-q", "-p", "no:cacheprovider", "--benchmark-disable",
         "--dprec-quick"],
        capture_output=True, text=True, timeout=600, cwd=bench_dir.parent,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout


def test_bench_flower_streaming_script(tmp_path):
    """bench/bench_flower_streaming.py at 4 clients x 1,000 parameters: each row (DP-REC streamed with and without
    adaptive clipping, DP-REC with every reply at once, float32 FedAvg) runs one round in a process of its own and
    lands in the table and the JSON."""
    if sys.version_info < (3, 11):
        pytest.skip("dprec.flower needs flwr's Message API (Python >= 3.11)")
    pytest.importorskip("flwr")
    pytest.importorskip("scipy")
    import json

    script = Path(__file__).resolve().parents[1] / "bench" / "bench_flower_streaming.py"
    if not script.exists():
        pytest.skip("bench/ is not shipped beside the tests")
    path = tmp_path / "round.json"
    proc = subprocess.run(
        [sys.executable, str(script), "--clients", "4", "--params", "1000", "--json", str(path)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    out = proc.stdout
    assert "CPU:" in out and "cores" in out and "peak RSS (MiB)" in out, out
    labels = ["DP-REC, streamed (adaptive clipping)", "DP-REC, streamed (fixed clip norm)", "DP-REC, all replies at once",
              "FedAvg, float32"]
    for label in labels:
        assert f"{label} |" in out, out
    rows = json.loads(path.read_text())["rows"]
    assert [r["label"] for r in rows] == labels
    assert all(r["aggregated"] == 4 and r["pulls"] >= 1 and r["peak_rss_mib"] > 0 for r in rows)
    dprec, fixed, at_once, fedavg = rows
    assert dprec["wire_bytes"] > fixed["wire_bytes"]  # the quantile bit
    assert dprec["wire_bytes"] < fedavg["wire_bytes"] == dprec["float32_wire_bytes"]
    assert dprec["decode_in_pulls_s"] > 0 and at_once["decode_in_pulls_s"] == 0


def test_bench_flower_secagg_script(tmp_path):
    """bench/bench_flower_secagg.py at 3 clients x 256 parameters, 2 rounds: a real Flower simulation per row whose
    error, bytes per SecAgg+ stage and costs land in the tables and the JSON."""
    if sys.version_info < (3, 11):
        pytest.skip("dprec.flower needs flwr's Message API (Python >= 3.11)")
    pytest.importorskip("flwr")
    pytest.importorskip("ray")
    pytest.importorskip("scipy")
    import json

    script = Path(__file__).resolve().parents[1] / "bench" / "bench_flower_secagg.py"
    if not script.exists():
        pytest.skip("bench/ is not shipped beside the tests")
    path = tmp_path / "rows.json"
    proc = subprocess.run(
        [sys.executable, str(script), "--clients", "3", "--dim", "256", "--rounds", "2", "--configs", "ddg:16",
         "--json", str(path)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "| ddg:16 | collect_masked_vectors |" in proc.stdout and "x the float32 FitRes" in proc.stdout
    (row,) = json.loads(path.read_text())
    assert row["rounds"] == 2 and row["padded_dim"] == 256
    # The masked words travel as int64 (8 bytes each) whatever the modulus; the float32 FitRes holds 4 per value.
    assert 8 * 256 <= row["bytes_out"]["collect_masked_vectors"] <= 8 * 256 + 1024
    assert 4 * 256 <= row["float32_fitres_bytes"] <= 4 * 256 + 1024
    assert set(row["bytes_out"]) == {"setup", "share_keys", "collect_masked_vectors", "unmask"}
    assert row["measured_mse"] > 0 and row["expected_mse"] > 0 and row["client_ddp_s"] > 0
