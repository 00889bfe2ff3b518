"""The server side of distributed DP over Flower's SecAgg+: :class:`DistributedDPStrategy` and its workflow."""

from __future__ import annotations

import math
import secrets
import time
from dataclasses import dataclass, field
from logging import ERROR, INFO, WARNING
from typing import Any

import numpy as np
from flwr.common import (
    Code,
    FitIns,
    FitRes,
    Parameters,
    Scalar,
    Status,
    log,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import Strategy

from .._runtime.validation import check_int, check_positive
from ._adaptive import AdaptiveClipping
from ._common import _DPREC_PREFIX, _describe
from ._inprocess import WordsWorkflow
from ._legacy import _LegacyWrapper, _node_id, _with_dtypes, _wrong_legacy_api
from ._secagg import (
    MECHANISMS,
    count_lattice,
    max_secagg_clients,
    modular_sum_from_secagg,
    pipeline_config,
)
from ._secagg import secagg_ranges as _secagg_ranges
from ._strategy import _sample_plan_problem

__all__ = ["DistributedDPStrategy", "DistributedDPRound"]

# Flower's DefaultWorkflow keeps the round number here (flwr.server.workflow.constant).
_MAIN_CONFIGS_RECORD = "config"
_CURRENT_ROUND = "current_round"


@dataclass
class DistributedDPRound:
    """What the server did in one round of :class:`DistributedDPStrategy` (its :attr:`~DistributedDPStrategy.history`).

    ``status``: ``"aggregated"`` (the mean applied), ``"discarded"`` (decoded and accounted, but the wrapped
    strategy returned no parameters, e.g. FedAvg with ``accept_failures=False`` after a dropout), ``"failed"``
    (SecAgg+ revealed a sum that did not decode: nothing applied, the round accounted), ``"halted"`` (SecAgg+ stopped before unmasking, e.g. more dropouts than
    its threshold tolerates: nothing applied, nothing revealed, not accounted), ``"empty"`` (no masked vector).
    ``num_aggregated`` is the number of masked vectors in the sum, hence of noise shares; ``seed`` the round's public
    seed (rotation signs, sketch hashes); ``epsilon`` the total so far.
    ``modular_sum`` and ``mean`` (the decoded mean update, float64) are kept with ``keep_sums=True``.
    """

    server_round: int
    status: str
    num_sampled: int
    num_aggregated: int
    clip_norm: float
    noise_stddev: float
    granularity: float
    bits: int
    padded_dim: int
    seed: int
    epsilon: float
    unclipped_fraction: float | None = None
    next_clip_norm: float | None = None
    decode_seconds: float = 0.0
    reason: str = ""
    modular_sum: np.ndarray | None = field(default=None, repr=False)
    mean: np.ndarray | None = field(default=None, repr=False)


@dataclass
class _Plan:
    pipeline: Any
    nodes: list[int]
    arrays: list[np.ndarray]
    floats: list[int]
    num_clients: int  # the population this round's sample was drawn from: min(N, connected)
    lattice: int  # the clipping count's M (0: no adaptive clipping)


class DistributedDPStrategy(_LegacyWrapper):
    """Distributed DP (DDG or Skellam, Chen et al.) on Flower's own SecAgg+: wrap a legacy-API strategy.

    The client adds ``mods=[secaggplus_mod, distributed_dp_mod]``; the server wraps its ``flwr.server.strategy``
    strategy (FedAvg, FedAdam, ...) and runs ``DefaultWorkflow(fit_workflow=strategy.secagg_workflow(...))``.
    Each round the wrapped strategy picks the clients; this wrapper sends them the round's pipeline (a fresh
    public seed for the rotation and the sketch, the clip norm, the scale, each client's noise), SecAgg+ sums
    their integer vectors mod ``2**bits`` (the server never sees one), and :meth:`aggregate_fit` decodes the sum
    into the mean update (divided by the number of vectors summed), hands ``global + mean`` to the wrapped
    strategy, adapts the clip norm, and accounts the round. See the *Distributed DP in Flower* page of the docs.

    Parameters
    ----------
    strategy : flwr.server.strategy.Strategy
        Samples the clients (distinct, uniformly: FedAvg's sampling) and applies the DP mean (FedAdam's step on
        it is post-processing). Its ``fit_metrics_aggregation_fn`` sees the clients' fit metrics only if their
        mod keeps them (``make_distributed_dp_mod(keep_metrics=True)``).
    clip_norm : float
        L2 clip norm of each client's update (the initial one with adaptive clipping).
    delta : float
        The delta of the reported epsilon.
    mechanism : {"ddg", "skellam"}
        Distributed discrete Gaussian (default) or Skellam noise.
    bits : int
        SecAgg+ words are mod ``2**bits``, 8 to 31 (:func:`secagg_ranges`); default 20.
    noise_multiplier : float, optional
        ``z``: the summed noise of ``expected_clients_per_round`` clients has standard deviation ``z * clip_norm``
        (TFF's ``noise_multiplier``); each client adds ``z clip_norm / sqrt(expected_clients_per_round)``.
    target_epsilon : float, optional
        Instead of ``noise_multiplier``: the smallest noise for which ``num_rounds`` rounds of
        ``expected_clients_per_round`` clients are ``(target_epsilon, delta)``-DP by this strategy's accounting
        (solved when the first round is configured, once the model's size is known).
    num_rounds : int, optional
        Needed with ``target_epsilon``.
    num_clients : int, optional
        N, the population; default: the clients connected when the first round is configured. The round's
        participation rate is ``B / N``.
    expected_clients_per_round : int, optional
        The clients whose noise shares make up the noise (TFF's ``expected_clients_per_round``); default: the
        first round's sample size.
    beta : float
        Conditional rounding bias in [0, 1) (default ``exp(-0.5)``; 0: unconditional rounding).
    sketch : (int, int), optional
        Count-sketch ``(rows, cols)`` of the update before the rotation (Chen et al., Algorithm 2).
    wrap_probability : float
        Per-coordinate probability that the sum wraps around ``2**bits`` (the scale's head-room), default 1e-6.
    adaptive_clipping : bool or AdaptiveClipping
        Adapt the clip norm to a private quantile of the update norms (Andrew et al.). Each client adds its
        noisy bit to a second SecAgg+ coordinate; the server sees only the noisy count. ``quantile_noise`` is each
        client's noise on its bit (default ``2 noise_stddev / clip``), accounted with the update in one event.
    keep_sums : bool
        Keep each round's modular sum and decoded mean in :attr:`history` (memory O(model) per round).

    Raises
    ------
    TypeError, ValueError
        For a bad argument (named), a strategy of the Message API, and, when a round is configured (before
        anything is sent): bits too few for the round's clients (rounding alone would wrap at the head-room
        asked) or for the clipping count, a DDG integer noise per client below 0.5 (no bound is claimed there),
        more clients than SecAgg+ carries exactly or than ``N``, fewer than 2 clients, a
        ``reconstruction_threshold`` above the round's sample, or a workflow not made by :meth:`secagg_workflow`
        (RuntimeError).
    """

    def __init__(
        self,
        strategy: Strategy,
        *,
        clip_norm: float,
        delta: float,
        mechanism: str = "ddg",
        bits: int = 20,
        noise_multiplier: float | None = None,
        target_epsilon: float | None = None,
        num_rounds: int | None = None,
        num_clients: int | None = None,
        expected_clients_per_round: int | None = None,
        beta: float = math.exp(-0.5),
        sketch: tuple[int, int] | None = None,
        wrap_probability: float = 1e-6,
        adaptive_clipping: bool | AdaptiveClipping = False,
        keep_sums: bool = False,
    ) -> None:
        super().__init__()
        if isinstance(strategy, DistributedDPStrategy):
            raise TypeError("strategy is already a DistributedDPStrategy")
        if not isinstance(strategy, Strategy):
            raise TypeError(_wrong_legacy_api(strategy).replace("DPRECLegacyStrategy", "DistributedDPStrategy"))
        if mechanism not in MECHANISMS:
            raise ValueError(f"mechanism must be one of {MECHANISMS}, got {mechanism!r}")
        _secagg_ranges(bits)
        self.strategy = strategy
        self.mechanism = mechanism
        self.bits = int(bits)
        self._clip = check_positive(clip_norm, "clip_norm")
        self.delta = check_positive(delta, "delta")
        if self.delta >= 1.0:
            raise ValueError(f"delta must be in (0, 1), got {delta!r}")
        if (noise_multiplier is None) == (target_epsilon is None):
            raise ValueError("give exactly one of noise_multiplier and target_epsilon")
        self._noise_multiplier = None if noise_multiplier is None else check_positive(noise_multiplier, "noise_multiplier")
        self._target_epsilon = None if target_epsilon is None else check_positive(target_epsilon, "target_epsilon")
        self.num_rounds = None if num_rounds is None else check_int(num_rounds, "num_rounds", 1, 1 << 40)
        if target_epsilon is not None and num_rounds is None:
            raise ValueError("target_epsilon needs num_rounds (the rounds the calibration composes)")
        self.num_clients = None if num_clients is None else check_int(num_clients, "num_clients", 2, 1 << 40)
        self.expected_clients_per_round = (
            None if expected_clients_per_round is None
            else check_int(expected_clients_per_round, "expected_clients_per_round", 1, 1 << 40)
        )
        problem = _sample_plan_problem(strategy, "fraction_fit", "min_fit_clients", "min_available_clients", num_clients)
        if problem:
            raise ValueError(f"DistributedDPStrategy: {problem}")
        from ..secagg.pipeline import DDGPipeline, SkellamPipeline  # noqa: PLC0415 - SciPy on first use only

        self._pipeline_cls = DDGPipeline if mechanism == "ddg" else SkellamPipeline
        self._pipeline_kwargs: dict[str, Any] = {"beta": beta, "sketch": sketch, "wrap_probability": wrap_probability}
        # A small pipeline checks beta, sketch and wrap_probability now, naming them (the model's size, the bits for
        # the round's clients and the noise are checked when a round is configured).
        self._pipeline_cls(8, clip=1.0, bits=31, num_clients=2, seed=0, noise_stddev=1.0, **self._pipeline_kwargs)
        if adaptive_clipping is True:
            adaptive_clipping = AdaptiveClipping()
        if adaptive_clipping is not False and not isinstance(adaptive_clipping, AdaptiveClipping):
            raise TypeError(f"adaptive_clipping must be a bool or an AdaptiveClipping, got {type(adaptive_clipping).__name__}")
        self.adaptive_clipping: AdaptiveClipping | None = adaptive_clipping or None
        if self.adaptive_clipping is not None and self.adaptive_clipping.initial_clip_norm is not None:
            self._clip = float(self.adaptive_clipping.initial_clip_norm)
        if not isinstance(keep_sums, bool):
            raise TypeError(f"keep_sums must be a bool, got {type(keep_sums).__name__}")
        self.keep_sums = keep_sums
        if float(getattr(strategy, "fraction_evaluate", 0.0) or 0.0) > 0.0:
            log(WARNING, "DistributedDPStrategy: the wrapped strategy evaluates on clients (fraction_evaluate > 0): "
                "their losses, metrics and example counts reach the server in the clear, outside the guarantee")
        self._client_noise_multiplier: float | None = None  # each client's sigma / clip, fixed at the first round
        self._accountant: Any = None
        self._rounds: dict[int, _Plan] = {}
        self._workflow: DistributedDPWorkflow | None = None
        self.history: list[DistributedDPRound] = []

    def __repr__(self) -> str:
        noise = (f"noise_multiplier={self._noise_multiplier!r}" if self._noise_multiplier is not None
                 else f"target_epsilon={self._target_epsilon!r}")
        return (f"DistributedDPStrategy({self.strategy!r}, mechanism={self.mechanism!r}, bits={self.bits}, "
                f"clip_norm={self._clip!r}, {noise}, delta={self.delta!r})")

    # -- what the strategy exposes -----------------------------------------------------------

    def secagg_workflow(
        self, num_shares: int | float, reconstruction_threshold: int | float, *, timeout: float | None = None
    ) -> DistributedDPWorkflow:
        """Flower's ``SecAggPlusWorkflow`` set up to carry this strategy's ``bits``-bit words exactly.

        Parameters
        ----------
        num_shares : int or float
            SecAgg+'s: the shares of each client's secrets (its neighbours plus itself), or a fraction of the
            round's clients.
        reconstruction_threshold : int or float
            SecAgg+'s: the shares that unmask a client, or a fraction of ``num_shares``; more dropouts than this
            tolerates halt the round (recorded, nothing applied).
        timeout : float, optional
            SecAgg+'s wait per stage, in seconds (None: no limit).

        Returns
        -------
        DistributedDPWorkflow
            Pass it as ``DefaultWorkflow(fit_workflow=...)``.
        """
        return DistributedDPWorkflow(self, num_shares, reconstruction_threshold, timeout=timeout)

    @property
    def clip_norm(self) -> float:
        """The clip norm of the next round."""
        return self._clip

    @property
    def client_noise_multiplier(self) -> float | None:
        """Each client's noise standard deviation over the clip norm (None before the first round)."""
        return self._client_noise_multiplier

    @property
    def noise_multiplier(self) -> float | None:
        """``z``: the noise of ``expected_clients_per_round`` shares over the clip norm (None before it is known)."""
        if self._client_noise_multiplier is None or self.expected_clients_per_round is None:
            return self._noise_multiplier
        return self._client_noise_multiplier * math.sqrt(self.expected_clients_per_round)

    @property
    def accountant(self) -> Any:
        """The :class:`dprec.accounting.Accountant` of the rounds so far (None before the first accounted round)."""
        return self._accountant

    @property
    def epsilon(self) -> float:
        """Epsilon at :attr:`delta` spent so far, against the server (and so against any observer of less: the
        messages, the released model), client-level, zero-out relation (0 before any accounted round)."""
        return 0.0 if self._accountant is None else float(self._accountant.get_epsilon(self.delta))

    @property
    def guarantee(self) -> Any:
        """The :class:`dprec.accounting.PrivacyGuarantee` so far (None before the first accounted round)."""
        return None if self._accountant is None else self._accountant.guarantee(self.delta)

    # -- the round's pipeline -----------------------------------------------------------------

    def _pipeline(self, dim: int, clients: int, clip: float, sigma: float, seed: int, check_floor: bool = True) -> Any:
        from ..accounting.discrete import MIN_SUMMED_NOISE  # noqa: PLC0415

        try:
            pipe = self._pipeline_cls(dim, clip=clip, bits=self.bits, num_clients=clients, seed=seed,
                                      noise_stddev=sigma, **self._pipeline_kwargs)
        except ValueError as exc:
            raise ValueError(f"DistributedDPStrategy: {exc}") from None
        if check_floor and self.mechanism == "ddg" and pipe.integer_noise_stddev < MIN_SUMMED_NOISE:
            raise ValueError(
                f"DistributedDPStrategy: each client's integer noise {pipe.integer_noise_stddev:.3g} (noise / gamma at "
                f"bits={self.bits}) is below {MIN_SUMMED_NOISE}, where no bound on a sum of discrete Gaussians is "
                "claimed: raise the noise or bits"
            )
        return pipe

    def _quantile_noise(self, z: float | None = None) -> float:
        """``s``: each client's noise on its clipping bit, in bit units, at each client's noise multiplier ``z``
        (default: the strategy's)."""
        z = self._client_noise_multiplier if z is None else z
        assert self.adaptive_clipping is not None and z is not None
        return self.adaptive_clipping.noise_for(1.0 / z)

    def _event(self, pipe: Any, shares: int, participation: float, lattice: int, z: float | None = None) -> Any:
        from ..accounting.accountant import DDGEvent, SecAggRoundEvent, SkellamEvent  # noqa: PLC0415

        cls = DDGEvent if self.mechanism == "ddg" else SkellamEvent
        parts = [cls(l2_sensitivity=pipe.l2_sensitivity, noise_stddev=pipe.noise_stddev, num_clients=shares,
                     dim=pipe.padded_dim, granularity=pipe.granularity)]
        if lattice:
            parts.append(DDGEvent(l2_sensitivity=float(lattice), noise_stddev=self._quantile_noise(z) * lattice,
                                  num_clients=shares, dim=1, granularity=1.0))
        return SecAggRoundEvent(parts, participation_rate=participation)

    def _lattice(self, clients: int, pipe: Any, z: float | None = None) -> int:
        """The clipping count's lattice ``M`` (0 without adaptive clipping); -1 when no lattice both fits the words
        and keeps each client's noise on it at :data:`~dprec.accounting.discrete.MIN_SUMMED_NOISE` or more."""
        if self.adaptive_clipping is None:
            return 0
        from ..accounting.discrete import MIN_SUMMED_NOISE  # noqa: PLC0415

        s = self._quantile_noise(z)
        m = count_lattice(clients, s, self.bits, pipe.stddevs_of_headroom)
        return m if m >= 1 and s * m >= MIN_SUMMED_NOISE else -1

    def _checked_lattice(self, clients: int, pipe: Any) -> int:
        from ..accounting.discrete import MIN_SUMMED_NOISE  # noqa: PLC0415

        m = self._lattice(clients, pipe)
        if m < 0:
            raise ValueError(
                f"DistributedDPStrategy: bits={self.bits} is too few for the clipping count of {clients} clients "
                f"(adaptive clipping; its lattice must fit the words with each client's noise at least "
                f"{MIN_SUMMED_NOISE} on it): raise bits or quantile_noise"
            )
        return m

    def _calibrate(self, dim: int, clients: int, population: int) -> float:
        """Each client's sigma / clip for ``target_epsilon`` over ``num_rounds`` rounds of ``clients`` shares."""
        from ..accounting import Accountant  # noqa: PLC0415
        from ..accounting.discrete import MIN_SUMMED_NOISE  # noqa: PLC0415

        assert self._target_epsilon is not None and self.num_rounds is not None
        rounds = self.num_rounds
        q = min(1.0, clients / population)

        def eps(z: float) -> float:
            # Below the noise floors no bound is claimed: epsilon is infinite there, not an error.
            pipe = self._pipeline(dim, clients, 1.0, z, 0, check_floor=False)
            lattice = self._lattice(clients, pipe, z)
            if lattice < 0 or (self.mechanism == "ddg" and pipe.integer_noise_stddev < MIN_SUMMED_NOISE):
                return math.inf
            event = self._event(pipe, clients, q, lattice, z)
            return float(Accountant(threat_model="server").compose(event, rounds).get_epsilon(self.delta))

        lo, hi = 1e-3, 1.0
        while eps(hi) > self._target_epsilon:
            lo, hi = hi, hi * 4.0
            if hi > 1e7:
                raise ValueError(f"DistributedDPStrategy: target_epsilon={self._target_epsilon} is out of reach")
        for _ in range(60):
            mid = math.sqrt(lo * hi)
            if eps(mid) > self._target_epsilon:
                lo = mid
            else:
                hi = mid
            if hi / lo < 1.0 + 1e-6:
                break
        return hi

    # -- training -----------------------------------------------------------------------------

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        """The wrapped strategy's ``FitIns``, each config extended by the round's ``"dprec.ddp."`` pipeline entries.

        Raises
        ------
        RuntimeError
            When the fit workflow is not this strategy's :meth:`secagg_workflow`.
        ValueError
            See the class; nothing is sent that round.
        """
        workflow = self._workflow
        if workflow is None:
            raise RuntimeError(
                "DistributedDPStrategy runs only under its own SecAgg+ workflow: "
                "DefaultWorkflow(fit_workflow=strategy.secagg_workflow(num_shares=..., reconstruction_threshold=...))"
            )
        instructions = list(self.strategy.configure_fit(server_round, parameters, client_manager))
        if not instructions:
            return instructions
        nodes = [_node_id(proxy) for proxy, _ in instructions]
        b = len(nodes)
        if len(set(nodes)) != b:
            raise ValueError(f"{type(self.strategy).__name__}.configure_fit chose a client several times")
        for _, ins in instructions:
            if ins.parameters is not parameters and list(ins.parameters.tensors) != list(parameters.tensors):
                raise ValueError(f"{type(self.strategy).__name__}.configure_fit sends a client other parameters than "
                                 "the global ones; the update is decoded against the global parameters")
        if b < 2:
            raise ValueError(f"round {server_round}: SecAgg+ needs at least 2 clients, the strategy chose {b}")
        threshold = workflow.reconstruction_threshold
        if isinstance(threshold, int) and threshold > b:
            raise ValueError(f"round {server_round}: reconstruction_threshold={threshold} exceeds the {b} clients "
                             "chosen; SecAgg+ could never unmask")
        if b > max_secagg_clients(self.bits):
            raise ValueError(f"round {server_round}: {b} clients exceed the {max_secagg_clients(self.bits)} whose "
                             f"{self.bits}-bit sum SecAgg+ carries exactly")
        available = client_manager.num_available()
        if self.num_clients is None:
            self.num_clients = max(b, available)
        if b > self.num_clients:
            raise ValueError(f"round {server_round}: {b} clients chosen of num_clients={self.num_clients}")
        # The wrapped strategy samples among the clients connected now: with fewer than N, each is sampled at a
        # rate above B / N, and the round is accounted at B / min(N, connected).
        population = min(self.num_clients, max(available, b))
        if population < self.num_clients:
            log(WARNING, "distributed DP round %d: %d clients connected of num_clients=%d; accounted at the rate "
                "%d/%d", server_round, available, self.num_clients, b, population)
        if self.expected_clients_per_round is None:
            self.expected_clients_per_round = b
        arrays = parameters_to_ndarrays(parameters)
        floats = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]
        dim = int(sum(arrays[i].size for i in floats))
        if dim < 1:
            raise ValueError("the global parameters hold no floating-point values")
        if self._client_noise_multiplier is None:
            if self._noise_multiplier is not None:
                self._client_noise_multiplier = self._noise_multiplier / math.sqrt(self.expected_clients_per_round)
            else:
                self._client_noise_multiplier = self._calibrate(dim, self.expected_clients_per_round, self.num_clients)
        pipe = self._pipeline(dim, b, self._clip, self._client_noise_multiplier * self._clip,
                              secrets.randbits(63))
        lattice = self._checked_lattice(b, pipe)
        count_noise = self._quantile_noise() * lattice if lattice else 0.0
        entries = pipeline_config(pipe, count_lattice=lattice, count_noise=count_noise)
        self._rounds[server_round] = _Plan(pipe, nodes, arrays, floats, population, lattice)
        out = []
        for proxy, ins in instructions:
            config = {k: v for k, v in ins.config.items() if not str(k).startswith(_DPREC_PREFIX)}
            config.update(entries)
            out.append((proxy, FitIns(ins.parameters, config)))
        log(INFO, "distributed DP round %d: %d clients, %s noise %.4g per client (clip %.4g), %d-bit words x %d",
            server_round, b, self.mechanism, pipe.noise_stddev, pipe.clip, self.bits, pipe.padded_dim)
        return out

    @staticmethod
    def _epsilon_metrics(epsilon: float) -> dict[str, Scalar]:
        """``"dprec-epsilon"`` and, as DP-REC's strategies name them, ``"dprec-epsilon.<threat model>.<relation>"``:
        one number for every observer (each sees at most the server's view), ``inf`` for ``add_remove``."""
        out: dict[str, Scalar] = {"dprec-epsilon": epsilon}
        for observer in ("server", "messages", "central"):
            out[f"dprec-epsilon.{observer}.zero"] = epsilon
            out[f"dprec-epsilon.{observer}.add_remove"] = math.inf
        return out

    def _record(self, server_round: int, plan: _Plan, status: str, shares: int, **extra: Any) -> DistributedDPRound:
        pipe = plan.pipeline
        stats = DistributedDPRound(
            server_round=server_round, status=status, num_sampled=len(plan.nodes), num_aggregated=shares,
            clip_norm=pipe.clip, noise_stddev=pipe.noise_stddev, granularity=pipe.granularity, bits=pipe.bits,
            padded_dim=pipe.padded_dim, seed=pipe.seed, epsilon=self.epsilon, **extra,
        )
        self.history.append(stats)
        return stats

    def _halted(self, server_round: int) -> None:
        """SecAgg+ stopped before ``aggregate_fit``: nothing revealed, nothing applied, nothing accounted."""
        plan = self._rounds.pop(server_round, None)
        if plan is None:
            return
        log(WARNING, "distributed DP round %d: secure aggregation halted (too many dropouts for its threshold, or "
            "too few clients); nothing applied, and nothing revealed beyond masked vectors: no privacy spent",
            server_round)
        self._record(server_round, plan, "halted", 0, reason="SecAgg+ halted before unmasking")

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        """Decode SecAgg+'s sum into the mean update, account the round, and hand ``global + mean`` to the wrapped
        strategy (its ``aggregate_fit`` of one ``FitRes``).

        ``results`` are SecAgg+'s: every ``FitRes`` holds the same aggregate, one per masked vector summed.
        """
        from ..accounting import Accountant  # noqa: PLC0415
        from ..secagg.modular import centered_lift  # noqa: PLC0415

        plan = self._rounds.pop(server_round, None)
        if plan is None:
            raise ValueError(f"round {server_round} was not configured by this DistributedDPStrategy")
        pipe, n = plan.pipeline, len(results)
        metrics: dict[str, Scalar] = {"dprec-clients": n, "dprec-dropped": len(plan.nodes) - n}
        if n == 0:
            self._record(server_round, plan, "empty", 0, reason="no masked vector")
            metrics.update(self._epsilon_metrics(self.epsilon))
            return None, metrics
        # SecAgg+ unmasked a sum of n vectors: the server has seen it, whatever follows. Account it first.
        if self._accountant is None:
            self._accountant = Accountant(threat_model="server")
        self._accountant.compose(self._event(pipe, n, min(1.0, len(plan.nodes) / plan.num_clients), plan.lattice))
        epsilon = self.epsilon
        metrics.update(self._epsilon_metrics(epsilon))
        start = time.perf_counter()
        try:
            aggregate = parameters_to_ndarrays(results[0][1].parameters)
            want = 2 if plan.lattice else 1
            if len(aggregate) != want or aggregate[0].shape != (pipe.padded_dim,) or (
                plan.lattice and aggregate[1].shape != (1,)
            ):
                raise ValueError(f"the aggregate's arrays {[a.shape for a in aggregate]} are not the round's")
            total = modular_sum_from_secagg(aggregate[0], self.bits, n)
            mean = np.asarray(pipe.decode(total, num_clients=n), dtype=np.float64)
            fraction = None
            if plan.lattice:
                count = modular_sum_from_secagg(aggregate[1], self.bits, n)
                lifted = float(centered_lift(count, self.bits, dtype=np.float64)[0])
                fraction = min(max(lifted / plan.lattice / n, 0.0), 1.0)
        except (ValueError, TypeError) as exc:
            log(ERROR, "distributed DP round %d: the secure aggregate did not decode (%s); nothing applied",
                server_round, _describe(exc))
            self._record(server_round, plan, "failed", n, reason=_describe(exc))
            return None, metrics
        seconds = time.perf_counter() - start
        # global + mean for the floating-point arrays (in their dtype); the others keep the global values.
        updated = [a.copy() for a in plan.arrays]
        offset = 0
        for i in plan.floats:
            a = plan.arrays[i]
            piece = mean[offset: offset + a.size].reshape(a.shape)
            offset += a.size
            updated[i] = (a.astype(np.float64) + piece).astype(a.dtype)
        fit = FitRes(status=Status(code=Code.OK, message="distributed DP: global + mean"),
                     parameters=ndarrays_to_parameters(updated), num_examples=1, metrics={})
        parameters, _ = self._strategy_aggregate_fit(server_round, [(results[0][0], fit)], failures)
        # The wrapped strategy may discard the round (FedAvg with accept_failures=False and a dropout): then nothing
        # is applied, the round stays accounted (the sum was revealed) and the clip norm does not move.
        applied = parameters is not None
        next_clip = self._clip
        if applied and self.adaptive_clipping is not None and fraction is not None:
            next_clip = self.adaptive_clipping.next_clip_norm(self._clip, fraction)
            self._clip = next_clip
        self._record(server_round, plan, "aggregated" if applied else "discarded", n, unclipped_fraction=fraction,
                     next_clip_norm=next_clip, decode_seconds=seconds,
                     modular_sum=total if self.keep_sums else None, mean=mean if self.keep_sums else None,
                     reason="" if applied else f"{type(self.strategy).__name__}.aggregate_fit returned no parameters")
        metrics.update({"dprec-clip-norm": pipe.clip, "dprec-noise-stddev": pipe.noise_stddev,
                        "dprec-secagg-word-bits": self.bits, "dprec-secagg-words": pipe.padded_dim})
        if fraction is not None:
            metrics["dprec-unclipped-fraction"] = fraction
        log(INFO, "distributed DP round %d: %d of %d clients summed%s; epsilon %.4g (delta %g) against the server "
            "(so against the messages and the released model too), zero-out relation", server_round, n, len(plan.nodes), "" if applied else " (discarded by the strategy)",
            epsilon, self.delta)
        user = self._fit_metrics(server_round, results, skip_empty=True)
        user.update(metrics)
        return (None if parameters is None else _with_dtypes(parameters, updated)), user


