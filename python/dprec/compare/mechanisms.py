"""The mechanisms ``dprec compare`` trains, each calibrated by dprec's own accountant.

A :class:`Mechanism` answers three questions for a :class:`Setting` (the federation's size, the
sampling, the rounds, the target epsilon and delta, the clip norm and the model's shapes):

* :meth:`Mechanism.calibrate`: the mechanism's noise parameters at which its accountant reports
  the target epsilon against one threat model, or :class:`NoGuarantee` with the reason;
* :meth:`Mechanism.guarantee`: what those parameters give against any threat model (a
  :class:`Row`: epsilon, ``inf`` with the reason where nothing is proved, the local epsilon);
* :meth:`Mechanism.round`: one federated round with those parameters (clients' messages built
  with the library's real client code, their bytes counted, the server's decode).

Every guarantee uses the ``"zero"`` relation (one client's update replaced by zero; for joint
noise one example's gradient): it is the only relation every mechanism here has a bound for
(secure aggregation loses add/remove because removing a client removes its noise share; DP-REC
under Poisson sampling has none either). The private randomness (DP-REC's seeds and Gumbel draws,
every noise share, every rounding) comes from the OS entropy source through ``private_rng``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from .models import Model, client_batches, dp_sgd_local, flatten, local_sgd, unflatten

__all__ = [
    "MECHANISMS",
    "Mechanism",
    "NoGuarantee",
    "Row",
    "Setting",
    "mechanism_registry",
]

THREAT_MODELS = ("central", "messages", "server")
RELATION = "zero"
FLOAT32_BYTES = 4
#: DP-REC bits per tensor (the demo's 7: K = 128 candidates per tensor).
DEFAULT_DPREC_BITS = 7
#: SecAgg word size of DDG and Skellam (Chen et al. use 16 to 20 bits).
DEFAULT_SECAGG_BITS = 18
#: How the DDG / Skellam rows sum the clients' words: dprec's SecAgg simulator (the modular sum), or Flower's
#: SecAgg+ protocol run in process (:func:`dprec.flower.secagg_plus_sum`; needs ``flwr``).
SECAGG_TRANSPORTS = ("simulator", "flower")
#: Count-sketch compression of the sketched DDG / Skellam rows: one row, ``dim / 4`` columns.
SKETCH_COMPRESSION = 4
#: Joint noise composes S x T steps: the improved RDP conversion (dp_accounting's PLD grid at tiny noise
#: multipliers, which the calibration's bracket visits, needs gigabytes).
JOINT_NOISE_CONVERSION = "rdp-balle"


class NoGuarantee(Exception):
    """The mechanism has no bound against this observer (or cannot reach the target); ``str`` says why."""


@dataclass(frozen=True)
class Setting:
    """Everything a calibration depends on (the same for every mechanism of a comparison)."""

    num_clients: int
    clients_per_round: int
    rounds: int
    target_epsilon: float
    delta: float
    clip: float
    shapes: tuple[tuple[str, tuple[int, ...]], ...]
    client_sizes: tuple[int, ...]
    local_epochs: int
    batch_size: int

    @property
    def sampling_rate(self) -> float:
        return self.clients_per_round / self.num_clients

    @property
    def dim(self) -> int:
        return int(sum(math.prod(s) for _, s in self.shapes))

    @property
    def template(self) -> dict[str, np.ndarray]:
        return {name: np.zeros(shape, dtype=np.float32) for name, shape in self.shapes}


@dataclass
class Row:
    """One mechanism's guarantee against one observer."""

    epsilon: float
    reason: Optional[str] = None  # why epsilon is inf
    local_epsilon: Optional[float] = None  # one message's epsilon against the server (local mechanisms)
    conversion: str = ""
    unit: str = "client"  # whose data the guarantee protects: a client's update or one example
    note: Optional[str] = None  # e.g. the paper's own number for the reproduction row


@dataclass
class RoundOutput:
    """What a round produced: the server's estimate of the mean update and what went over the wire."""

    update: Optional[dict[str, np.ndarray]]  # None: nothing to apply
    messages: int  # messages sent (including noise-only top-ups)
    bytes_sent: int  # their total bytes
    message_bytes: int  # bytes of one client message
    clipped: Optional[int] = 0  # client updates whose norm exceeded the clip (None: not counted)


