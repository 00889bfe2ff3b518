"""Tests of `dprec demo` (python/dprec/demo.py): the Dirichlet split, DP-FedAvg's calibration,
argument checking, the missing-dependency message, and a few rounds of the whole run."""

from __future__ import annotations

import io
import json
import math
import sys

import numpy as np
import pytest

from dprec import demo
from dprec.__main__ import main

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------- Dirichlet split


def _labels(n: int = 600, classes: int = 10, seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, classes, size=n)


@pytest.mark.parametrize("alpha", [0.05, 0.5, 100.0])
@pytest.mark.parametrize("clients", [1, 7, 100])
def test_dirichlet_split_is_a_partition(alpha, clients):
    y = _labels()
    parts = demo.dirichlet_split(y, clients, alpha, np.random.default_rng(0))
    assert len(parts) == clients
    assert all(p.size > 0 for p in parts), "a client is empty"
    assert all(p.dtype == np.int64 and np.all(np.diff(p) > 0) for p in parts)
    together = np.concatenate(parts)
    assert together.size == y.size  # every sample once: no duplicates ...
    assert np.array_equal(np.sort(together), np.arange(y.size))  # ... and none missing


def test_dirichlet_split_no_empty_client_when_clients_equal_samples():
    y = _labels(n=50)
    parts = demo.dirichlet_split(y, 50, 0.01, np.random.default_rng(1))
    assert sorted(p.size for p in parts) == [1] * 50


def test_dirichlet_split_is_deterministic_for_a_seed():
    y = _labels()
    a = demo.dirichlet_split(y, 20, 0.5, np.random.default_rng(42))
    b = demo.dirichlet_split(y, 20, 0.5, np.random.default_rng(42))
    c = demo.dirichlet_split(y, 20, 0.5, np.random.default_rng(43))
    assert all(np.array_equal(x, z) for x, z in zip(a, b))
    assert not all(np.array_equal(x, z) for x, z in zip(a, c))


def test_dirichlet_split_small_alpha_is_non_iid():
    y = _labels(n=2000)

    def mean_classes(alpha: float) -> float:
        parts = demo.dirichlet_split(y, 20, alpha, np.random.default_rng(5))
        return float(np.mean([np.unique(y[p]).size for p in parts]))

    assert mean_classes(0.1) < 5.0 < 9.5 < mean_classes(100.0)


def test_dirichlet_split_rejects_bad_arguments():
    y = _labels(n=30)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="num_clients"):
        demo.dirichlet_split(y, 31, 0.5, rng)
    with pytest.raises(ValueError, match="num_clients"):
        demo.dirichlet_split(y, 0, 0.5, rng)
    with pytest.raises(ValueError, match="alpha"):
        demo.dirichlet_split(y, 3, 0.0, rng)
    with pytest.raises(TypeError, match="labels"):
        demo.dirichlet_split(y.astype(float), 3, 0.5, rng)
    with pytest.raises(TypeError, match="rng"):
        demo.dirichlet_split(y, 3, 0.5, 0)


# --------------------------------------------------------------------------- DP-FedAvg accounting


def test_dp_fedavg_calibration_round_trip():
    pytest.importorskip("scipy")
    delta = 100**-1.1
    z = demo.calibrate_noise_multiplier(4.0, sampling_rate=0.1, rounds=50, delta=delta)
    assert demo.dp_fedavg_epsilon(z, sampling_rate=0.1, rounds=50, delta=delta) == pytest.approx(4.0, rel=1e-6)
    # Epsilon falls as the noise grows and rises with the rounds.
    assert demo.dp_fedavg_epsilon(1.1 * z, sampling_rate=0.1, rounds=50, delta=delta) < 4.0
    assert demo.dp_fedavg_epsilon(z, sampling_rate=0.1, rounds=60, delta=delta) > 4.0
    with pytest.raises(ValueError, match="target_epsilon"):
        demo.calibrate_noise_multiplier(-1.0, sampling_rate=0.1, rounds=50, delta=delta)


def test_dp_fedavg_epsilon_full_batch_is_the_gaussian_mechanism():
    pytest.importorskip("scipy")
    from dprec.accounting import DEFAULT_ORDERS

    # q = 1: RDP a T / (2 z^2), Mironov's conversion.
    z, t, delta = 2.0, 10, 1e-5
    expected = min(a * t / (2 * z * z) + math.log(1 / delta) / (a - 1) for a in DEFAULT_ORDERS)
    assert demo.dp_fedavg_epsilon(z, sampling_rate=1.0, rounds=t, delta=delta) == pytest.approx(expected, rel=1e-12)


# --------------------------------------------------------------------------- CLI arguments