class DistributedDPWorkflow(WordsWorkflow):
    """Flower's ``SecAggPlusWorkflow`` with the ranges that carry a :class:`DistributedDPStrategy`'s words exactly
    (:func:`dprec.flower.secagg_ranges`); made by :meth:`DistributedDPStrategy.secagg_workflow`.

    A round that SecAgg+ halts (fewer surviving clients than its reconstruction threshold) is recorded in the
    strategy's history as ``"halted"``: nothing applied, nothing accounted (the server saw only masked vectors).

    Parameters
    ----------
    strategy : DistributedDPStrategy
        The strategy of the ``LegacyContext`` this workflow runs with (checked at each call).
    num_shares, reconstruction_threshold, timeout
        SecAgg+'s own (``flwr.server.workflow.SecAggPlusWorkflow``).
    """

    def __init__(
        self,
        strategy: DistributedDPStrategy,
        num_shares: int | float,
        reconstruction_threshold: int | float,
        *,
        timeout: float | None = None,
    ) -> None:
        if not isinstance(strategy, DistributedDPStrategy):
            raise TypeError(f"strategy must be a DistributedDPStrategy, got {type(strategy).__name__}")
        self._strategy = strategy
        super().__init__(strategy.bits, num_shares, reconstruction_threshold, timeout=timeout)

    def __call__(self, grid: Any, context: Any) -> None:
        if getattr(context, "strategy", None) is not self._strategy:
            raise TypeError("the LegacyContext's strategy must be the DistributedDPStrategy that made this workflow")
        server_round = int(context.state.config_records[_MAIN_CONFIGS_RECORD][_CURRENT_ROUND])
        self._strategy._workflow = self
        try:
            super().__call__(grid, context)
        finally:
            self._strategy._workflow = None
            self._strategy._halted(server_round)