@dataclass
class Client:
    """One client's data as the runner hands it to a mechanism."""

    index: int
    x: np.ndarray
    y: np.ndarray
    batch_rng: np.random.Generator  # the seeded minibatch order (shared by every mechanism)


def _solve(f: Callable[[float], float], target: float, lo: float, hi: float, increasing: bool,
           what: str, rtol: float = 1e-3) -> float:
    """The parameter ``v`` in ``[lo, hi]`` with ``target (1 - rtol) <= f(v) <= target`` by bisection in log space.

    ``f`` is the accountant's reported epsilon, monotone in ``v``; the result is on the safe side
    (``f(v) <= target``) and within ``rtol`` of it (the 1% promise, with margin)."""
    ok_side, bad_side = (lo, hi) if increasing else (hi, lo)
    if f(ok_side) > target:
        raise NoGuarantee(f"{what}: no parameter in [{lo:g}, {hi:g}] reaches epsilon {target:g}")
    if f(bad_side) <= target:
        return bad_side
    from ..accounting.baselines import _bisect_to_target  # noqa: PLC0415 - the library's safe-side bisection

    return _bisect_to_target(f, target, ok_side, bad_side, rtol)


def _clip_vector(v: np.ndarray, clip: float) -> tuple[np.ndarray, bool]:
    norm = float(np.linalg.norm(v))
    if norm > clip:
        return v * (clip / norm), True
    return v, False


def _local_update(model: Model, w: dict[str, np.ndarray], client: Client, setting: Setting,
                  local_lr: float) -> dict[str, np.ndarray]:
    """The client's plain local SGD (every mechanism but joint noise): new weights minus ``w``."""
    batches = client_batches(np.arange(client.y.size), setting.local_epochs, setting.batch_size, client.batch_rng)
    new = local_sgd(model, w, client.x, client.y, batches, local_lr)
    return {k: new[k] - w[k] for k in w}


class Mechanism:
    """Base class: a named mechanism with a calibration, a guarantee and a round."""

    key: str = ""
    label: str = ""
    sampling: str = "poisson"  # how the runner draws the round's clients: "poisson" or "with_replacement"
    unit: str = "client"
    reproduction: bool = False
    trust: str = ""  # one sentence: who must be trusted, and for what

    def calibrate(self, setting: Setting, threat_model: str) -> dict[str, float]:
        raise NotImplementedError

    def guarantee(self, setting: Setting, params: dict[str, float], threat_model: str) -> Row:
        raise NotImplementedError

    def round(self, setting: Setting, params: dict[str, float], model: Model, w: dict[str, np.ndarray],
              clients: list[Client], ctx: "RoundContext") -> RoundOutput:
        raise NotImplementedError

    def describe(self, params: dict[str, float]) -> str:
        return ", ".join(f"{k}={v:.4g}" for k, v in params.items())


@dataclass
class RoundContext:
    """Per-run state a mechanism may keep between rounds, and the run's sources of randomness."""

    private_rng: np.random.Generator  # OS entropy: every private draw
    public_rng: np.random.Generator  # seeded: public choices (SecAgg round seeds, noise top-up clients)
    local_lr: float
    state: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- FedAvg and DP-FedAvg


class FedAvg(Mechanism):
    key, label = "fedavg", "FedAvg (no privacy)"
    trust = "no privacy: everyone who sees a message sees the client's raw update"

    def calibrate(self, setting: Setting, threat_model: str) -> dict[str, float]:
        raise NoGuarantee("no privacy mechanism")

    def guarantee(self, setting: Setting, params: dict[str, float], threat_model: str) -> Row:
        return Row(math.inf, "no privacy mechanism", unit="-")

    def round(self, setting, params, model, w, clients, ctx):
        if not clients:
            return RoundOutput(None, 0, 0, FLOAT32_BYTES * setting.dim)
        total = None
        for c in clients:
            u = _local_update(model, w, c, setting, ctx.local_lr)
            total = u if total is None else {k: total[k] + u[k] for k in u}
        assert total is not None
        nb = FLOAT32_BYTES * setting.dim
        return RoundOutput({k: v / len(clients) for k, v in total.items()}, len(clients), nb * len(clients), nb)