@pytest.mark.parametrize(
    "argv",
    [
        ["--rounds", "0"],
        ["--rounds", "x"],
        ["--clients", "0"],
        ["--clients", "20", "--clients-per-round", "21"],
        ["--clients", "5000"],
        ["--bits", "25"],
        ["--epsilon", "-1"],
        ["--epsilon", "nan"],
        ["--delta", "1"],
        ["--seed", "-1"],
        ["--clip", "0"],
    ],
)
def test_bad_arguments_exit_with_an_argparse_error(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--no-progress", *argv])
    assert exc.value.code == 2
    assert "error" in capsys.readouterr().err


def test_missing_dependency_message(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "sklearn", None)  # makes `import sklearn` raise ImportError
    assert main(["demo", "--rounds", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "scikit-learn" in err and 'pip install "dprec[demo]"' in err


def test_quick_sets_fewer_rounds_and_sparser_evaluation():
    import argparse

    p = argparse.ArgumentParser()
    demo.add_arguments(p)
    quick = demo.config_from_args(p.parse_args(["--quick"]))
    full = demo.config_from_args(p.parse_args([]))
    assert quick.rounds == demo.QUICK_ROUNDS < full.rounds == demo.DEFAULT_ROUNDS
    assert quick.eval_every == demo.QUICK_EVAL_EVERY > full.eval_every
    assert demo.config_from_args(p.parse_args(["--quick", "--rounds", "7"])).rounds == 7


# --------------------------------------------------------------------------- a few rounds of the real thing


def _needs_demo_deps() -> None:
    for module in ("torch", "sklearn", "scipy", "matplotlib"):
        pytest.importorskip(module)


def _table_rows(text: str) -> dict[str, list[str]]:
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) == 4 and cells[0] in demo.METHODS:
            rows[cells[0]] = cells[1].split() + cells[2].split() + cells[3].split()
    return rows


def test_demo_runs_a_few_rounds(tmp_path, capsys):
    _needs_demo_deps()
    import torch

    from dprec.codec import DPRECCodec

    png, js = tmp_path / "acc.png", tmp_path / "out.json"
    argv = ["demo", "--rounds", "3", "--clients", "20", "--clients-per-round", "5", "--epsilon", "6",
            "--no-progress", "--plot", str(png), "--json", str(js)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    rows = _table_rows(out)
    assert list(rows) == ["FedAvg", "DP-FedAvg", "DP-REC"]
    # columns: final acc, best acc, epsilon, delta, bytes, compression
    assert rows["FedAvg"][2] == "inf" and rows["FedAvg"][3] == "-"
    assert rows["DP-FedAvg"][2] == rows["DP-REC"][2] == "6.000"
    delta = f"{20 ** -1.1:.3g}"
    assert rows["DP-FedAvg"][3] == rows["DP-REC"][3] == delta
    assert rows["FedAvg"][4] == rows["DP-FedAvg"][4] == "9,640"  # 2,410 float32 parameters

    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    template = {k: v for k, v in model.state_dict().items()}
    msg_bytes = DPRECCodec(sigma=1.0, bits=7).layout(template).message_nbytes
    assert rows["DP-REC"][4] == str(msg_bytes)
    assert rows["DP-REC"][5] == f"{9640 / msg_bytes:.1f}x"
    for name in demo.METHODS:
        final, best = (float(x.rstrip("%")) for x in rows[name][:2])
        assert 0.0 <= final <= best <= 100.0
    assert "c = " in out and "sigma = C/c" in out and "z = " in out

    data = json.loads(js.read_text())
    methods = {m["name"]: m for m in data["methods"]}
    assert methods["FedAvg"]["epsilon"] == "inf"
    eps_fed, eps_rec = methods["DP-FedAvg"]["epsilon"], methods["DP-REC"]["epsilon"]
    assert math.isfinite(eps_fed) and math.isfinite(eps_rec)
    assert eps_fed == pytest.approx(6.0, rel=1e-6) and eps_rec == pytest.approx(6.0, rel=1e-6)
    assert methods["DP-REC"]["bytes_per_client_round"] == msg_bytes
    assert data["eval_rounds"] == [0, 1, 2, 3]
    assert all(len(v) == 4 for v in data["accuracy"].values())
    assert data["epsilon_history"][0] == 0.0 and data["epsilon_history"][-1] == pytest.approx(eps_rec)
    assert data["num_params"] == 2410 and data["num_tensors"] == 4
    assert data["sigma"] == pytest.approx(data["config"]["clip"] / data["clip_multiplier"])
    assert sum(data["client_sizes"]) == data["train_size"] == demo.TRAIN_SIZE

    blob = png.read_bytes()
    assert blob.startswith(PNG_SIGNATURE)
    assert 5_000 < len(blob) < 2_000_000


class _FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_and_same_start_for_all_methods():
    _needs_demo_deps()
    pytest.importorskip("tqdm")
    stream = _FakeTerminal()
    cfg = demo.DemoConfig(rounds=2, clients=10, clients_per_round=3, eval_every=1, progress=True)
    result = demo.run_demo(cfg, progress_stream=stream)
    assert "dprec demo" in stream.getvalue()
    # Round 0 is the common initial model: the same accuracy for every method.
    assert len({result.accuracy[m][0] for m in demo.METHODS}) == 1
    assert result.eval_rounds == [0, 1, 2]
    assert result.method("DP-REC").epsilon == pytest.approx(cfg.epsilon, rel=1e-6)
