"""dprec.audit: the empirical lower bound never exceeds the claimed epsilon; it has power on broken
variants; the CLI; bad input.

The mechanisms' own randomness (DP-REC's seeds and Gumbel noise, SecAgg rounding and noise, QMGeo's
seeds, DP-FedAvg's noise) comes from the OS entropy source, as in the product: ``seed`` fixes only
the audit's driver, so these tests are statistical, not bit-deterministic. Confidence and
multiple-testing correction: each group of k audits below must all hold together with probability
at least 1 - ALPHA (ALPHA = 1e-3), so every audit runs at confidence 1 - ALPHA / k (Bonferroni).
If the accounting is sound, a soundness test fails with probability at most 1e-3; the power tests
use settings whose lower bound clears the claim by about 1 (in epsilon) at that confidence.
"""

from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("scipy")

from dprec import audit as audit_mod  # noqa: E402
from dprec.__main__ import main  # noqa: E402
from dprec.audit import AuditResult, audit  # noqa: E402

ALPHA = 1e-3

# (mechanism, threat_model, relation, keyword arguments): the real mechanisms.
SOUND = [
    ("dprec", "server", "zero", dict(trials=10000)),
    ("dprec", "messages", "zero", dict(trials=3000)),
    ("dprec", "central", "zero", dict(trials=3000)),
    ("gaussian", "central", "add_remove", dict(trials=20000)),
    ("gaussian", "central", "zero", dict(trials=20000)),
    ("ddg", "central", "zero", dict(trials=600)),
    ("ddg", "server", "zero", dict(trials=600)),
    ("skellam", "messages", "zero", dict(trials=600)),
    ("qmgeo", "server", "zero", dict(trials=20000)),
    ("qmgeo", "messages", "zero", dict(trials=10000)),
    ("qmgeo", "central", "zero", dict(trials=10000)),
]

# Test-only broken variants: noise divided by 4, DP-REC's Gumbel noise from the public seed.
BROKEN = [
    ("dprec", "server", "noise/4", dict(trials=20000, clip_multiplier=0.7)),
    ("dprec", "server", "public-gumbel", dict(trials=10000, clip_multiplier=0.5)),
    ("dprec", "messages", "public-gumbel", dict(trials=5000, clip_multiplier=0.5)),
    ("gaussian", "central", "noise/4", dict(trials=20000, clip_multiplier=1.0)),
    ("ddg", "central", "noise/4", dict(trials=10000, clip_multiplier=0.7, num_clients=1)),
    ("skellam", "server", "noise/4", dict(trials=10000, clip_multiplier=0.7, num_clients=1)),
]


@pytest.mark.parametrize("mechanism,threat_model,relation,kw", SOUND, ids=lambda v: str(v))
def test_lower_bound_below_claim(mechanism, threat_model, relation, kw):
    r = audit(mechanism, threat_model=threat_model, relation=relation, seed=11, progress=False,
              confidence=1.0 - ALPHA / len(SOUND), **kw)
    assert isinstance(r, AuditResult)
    assert r.threat_model == threat_model and r.relation == relation and r.mechanism == mechanism
    assert 0.0 <= r.epsilon_lower <= r.epsilon_claimed <= r.epsilon_accounted, r.summary()
    if math.isfinite(r.epsilon_accounted):
        assert r.epsilon_lower <= r.epsilon_accounted, r.summary()
    if mechanism == "dprec":
        # REC's messages as sent are bounded against the server and a message observer at 7 bits; a central
        # observer cannot be charged REC's total-variation cost at 7 bits, so the message bound holds there.
        assert math.isfinite(r.epsilon_accounted), r.summary()
    assert r.consistent and r.broken is None
    assert 0.0 <= r.fpr <= r.fpr_upper <= 1.0 and 0.0 <= r.fnr <= r.fnr_upper <= 1.0


@pytest.mark.parametrize("mechanism,threat_model,broken,kw", BROKEN, ids=lambda v: str(v))
def test_power_on_broken_variants(mechanism, threat_model, broken, kw):
    r = audit(mechanism, threat_model=threat_model, seed=5, progress=False, _broken=broken,
              confidence=1.0 - ALPHA / len(BROKEN), **kw)
    assert r.broken == broken
    assert r.epsilon_lower > r.epsilon_claimed, r.summary()
    assert not r.consistent and "VIOLATION" in r.summary()