class DPFedAvg(Mechanism):
    key, label = "dp-fedavg", "DP-FedAvg (central Gaussian)"
    trust = "the server sees every raw clipped update and must add the noise honestly"

    def calibrate(self, setting: Setting, threat_model: str) -> dict[str, float]:
        if threat_model != "central":
            raise NoGuarantee(self.guarantee(setting, {"z": 1.0}, threat_model).reason or "")
        from ..accounting import sampled_gaussian_calibrate  # noqa: PLC0415

        try:
            z = sampled_gaussian_calibrate(setting.target_epsilon, setting.sampling_rate, setting.rounds,
                                           setting.delta, threat_model="central", relation=RELATION, rtol=1e-3)
        except ValueError as exc:
            raise NoGuarantee(str(exc)) from None
        return {"z": z}

    def guarantee(self, setting: Setting, params: dict[str, float], threat_model: str) -> Row:
        from ..accounting import sampled_gaussian_epsilon  # noqa: PLC0415

        g = sampled_gaussian_epsilon(params["z"], setting.sampling_rate, setting.rounds, setting.delta,
                                     threat_model=threat_model, relation=RELATION)
        return Row(float(g.epsilon), g.reasons.get(RELATION) if not g.finite else None, conversion=g.conversion)

    def round(self, setting, params, model, w, clients, ctx):
        dim = setting.dim
        total = np.zeros(dim)
        clipped = 0
        for c in clients:
            v, was = _clip_vector(flatten(_local_update(model, w, c, setting, ctx.local_lr)), setting.clip)
            total += v
            clipped += was
        # Noise every round, also when nobody was drawn (the accounting's Poisson-sampled Gaussian).
        total += ctx.private_rng.normal(0.0, params["z"] * setting.clip, size=dim)
        mean = total / (setting.sampling_rate * setting.num_clients)
        nb = FLOAT32_BYTES * dim
        return RoundOutput(unflatten(mean, w), len(clients), nb * len(clients), nb, clipped)


# --------------------------------------------------------------------------- DP-REC and its Gaussian


class DPREC(Mechanism):
    """DP-REC's codec; ``sampling`` picks the runner's client sampling and the accountant's."""

    trust = "nobody: each message is private on its own (the bound holds against the server, who knows the sender)"

    def __init__(self, sampling: str = "poisson", bits: int = DEFAULT_DPREC_BITS, paper: bool = False) -> None:
        self.sampling = sampling
        self.bits = bits
        self.reproduction = paper
        tag = "with replacement" if sampling == "with_replacement" else "Poisson"
        if paper:
            self.key = "dp-rec-paper"
            self.label = f"DP-REC, paper's Alg. 7 ({tag}; reproduction)"
            self.trust = "as the paper: its accounting is reproduced, not proved; see the sound rows"
        else:
            self.key = "dp-rec-wr" if sampling == "with_replacement" else "dp-rec"
            self.label = f"DP-REC ({tag}, {bits} bits/tensor)"

    def _groups(self, setting: Setting) -> int:
        # The codec's own layout: a tensor split into several groups counts each.
        from ..rec.codec import DPRECCodec  # noqa: PLC0415

        return DPRECCodec(sigma=1.0, bits=max(self.bits, 1)).layout(setting.template).num_groups

    def _accounting(self, setting: Setting, c: float, threat_model: Optional[str], method: str = "sound") -> Any:
        from ..accounting import dprec_epsilon  # noqa: PLC0415

        groups = self._groups(setting)
        kw: dict[str, Any] = {}
        if method == "sound":
            kw = dict(threat_model=threat_model, relation=RELATION, groups=groups)
        return dprec_epsilon(
            rounds=setting.rounds, clients_per_round=setting.clients_per_round, num_clients=setting.num_clients,
            clip_multiplier=c, delta=setting.delta, bits=self.bits * groups, sampling=self.sampling, method=method,
            **kw,
        )

    def calibrate(self, setting: Setting, threat_model: str) -> dict[str, float]:
        from ..accounting import dprec_calibrate  # noqa: PLC0415

        groups = self._groups(setting)
        kw: dict[str, Any] = dict(threat_model=threat_model, relation=RELATION, groups=groups)
        if self.reproduction:
            kw = {}
        try:
            c = dprec_calibrate(
                target_epsilon=setting.target_epsilon, rounds=setting.rounds,
                clients_per_round=setting.clients_per_round, num_clients=setting.num_clients, delta=setting.delta,
                bits=self.bits * groups, sampling=self.sampling, method="paper" if self.reproduction else "sound",
                **kw,
            )
        except ValueError as exc:
            raise NoGuarantee(str(exc).split("; valid")[0]) from None
        return {"c": c, "sigma": setting.clip / c}

    def guarantee(self, setting: Setting, params: dict[str, float], threat_model: str) -> Row:
        note = None
        if self.reproduction:
            paper = self._accounting(setting, params["c"], None, method="paper")
            note = (f"the paper's Algorithm 7 reports epsilon {paper.epsilon:.3g} at this c (a reproduction, not a "
                    "guarantee); the epsilon column is the sound bound at the same c")
        try:
            acc = self._accounting(setting, params["c"], threat_model)
        except ValueError as exc:  # e.g. too few bits to pay REC's total-variation cost against "central"
            return Row(math.inf, str(exc).split("; use")[0], note=note)
        local = acc.local.per_message if acc.local is not None else None
        reason = None
        if not acc.finite:
            reason = acc.reasons.get(RELATION) or "no bound at these bits (REC's total-variation cost exceeds delta)"
        return Row(float(acc.epsilon), reason, local, str(acc.conversion), note=note)

    def describe(self, params: dict[str, float]) -> str:
        return f"c={params['c']:.4g}, sigma=C/c={params['sigma']:.4g}, K=2^{self.bits} per tensor"

    def round(self, setting, params, model, w, clients, ctx):
        from ..rec.codec import DPRECCodec  # noqa: PLC0415

        codec = ctx.state.get("codec")
        if codec is None:
            codec = ctx.state["codec"] = DPRECCodec(sigma=params["sigma"], clip_multiplier=params["c"], bits=self.bits)
        template = setting.template
        if not clients:
            return RoundOutput(None, 0, 0, codec.layout(template).message_nbytes)
        blobs = []
        clipped = 0
        for c in clients:
            msg, info = codec.encode(_local_update(model, w, c, setting, ctx.local_lr), rng=ctx.private_rng,
                                     seed=int(ctx.private_rng.integers(0, 2**63)), return_info=True)
            clipped += int(info.clipped)
            blobs.append(msg.to_bytes())
        mean = codec.aggregate(blobs, template)
        nb = len(blobs[0])
        return RoundOutput({k: np.asarray(v, dtype=np.float32) for k, v in mean.items()}, len(blobs), nb * len(blobs),
                           nb, clipped)


