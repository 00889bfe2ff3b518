"""Run a comparison: calibrate every mechanism per threat model, train each calibration ``runs`` times.

The split, the initial model and the SecAgg round seeds follow ``seed`` and the run number. The
client sampling and the minibatch order come from a per-run secret drawn from the OS entropy source
and stored nowhere (amplification by sampling needs the draw unpredictable); every mechanism of a
run shares it, so they see the same sampled clients and minibatches (a paired comparison).
Everything private (DP-REC's seeds and Gumbel draws, every noise share and rounding) comes from the
OS entropy source.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import secrets
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, Optional

import numpy as np

from .federations import Federation, digits_federation, synthetic_federation
from .mechanisms import (
    OPT_IN_MECHANISMS,
    THREAT_MODELS,
    Client,
    Mechanism,
    NoGuarantee,
    RoundContext,
    Setting,
    flower_unavailable_reason,
    mechanism_registry,
)

__all__ = [
    "FEDERATION_DEFAULTS",
    "CompareConfig",
    "CompareResult",
    "FederationResult",
    "PlanResult",
    "RowResult",
    "RunResult",
    "run_compare",
]

#: Per-federation defaults: clients N, expected clients per round B, rounds T, test accuracy every k rounds.
FEDERATION_DEFAULTS: dict[str, dict[str, int]] = {
    "digits": {"clients": 100, "clients_per_round": 10, "rounds": 300, "eval_every": 10},
    "synthetic": {"clients": 10_000, "clients_per_round": 100, "rounds": 100, "eval_every": 5},
}
QUICK_ROUNDS = {"digits": 40, "synthetic": 20}
#: Upper bounds of the settings (a setting is work or memory in proportion: refused with its name above these).
LIMITS: dict[str, int] = {
    "runs": 1_000, "rounds": 1_000_000, "clients": 200_000, "clients_per_round": 200_000, "eval_every": 1_000_000,
    "local_epochs": 1_000, "batch_size": 1_000_000, "workers": 1_024,
}
#: Clients of digits: at most one per training image (no client may be empty).
DIGITS_TRAIN_SIZE = 1_437


@dataclass
class CompareConfig:
    """What one comparison depends on (``dprec compare --help`` explains each)."""

    federations: tuple[str, ...] = ("digits", "synthetic")
    mechanisms: tuple[str, ...] = ()  # () = all
    threat_models: tuple[str, ...] = THREAT_MODELS
    epsilon: float = 6.0
    delta: Optional[float] = None  # None: N ** -1.1 of each federation
    runs: int = 3
    rounds: Optional[int] = None  # None: each federation's default
    clients: Optional[int] = None
    clients_per_round: Optional[int] = None
    eval_every: Optional[int] = None
    clip: float = 1.0
    server_lr: float = 1.0
    local_epochs: int = 2
    local_lr: float = 0.1
    batch_size: int = 16
    alpha: float = 0.5
    seed: int = 0
    workers: int = 0  # 0: every core
    quick: bool = False

    def validate(self) -> None:
        """Raise ValueError (TypeError) naming the first bad setting."""
        known = mechanism_registry()
        for name in self.federations:
            if name not in FEDERATION_DEFAULTS:
                raise ValueError(f"federations: unknown {name!r}; valid: {tuple(FEDERATION_DEFAULTS)}")
        if not self.federations:
            raise ValueError("federations must name at least one federation")
        for key in self.mechanisms:
            if key not in known:
                raise ValueError(f"mechanisms: unknown {key!r}; valid: {tuple(known)}")
            if key in OPT_IN_MECHANISMS and flower_unavailable_reason():
                raise ValueError(f"mechanisms: {key!r} sums through Flower's SecAgg+, but {flower_unavailable_reason()}")
        if not self.threat_models:
            raise ValueError("threat_models must name at least one threat model")
        for tm in self.threat_models:
            if tm not in THREAT_MODELS:
                raise ValueError(f"threat_models: unknown {tm!r}; valid: {THREAT_MODELS}")
        _positive(self.epsilon, "epsilon")
        if self.delta is not None and not 0.0 < float(self.delta) < 1.0:
            raise ValueError(f"delta must be in (0, 1), got {self.delta!r}")
        for name in ("runs", "local_epochs", "batch_size"):
            _count(getattr(self, name), name)
        for name in ("rounds", "clients", "clients_per_round", "eval_every"):
            if getattr(self, name) is not None:
                _count(getattr(self, name), name)
        for name, top in LIMITS.items():
            value = getattr(self, name)
            if isinstance(value, (int, np.integer)) and value > top:
                raise ValueError(f"{name} must be <= {top:,}, got {value:,}")
        for name in ("clip", "server_lr", "local_lr", "alpha"):
            _positive(getattr(self, name), name)
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {self.seed!r}")
        if not isinstance(self.workers, int) or isinstance(self.workers, bool) or self.workers < 0:
            raise ValueError(f"workers must be a non-negative int, got {self.workers!r}")
        for fed in self.federations:
            n, b = self.federation_value(fed, "clients"), self.federation_value(fed, "clients_per_round")
            if b > n:
                raise ValueError(f"clients_per_round={b} exceeds clients={n} ({fed})")
            if fed == "digits" and n > DIGITS_TRAIN_SIZE:
                raise ValueError(f"clients={n} exceeds digits' {DIGITS_TRAIN_SIZE:,} training images (no client may "
                                 "be empty)")

    def federation_value(self, federation: str, name: str) -> int:
        """``name`` (clients, clients_per_round, rounds, eval_every) for ``federation``: override or default."""
        override = getattr(self, name)
        if override is not None:
            return int(override)
        if name == "rounds" and self.quick:
            return QUICK_ROUNDS[federation]
        return FEDERATION_DEFAULTS[federation][name]

    def mechanism_keys(self) -> tuple[str, ...]:
        """The mechanisms to run: those asked for, or all but :data:`OPT_IN_MECHANISMS` (the Flower SecAgg+ rows)."""
        if self.mechanisms:
            return self.mechanisms
        return tuple(k for k in mechanism_registry() if k not in OPT_IN_MECHANISMS)


def _positive(value: Any, name: str) -> float:
    if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not (float(value) > 0.0 and math.isfinite(float(value))):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def _count(value: Any, name: str) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return int(value)


# --------------------------------------------------------------------------- results


@dataclass
class RunResult:
    """One training run of one calibration."""

    run: int
    eval_rounds: list[int]
    accuracy: list[float]
    bytes_uploaded: list[int]  # cumulative bytes of every client message up to each eval round
    message_bytes: int
    total_bytes: int
    messages: int
    clipped_fraction: Optional[float]  # client updates clipped (None: not counted, e.g. per-example clipping)
    wall_s: float


@dataclass
class PlanResult:
    """One calibrated configuration of one mechanism, trained ``runs`` times."""

    mechanism: str
    label: str
    params: dict[str, float]
    description: str
    calibrated_for: list[str]  # the threat models whose target epsilon these parameters meet
    runs: list[RunResult] = field(default_factory=list)
    epsilons: dict[str, float] = field(default_factory=dict)  # these parameters' epsilon against each observer

    def final_accuracy(self) -> tuple[float, float]:
        """Mean and sample standard deviation over runs of the final test accuracy."""
        acc = np.array([r.accuracy[-1] for r in self.runs])
        return float(acc.mean()), float(acc.std(ddof=1)) if acc.size > 1 else 0.0


@dataclass
class RowResult:
    """A mechanism under one threat model: its guarantee at the parameters it trained with."""

    threat_model: str
    mechanism: str
    label: str
    plan: int  # index into FederationResult.plans (-1: nothing trained)
    calibrated: bool  # False: no guarantee here; the accuracy is that of the plan calibrated for another observer
    epsilon: float
    reason: Optional[str]
    local_epsilon: Optional[float]
    conversion: str
    unit: str
    trust: str
    reproduction: bool
    note: Optional[str] = None


@dataclass
class FederationResult:
    name: str
    description: str
    num_clients: int
    clients_per_round: int
    rounds: int
    delta: float
    dim: int
    float_bytes: int
    rule: str
    plans: list[PlanResult]
    rows: list[RowResult]


@dataclass
class CompareResult:
    config: CompareConfig
    federations: list[FederationResult]
    elapsed_s: float
    machine: str

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (infinite numbers as the string ``"inf"``); :meth:`from_dict` inverts it."""
        return _encode(asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CompareResult":
        """Inverse of :meth:`as_dict`; ValueError naming ``data`` for anything that is not such a result."""
        try:
            return cls._from_dict(data)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"data is not a dprec compare result (as_dict / --json): {type(exc).__name__}: {exc}") \
                from None

    @classmethod
    def _from_dict(cls, data: dict[str, Any]) -> "CompareResult":
        d = _decode(data)
        cfg = CompareConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in d["config"].items()})
        feds = []
        for f in d["federations"]:
            plans = [PlanResult(**{**p, "runs": [RunResult(**r) for r in p["runs"]]}) for p in f["plans"]]
            rows = [RowResult(**r) for r in f["rows"]]
            feds.append(FederationResult(**{**f, "plans": plans, "rows": rows}))
        return cls(config=cfg, federations=feds, elapsed_s=d["elapsed_s"], machine=d["machine"])