def test_dprec_accounting_reports_the_overhead():
    # Against the server (default): REC's message with K = 2**7 candidates bounded as sent, finite and
    # above the Gaussian variant's epsilon (the claim, a reference).
    r = audit("dprec", trials=400, seed=1, progress=False)
    assert math.isfinite(r.epsilon_accounted) and 0 < r.epsilon_claimed < r.epsilon_accounted < 10
    assert "as sent" in r.accounted_note and "bits=None" in r.accounted_note
    json.dumps(r.to_dict())
    assert r.params["candidates"] == 128 and r.params["dim"] == 16
    # Against a central observer: REC's total-variation cost 12 e^{c^2} / 2^7 per message exceeds delta, so the
    # accounted epsilon is the message observer's bound (post-processing); the claim is the Gaussian variant's.
    r = audit("dprec", threat_model="central", trials=400, seed=1, progress=False)
    m = audit("dprec", threat_model="messages", trials=400, seed=1, progress=False)
    assert r.epsilon_accounted == m.epsilon_accounted < float("inf") and 0 < r.epsilon_claimed < 10
    assert "post-processing" in r.accounted_note
    json.dumps(r.to_dict())


@pytest.mark.parametrize("threat_model", ["messages", "central"])
def test_dprec_audit_of_one_client_against_every_observer(threat_model):
    # One client: its one message as the server sees it bounds the other observers (post-processing);
    # this raised a ValueError (the local bound is defined for the server only).
    r = audit("dprec", threat_model=threat_model, num_clients=1, trials=400, seed=1, progress=False)
    s = audit("dprec", threat_model="server", num_clients=1, trials=400, seed=1, progress=False)
    assert r.epsilon_accounted == s.epsilon_accounted < float("inf")


def test_lower_bound_statistics():
    import numpy as np

    rng = np.random.default_rng(0)
    # Identical distributions: no evidence.
    s = rng.normal(size=4000)
    out = audit_mod._lower_bound(s[:2000], s[2000:], delta=1e-5, alpha=0.05, rng=rng)
    assert out["epsilon_lower"] < 0.5
    # Perfectly separated: bounded by the trial count, log((1 - delta - u) / u).
    out = audit_mod._lower_bound(np.zeros(2000), np.ones(2000), delta=1e-5, alpha=0.05, rng=rng)
    u = audit_mod.clopper_pearson_upper(0, 1000, 0.025)
    assert out["epsilon_lower"] == pytest.approx(np.log((1 - 1e-5 - u) / u))
    assert audit_mod.clopper_pearson_upper(0, 1000, 0.05) == pytest.approx(1 - 0.05 ** (1 / 1000))


def test_cli_json(capsys):
    # At confidence 0.999 the lower bound exceeds a sound claim with probability <= 1e-3 (the mechanism's
    # randomness is the OS's, so this test is statistical, like test_lower_bound_below_claim).
    assert main(["audit", "--mechanism", "qmgeo", "--trials", "2000", "--seed", "3", "--confidence", "0.999",
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["mechanism"] == "qmgeo" and d["threat_model"] == "server" and d["relation"] == "zero"
    assert d["trials"] == 2000 and d["confidence"] == 0.999 and isinstance(d["epsilon_claimed"], float)
    assert d["epsilon_lower"] <= d["epsilon_claimed"]
    assert {"fpr", "fnr", "threshold", "confidence", "delta", "statistic", "params"} <= set(d)


def test_cli_text(capsys):
    assert main(["audit", "--mechanism", "gaussian", "--threat-model", "central", "--relation", "add_remove",
                 "--trials", "2000", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "epsilon lower bound" in out and "accounted epsilon" in out


def test_cli_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["audit", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for word in ("server", "messages", "central", "--threat-model", "--relation", "--trials", "--json", "--delta",
                 "zero", "add_remove", "Clopper-Pearson"):
        assert word in out
    assert "_broken" not in out and "public-gumbel" not in out


@pytest.mark.parametrize(
    "args,kw,names",
    [
        (("laplace",), {}, ["mechanism", "dprec", "qmgeo"]),
        (("dprec",), dict(threat_model="shuffler"), ["threat_model", "central", "messages", "server"]),
        (("dprec",), dict(relation="swap"), ["relation", "add_remove", "zero"]),
        (("gaussian",), dict(threat_model="server"), ["threat_model", "central"]),
        (("gaussian",), dict(threat_model="messages"), ["threat_model", "central"]),
        (("dprec",), dict(relation="add_remove"), ["relation", "zero"]),
        (("qmgeo",), dict(relation="add_remove"), ["relation", "zero"]),
        (("dprec",), dict(trials=10), ["trials"]),
        (("dprec",), dict(delta=0.0), ["delta"]),
        (("dprec",), dict(confidence=1.0), ["confidence"]),
        (("dprec",), dict(clip_multiplier=-1.0), ["clip_multiplier"]),
        (("gaussian",), dict(threat_model="central", bits=7), ["bits"]),
        (("dprec",), dict(_broken="noise/2"), ["_broken"]),
    ],
)
def test_bad_input(args, kw, names):
    with pytest.raises(ValueError) as e:
        audit(*args, progress=False, **kw)
    for n in names:
        assert n in str(e.value)


def test_cli_bad_input(capsys):
    with pytest.raises(SystemExit) as e:
        main(["audit", "--mechanism", "gaussian", "--threat-model", "server"])
    assert e.value.code == 2
    assert "threat_model" in capsys.readouterr().err