class LocalGaussian(DPREC):
    """What DP-REC compresses: the clipped update plus N(0, sigma^2) per coordinate, sent as float32, attributed."""

    trust = "nobody: each float32 message is private on its own (against the server, who knows the sender)"

    def __init__(self) -> None:
        super().__init__(sampling="poisson")
        self.key = "local-gaussian"
        self.label = "Local Gaussian (float32; what DP-REC compresses)"
        self.bits = 0

    def _accounting(self, setting, c, threat_model, method="sound"):
        from ..accounting import dprec_epsilon  # noqa: PLC0415

        return dprec_epsilon(
            rounds=setting.rounds, clients_per_round=setting.clients_per_round, num_clients=setting.num_clients,
            clip_multiplier=c, delta=setting.delta, bits=None, sampling="poisson", threat_model=threat_model,
            relation=RELATION,
        )

    def calibrate(self, setting: Setting, threat_model: str) -> dict[str, float]:
        from ..accounting import dprec_calibrate  # noqa: PLC0415

        try:
            c = dprec_calibrate(
                target_epsilon=setting.target_epsilon, rounds=setting.rounds,
                clients_per_round=setting.clients_per_round, num_clients=setting.num_clients, delta=setting.delta,
                bits=None, sampling="poisson", threat_model=threat_model, relation=RELATION,
            )
        except ValueError as exc:
            raise NoGuarantee(str(exc).split("; valid")[0]) from None
        return {"c": c, "sigma": setting.clip / c}

    def describe(self, params: dict[str, float]) -> str:
        return f"c={params['c']:.4g}, sigma=C/c={params['sigma']:.4g}"

    def round(self, setting, params, model, w, clients, ctx):
        nb = FLOAT32_BYTES * setting.dim
        if not clients:
            return RoundOutput(None, 0, 0, nb)
        total = np.zeros(setting.dim)
        clipped = 0
        for c in clients:
            v, was = _clip_vector(flatten(_local_update(model, w, c, setting, ctx.local_lr)), setting.clip)
            clipped += was
            msg = (v + ctx.private_rng.normal(0.0, params["sigma"], size=v.size)).astype(np.float32)
            total += msg
        return RoundOutput(unflatten(total / len(clients), w), len(clients), nb * len(clients), nb, clipped)