def _encode(x: Any) -> Any:
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if isinstance(x, dict):
        return {k: _encode(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_encode(v) for v in x]
    return x


def _decode(x: Any) -> Any:
    if x == "inf":
        return math.inf
    if x == "-inf":
        return -math.inf
    if isinstance(x, dict):
        return {k: _decode(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_decode(v) for v in x]
    return x


# --------------------------------------------------------------------------- building blocks


def build_federation(name: str, clients: int, alpha: float, seed: int) -> Federation:
    if name == "digits":
        return digits_federation(num_clients=clients, alpha=alpha, seed=seed)
    return synthetic_federation(num_clients=clients, seed=seed)


_FEDERATION_CACHE: dict[tuple, Federation] = {}


def _cached_federation(name: str, clients: int, alpha: float, seed: int) -> Federation:
    key = (name, clients, alpha, seed)
    if key not in _FEDERATION_CACHE:
        _FEDERATION_CACHE.clear()
        _FEDERATION_CACHE[key] = build_federation(name, clients, alpha, seed)
    return _FEDERATION_CACHE[key]


def _setting(cfg: CompareConfig, fed_name: str, fed: Federation) -> Setting:
    n = cfg.federation_value(fed_name, "clients")
    params = fed.model.init_params(np.random.default_rng([cfg.seed, 1]))
    return Setting(
        num_clients=n,
        clients_per_round=cfg.federation_value(fed_name, "clients_per_round"),
        rounds=cfg.federation_value(fed_name, "rounds"),
        target_epsilon=float(cfg.epsilon),
        delta=float(n) ** -1.1 if cfg.delta is None else float(cfg.delta),
        clip=float(cfg.clip),
        shapes=tuple((k, tuple(v.shape)) for k, v in params.items()),
        client_sizes=tuple(int(c.size) for c in fed.clients),
        local_epochs=cfg.local_epochs,
        batch_size=cfg.batch_size,
    )


def _same(a: dict[str, float], b: dict[str, float]) -> bool:
    return a.keys() == b.keys() and all(math.isclose(a[k], b[k], rel_tol=1e-9, abs_tol=0.0) for k in a)


def calibrate_plans(setting: Setting, keys: tuple[str, ...], threat_models: tuple[str, ...]
                    ) -> tuple[list[PlanResult], dict[tuple[str, str], Optional[int]], dict[tuple[str, str], str]]:
    """Calibrate every mechanism against every threat model; one plan per distinct parameter set.

    Returns the plans, ``(mechanism, threat model) -> plan index`` (None: no calibration there) and
    the reasons where calibration failed. A mechanism calibrated under none of ``threat_models`` is
    calibrated under the others (DP-FedAvg: central) so it still trains, labelled as such; FedAvg
    trains once with no parameters."""
    registry = mechanism_registry()
    plans: list[PlanResult] = []
    where: dict[tuple[str, str], Optional[int]] = {}
    why: dict[tuple[str, str], str] = {}
    for key in keys:
        mech = registry[key]
        mine: list[int] = []
        if mech.reproduction:  # calibrated by the paper's own accounting, under no threat model
            try:
                params = mech.calibrate(setting, "central")
            except NoGuarantee as exc:
                where.update({(key, tm): None for tm in threat_models})
                where[(key, "*")] = None
                why.update({(key, tm): f"the paper's accounting cannot calibrate here: {exc}" for tm in threat_models})
                continue
            plans.append(PlanResult(key, mech.label, params, mech.describe(params), ["paper's accounting"]))
            where.update({(key, tm): None for tm in threat_models})
            where[(key, "*")] = len(plans) - 1
            why.update({(key, tm): "calibrated by the paper's accounting, not against this observer"
                        for tm in threat_models})
            continue
        order = list(threat_models) + [tm for tm in THREAT_MODELS if tm not in threat_models]
        for tm in order:
            if tm not in threat_models and mine:
                break
            try:
                params = mech.calibrate(setting, tm)
            except NoGuarantee as exc:
                why[(key, tm)] = str(exc)
                where[(key, tm)] = None
                continue
            for i in mine:
                if _same(plans[i].params, params):
                    plans[i].calibrated_for.append(tm)
                    where[(key, tm)] = i
                    break
            else:
                plans.append(PlanResult(key, mech.label, params, mech.describe(params), [tm]))
                mine.append(len(plans) - 1)
                where[(key, tm)] = len(plans) - 1
        if not mine:
            plans.append(PlanResult(key, mech.label, {}, "no noise" if key == "fedavg" else "not calibrated", []))
            mine.append(len(plans) - 1)
        for tm in threat_models:
            if where.get((key, tm)) is None:
                where[(key, tm)] = None
        where[(key, "*")] = mine[0]
    return plans, where, why


def train(cfg: CompareConfig, fed_name: str, mechanism: str, params: dict[str, float], run: int, secret: int,
          on_round: Optional[Callable[[int], None]] = None) -> RunResult:
    """One training run of ``mechanism`` at ``params`` on ``fed_name`` (run number ``run``).

    ``secret`` seeds the client sampling and the minibatch order: the draws that amplification by
    sampling relies on must be unpredictable, so :func:`run_compare` takes it from the OS entropy
    source for every run (shared by the run's mechanisms, so they see the same clients) and stores
    it nowhere. The split and the initial model follow ``cfg.seed``; private noise is OS entropy.
    """
    t0 = time.perf_counter()
    n = cfg.federation_value(fed_name, "clients")
    fed = _cached_federation(fed_name, n, cfg.alpha, cfg.seed)
    setting = _setting(cfg, fed_name, fed)
    mech: Mechanism = mechanism_registry()[mechanism]
    model = fed.model
    w = model.init_params(np.random.default_rng([cfg.seed, 1, run]))
    sample_rng = np.random.default_rng([secret, 2])
    ctx = RoundContext(private_rng=np.random.default_rng(), public_rng=np.random.default_rng([cfg.seed, 4, run]),
                       local_lr=cfg.local_lr)
    eval_every = cfg.federation_value(fed_name, "eval_every")
    q, b = setting.sampling_rate, setting.clients_per_round
    eval_rounds, accuracy, uploaded = [0], [model.accuracy(w, fed.x_test, fed.y_test)], [0]
    total_bytes = messages = updates = 0
    clipped: Optional[int] = 0
    message_bytes = 0
    for r in range(1, setting.rounds + 1):
        if mech.sampling == "with_replacement":
            drawn = sample_rng.integers(0, n, size=b)
        else:
            drawn = np.flatnonzero(sample_rng.random(n) < q)
        clients = []
        for j, k in enumerate(drawn):
            idx = fed.clients[int(k)]
            clients.append(Client(int(k), fed.x_train[idx], fed.y_train[idx],
                                  np.random.default_rng([secret, 3, r, int(k), j])))
        out = mech.round(setting, params, model, w, clients, ctx)
        if out.update is not None:
            w = {k: (w[k] + cfg.server_lr * out.update[k]).astype(np.float32) for k in w}
        total_bytes += out.bytes_sent
        messages += out.messages
        clipped = None if clipped is None or out.clipped is None else clipped + out.clipped
        updates += len(clients)
        message_bytes = out.message_bytes
        if r % eval_every == 0 or r == setting.rounds:
            eval_rounds.append(r)
            accuracy.append(model.accuracy(w, fed.x_test, fed.y_test))
            uploaded.append(total_bytes)
        if on_round is not None:
            on_round(r)
    fraction = None if clipped is None else (clipped / updates if updates else 0.0)
    return RunResult(run, eval_rounds, accuracy, uploaded, message_bytes, total_bytes, messages, fraction,
                     time.perf_counter() - t0)


def _train_task(args: tuple) -> tuple[int, RunResult]:
    cfg, fed_name, mechanism, params, run, secret, plan_index = args
    _single_thread_kernels()
    return plan_index, train(cfg, fed_name, mechanism, params, run, secret)


def _single_thread_kernels() -> None:
    # Processes run the training in parallel: one native thread each avoids oversubscribing the cores.
    from ..runtime import set_num_threads  # noqa: PLC0415

    set_num_threads(1)


def _rule(cfg: CompareConfig, setting: Setting) -> str:
    return (
        f"every private mechanism clips at C = {cfg.clip:g} (a client's update in L2; joint noise: each example's "
        f"gradient) and gets its noise only from its own accountant at epsilon {cfg.epsilon:g}, delta "
        f"{setting.delta:.3g} over {setting.rounds} rounds (zero-out relation; each accountant's own conversion: "
        "PLD for DP-FedAvg, Mironov's RDP conversion for DDG/Skellam as their calibration, the improved RDP "
        "conversion for the others); every mechanism, FedAvg included, "
        f"applies server learning rate {cfg.server_lr:g} to its decoded mean update; local training is the same "
        f"({cfg.local_epochs} epochs of SGD, lr {cfg.local_lr:g}, batch {cfg.batch_size}); nothing is tuned per "
        "mechanism"
    )


def run_compare(config: CompareConfig, *, progress: Optional[Callable[[int, int, str], None]] = None
                ) -> CompareResult:
    """Calibrate and train every mechanism on every federation of ``config``.

    Parameters
    ----------
    config : CompareConfig
    progress : callable, optional
        ``progress(done, total, what)`` after every finished training run (the CLI's progress bar).

    Returns
    -------
    CompareResult
    """
    if not isinstance(config, CompareConfig):
        raise TypeError(f"config must be a CompareConfig, got {type(config).__name__}")
    config.validate()
    t0 = time.perf_counter()
    registry = mechanism_registry()
    keys = config.mechanism_keys()
    results: list[FederationResult] = []
    tasks: list[tuple] = []
    staged: list[tuple[str, list[PlanResult]]] = []
    for fed_name in config.federations:
        fed = _cached_federation(fed_name, config.federation_value(fed_name, "clients"), config.alpha, config.seed)
        setting = _setting(config, fed_name, fed)
        plans, where, why = calibrate_plans(setting, keys, config.threat_models)
        # Each trained configuration's guarantee against every observer, once (the rows and the summary use it).
        guarantees = {(index, tm): registry[plan.mechanism].guarantee(setting, plan.params, tm)
                      for index, plan in enumerate(plans) if plan.params for tm in config.threat_models}
        for index, plan in enumerate(plans):
            if plan.params:
                plan.epsilons = {tm: guarantees[(index, tm)].epsilon for tm in config.threat_models}
        rows: list[RowResult] = []
        for tm in config.threat_models:
            for key in keys:
                mech = registry[key]
                i = where.get((key, tm))
                plan = where[(key, "*")] if i is None else i
                if plan is None:  # nothing trained (a reproduction the paper's accounting cannot calibrate)
                    rows.append(RowResult(tm, key, mech.label, -1, False, math.inf, why.get((key, tm)), None, "",
                                          mech.unit, mech.trust, mech.reproduction))
                    continue
                params = plans[plan].params
                if key == "fedavg" or not params:
                    row = mech.guarantee(setting, params, tm) if key == "fedavg" else None
                    eps, reason, local, conv, unit, note = (math.inf, why.get((key, tm), "not calibrated"), None,
                                                            "", "-", None)
                    if row is not None:
                        eps, reason, unit = row.epsilon, row.reason, row.unit
                else:
                    row = guarantees[(plan, tm)]
                    eps, reason, local, conv, unit, note = (row.epsilon, row.reason, row.local_epsilon,
                                                            row.conversion, row.unit, row.note)
                    if i is None and reason is None:
                        reason = why.get((key, tm))
                rows.append(RowResult(tm, key, mech.label, plan, i is not None, eps, reason, local, conv, unit,
                                      mech.trust, mech.reproduction, note))
        results.append(FederationResult(
            fed_name, fed.description, setting.num_clients, setting.clients_per_round, setting.rounds, setting.delta,
            setting.dim, 4 * setting.dim, _rule(config, setting), plans, rows,
        ))
        staged.append((fed_name, plans))
        secrets_of_runs = [secrets.randbits(128) for _ in range(config.runs)]  # OS entropy, never stored
        for p_index, plan in enumerate(plans):
            if not plan.params and plan.mechanism != "fedavg":
                continue  # calibrated nowhere (e.g. an epsilon no parameter reaches): nothing to train
            for run in range(config.runs):
                tasks.append((config, fed_name, plan.mechanism, plan.params, run, secrets_of_runs[run],
                              (len(results) - 1, p_index)))
    workers = config.workers or os.cpu_count() or 1
    done = 0
    collected: dict[tuple[int, int], list[RunResult]] = {}

    def record(where: tuple[int, int], result: RunResult) -> None:
        nonlocal done
        collected.setdefault(where, []).append(result)
        done += 1
        if progress is not None:
            f, p = where
            progress(done, len(tasks), f"{results[f].name}: {results[f].plans[p].label}")

    if workers == 1 or len(tasks) == 1:
        for task in tasks:
            record(*_train_task(task))
    else:
        # spawn, not fork: a forked child would inherit the native thread pool's locks without its threads.
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=ctx) as pool:
            futures = [pool.submit(_train_task, task) for task in tasks]
            for fut in as_completed(futures):
                record(*fut.result())
    for (f, p), runs in collected.items():
        results[f].plans[p].runs = sorted(runs, key=lambda r: r.run)
    return CompareResult(config, results, time.perf_counter() - t0, _machine())


def _machine() -> str:
    import platform  # noqa: PLC0415

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} logical cores, Python {platform.python_version()}, NumPy {np.__version__}"


def config_fields() -> list[str]:
    return [f.name for f in fields(CompareConfig)]
