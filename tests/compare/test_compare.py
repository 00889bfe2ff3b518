"""``dprec compare`` / ``dprec demo``: every mechanism trains, calibrations meet their accountants, output round-trips."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

pytest.importorskip("scipy")
pytest.importorskip("sklearn")

from dprec.compare import CompareConfig, CompareResult, cli, compare, format_table, mechanisms, run_compare  # noqa: E402
from dprec.compare.runner import calibrate_plans  # noqa: E402

TARGET = 6.0


@pytest.fixture(scope="module")
def digits_result() -> CompareResult:
    # Every mechanism, a few rounds, two runs: the whole code path of each (calibration, client, server).
    return run_compare(CompareConfig(federations=("digits",), runs=2, rounds=3, eval_every=1, workers=1))


@pytest.fixture(scope="module")
def synthetic_result() -> CompareResult:
    return run_compare(CompareConfig(federations=("synthetic",), runs=1, rounds=2, clients=400, clients_per_round=20,
                                     workers=2))


def test_every_mechanism_trains(digits_result: CompareResult) -> None:
    fed = digits_result.federations[0]
    trained = {p.mechanism for p in fed.plans}
    assert trained == set(mechanisms.MECHANISMS) - set(mechanisms.OPT_IN_MECHANISMS)  # the Flower rows: by name
    for plan in fed.plans:
        assert [r.run for r in plan.runs] == [0, 1]
        for run in plan.runs:
            assert run.eval_rounds == [0, 1, 2, 3]
            assert all(0.0 <= a <= 1.0 for a in run.accuracy)
            assert run.bytes_uploaded[0] == 0 and run.bytes_uploaded[-1] == run.total_bytes
            assert np.all(np.diff(run.bytes_uploaded) >= 0)
            assert run.message_bytes > 0
    by = {p.mechanism: p for p in fed.plans}
    assert by["dp-rec"].runs[0].message_bytes == 37  # 4 tensors x 7 bits + header
    assert by["fedavg"].runs[0].message_bytes == 4 * fed.dim
    assert by["ddg-sketch"].runs[0].message_bytes < by["ddg"].runs[0].message_bytes


def test_synthetic_federation_trains_with_processes(synthetic_result: CompareResult) -> None:
    fed = synthetic_result.federations[0]
    assert fed.num_clients == 400 and fed.rounds == 2
    # Two tensors x 7 bits: Algorithm 7's overhead 12 rho / 2^b exceeds delta, so the reproduction cannot calibrate.
    assert {p.mechanism for p in fed.plans} == set(mechanisms.MECHANISMS) - {"dp-rec-paper", *mechanisms.OPT_IN_MECHANISMS}
    assert all(len(p.runs) == 1 for p in fed.plans)
    paper = [r for r in fed.rows if r.mechanism == "dp-rec-paper"]
    assert paper and all(r.plan == -1 and math.isinf(r.epsilon) and "paper" in r.reason for r in paper)
    assert "DP-REC, paper's Alg. 7" in format_table(synthetic_result)


def test_sampling_is_secret_and_paired() -> None:
    # The client sampling (which amplification relies on) is drawn from a per-run secret: FedAvg (no private
    # randomness) reproduces exactly given the secret, and two comparisons with the same seed draw differently.
    from dprec.compare import runner  # noqa: PLC0415

    cfg = CompareConfig(federations=("digits",), mechanisms=("fedavg",), runs=1, rounds=6, eval_every=1, workers=1)
    a, b = (runner.train(cfg, "digits", "fedavg", {}, 0, secret=12345) for _ in range(2))
    c = runner.train(cfg, "digits", "fedavg", {}, 0, secret=54321)
    assert a.accuracy == b.accuracy and a.bytes_uploaded == b.bytes_uploaded and a.accuracy != c.accuracy
    # Two comparisons draw different secrets: six rounds' accuracies and upload counts all equal would be a
    # coincidence of probability far below 1e-6.
    first, second = (run_compare(cfg).federations[0].plans[0].runs[0] for _ in range(2))
    assert (first.accuracy, first.bytes_uploaded) != (second.accuracy, second.bytes_uploaded)


def _independent_epsilon(fed, plan, tm: str) -> float:
    """The accountant's epsilon at the calibrated parameters, computed here from the public accounting API."""
    from dprec.accounting import (  # noqa: PLC0415
        dprec_epsilon,
        joint_noise_guarantee,
        sampled_gaussian_epsilon,
    )
    from dprec.accounting.qmgeo import qmgeo_rdp  # noqa: PLC0415
    from dprec.accounting.rdp import DEFAULT_ORDERS, rdp_to_epsilon  # noqa: PLC0415

    n, b, t, delta = fed.num_clients, fed.clients_per_round, fed.rounds, fed.delta
    q = b / n
    p = plan.params
    key = plan.mechanism.removesuffix("-flower")  # Flower's SecAgg+ rows: the same mechanism and accounting
    if key == "dp-fedavg":
        return sampled_gaussian_epsilon(p["z"], q, t, delta, threat_model=tm, relation="zero").epsilon
    if key in ("dp-rec", "dp-rec-wr"):
        sampling = "poisson" if key == "dp-rec" else "with_replacement"
        return dprec_epsilon(rounds=t, clients_per_round=b, num_clients=n, clip_multiplier=p["c"], delta=delta,
                             bits=28, groups=4, sampling=sampling, threat_model=tm, relation="zero").epsilon
    if key == "local-gaussian":
        return dprec_epsilon(rounds=t, clients_per_round=b, num_clients=n, clip_multiplier=p["c"], delta=delta,
                             bits=None, sampling="poisson", threat_model=tm, relation="zero").epsilon
    if key in ("ddg", "ddg-sketch", "skellam", "skellam-sketch"):
        from dprec.secagg import DDGPipeline, SkellamPipeline  # noqa: PLC0415

        cls = DDGPipeline if key.startswith("ddg") else SkellamPipeline
        sketch = (1, math.ceil(fed.dim / 4)) if key.endswith("sketch") else None
        pipe = cls(fed.dim, clip=1.0, bits=18, num_clients=b, seed=0, noise_stddev=p["noise_stddev"], delta=delta,
                   steps=t, sampling_rate=q, sketch=sketch)
        return pipe.epsilon(threat_model=tm, relation="zero")  # central amplified; messages/server: participation
    if key == "qmgeo":
        a = np.asarray(DEFAULT_ORDERS, dtype=float)
        per_message = qmgeo_rdp(a, 2, 1.0, dim=fed.dim, inputs=[-1.0, 1.0], w_max=p["ratio"])
        # The attributed Poisson mixture, written out: a client that is not drawn sends nothing.
        per_round = np.logaddexp(math.log1p(-q), math.log(q) + (a - 1.0) * per_message) / (a - 1.0)
        return rdp_to_epsilon(a, t * per_round, delta, method="balle")[0]
    if key == "joint-noise":
        from dprec.compare.mechanisms import JointNoise  # noqa: PLC0415

        setting = _setting_of(fed)
        q_e, steps = JointNoise()._steps(setting)
        return joint_noise_guarantee(p["sigma_total"], q_e, delta, local_steps=steps, rounds=t, threat_model=tm,
                                     relation="zero", conversion="rdp-balle").epsilon
    raise AssertionError(key)