# --------------------------------------------------------------------------- SecAgg: DDG and Skellam


class SecAggNoise(Mechanism):
    """DDG or Skellam through :mod:`dprec.secagg`'s pipeline; exactly ``B`` noise shares per round.

    The pipeline is calibrated for ``num_clients = B`` noise shares, against each observer: for
    ``"central"`` with Poisson amplification (the sample hidden; the server divides by ``B``, not by
    the drawn count, so the released model reveals only the sum), for ``"messages"`` and
    ``"server"`` with the participation mixture of the unsampled round (a masked message still shows
    the server who took part). In a round with ``k`` Poisson-drawn
    participants, the first ``min(k, B)`` in a random order add their share (``pipeline.encode``); the
    others send their rounded vector without noise; when ``k < B``, ``B - k`` idle clients chosen at
    random send a share on a zero update. The total noise is then always ``B`` shares, whoever is
    drawn, so under the zero-out relation the round is the Poisson-sampled mechanism the accountant
    composes. The server sees only the modular sum (the secure-aggregation simulator).

    ``transport="flower"`` (the ``ddg-flower`` and ``skellam-flower`` rows, run only when named): the sum of the
    same words is computed by Flower's SecAgg+ protocol run in process (:func:`dprec.flower.secagg_plus_sum`),
    checked equal to the simulator's on every round; same calibration, same accounting, so these rows are the
    simulator's rows for the same seeds, with SecAgg+'s cost in their time. Only the summation changes: the
    Flower integration's own client mod, decode and per-round accounting (``DistributedDPStrategy``) are tested
    in Flower simulations instead. Needs ``flwr`` (Python >= 3.11)."""

    trust = ("the secure-aggregation protocol (no collusion that unmasks messages), and whoever assigns the B noise "
             "shares (clients told they are beyond B add none)")

    def __init__(self, kind: str, sketch: bool, bits: int = DEFAULT_SECAGG_BITS, transport: str = "simulator") -> None:
        if transport not in SECAGG_TRANSPORTS:
            raise ValueError(f"transport must be one of {SECAGG_TRANSPORTS}, got {transport!r}")
        self.kind, self.sketch, self.bits, self.transport = kind, sketch, bits, transport
        self._calibrated: dict[tuple[Setting, str], dict[str, float]] = {}
        name = "DDG" if kind == "ddg" else "Skellam"
        flower = transport == "flower"
        self.key = f"{kind}{'-sketch' if sketch else ''}{'-flower' if flower else ''}"
        self.label = (f"{name} + SecAgg{' + count-sketch' if sketch else ''} ({bits}-bit"
                      f"{', summed by Flower SecAgg+' if flower else ''})")

    def _sketch_shape(self, setting: Setting) -> Optional[tuple[int, int]]:
        return (1, max(1, math.ceil(setting.dim / SKETCH_COMPRESSION))) if self.sketch else None

    def _pipeline(self, setting: Setting, seed: int, **kw: Any) -> Any:
        from ..secagg import DDGPipeline, SkellamPipeline  # noqa: PLC0415

        cls = DDGPipeline if self.kind == "ddg" else SkellamPipeline
        return cls(setting.dim, clip=setting.clip, bits=self.bits, num_clients=setting.clients_per_round, seed=seed,
                   delta=setting.delta, steps=setting.rounds, sampling_rate=setting.sampling_rate,
                   sketch=self._sketch_shape(setting), **kw)

    def calibrate(self, setting: Setting, threat_model: str) -> dict[str, float]:
        # "messages" and "server" share one curve (participation seen); "central" is amplified (sample hidden).
        key = (setting, "central" if threat_model == "central" else "seen")
        if key not in self._calibrated:
            try:
                pipe = self._pipeline(setting, 0, target_epsilon=setting.target_epsilon, threat_model=threat_model)
            except ValueError as exc:
                raise NoGuarantee(str(exc)) from None
            self._calibrated[key] = {"noise_stddev": pipe.noise_stddev}
        return dict(self._calibrated[key])

    def guarantee(self, setting: Setting, params: dict[str, float], threat_model: str) -> Row:
        pipe = self._pipeline(setting, 0, noise_stddev=params["noise_stddev"])
        g = pipe.guarantee(threat_model=threat_model, relation=RELATION)  # rdp-mironov, as the calibration
        return Row(float(g.epsilon), None if g.finite else g.reasons.get(RELATION), conversion=g.conversion,
                   note="no local guarantee: a message alone is masked, its noise share alone is small")

    def describe(self, params: dict[str, float]) -> str:
        sk = "" if not self.sketch else f", sketch 1 x dim/{SKETCH_COMPRESSION}"
        return f"share stddev {params['noise_stddev']:.4g} x B shares{sk}"

    def round(self, setting, params, model, w, clients, ctx):
        base = ctx.state.get("pipeline")
        if base is None:
            base = ctx.state["pipeline"] = self._pipeline(setting, 0, noise_stddev=params["noise_stddev"])
        pipe = base.with_seed(int(ctx.public_rng.integers(0, 2**63)))
        b = setting.clients_per_round
        order = ctx.public_rng.permutation(len(clients))
        words = []
        clipped = 0
        for rank, i in enumerate(order):
            u = flatten(_local_update(model, w, clients[i], setting, ctx.local_lr))
            clipped += int(np.linalg.norm(u) > setting.clip)
            words.append(pipe.encode(u, rng=ctx.private_rng, add_noise=rank < b))  # beyond B: no share
        top_up = max(0, b - len(clients))
        for _ in range(top_up):
            words.append(pipe.encode(np.zeros(setting.dim), rng=ctx.private_rng))
        nb = pipe.bits_per_client // 8
        total = pipe.aggregate(np.stack(words))
        if self.transport == "flower" and len(words) >= 2:
            # Flower's own SecAgg+ (key agreement, Shamir shares, masks, unmasking) computes the sum, in process; it
            # must equal the simulator's to the bit, so the row is the simulator's row for the same seeds.
            from ..flower import secagg_plus_sum  # noqa: PLC0415

            secure = secagg_plus_sum(words, self.bits)
            if not np.array_equal(secure, total):
                raise RuntimeError("Flower's SecAgg+ sum differs from the modular sum of the clients' words")
            total = secure
        # Divided by B, not the drawn k, and applied even when nobody was drawn (noise alone): the released model
        # is then a function of the sum alone, so the central observer's amplification (the sample hidden) holds.
        mean = np.asarray(pipe.decode(total, num_clients=b))
        return RoundOutput(unflatten(mean, w), len(words), nb * len(words), nb, clipped)


