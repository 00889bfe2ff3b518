"""Empirical privacy audit of the shipped mechanisms: a Clopper-Pearson lower bound on epsilon.

:func:`audit` runs a mechanism's real code path many times on a *canary* update (L2 norm equal to
the clip ``C``) and on its neighbour (a zero update for ``relation="zero"``; the target client
absent for ``relation="add_remove"``), applies a distinguishing test for the observer of the chosen
threat model, and turns the test's error rates into a statistical lower bound on epsilon at the
given delta. The bound is reported beside the epsilon dprec's accounting gives for exactly the
audited mechanism (one round, one message per client)::

    from dprec.audit import audit

    r = audit("dprec", threat_model="server", trials=20000, clip_multiplier=1.0)
    print(r.summary())          # epsilon_lower <= epsilon_accounted, or the accounting is wrong

Or from the shell: ``dprec audit --mechanism dprec --threat-model server --trials 20000 --json``.

Mechanisms: ``"dprec"`` (:class:`dprec.rec.codec.DPRECCodec`), ``"gaussian"`` (DP-FedAvg's
server-side Gaussian; ``"central"`` only), ``"ddg"`` and ``"skellam"`` (the
:mod:`dprec.secagg` pipelines; every observer sees only the modular sum) and ``"qmgeo"``
(:class:`dprec.qmgeo.QMGeoCodec`, with inputs strictly between levels). Each runs with its own
private randomness from the operating system's entropy source, exactly as the product does;
``seed`` seeds only the audit's driver, so two runs with the same ``seed`` give slightly
different bounds. The result (:class:`AuditResult`) holds the lower bound (``epsilon_lower``), the
accounted and claimed epsilons, how they were obtained (``accounted_note``), the test and its
error rates, and ``consistent``.

See *Which guarantee do I have?*, section 7 (*The empirical audit*), in the documentation for
what each mechanism runs, the observers' tests, the statistics, and results.
"""

from __future__ import annotations

import json
import math
import secrets
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

import numpy as np

__all__ = ["AuditResult", "audit", "MECHANISMS", "THREAT_MODELS", "RELATIONS", "SUPPORTED", "clopper_pearson_upper"]

MECHANISMS = ("dprec", "gaussian", "ddg", "skellam", "qmgeo")
# The same as dprec.accounting.guarantee's (not imported here: that needs SciPy, and ``dprec --help`` must not).
THREAT_MODELS = ("central", "messages", "server")
RELATIONS = ("add_remove", "zero")

#: (mechanism, threat_model) -> the relations the audit supports (those with a finite accounting).
SUPPORTED: dict[tuple[str, str], tuple[str, ...]] = {
    ("dprec", "server"): ("zero",),
    ("dprec", "messages"): ("zero",),
    ("dprec", "central"): ("zero",),
    ("gaussian", "central"): ("add_remove", "zero"),
    ("ddg", "server"): ("zero",),
    ("ddg", "messages"): ("zero",),
    ("ddg", "central"): ("zero",),
    ("skellam", "server"): ("zero",),
    ("skellam", "messages"): ("zero",),
    ("skellam", "central"): ("zero",),
    ("qmgeo", "server"): ("zero",),
    ("qmgeo", "messages"): ("zero",),
    ("qmgeo", "central"): ("zero",),
}

_WHY_NOT = {
    ("dprec", "add_remove"): "an observer who knows which client sent each message sees whether the target takes "
    "part at all (server); the audited round has every client send one message, for which no add/remove bound "
    "is proved against a message observer",
    ("qmgeo", "add_remove"): "QMGeo is a local randomizer: its accounting is for one client's input changed "
    "(relation='zero'); its participation is visible to an observer of messages",
    ("ddg", "add_remove"): "removing a client also removes its share of the noise, which the distributed "
    "discrete Gaussian's accounting does not cover (relation='zero': the client stays, sending a zero update)",
    ("skellam", "add_remove"): "removing a client also removes its share of the noise, which the Skellam "
    "accounting does not cover (relation='zero': the client stays, sending a zero update)",
    ("gaussian", "server"): "DP-FedAvg's clients send unnoised updates; the server adds the noise to the sum, "
    "so the server (and any observer of messages) has no guarantee",
}

#: Test-only broken variants (power checks of the audit); not part of the public interface.
_BROKEN = {
    "dprec": ("noise/4", "public-gumbel"),
    "gaussian": ("noise/4",),
    "ddg": ("noise/4",),
    "skellam": ("noise/4",),
    "qmgeo": (),
}

_DEFAULT_DIM = {"dprec": 16, "gaussian": 16, "ddg": 16, "skellam": 16, "qmgeo": 1}
_DEFAULT_BITS = {"dprec": 7, "ddg": 16, "skellam": 16}