_SETTINGS: dict = {}


def _setting_of(fed):
    return _SETTINGS[fed.name]


def test_calibration_meets_each_accountant(digits_result: CompareResult) -> None:
    from dprec.compare import runner  # noqa: PLC0415

    cfg = digits_result.config
    fed = digits_result.federations[0]
    feder = runner._cached_federation("digits", 100, cfg.alpha, cfg.seed)
    _SETTINGS["digits"] = runner._setting(cfg, "digits", feder)
    checked = 0
    for row in fed.rows:
        plan = fed.plans[row.plan]
        if not row.calibrated or row.mechanism == "fedavg":
            continue
        eps = _independent_epsilon(fed, plan, row.threat_model)
        assert TARGET * 0.99 <= eps <= TARGET, (row.mechanism, row.threat_model, eps)
        assert row.epsilon == pytest.approx(eps, rel=1e-9)
        checked += 1
    assert checked >= 25  # 10 mechanisms with a calibration, most against all three observers


def test_rows_state_whom_they_protect_against(digits_result: CompareResult) -> None:
    rows = {(r.threat_model, r.mechanism): r for r in digits_result.federations[0].rows}
    assert rows[("central", "dp-fedavg")].calibrated
    for tm in ("messages", "server"):
        r = rows[(tm, "dp-fedavg")]
        assert math.isinf(r.epsilon) and not r.calibrated and r.reason
    # DP-REC's messages as sent (7 bits per tensor) cannot pay REC's total-variation cost centrally, so its central
    # guarantee is the message observer's bound (post-processing): one calibration for all three observers.
    central = rows[("central", "dp-rec")]
    assert central.calibrated and central.epsilon == rows[("messages", "dp-rec")].epsilon
    # DDG against the central observer is amplified by the hidden sample; against the server it is not.
    plans = digits_result.federations[0].plans
    assert plans[rows[("central", "ddg")].plan].params["noise_stddev"] < \
        plans[rows[("server", "ddg")].plan].params["noise_stddev"]
    assert rows[("server", "dp-rec")].calibrated and rows[("server", "dp-rec")].local_epsilon > 0
    for tm in ("central", "messages", "server"):
        assert rows[(tm, "joint-noise")].unit == "example"
        assert math.isinf(rows[(tm, "fedavg")].epsilon)
        paper = rows[(tm, "dp-rec-paper")]
        assert paper.reproduction and not paper.calibrated and "Algorithm 7" in (paper.note or "")
    # The paper's accounting allows a much larger c than the sound bound against the server.
    assert plans[rows[("server", "dp-rec-paper")].plan].params["c"] > plans[rows[("server", "dp-rec-wr")].plan].params["c"]