# --------------------------------------------------------------------------- QMGeo


class QMGeo(Mechanism):
    """QMGeo with two levels (one bit per coordinate) on inputs restricted to ``{-s, +s}``.

    QMGeo's exact Renyi divergence is finite only on a promised finite input set
    (:mod:`dprec.accounting.qmgeo`). The client clips its update to ``C``, clips each coordinate to
    ``s = C / sqrt(d)`` and rounds it without bias onto ``{-s, +s}`` (OS entropy); QMGeo then
    quantizes to the levels ``+-w_max``. The calibrated ``w_max / s`` sets epsilon: the exact RDP of
    ``d`` coordinates per message, each participation attributed (a Poisson-drawn client that is not
    drawn sends nothing: ``log(1 - q + q exp((a-1) D_a)) / (a-1)`` per round), composed over the
    rounds, improved conversion. Two levels, because the input restriction costs more than the
    geometric spread saves: with more levels the same epsilon needs a wider spread."""

    key, label = "qmgeo", "QMGeo (1 bit/coordinate, local)"
    trust = "nobody: each message is private on its own (against the server, who knows the sender)"
    levels = 2

    def _epsilon(self, setting: Setting, ratio: float) -> tuple[float, float]:
        from ..accounting import qmgeo_guarantee  # noqa: PLC0415

        # The codec's scale is s: inputs +-s and levels +-ratio*s; the divergence depends on the ratio only.
        kw = dict(dim=setting.dim, inputs=[-1.0, 1.0], w_max=ratio)
        eps = qmgeo_guarantee(self.levels, 1.0, setting.delta, rounds=setting.rounds,
                              participation_rate=setting.sampling_rate, **kw).epsilon
        local = qmgeo_guarantee(self.levels, 1.0, setting.delta, rounds=1, **kw).epsilon
        return float(eps), float(local)

    def calibrate(self, setting: Setting, threat_model: str) -> dict[str, float]:
        ratio = _solve(lambda r: self._epsilon(setting, r)[0], setting.target_epsilon, 1.0 + 1e-9, 1e9,
                       increasing=False, what="QMGeo w_max/s")
        return {"ratio": ratio}

    def guarantee(self, setting: Setting, params: dict[str, float], threat_model: str) -> Row:
        eps, local = self._epsilon(setting, params["ratio"])
        return Row(eps, None, local, "rdp-balle")

    def describe(self, params: dict[str, float]) -> str:
        return f"w_max/s={params['ratio']:.4g}, s=C/sqrt(d), {self.levels} levels"

    def round(self, setting, params, model, w, clients, ctx):
        from ..qmgeo.codec import QMGeoCodec  # noqa: PLC0415

        s = setting.clip / math.sqrt(setting.dim)
        codec = QMGeoCodec(w_max=params["ratio"] * s, levels=self.levels, p=1.0)
        nb = codec.layout(setting.template).message_nbytes
        if not clients:
            return RoundOutput(None, 0, 0, nb)
        msgs = []
        clipped = 0
        for c in clients:
            v, was = _clip_vector(flatten(_local_update(model, w, c, setting, ctx.local_lr)), setting.clip)
            clipped += was
            v = np.clip(v, -s, s)
            up = ctx.private_rng.random(v.size) < (v + s) / (2.0 * s)  # unbiased onto {-s, +s}
            msgs.append(codec.encode(unflatten(np.where(up, s, -s), w), rng=ctx.private_rng))
        mean = codec.aggregate(msgs, setting.template)
        return RoundOutput({k: np.asarray(v, dtype=np.float32) for k, v in mean.items()}, len(msgs), nb * len(msgs),
                           nb, clipped)


