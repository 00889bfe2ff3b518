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
    # The search runs on a coarser PLD (1e-3) than the reported epsilon (1e-4): equal to about 1e-6.
    assert demo.dp_fedavg_epsilon(z, sampling_rate=0.1, rounds=50, delta=delta) == pytest.approx(4.0, rel=1e-5)
    z_rdp = demo.calibrate_noise_multiplier(4.0, sampling_rate=0.1, rounds=50, delta=delta, conversion="rdp-balle")
    assert z <= z_rdp  # the PLD is the tighter accounting: less noise for the same epsilon
    # Epsilon falls as the noise grows and rises with the rounds.
    assert demo.dp_fedavg_epsilon(1.1 * z, sampling_rate=0.1, rounds=50, delta=delta) < 4.0
    assert demo.dp_fedavg_epsilon(z, sampling_rate=0.1, rounds=60, delta=delta) > 4.0
    with pytest.raises(ValueError, match="target_epsilon"):
        demo.calibrate_noise_multiplier(-1.0, sampling_rate=0.1, rounds=50, delta=delta)


def test_dp_fedavg_epsilon_full_batch_is_the_gaussian_mechanism():
    pytest.importorskip("scipy")
    from dprec.accounting import DEFAULT_ORDERS, rdp_to_epsilon

    # q = 1: RDP a T / (2 z^2); the improved (Balle et al.) conversion when the PLD is not asked for.
    z, t, delta = 2.0, 10, 1e-5
    expected = rdp_to_epsilon(DEFAULT_ORDERS, DEFAULT_ORDERS * t / (2 * z * z), delta, method="balle")[0]
    got = demo.dp_fedavg_epsilon(z, sampling_rate=1.0, rounds=t, delta=delta, conversion="rdp-balle")
    assert got == pytest.approx(expected, rel=1e-12)
    # The default conversion is the tight baseline: the PLD when dp_accounting imports, never above the RDP one.
    g = demo.dp_fedavg_guarantee(z, sampling_rate=1.0, rounds=t, delta=delta)
    from dprec.accounting import pld_available

    assert g.conversion.startswith("pld" if pld_available() else "rdp-balle")
    assert g.epsilon <= expected * (1 + 1e-6)
    assert (g.threat_model, g.relation) == ("central", "add_remove")


@pytest.mark.parametrize("threat_model", ["messages", "server"])
def test_dp_fedavg_has_no_guarantee_against_a_message_observer_or_the_server(threat_model):
    pytest.importorskip("scipy")
    g = demo.dp_fedavg_guarantee(0.8, sampling_rate=0.1, rounds=10, delta=1e-5, threat_model=threat_model,
                                 relation="zero")
    assert math.isinf(g.epsilon) and not g.finite and g.reasons["zero"]
    assert math.isinf(demo.dp_fedavg_epsilon(0.8, sampling_rate=0.1, rounds=10, delta=1e-5, threat_model=threat_model))
    # Calibration for such an observer is refused, naming threat_model and the valid choice.
    with pytest.raises(ValueError, match=r"threat_model='%s'.*threat_model='central'" % threat_model):
        demo.calibrate_noise_multiplier(4.0, sampling_rate=0.1, rounds=10, delta=1e-5, threat_model=threat_model)


def test_dp_fedavg_bad_threat_model_and_relation_are_named():
    pytest.importorskip("scipy")
    with pytest.raises(ValueError, match="threat_model must be one of"):
        demo.dp_fedavg_epsilon(1.0, sampling_rate=0.1, rounds=10, delta=1e-5, threat_model="curious")
    with pytest.raises(ValueError, match="relation must be one of"):
        demo.calibrate_noise_multiplier(4.0, sampling_rate=0.1, rounds=10, delta=1e-5, relation="swap")
    with pytest.raises(ValueError, match="threat_model must be one of"):
        demo.DemoConfig(threat_model="curious").validate()
    with pytest.raises(ValueError, match="relation must be one of"):
        demo.DemoConfig(relation="swap").validate()


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
        ["--threat-model", "curious"],
        ["--relation", "swap"],
        # DP-REC has no add/remove bound under Poisson sampling: refused before any training, naming relation.
        ["--rounds", "1", "--relation", "add_remove"],
    ],
)
def test_bad_arguments_exit_with_an_argparse_error(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--no-progress", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "error" in err
    if "--relation" in argv or "--threat-model" in argv:
        assert "relation" in err or "threat-model" in err or "threat_model" in err


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
    assert (full.threat_model, full.relation) == ("server", "zero")
    central = demo.config_from_args(p.parse_args(["--threat-model", "central", "--relation", "zero"]))
    assert (central.threat_model, central.relation) == ("central", "zero")
    assert "--threat-model" in p.format_help() and "--relation" in p.format_help()


# --------------------------------------------------------------------------- a few rounds of the real thing


def _needs_demo_deps() -> None:
    for module in ("torch", "sklearn", "scipy", "matplotlib"):
        pytest.importorskip(module)


def _table_rows(text: str) -> dict[str, list[str]]:
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) == 5 and cells[0] in demo.METHODS:
            rows[cells[0]] = cells[1].split() + cells[2].split() + cells[3].split() + [cells[4]]
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
    # columns: final acc, best acc, epsilon, delta, bytes, compression, conversion
    assert rows["FedAvg"][2] == "inf" and rows["FedAvg"][3] == "-"
    # The default observer is the server: DP-REC at the target, DP-FedAvg without a guarantee (inf), its
    # central epsilon (the one its noise is calibrated for) a labelled reference line.
    assert rows["DP-REC"][2] == "6.000" and rows["DP-FedAvg"][2] == "inf"
    assert "against the 'server' observer" in out and "relation 'zero'" in out
    assert "reference only: DP-FedAvg's epsilon against the 'central' observer" in out
    ref_line = next(line for line in out.splitlines() if line.startswith("reference only"))
    assert ref_line.endswith(": 6.000")
    from dprec.accounting import pld_available

    assert rows["DP-FedAvg"][6] == ("pld" if pld_available() else "rdp-balle")
    assert rows["DP-REC"][6] == "rdp-balle, both tails" and rows["FedAvg"][6] == "-"
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
    assert eps_fed == "inf" and math.isfinite(eps_rec) and eps_rec == pytest.approx(6.0, rel=1e-6)
    assert data["dp_fedavg_central_epsilon"] == pytest.approx(6.0, rel=1e-5)
    for name in ("DP-FedAvg", "DP-REC"):
        assert (methods[name]["threat_model"], methods[name]["relation"]) == ("server", "zero")
    assert "holds the unnoised sum" in methods["DP-FedAvg"]["reason"] and methods["DP-REC"]["reason"] is None
    assert data["config"]["threat_model"] == "server" and data["config"]["relation"] == "zero"
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
    cfg = demo.DemoConfig(rounds=2, clients=20, clients_per_round=5, epsilon=6.0, eval_every=1, progress=True)
    result = demo.run_demo(cfg, progress_stream=stream)
    assert "dprec demo" in stream.getvalue()
    # Round 0 is the common initial model: the same accuracy for every method.
    assert len({result.accuracy[m][0] for m in demo.METHODS}) == 1
    assert result.eval_rounds == [0, 1, 2]
    assert result.method("DP-REC").epsilon == pytest.approx(cfg.epsilon, rel=1e-6)