def test_json_round_trips(digits_result: CompareResult, tmp_path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps(digits_result.as_dict()))
    back = CompareResult.from_dict(json.loads(path.read_text()))
    assert back == digits_result
    assert format_table(back) == format_table(digits_result)


def test_plots_are_written(digits_result: CompareResult, synthetic_result: CompareResult, tmp_path) -> None:
    pytest.importorskip("matplotlib")
    from dprec.compare import write_plots  # noqa: PLC0415

    for res in (digits_result, synthetic_result):
        paths = write_plots(res, str(tmp_path / "cmp.png"))
        assert len(paths) == 1
        with open(paths[0], "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_table_groups_by_threat_model(digits_result: CompareResult) -> None:
    text = format_table(digits_result, trust=True)
    for heading in ("-- against central", "-- against messages", "-- against server"):
        assert heading in text
    assert "trust:" in text and "rule:" in text and "inf" in text


def test_cli_compare_and_load(tmp_path, capsys) -> None:
    js = tmp_path / "out.json"
    code = cli.main(["--federation", "digits", "--mechanism", "fedavg", "dp-rec", "--threat-model", "server",
                     "--rounds", "2", "--runs", "1", "--no-progress", "--json", str(js), "--workers", "1"])
    assert code == 0
    out = capsys.readouterr().out
    assert "-- against server" in out and "-- against central" not in out and js.exists()
    data = json.loads(js.read_text())
    assert data["config"]["mechanisms"] == ["fedavg", "dp-rec"] and data["config"]["rounds"] == 2
    assert cli.main(["--load", str(js)]) == 0
    assert "DP-REC" in capsys.readouterr().out


def test_cli_demo_preset(capsys) -> None:
    from dprec.compare import demo  # noqa: PLC0415

    assert demo.main(["--quick", "--rounds", "2", "--runs", "1", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "trust:" in out and "DP-REC sends 37 bytes" in out


@pytest.mark.parametrize(
    "settings, name",
    [
        (dict(federations=("mnist",)), "federations"),
        (dict(mechanisms=("dp-sgd",)), "mechanisms"),
        (dict(threat_models=("everyone",)), "threat_models"),
        (dict(epsilon=-1.0), "epsilon"),
        (dict(delta=1.5), "delta"),
        (dict(runs=0), "runs"),
        (dict(clients=10, clients_per_round=20), "clients_per_round"),
        (dict(seed=-1), "seed"),
        (dict(federations=("synthetic",), clients=10**7, clients_per_round=10), "clients"),  # memory: capped
        (dict(federations=("digits",), clients=5000), "clients"),  # more clients than training images
        (dict(rounds=10**9), "rounds"),
        (dict(runs=10**6), "runs"),
    ],
)
def test_bad_config_names_the_setting(settings, name) -> None:
    with pytest.raises((ValueError, TypeError), match=name):
        CompareConfig(**settings).validate()


def test_compare_rejects_unknown_keyword() -> None:
    with pytest.raises(TypeError, match="rounds_per_client"):
        compare(rounds_per_client=3)


def test_secagg_round_sums_exactly_b_noise_shares() -> None:
    # Fewer participants than B: idle clients top up with noise-only messages; more: only B shares.
    cfg = CompareConfig(federations=("digits",), mechanisms=("ddg",), runs=1, rounds=1, workers=1)
    from dprec.compare import runner  # noqa: PLC0415

    fed = runner._cached_federation("digits", 100, cfg.alpha, cfg.seed)
    setting = runner._setting(cfg, "digits", fed)
    mech = mechanisms.SecAggNoise("ddg", sketch=False)
    params = mech.calibrate(setting, "server")
    w = fed.model.init_params(np.random.default_rng(0))
    ctx = mechanisms.RoundContext(np.random.default_rng(), np.random.default_rng(1), 0.1)

    def clients(k: int) -> list:
        return [mechanisms.Client(i, fed.x_train[fed.clients[i]], fed.y_train[fed.clients[i]],
                                  np.random.default_rng(i)) for i in range(k)]

    few = mech.round(setting, params, fed.model, w, clients(3), ctx)
    many = mech.round(setting, params, fed.model, w, clients(14), ctx)
    none = mech.round(setting, params, fed.model, w, [], ctx)
    assert few.messages == setting.clients_per_round and many.messages == 14
    # Nobody drawn: the noise-only sum is released all the same (the model must not reveal that k = 0).
    assert none.update is not None and none.messages == setting.clients_per_round


@pytest.mark.parametrize("kind", ["ddg", "skellam"])
def test_flower_secagg_rows_equal_the_simulator_rows_for_the_same_seeds(kind) -> None:
    """The ``-flower`` rows sum the clients' words with Flower's SecAgg+ protocol (in process): with the same
    public and private seeds, a round's update is the simulator row's, bit for bit."""
    pytest.importorskip("flwr")
    from dprec.compare import runner  # noqa: PLC0415

    cfg = CompareConfig(federations=("digits",), mechanisms=(kind,), runs=1, rounds=1, workers=1)
    fed = runner._cached_federation("digits", 100, cfg.alpha, cfg.seed)
    setting = runner._setting(cfg, "digits", fed)
    simulator = mechanisms.SecAggNoise(kind, sketch=False)
    flower = mechanisms.SecAggNoise(kind, sketch=False, transport="flower")
    assert flower.key == f"{kind}-flower" and "Flower SecAgg+" in flower.label
    params = simulator.calibrate(setting, "server")
    assert flower.calibrate(setting, "server") == params
    w = fed.model.init_params(np.random.default_rng(0))
    outs = []
    for mech in (simulator, flower):
        # Fresh clients and contexts: the same seeds for both rows (local training draws from each client's rng).
        clients = [mechanisms.Client(i, fed.x_train[fed.clients[i]], fed.y_train[fed.clients[i]],
                                     np.random.default_rng(i)) for i in range(6)]
        ctx = mechanisms.RoundContext(np.random.default_rng(7), np.random.default_rng(8), 0.1)
        outs.append(mech.round(setting, params, fed.model, w, clients, ctx))
    assert outs[0].update.keys() == outs[1].update.keys()
    for name in outs[0].update:
        np.testing.assert_array_equal(outs[0].update[name], outs[1].update[name])
    assert outs[0].messages == outs[1].messages
    with pytest.raises(ValueError, match="transport"):
        mechanisms.SecAggNoise(kind, sketch=False, transport="grpc")


def test_flower_rows_run_when_named_and_train() -> None:
    pytest.importorskip("flwr")
    res = run_compare(CompareConfig(federations=("digits",), mechanisms=("ddg", "ddg-flower"), runs=1, rounds=2,
                                    eval_every=1, workers=1, threat_models=("server",)))
    by = {p.mechanism: p for p in res.federations[0].plans}
    assert set(by) == {"ddg", "ddg-flower"}
    assert by["ddg"].params == by["ddg-flower"].params  # one calibration: the same mechanism
    assert by["ddg-flower"].runs[0].message_bytes == by["ddg"].runs[0].message_bytes


def test_calibrate_plans_dedupes_identical_parameters() -> None:
    from dprec.compare import runner  # noqa: PLC0415

    cfg = CompareConfig(federations=("digits",), rounds=5)
    fed = runner._cached_federation("digits", 100, cfg.alpha, cfg.seed)
    setting = runner._setting(cfg, "digits", fed)
    plans, where, why = calibrate_plans(setting, ("skellam", "dp-fedavg"), ("central", "messages", "server"))
    assert len(plans) == 3
    assert plans[0].params["noise_stddev"] < plans[1].params["noise_stddev"]
    # Skellam: the central observer is amplified (the sample hidden); messages and server share one calibration.
    assert plans[0].calibrated_for == ["central"] and plans[1].calibrated_for == ["messages", "server"]
    assert plans[2].calibrated_for == ["central"] and where[("dp-fedavg", "server")] is None
    assert "server" in why[("dp-fedavg", "server")] or "aggregation" in why[("dp-fedavg", "server")]


def test_unreachable_target_skips_training_instead_of_crashing() -> None:
    # Nothing reaches epsilon 1e-3 in 3 rounds of DDG at these bits, and DP-REC has no c for 1e5: reported, not run.
    res = run_compare(CompareConfig(federations=("digits",), mechanisms=("fedavg", "ddg", "dp-rec"), epsilon=1e-3,
                                    runs=1, rounds=3, workers=1))
    fed = res.federations[0]
    trained = {p.mechanism for p in fed.plans if p.runs}
    assert "fedavg" in trained
    for row in fed.rows:
        if row.mechanism != "fedavg" and not row.calibrated:
            assert row.reason


def test_sampled_gaussian_calibrate_is_tight_and_safe() -> None:
    from dprec.accounting import sampled_gaussian_calibrate, sampled_gaussian_epsilon  # noqa: PLC0415

    for conversion in ("rdp-mironov", "rdp-balle", "auto"):
        z = sampled_gaussian_calibrate(3.0, 0.05, 200, 1e-5, conversion=conversion, rtol=1e-3)
        eps = sampled_gaussian_epsilon(z, 0.05, 200, 1e-5, conversion=conversion).epsilon
        assert 3.0 * 0.999 <= eps <= 3.0
    with pytest.raises(ValueError, match="threat_model"):
        sampled_gaussian_calibrate(3.0, 0.05, 200, 1e-5, threat_model="server")
    with pytest.raises(ValueError, match="target_epsilon"):
        sampled_gaussian_calibrate(-1.0, 0.05, 200, 1e-5)


def test_cli_load_refuses_what_is_not_a_result(tmp_path, capsys) -> None:
    for name, text in (("notjson.json", "not json"), ("wrong.json", '{"config": {}, "federations": 3}'),
                       ("empty.json", "{}")):
        path = tmp_path / name
        path.write_text(text)
        assert cli.main(["--load", str(path)]) == 2
        assert "--load" in capsys.readouterr().err
    assert cli.main(["--load", str(tmp_path / "missing.json")]) == 2
    with pytest.raises(ValueError, match="data"):
        CompareResult.from_dict({"config": {"bogus": 1}, "federations": [], "elapsed_s": 0.0, "machine": ""})