# --------------------------------------------------------------------------- joint noise


class JointNoise(Mechanism):
    """Heikkila et al.'s joint-noise DP-SGD: per-example clipping, local steps, noise shares through SecAgg.

    Every participant runs one DP-SGD step per round at the global model (Poisson rate
    ``q_e = min(1, batch / median client size)``, each example's gradient clipped to ``C``), adding a
    noise share of standard deviation ``sigma_total C / sqrt(B)``. One step, ``S = 1``: with more
    local steps a client's later steps start from its own noisy iterate, which only its own share
    masks (so one example can move every later gradient of its client); Heikkila et al.'s
    sum-dominated argument treats that iterate as public, and dprec does not claim it; as for DDG, exactly ``B``
    shares per round (participants beyond ``B`` add none, idle clients top up with noise-only
    updates). Accounted by :func:`dprec.accounting.joint_noise_guarantee`: ``T`` Poisson-sampled
    Gaussian steps at ``sigma_total`` for one EXAMPLE (record-level), the same against every
    observer (secure aggregation), zero-out. The step size is the same for every client (not
    divided by its own batch size), so the shares add up in one Gaussian per step."""

    key, label = "joint-noise", "Joint-noise DP-SGD + SecAgg"

    def __init__(self) -> None:
        self._calibrated: dict[Setting, dict[str, float]] = {}
    unit = "example"
    trust = "the secure-aggregation protocol and clients adding their shares; protects one example, not a client"

    def _steps(self, setting: Setting) -> tuple[float, int]:
        # One local step per round (S = 1): with more, a client's second step starts from a private iterate
        # masked only by its own noise share, which the sum-dominated argument does not cover (see the class).
        median = float(np.median(setting.client_sizes))
        return min(1.0, setting.batch_size / median), 1

    def calibrate(self, setting: Setting, threat_model: str) -> dict[str, float]:
        from ..accounting import joint_noise_guarantee  # noqa: PLC0415

        if setting in self._calibrated:  # the same curve for every observer (secure aggregation)
            return dict(self._calibrated[setting])
        q_e, steps = self._steps(setting)

        def eps(z: float) -> float:
            return float(joint_noise_guarantee(z, q_e, setting.delta, local_steps=steps, rounds=setting.rounds,
                                               threat_model=threat_model, relation=RELATION,
                                               conversion=JOINT_NOISE_CONVERSION).epsilon)

        z = _solve(eps, setting.target_epsilon, 1e-2, 1e4, increasing=False, what="joint-noise sigma_total")
        self._calibrated[setting] = {"sigma_total": z}
        return {"sigma_total": z}

    def guarantee(self, setting: Setting, params: dict[str, float], threat_model: str) -> Row:
        from ..accounting import joint_noise_guarantee  # noqa: PLC0415

        q_e, steps = self._steps(setting)
        g = joint_noise_guarantee(params["sigma_total"], q_e, setting.delta, local_steps=steps,
                                  rounds=setting.rounds, threat_model=threat_model, relation=RELATION,
                                  conversion=JOINT_NOISE_CONVERSION)
        return Row(float(g.epsilon), None if g.finite else g.reasons.get(RELATION), conversion=g.conversion,
                   unit="example", note="protects one example (per-example clipping), not a client's update")

    def describe(self, params: dict[str, float]) -> str:
        return f"sigma_total={params['sigma_total']:.4g} (B shares), per-example clip C"

    def round(self, setting, params, model, w, clients, ctx):
        q_e, steps = self._steps(setting)
        b = setting.clients_per_round
        share = params["sigma_total"] / math.sqrt(b)
        mean_size = float(np.mean(setting.client_sizes))
        order = ctx.public_rng.permutation(len(clients))
        total = np.zeros(setting.dim)
        nb = FLOAT32_BYTES * setting.dim
        for rank, i in enumerate(order):
            c = clients[i]
            # dp_sgd_local divides by q_e * len(x); scale lr so every client steps by local_lr / (q_e * mean size).
            lr = ctx.local_lr * c.y.size / mean_size
            new = dp_sgd_local(model, w, c.x, c.y, steps=steps, sampling_rate=q_e, clip=setting.clip,
                               noise_stddev=share * setting.clip if rank < b else 0.0, lr=lr,
                               data_rng=c.batch_rng, noise_rng=ctx.private_rng)
            total += flatten({k: new[k] - w[k] for k in w})
        top_up = max(0, b - len(clients))
        for _ in range(top_up):  # an idle client's update is its noise shares alone, at the same step size
            step = ctx.local_lr / (q_e * mean_size)
            total -= step * ctx.private_rng.normal(0.0, share * setting.clip, size=(steps, setting.dim)).sum(axis=0)
        sent = len(clients) + top_up
        if not clients:
            return RoundOutput(None, sent, nb * sent, nb)
        return RoundOutput(unflatten(total / len(clients), w), sent, nb * sent, nb, None)