def test_demo_against_the_server_reports_dp_fedavg_as_inf_with_the_reason():
    # DP-FedAvg's server adds the noise to raw updates: no guarantee against it. The table says inf, the
    # reason is printed, and DP-FedAvg still runs with the central calibration (said in a note).
    _needs_demo_deps()
    cfg = demo.DemoConfig(rounds=1, clients=20, clients_per_round=5, epsilon=6.0, eval_every=1, progress=False,
                          threat_model="server", relation="zero")
    result = demo.run_demo(cfg)
    dpf, dpr = result.method("DP-FedAvg"), result.method("DP-REC")
    assert math.isinf(dpf.epsilon) and dpf.threat_model == "server" and "holds the unnoised sum" in dpf.reason
    assert dpr.epsilon == pytest.approx(cfg.epsilon, rel=1e-6) and dpr.threat_model == "server"
    assert result.noise_multiplier == pytest.approx(
        demo.calibrate_noise_multiplier(cfg.epsilon, sampling_rate=0.25, rounds=1, delta=cfg.target_delta,
                                        relation="zero"), rel=1e-9)
    assert result.dp_fedavg_central_epsilon == pytest.approx(cfg.epsilon, rel=1e-5)
    text = demo.format_report(result)
    rows = _table_rows(text)
    assert rows["DP-FedAvg"][2] == "inf" and rows["DP-REC"][2] == f"{cfg.epsilon:.3f}"
    assert "against the 'server' observer" in text
    assert "DP-FedAvg: inf, no guarantee against the 'server' observer: the server adds the noise" in text
    assert "calibrated for epsilon 6 against the 'central' observer" in text
    assert "reference only: DP-FedAvg's epsilon against the 'central' observer" in text
    assert result.as_dict()["methods"][1]["epsilon"] == "inf"


@pytest.mark.parametrize("bits", [7, 22])
def test_demo_against_the_central_observer_names_the_bits_it_needs(bits, capsys):
    # 3 rounds x 5 clients x 4 tensors x 12 (1 + e^6) / 2^b < 20^-1.1 needs b >= 23: refused before any
    # training (no traceback, exit code 2), naming --bits, the bits needed and the alternative.
    _needs_demo_deps()
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--no-progress", "--rounds", "3", "--clients", "20", "--clients-per-round", "5",
              "--epsilon", "6", "--threat-model", "central", "--bits", str(bits)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"--bits {bits} (4 tensors x {bits} bits)" in err and "at least --bits 23 per tensor" in err
    assert "--threat-model server" in err and "Traceback" not in err
    # The necessary condition, computed: 12 x 60 x (1 + e^6) / 20^-1.1 between 2^22 and 2^23.
    assert 2**22 < 12 * 60 * (1 + math.exp(6)) / 20**-1.1 < 2**23


def test_demo_central_beyond_24_bits_says_so_and_the_central_calibration_when_bits_suffice():
    _needs_demo_deps()
    cfg = demo.DemoConfig(rounds=300, clients=100, clients_per_round=10, epsilon=16.0, threat_model="central")
    with pytest.raises(ValueError, match=r"--bits 7 .*more than the 24 --bits allows.*--threat-model server"):
        demo.run_demo(cfg)
    # Enough bits for the necessary condition: DP-REC calibrated against the central observer (REC's
    # total-variation cost paid), DP-FedAvg too, both finite at the target; no reference line.
    cfg = demo.DemoConfig(rounds=1, clients=20, clients_per_round=5, epsilon=2.0, bits=20, eval_every=1,
                          progress=False, threat_model="central")
    result = demo.run_demo(cfg)
    dpf, dpr = result.method("DP-FedAvg"), result.method("DP-REC")
    assert dpr.threat_model == dpf.threat_model == "central"
    assert dpr.epsilon == pytest.approx(2.0, rel=1e-6) and dpf.epsilon == pytest.approx(2.0, rel=1e-5)
    assert result.dp_fedavg_central_epsilon is None and "reference only" not in demo.format_report(result)