# --------------------------------------------------------------------------------------
# Result
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditResult:
    """The outcome of one :func:`audit`.

    Attributes
    ----------
    mechanism, threat_model, relation : str
        What was audited, against which observer, under which neighbouring relation.
    epsilon_lower : float
        The Clopper-Pearson lower bound on epsilon at ``delta``, holding with probability at least
        ``confidence`` (over the mechanism's randomness) if the mechanism is (eps, delta)-DP for
        no smaller eps. 0 when the test found nothing.
    epsilon_accounted : float
        dprec's accounting of exactly the audited mechanism (``inf`` where none is proved; see
        ``accounted_note``).
    epsilon_claimed : float
        ``epsilon_accounted``, except for DP-REC, where it is the Gaussian variant's accounting
        (``bits=None``), at most the accounted epsilon: a reference (see the docs' audit section).
    accounted_note : str
        How the accounted epsilon was obtained (and why it is infinite, where it is).
    delta, confidence : float
    trials : int
        Runs of the mechanism per hypothesis (canary, neighbour); half of each select the test.
    eval_trials : int
        Runs per hypothesis in the evaluation half.
    statistic : str
        The distinguishing score (larger means "canary").
    inequality : str
        Which DP inequality gave the bound.
    threshold : float
        The rule is "canary if score > threshold".
    fpr, fnr : float
        Empirical error rates of the rule on the evaluation halves (neighbour called canary;
        canary called neighbour).
    fpr_upper, fnr_upper : float
        Their one-sided Clopper-Pearson upper bounds at level ``(1 - confidence) / 2`` each.
    params : dict
        The mechanism's parameters (clip multiplier, bits, dim, clients, ...).
    randomness : str
        Where the mechanism's randomness and the driver's came from.
    broken : str or None
        The test-only broken variant audited, or None for the real mechanism.
    seconds : float
        Wall time of the audit.
    """

    mechanism: str
    threat_model: str
    relation: str
    epsilon_lower: float
    epsilon_accounted: float
    epsilon_claimed: float
    accounted_note: str
    delta: float
    confidence: float
    trials: int
    eval_trials: int
    statistic: str
    inequality: str
    threshold: float
    fpr: float
    fnr: float
    fpr_upper: float
    fnr_upper: float
    params: dict = field(default_factory=dict)
    randomness: str = ""
    broken: Optional[str] = None
    seconds: float = 0.0

    @property
    def consistent(self) -> bool:
        """Whether the lower bound does not exceed the accounted epsilon (the claimed one where the
        accounting gives no finite number)."""
        bound = self.epsilon_accounted if math.isfinite(self.epsilon_accounted) else self.epsilon_claimed
        return self.epsilon_lower <= bound

    def summary(self) -> str:
        """A few human lines: bound, claim, test, error rates, parameters."""
        name = self.mechanism + (f" [BROKEN: {self.broken}]" if self.broken else "")
        params = ", ".join(f"{k}={v}" for k, v in self.params.items())
        acc = f"{self.epsilon_accounted:.4g}"
        lines = [
            f"audit of {name}: threat model {self.threat_model!r}, relation {self.relation!r} ({params})",
            f"  epsilon lower bound {self.epsilon_lower:.4f} at delta={self.delta:g}, confidence {self.confidence:g} "
            f"(Clopper-Pearson, {self.trials} trials per hypothesis, {self.eval_trials} evaluated)",
            f"  accounted epsilon {acc}; claimed {self.epsilon_claimed:.4f} ({self.accounted_note})",
            f"  test: {self.statistic}; canary if score > {self.threshold:.6g}; {self.inequality}",
            f"  FPR {self.fpr:.4g} (upper {self.fpr_upper:.4g}), FNR {self.fnr:.4g} (upper {self.fnr_upper:.4g})",
            f"  {'CONSISTENT' if self.consistent else 'VIOLATION'}: lower bound "
            f"{'<=' if self.consistent else '>'} "
            f"{'accounted' if math.isfinite(self.epsilon_accounted) else 'claimed'} epsilon; {self.randomness}",
        ]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """A JSON-ready dict (infinities as the string "inf")."""
        def clean(v: Any) -> Any:
            if isinstance(v, float) and not math.isfinite(v):
                return "inf" if v > 0 else ("-inf" if v < 0 else "nan")
            if isinstance(v, dict):
                return {k: clean(x) for k, x in v.items()}
            return v

        d = {k: clean(v) for k, v in asdict(self).items()}
        d["consistent"] = self.consistent
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


# --------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------