# --------------------------------------------------------------------------- registry


def mechanism_registry() -> dict[str, Mechanism]:
    """Every mechanism ``dprec compare`` knows, by key, in the order of its tables."""
    mechs: list[Mechanism] = [
        FedAvg(),
        DPFedAvg(),
        DPREC("poisson"),
        DPREC("with_replacement"),
        DPREC("with_replacement", paper=True),
        LocalGaussian(),
        SecAggNoise("ddg", sketch=False),
        SecAggNoise("ddg", sketch=True),
        SecAggNoise("skellam", sketch=False),
        SecAggNoise("skellam", sketch=True),
        SecAggNoise("ddg", sketch=False, transport="flower"),
        SecAggNoise("skellam", sketch=False, transport="flower"),
        QMGeo(),
        JointNoise(),
    ]
    return {m.key: m for m in mechs}


MECHANISMS: tuple[str, ...] = tuple(mechanism_registry())
#: Rows run only when named (``--mechanism ddg-flower``): Flower's SecAgg+ costs O(B k) key agreements and masks
#: per round in one process, minutes a round at B = 100; they reproduce the ``ddg`` / ``skellam`` rows.
OPT_IN_MECHANISMS: tuple[str, ...] = ("ddg-flower", "skellam-flower")


def flower_unavailable_reason() -> Optional[str]:
    """Why the ``-flower`` rows cannot run here (``dprec.flower`` needs flwr and Python >= 3.11), or None."""
    import importlib.util  # noqa: PLC0415
    import sys  # noqa: PLC0415

    if sys.version_info < (3, 11):
        return "dprec.flower needs Python >= 3.11"
    if importlib.util.find_spec("flwr") is None:
        return 'flwr is not installed: pip install "dprec[flower]"'
    return None