def clopper_pearson_upper(k: Any, n: int, alpha: float) -> Any:
    """One-sided Clopper-Pearson upper bound on a binomial proportion: ``P(p <= bound) >= 1 - alpha``
    for ``k`` successes of ``n``."""
    from scipy.stats import beta  # noqa: PLC0415

    k = np.asarray(k, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        out = np.where(k >= n, 1.0, beta.ppf(1.0 - alpha, k + 1.0, np.maximum(n - k, 1.0)))
    return out if out.ndim else float(out)


def _bounds(fp: Any, fn: Any, n0: int, n1: int, alpha: float, delta: float) -> tuple[Any, Any, Any, Any]:
    """Both inequalities' epsilon bounds for counts of false positives (of n0 neighbour runs) and false
    negatives (of n1 canary runs), each error bounded one-sided at alpha / 2."""
    fpr_u = clopper_pearson_upper(fp, n0, alpha / 2.0)
    fnr_u = clopper_pearson_upper(fn, n1, alpha / 2.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        e1 = np.log(np.maximum(1.0 - delta - fnr_u, 0.0) / fpr_u)  # P1(s > t) <= e^eps P0(s > t) + delta
        e2 = np.log(np.maximum(1.0 - delta - fpr_u, 0.0) / fnr_u)  # P0(s <= t) <= e^eps P1(s <= t) + delta
    return np.nan_to_num(e1, nan=-np.inf), np.nan_to_num(e2, nan=-np.inf), fpr_u, fnr_u


def _counts(s0: np.ndarray, s1: np.ndarray, thresholds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(false positives = #neighbour scores > t, false negatives = #canary scores <= t) per threshold."""
    a0, a1 = np.sort(s0), np.sort(s1)
    fp = a0.size - np.searchsorted(a0, thresholds, side="right")
    fn = np.searchsorted(a1, thresholds, side="right")
    return fp, fn


def _lower_bound(s0: np.ndarray, s1: np.ndarray, *, delta: float, alpha: float, rng: np.random.Generator) -> dict:
    """Select (threshold, inequality) on the first halves, bound epsilon on the second halves."""
    s0 = s0[rng.permutation(s0.size)]
    s1 = s1[rng.permutation(s1.size)]
    h0, h1 = s0.size // 2, s1.size // 2
    sel0, ev0, sel1, ev1 = s0[:h0], s0[h0:], s1[:h1], s1[h1:]
    both = np.concatenate([sel0, sel1])
    cand = np.unique(both)
    if cand.size > 4096:  # quantiles are enough to choose a threshold
        cand = np.unique(np.quantile(both, np.linspace(0.0, 1.0, 4097), method="inverted_cdf"))
    cand = np.concatenate([[-np.inf], cand])
    fp, fn = _counts(sel0, sel1, cand)
    e1, e2, _, _ = _bounds(fp, fn, sel0.size, sel1.size, alpha, delta)
    i1, i2 = int(np.argmax(e1)), int(np.argmax(e2))
    if e1[i1] >= e2[i2]:
        t, which = float(cand[i1]), 1
    else:
        t, which = float(cand[i2]), 2
    fp_e, fn_e = _counts(ev0, ev1, np.array([t]))
    b1, b2, fpr_u, fnr_u = _bounds(fp_e, fn_e, ev0.size, ev1.size, alpha, delta)
    eps = float((b1 if which == 1 else b2)[0])
    return dict(
        epsilon_lower=max(0.0, eps) if not math.isnan(eps) else 0.0,
        threshold=t,
        inequality=(
            "P1(score > t) <= e^eps P0(score > t) + delta" if which == 1
            else "P0(score <= t) <= e^eps P1(score <= t) + delta"
        ),
        fpr=float(fp_e[0]) / ev0.size,
        fnr=float(fn_e[0]) / ev1.size,
        fpr_upper=float(fpr_u[0]),
        fnr_upper=float(fnr_u[0]),
        eval_trials=int(min(ev0.size, ev1.size)),
    )


# --------------------------------------------------------------------------------------
# Accounting of exactly the audited mechanism
# --------------------------------------------------------------------------------------


def _accounted_dprec(c: float, delta: float, total_bits: int, threat_model: str, relation: str,
                     clients: int) -> tuple[float, float, str]:
    """(accounted epsilon of REC's messages with ``total_bits``, the Gaussian variant's (``bits=None``), note)
    of one round in which each of ``clients`` clients sends one DP-REC message (q = 1), the target's at
    clip multiplier c."""
    from .accounting import dprec_rec  # noqa: PLC0415

    threat = dict(threat_model=threat_model, relation=relation)
    composition = [""]

    def account(bits: Optional[int]) -> float:
        # Every audited message is one group of ``total_bits`` bits (K = 2^bits): groups=1.
        if threat_model == "server" or clients == 1:
            # One client: the server's view of its one message bounds the message and central
            # observers too (they see that message or a function of it): post-processing.
            kw = dict(clip_multiplier=c, delta=delta, bits=bits, rounds=1, groups=None if bits is None else 1)
            r = dprec_rec.dprec_local_epsilon(**kw, threat_model="server", relation=relation)
        else:
            kw = dict(clip_multiplier=c, delta=delta, bits=bits, rounds=1, clients_per_round=clients,
                      num_clients=clients, sampling="without_replacement", groups=None if bits is None else 1)
            r = dprec_rec.dprec_epsilon(**kw, **threat)
        composition[0] = str(r.composition)
        return float(r.epsilon)

    claimed = account(None)
    what = ("one message (local per-message bound)" if threat_model == "server" or clients == 1
            else f"one round, {clients} of {clients} clients each sending one message")
    reference = "claimed = the Gaussian mechanism DP-REC simulates (bits=None), a reference"
    try:
        accounted = account(total_bits)
    except ValueError:  # central: REC's total-variation cost reaches delta
        accounted = math.inf
        eta = dprec_rec.rec_total_variation(clients, c, total_bits, 1)
        note = (f"DP-REC accounting of {what}: inf, REC's total-variation cost for a central observer "
                f"eta = 12 rho / 2^b = {eta:.3g} at b = {total_bits} bits is >= delta / 2; {reference}")
    else:
        if threat_model == "central" and "post-processing" in composition[0]:
            how = (f"REC's messages as sent ({total_bits} bits): the message observer's bound, which holds against "
                   "the central observer by post-processing (REC's total-variation cost cannot be paid here)")
        elif threat_model == "central":
            how = f"the Gaussian curves plus REC's total-variation cost at {total_bits} bits"
        else:
            how = f"REC's messages as sent ({total_bits} bits, K = 2^{total_bits} candidates, seed and index visible)"
        note = f"DP-REC accounting of {what}: {how}; {reference}"
    return accounted, claimed, note


def _gaussian_epsilon(c: float, delta: float) -> tuple[float, str]:
    from .accounting import gaussian_guarantee  # noqa: PLC0415

    g = gaussian_guarantee(1.0 / c, delta, threat_model="central")  # the library's tight baseline
    return float(g.epsilon), f"one Gaussian release at noise multiplier 1/c, {g.conversion}"


def _accounted_qmgeo(codec: Any, template: Any, delta: float, inputs: list, threat_model: str,
                     relation: str) -> tuple[float, str]:
    """One round of QMGeo under the threat model and relation: the Accountant with the codec's event."""
    from .accounting import Accountant  # noqa: PLC0415

    event = codec.privacy_event(template, inputs=inputs)
    eps = float(Accountant(threat_model=threat_model, relation=relation).compose(event, 1).get_epsilon(delta))
    return eps, f"Accountant(threat_model={threat_model!r}, relation={relation!r}) of one QMGeoEvent"


# --------------------------------------------------------------------------------------
# Mechanisms: each returns (runner, accounted, claimed, note, statistic, params)
# runner(canary: bool, n: int, rng) -> scores (n,), larger = "canary"
# --------------------------------------------------------------------------------------


def _unit(d: int) -> np.ndarray:
    return np.full(d, 1.0 / math.sqrt(d))


def _dprec_setup(threat_model: str, relation: str, c: float, bits: int, dim: int, clients: int, delta: float,
                 broken: Optional[str]) -> dict:
    from ._runtime import arrays as _arrays  # noqa: PLC0415
    from ._runtime import dispatch as _dispatch
    from ._runtime.updates import plain_host_leaves  # noqa: PLC0415
    from .rec.codec import DPRECCodec  # noqa: PLC0415

    sigma = 1.0
    clip = c * sigma
    sigma_mech = sigma / 4.0 if broken == "noise/4" else sigma
    m = 1 if threat_model == "server" else clients
    u = _unit(dim)
    k = 1 << bits
    accounted, claimed, note = _accounted_dprec(c, delta, bits, threat_model, relation, m)

    def run(canary: bool, n: int, rng: np.random.Generator) -> np.ndarray:
        groups = n * m
        x = np.zeros((n, m, dim))
        if canary:
            x[:, 0, :] = clip * u
        x = x.reshape(-1)
        # The global clip never binds: every group keeps norm C (or 0).
        total = clip * math.sqrt(n) * (1.0 + 1e-9)
        codec = DPRECCodec(sigma=sigma_mech, clip_multiplier=total / sigma_mech, bits=bits, max_group_size=dim)
        if broken == "public-gumbel":
            seed = secrets.randbits(64)
            msg = codec.encode(x, rng=np.random.default_rng(seed), seed=seed)
        else:
            msg = codec.encode(x)  # OS-entropy seed and Gumbel noise: the product's path
        idx = np.asarray(msg.indices, dtype=np.int64)
        if threat_model == "central":
            dec = np.asarray(codec.decode(msg, x), dtype=np.float64).reshape(n, m, dim)
            return dec.sum(axis=1) @ u
        if broken == "public-gumbel":
            # The observer recomputes the zero update's index from the public seed: a mismatch is the canary.
            zero = codec.encode(np.zeros_like(x), rng=np.random.default_rng(msg.seed), seed=msg.seed)
            score = (idx != np.asarray(zero.indices)).astype(np.float64)
        else:
            # The observer's exact likelihood-ratio score of every message against the canary: the logits
            # of the canary in every group from the public seed (one native call), then
            # l_k - logsumexp(l) + log K (index uniform under a zero update).
            canary_x = np.tile(clip * u, groups)
            arrays = plain_host_leaves([canary_x])
            layout, rows, offsets, _, _ = codec._cached_layout(("",), [canary_x.shape], ["update"])
            kernels = _dispatch.select("auto", arrays[0], "update")
            lg = _arrays.empty(arrays[0], (int(offsets[-1]),), "float64")
            kernels.dot_products_groups(arrays, msg.seed, rows, offsets, np.full(groups, 1.0 / sigma_mech), lg)
            logits = np.asarray(lg.host).reshape(groups, k)
            top = logits.max(axis=1)
            lse = top + np.log(np.exp(logits - top[:, None]).sum(axis=1))
            score = logits[np.arange(groups), idx] - lse + math.log(k)
        return score.reshape(n, m).max(axis=1)

    stat = {
        "server": "exact log-likelihood ratio of the target's message: l_k - logsumexp(l) + log K, "
        "logits of the canary recomputed from the public seed",
        "messages": f"max over the round's {m} unattributed messages of the log-likelihood-ratio score",
        "central": f"projection of the decoded sum of the round's {m} messages on the canary direction",
    }[threat_model]
    if broken == "public-gumbel" and threat_model != "central":
        stat = "mismatch of the index with the zero update's index recomputed from the public seed"
        if m > 1:
            stat += f" (any of {m} messages)"
    params = dict(clip_multiplier=c, sigma=sigma, bits=bits, candidates=k, dim=dim, clients=m)
    return dict(run=run, accounted=accounted, claimed=claimed, note=note, statistic=stat, params=params,
                chunk=max(1, 8192 // m))


def _gaussian_setup(threat_model: str, relation: str, c: float, dim: int, clients: int, delta: float,
                    broken: Optional[str]) -> dict:
    clip = 1.0
    std = clip / c / (4.0 if broken == "noise/4" else 1.0)
    u = _unit(dim)
    eps, how = _gaussian_epsilon(c, delta)

    def run(canary: bool, n: int, rng: np.random.Generator) -> np.ndarray:
        noise_rng = np.random.default_rng(secrets.randbits(128))  # the server's noise: OS entropy
        updates = np.zeros((n, clients, dim))  # the other clients send zero updates
        if canary:
            updates[:, 0, :] = clip * u
        elif relation == "add_remove":
            updates = updates[:, 1:, :]  # the target is absent
        total = updates.sum(axis=1) + noise_rng.normal(0.0, std, size=(n, dim))
        return total @ u

    params = dict(clip_multiplier=c, clip=clip, noise_stddev=clip / c, dim=dim, clients=clients)
    return dict(run=run, accounted=eps, claimed=eps, note=f"DP-FedAvg accounting: {how}",
                statistic="projection of the noised sum on the canary direction", params=params, chunk=65536)


def _secagg_setup(mechanism: str, threat_model: str, relation: str, c: float, bits: int, dim: int, clients: int,
                  delta: float, broken: Optional[str], driver: np.random.Generator) -> dict:
    from .secagg import DDGPipeline, SkellamPipeline  # noqa: PLC0415

    cls = DDGPipeline if mechanism == "ddg" else SkellamPipeline
    clip = 1.0
    share = clip / (c * math.sqrt(clients))
    seed = int(driver.integers(0, 1 << 63))
    claimed_pipe = cls(dim, clip=clip, bits=bits, num_clients=clients, seed=seed, noise_stddev=share, delta=delta)
    eps = float(claimed_pipe.epsilon(threat_model=threat_model, relation=relation))
    mech_share = share / 4.0 if broken == "noise/4" else share
    pipe = cls(dim, clip=clip, bits=bits, num_clients=clients, seed=seed, noise_stddev=mech_share, delta=delta)
    u = _unit(dim)
    canary_x, zero_x = clip * u, np.zeros(dim)

    def run(canary: bool, n: int, rng: np.random.Generator) -> np.ndarray:
        p = pipe.with_seed(int(rng.integers(0, 1 << 63)))  # a fresh public round seed per batch
        out = np.empty(n)
        senders = clients - 1 if (not canary and relation == "add_remove") else clients
        for i in range(n):
            msgs = [p.encode(canary_x if (canary and j == 0) else zero_x) for j in range(senders)]
            total = p.aggregate(np.stack(msgs))
            out[i] = float(np.asarray(p.decode(total, num_clients=clients)) @ u)
        return out

    params = dict(clip_multiplier=c, clip=clip, noise_stddev_per_client=share, clients=clients, dim=dim,
                  secagg_bits=bits, granularity=pipe.granularity)
    return dict(run=run, accounted=eps, claimed=eps,
                note=f"{cls.__name__}.epsilon(delta) of one round (dprec.accounting.discrete)",
                statistic="projection of the decoded modular sum on the canary direction", params=params, chunk=256)


def _qmgeo_setup(threat_model: str, relation: str, levels: int, p: float, dim: int, clients: int, delta: float,
                 broken: Optional[str]) -> dict:
    from .accounting.qmgeo import qmgeo_log_pmf  # noqa: PLC0415
    from .qmgeo.codec import QMGeoCodec  # noqa: PLC0415

    w_max = 1.0
    step = 2.0 * w_max / (levels - 1)
    w_canary = w_max - step / 2.0  # the middle of the top interval
    w_zero = 0.0
    codec = QMGeoCodec(w_max=w_max, levels=levels, p=p)
    template = np.zeros(dim)
    eps, how = _accounted_qmgeo(codec, template, delta, [w_zero, w_canary], threat_model, relation)
    llr = qmgeo_log_pmf(w_canary, levels, p, w_max) - qmgeo_log_pmf(w_zero, levels, p, w_max)
    m = 1 if threat_model == "server" else clients

    def run(canary: bool, n: int, rng: np.random.Generator) -> np.ndarray:
        x = np.full((n, m, dim), w_zero)
        if canary:
            x[:, 0, :] = w_canary
        msg = codec.encode(x.reshape(-1))  # OS-entropy private seed
        idx = np.asarray(msg.indices(), dtype=np.int64).reshape(n, m, dim)
        if threat_model == "central":
            levels_v = -w_max + idx * step
            return levels_v.sum(axis=(1, 2))
        return llr[idx].sum(axis=2).max(axis=1)

    stat = {
        "server": "exact log-likelihood ratio of the target's levels (canary vs zero input)",
        "messages": f"max over the round's {m} unattributed messages of the log-likelihood ratio",
        "central": f"sum of the decoded aggregate of the round's {m} messages (projection on the canary)",
    }[threat_model]
    params = dict(levels=levels, p=p, w_max=w_max, canary_value=w_canary, dim=dim, clients=m)
    return dict(run=run, accounted=eps, claimed=eps,
                note=f"{how}, inputs {{0, {w_canary:.4g}}} (exact Renyi divergence of the implemented pmf)",
                statistic=stat, params=params, chunk=max(1, 65536 // (m * dim)))


# --------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------


def _choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(repr(c) for c in choices)}, got {value!r}")
    return value


def _progress(total: int, desc: str, enabled: bool) -> Any:
    if enabled:
        try:
            from tqdm.auto import tqdm  # noqa: PLC0415

            return tqdm(total=total, desc=desc, unit="trial", leave=False)
        except ImportError:
            pass
    return None


def audit(
    mechanism: str,
    *,
    threat_model: str = "server",
    relation: str = "zero",
    trials: int = 20000,
    delta: float = 1e-5,
    confidence: float = 0.95,
    clip_multiplier: float = 1.0,
    bits: Optional[int] = None,
    dim: Optional[int] = None,
    num_clients: int = 4,
    levels: int = 8,
    p: float = 0.5,
    seed: Optional[int] = None,
    progress: bool = True,
    _broken: Optional[str] = None,
) -> AuditResult:
    """Empirical privacy audit of a shipped mechanism: a Clopper-Pearson lower bound on epsilon.

    Parameters
    ----------
    mechanism : {"dprec", "gaussian", "ddg", "skellam", "qmgeo"}
        DP-REC (:class:`dprec.DPRECCodec`), DP-FedAvg's server-side Gaussian, the distributed
        discrete Gaussian or Skellam under secure aggregation (:mod:`dprec.secagg`), QMGeo
        (:class:`dprec.qmgeo.QMGeoCodec`).
    threat_model : {"central", "messages", "server"}
        The observer: the decoded aggregate; the unattributed messages of one round; the
        target's attributed message. ``"gaussian"`` has a guarantee only for ``"central"``.
    relation : {"add_remove", "zero"}
        The neighbour of the canary: a zero update, or the target absent. ``"add_remove"`` is
        audited for ``"gaussian"``, ``"ddg"`` and ``"skellam"`` only (DP-REC and QMGeo have no
        add/remove guarantee against an observer of messages).
    trials : int
        Runs of the mechanism per hypothesis (>= 200); half select the test, half bound it.
    delta : float
        In (0, 1).
    confidence : float
        In (0, 1): the probability that the lower bound is valid (default 0.95).
    clip_multiplier : float
        ``c = C / sigma``: the clip over the (total) noise standard deviation. DP-REC: the prior's
        sigma is 1 and C = c. Gaussian, DDG, Skellam: C = 1 and the total noise standard deviation
        (summed over the clients' shares) is 1/c.
    bits : int, optional
        DP-REC: bits per group (K = 2**bits candidates, default 7). DDG / Skellam: the SecAgg
        word size (default 16).
    dim : int, optional
        Elements of the update (default 16; QMGeo 1).
    num_clients : int
        Clients in the round for ``"messages"`` / ``"central"`` and for SecAgg and the Gaussian
        (the others send zero updates); the ``"server"`` observer of DP-REC and QMGeo sees one message.
    levels, p : int, float
        QMGeo's levels R and geometric parameter p.
    seed : int, optional
        Seeds the audit's driver only (the split into halves, SecAgg's public round seeds).
        The mechanism's own randomness (DP-REC's message seeds and Gumbel noise, the rounding and
        noise of SecAgg clients, QMGeo's private seeds, DP-FedAvg's noise) always comes from the
        OS entropy source, as in the product, so results vary slightly between runs.
    progress : bool
        Show a tqdm progress bar (if tqdm is installed).

    Returns
    -------
    AuditResult

    Raises
    ------
    ValueError
        For an unknown mechanism, threat model or relation, or a combination without a guarantee
        (naming the argument and the valid choices), or a parameter out of range.
    """
    started = time.perf_counter()
    mechanism = _choice(mechanism, "mechanism", MECHANISMS)
    threat_model = _choice(threat_model, "threat_model", tuple(THREAT_MODELS))
    relation = _choice(relation, "relation", tuple(RELATIONS))
    tms = tuple(t for t in THREAT_MODELS if (mechanism, t) in SUPPORTED)
    if (mechanism, threat_model) not in SUPPORTED:
        why = _WHY_NOT.get((mechanism, threat_model), "no guarantee")
        raise ValueError(
            f"threat_model={threat_model!r} has no guarantee for mechanism={mechanism!r} ({why}); "
            f"valid threat_model for {mechanism!r}: {', '.join(map(repr, tms))}"
        )
    rels = SUPPORTED[(mechanism, threat_model)]
    if relation not in rels:
        why = _WHY_NOT.get((mechanism, relation), "no guarantee")
        raise ValueError(
            f"relation={relation!r} is not audited for mechanism={mechanism!r} under threat_model={threat_model!r} "
            f"({why}); valid relation: {', '.join(map(repr, rels))}"
        )
    if _broken is not None and _broken not in _BROKEN[mechanism]:
        raise ValueError(f"_broken must be one of {_BROKEN[mechanism]} for {mechanism!r}, got {_broken!r}")
    if isinstance(trials, bool) or not isinstance(trials, (int, np.integer)) or trials < 200:
        raise ValueError(f"trials must be an integer >= 200, got {trials!r}")
    trials = int(trials)
    delta = float(delta)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    confidence = float(confidence)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    c = float(clip_multiplier)
    if not (math.isfinite(c) and c > 0):
        raise ValueError(f"clip_multiplier must be finite and > 0, got {clip_multiplier!r}")
    d = _DEFAULT_DIM[mechanism] if dim is None else int(dim)
    if d < 1:
        raise ValueError(f"dim must be >= 1, got {dim!r}")
    n_clients = int(num_clients)
    if n_clients < (2 if relation == "add_remove" else 1):
        raise ValueError(f"num_clients must be >= {2 if relation == 'add_remove' else 1}, got {num_clients!r}")
    if mechanism in _DEFAULT_BITS:
        b = _DEFAULT_BITS[mechanism] if bits is None else int(bits)
    elif bits is not None:
        raise ValueError(f"bits does not apply to mechanism={mechanism!r} (only to 'dprec', 'ddg', 'skellam')")
    driver = np.random.default_rng(seed)

    if mechanism == "dprec":
        if not 1 <= b <= 16:
            raise ValueError(f"bits must be in 1..16 for an audit of 'dprec', got {bits!r}")
        setup = _dprec_setup(threat_model, relation, c, b, d, n_clients, delta, _broken)
    elif mechanism == "gaussian":
        setup = _gaussian_setup(threat_model, relation, c, d, n_clients, delta, _broken)
    elif mechanism in ("ddg", "skellam"):
        setup = _secagg_setup(mechanism, threat_model, relation, c, b, d, n_clients, delta, _broken, driver)
    else:
        setup = _qmgeo_setup(threat_model, relation, int(levels), float(p), d, n_clients, delta, _broken)

    bar = _progress(2 * trials, f"audit {mechanism}/{threat_model}", progress)
    scores = []
    try:
        for canary in (False, True):
            parts, done = [], 0
            while done < trials:
                n = min(setup["chunk"], trials - done)
                parts.append(np.asarray(setup["run"](canary, n, driver), dtype=np.float64))
                done += n
                if bar is not None:
                    bar.update(n)
            scores.append(np.concatenate(parts))
    finally:
        if bar is not None:
            bar.close()
    stats = _lower_bound(scores[0], scores[1], delta=delta, alpha=1.0 - confidence, rng=driver)
    randomness = ("mechanism randomness: OS entropy (as in the product); driver seed: "
                  + ("OS entropy" if seed is None else str(seed)))
    if _broken == "public-gumbel":
        randomness = "BROKEN: Gumbel noise from a Generator seeded by the public message seed; " + randomness
    return AuditResult(
        mechanism=mechanism, threat_model=threat_model, relation=relation, delta=delta, confidence=confidence,
        trials=trials, epsilon_accounted=float(setup["accounted"]), epsilon_claimed=float(setup["claimed"]),
        accounted_note=setup["note"], statistic=setup["statistic"], params=setup["params"], randomness=randomness,
        broken=_broken, seconds=time.perf_counter() - started, **stats,
    )


# --------------------------------------------------------------------------------------
# Command line (``dprec audit``)
# --------------------------------------------------------------------------------------

DESCRIPTION = """\
Empirical privacy audit of a shipped mechanism: run its real code path (native kernels, Philox,
private randomness from the OS entropy source) many times on a canary update of norm C and on its
neighbour (a zero update, or the target absent), apply a distinguishing test for the chosen
observer, and report a Clopper-Pearson lower bound on epsilon at delta beside the epsilon dprec's
accounting gives for exactly that mechanism. A lower bound above the accounted epsilon means the
accounting (or the implementation) is wrong; a bound below it proves nothing more than that the
audit found no violation. For DP-REC the Gaussian mechanism it simulates is shown as a reference
("claimed"; bits=None), never above the accounted epsilon."""

EPILOG = """\
threat models (--threat-model):
  server    the observer knows which client sent each message (honest-but-curious server):
            sees the target's message; test = exact likelihood ratio (DP-REC, QMGeo)
  messages  the observer sees every message of a round but not who sent it (shuffler, history
            broadcast): test = the largest per-message likelihood ratio
  central   the observer sees only the decoded aggregate: test = projection on the canary
  (DDG and Skellam: every observer sees only the SecAgg modular sum; the Gaussian of DP-FedAvg
  has a guarantee only for central)

relations (--relation):
  zero        the target's update replaced by a zero update (all mechanisms)
  add_remove  the target absent (gaussian, ddg, skellam only)

statistics: half of the trials choose the threshold, the other half bound the error rates
(one-sided Clopper-Pearson, each at (1 - confidence)/2);
eps_lb = log((1 - delta - FNR_upper) / FPR_upper) (or with the errors' roles swapped).
For DP-REC the accounted epsilon bounds REC's messages as sent: against server and messages
directly (finite at any bits); against central the better of REC's total-variation route and the
message observer's bound, which holds by post-processing (the only one at an audit's bit widths).
The lower bound is compared with the accounted epsilon; the Gaussian variant's (bits=None,
"claimed") is a reference, never above it.

--seed seeds only the audit's driver; the mechanism's noise always comes from the OS.
"""


def add_arguments(p: Any) -> None:
    """The ``dprec audit`` options."""
    p.add_argument("--mechanism", choices=MECHANISMS, default="dprec", help="mechanism to audit (default dprec)")
    p.add_argument("--threat-model", choices=tuple(THREAT_MODELS), default="server",
                   help="observer: central, messages or server (default server)")
    p.add_argument("--relation", choices=tuple(RELATIONS), default="zero",
                   help="neighbouring relation: zero or add_remove (default zero)")
    p.add_argument("--trials", type=int, default=20000, help="runs per hypothesis (default 20000)")
    p.add_argument("--delta", type=float, default=1e-5, help="delta of the bound (default 1e-5)")
    p.add_argument("--confidence", type=float, default=0.95, help="confidence of the lower bound (default 0.95)")
    p.add_argument("--clip-multiplier", type=float, default=1.0,
                   help="c = C / sigma (clip over the total noise standard deviation; default 1)")
    p.add_argument("--bits", type=int, default=None,
                   help="DP-REC bits per group (K = 2**bits, default 7); DDG/Skellam SecAgg word bits (default 16)")
    p.add_argument("--dim", type=int, default=None, help="update length (default 16; qmgeo 1)")
    p.add_argument("--num-clients", type=int, default=4,
                   help="clients in the round for messages/central, SecAgg and the Gaussian (default 4)")
    p.add_argument("--levels", type=int, default=8, help="QMGeo levels R (default 8)")
    p.add_argument("--p", type=float, default=0.5, help="QMGeo geometric parameter p (default 0.5)")
    p.add_argument("--seed", type=int, default=None, help="seed of the audit driver only (default: OS entropy)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run_from_args(args: Any, parser: Any = None) -> int:
    try:
        result = audit(
            args.mechanism, threat_model=args.threat_model, relation=args.relation, trials=args.trials,
            delta=args.delta, confidence=args.confidence, clip_multiplier=args.clip_multiplier, bits=args.bits,
            dim=args.dim, num_clients=args.num_clients, levels=args.levels, p=args.p, seed=args.seed,
            progress=not (args.no_progress or args.json),
        )
    except ValueError as exc:
        if parser is not None:
            parser.error(str(exc))
        raise
    print(result.to_json() if args.json else result.summary())
    return 0
