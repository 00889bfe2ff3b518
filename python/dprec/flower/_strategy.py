"""The server side of the Message API: :class:`DPRECStrategy` and :class:`DPRECRound`."""

from __future__ import annotations

import math
import secrets
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from logging import INFO, WARNING
from typing import Any

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg, Result, Strategy

from .._runtime.validation import check_positive
from ..rec.codec import DPRECCodec, DPRECMessage, Layout
from ._common import (
    _CONFIG_KEYS,
    CONFIG_SIGMA,
    CONFIG_SLOT,
    DROP_REASONS,
    MESSAGE_KEY,
    STRATEGY_SAMPLING,
    _clip_text,
    _describe,
    _find_config,
    _float_arrays,
    _short,
    codec_config,
    wire_nbytes,
)

# --------------------------------------------------------------------------------------
# Server
# --------------------------------------------------------------------------------------


@dataclass
class DPRECRound:
    """What :class:`DPRECStrategy` did in one training round (``DPRECStrategy.history``).

    Attributes
    ----------
    server_round : int
    num_sampled : int
        ``B``: train messages sent (nodes sampled by the wrapped strategy without replacement,
        selected by the wrapper's Poisson sampling, 0 in an empty Poisson round; or slots drawn
        with replacement, ``clients_per_round``).
    num_available : int
        Nodes connected when the round was configured.
    num_aggregated : int
        DP-REC messages decoded into the mean.
    num_failed : int
        Error replies from sampled nodes (skipped, as FedAvg does).
    num_rejected : int
        Replies dropped, for any reason (logged; the ``"dprec-dropped"`` metric).
    dropped : dict
        Reason (one of :data:`DROP_REASONS`) -> replies dropped for it, the nonzero ones.
    num_metrics_dropped : int
        Aggregated replies whose train metrics were left out of the metric aggregation (no
        ``MetricRecord``, no weighting key, a weight above ``max_weight`` or a value that is not
        finite; logged, the ``"dprec-metrics-dropped"`` metric).
    accounted : bool
        Whether the round was accounted: a DP-REC message reached the server (aggregated or
        not), or, under Poisson sampling, always.
    epsilon : float
        Epsilon after this round against ``threat_model`` under ``relation`` (``inf`` where no
        bound is proved: see ``reasons``).
    delta : float
    threat_model, relation : str
        Whom ``epsilon`` holds against and its neighbouring relation (the strategy's).
    epsilons : dict
        Relation -> epsilon after this round, for both relations.
    reasons : dict
        Relation -> why there is no bound, for the infinite entries only.
    conversion : str
        How the composed curves became (epsilon, delta).
    local : dprec.accounting.LocalGuarantee or None
        The local guarantee after this round (what one client's own messages reveal, against the
        server, relation ``"zero"``, no sampling amplification): ``per_message``, and
        ``epsilon_max`` at ``delta_max`` over at most ``max_participations`` messages. None before
        the first accounted round.
    message_bytes : tuple of int
        Length of each aggregated client's DP-REC message.
    wire_bytes : tuple of int
        Serialized size of each aggregated client's ``ConfigRecord`` (see :func:`wire_nbytes`).
    float32_wire_bytes : int
        Serialized size of the same arrays as a float32 ``ArrayRecord``, per client.
    messages : tuple of bytes
        The aggregated messages, in aggregation order (only with ``keep_messages=True``).
    """

    server_round: int
    num_sampled: int
    num_available: int
    num_aggregated: int = 0
    num_failed: int = 0
    num_rejected: int = 0
    dropped: dict = field(default_factory=dict)
    num_metrics_dropped: int = 0
    accounted: bool = False
    epsilon: float = 0.0
    delta: float = 0.0
    threat_model: str = ""
    relation: str = ""
    epsilons: dict = field(default_factory=dict)
    reasons: dict = field(default_factory=dict)
    conversion: str = ""
    local: Any = None
    message_bytes: tuple[int, ...] = ()
    wire_bytes: tuple[int, ...] = ()
    float32_wire_bytes: int = 0
    messages: tuple[bytes, ...] = field(default=(), repr=False)


class DPRECStrategy(Strategy):
    """Wrap a Flower Message-API strategy so that training runs through DP-REC.

    Use it with :func:`dprec_mod` on the clients. The wrapped strategy (``FedAvg`` or a
    FedAvg-like one such as ``FedProx``) still builds the messages and aggregates the metrics,
    and, with ``sampling="without_replacement"``, selects the nodes; this wrapper

    * in :meth:`configure_train`: keeps the global arrays, adds the codec's parameters
      (:func:`codec_config`) to the train config, with ``sampling="poisson"`` selects the
      nodes itself (each connected node with probability ``sampling_rate``) and has the wrapped
      strategy build the train messages for exactly those, and records ``B`` (train messages)
      and ``N`` (connected nodes); with ``sampling="with_replacement"`` it draws
      ``clients_per_round`` slots itself (each a connected node, uniformly, with replacement, from ``secrets.SystemRandom``) and sends one
      train message per slot (a node drawn ``k`` times gets ``k``, each with its own message id
      and its slot under :data:`CONFIG_SLOT`; the client mod encodes each with a fresh seed);
    * in :meth:`aggregate_train`: keeps at most one reply per train message of this round, from
      its node (one per sampled node, except with replacement); drops (logs, counts) every
      reply that fails (see *Untrusted replies* below); decodes and averages the rest in one
      pass (:meth:`DPRECCodec.aggregate`, uniform weights), returns ``global + mean`` for the
      floating arrays (other arrays unchanged), steps the accountant, logs epsilon
      with its threat model, relation, sampling and conversion (``inf`` with the reason where
      no bound is proved) and the bytes on the wire, and adds them to the returned
      ``MetricRecord``: ``"dprec-epsilon"`` (for ``relation``),
      ``"dprec-epsilon.<threat_model>.<relation>"`` (both relations), ``"dprec-delta"``,
      ``"dprec-clients"`` (messages aggregated),
      ``"dprec-message-bytes"``, ``"dprec-wire-bytes"`` (per client: the serialized
      ``ConfigRecord``) and ``"float32-wire-bytes"`` (per client: the same arrays as a
      float32 ``ArrayRecord``); in a round that sent train messages also ``"dprec-failed"``
      (error replies) and ``"dprec-dropped"`` (replies dropped), with
      ``"dprec-dropped.<reason>"`` (:data:`DROP_REASONS`) and ``"dprec-metrics-dropped"``
      where nonzero.

    Untrusted replies. A reply is dropped, with its node and reason logged (WARNING) and counted,
    and the round goes on with the others, when it is not from the node of one of this round's
    train messages in reply to that message (Flower's ``reply_to_message_id`` and
    ``src_node_id``; where the grid set no message ids, only the node is compared), when its
    train message was answered more than once (all its replies; where the grid set no message
    ids: when its node replied more times than it was sent train messages), when it holds no
    DP-REC message for this model
    and codec (any failure of reading or parsing it, MemoryError included), when its seed
    appears in another reply of the round (every copy: which one is the original cannot be
    told, and dropping all makes the round independent of the order of arrival) or was already
    received in an earlier round, or, with ``weighted_by_key``, when its weight is missing,
    not a finite number ``>= 0`` or above ``max_weight``. A client can still send a well-formed
    message for any update it likes: the server checks where a message comes from and that it
    is new, not what it encodes.

    Evaluation is delegated unchanged. :meth:`start` is Flower's ``Strategy.start`` (its
    ``num_rounds`` also plans the accounting), returning Flower's ``Result``.

    Which bound: ``sampling="without_replacement"`` (default) lets ``FedAvg`` draw ``B`` of
    ``N`` nodes; ``sampling="poisson"`` samples every node independently at rate
    ``q = sampling_rate`` from the OS entropy source. Either way a node that is not selected
    sends nothing, so a round costs a client exactly
    ``log(1 - q + q exp(a (a-1) c^2 / 2)) / (a - 1)`` at order ``a`` (``q = B / N`` without
    replacement): unlike DP-FedAvg, DP-REC gets no sampled-Gaussian amplification. With
    ``T = 1000``, ``q = 10/100``, ``c = 0.5``, ``delta = 100^-1.1``
    (:func:`dprec.accounting.dprec_epsilon`, ``bits=None``, against the server, zero-out): epsilon 32.38 in
    both modes.
    Under Poisson sampling the number of clients per round varies (the mean's denominator is
    the realised count), every round is accounted (an empty round too: it sends nothing and
    returns the global arrays unchanged).

    ``sampling="with_replacement"`` is the paper's: each round ``B = clients_per_round`` slots
    (a parameter of the wrapper, not derived from the wrapped strategy's fraction; ``B > N`` is
    allowed) each pick one of the ``N`` connected nodes uniformly from the OS entropy source; the
    wrapped strategy builds the message of each node drawn (as under Poisson sampling) and the
    wrapper sends one per slot. The mean is over every slot's message (a node drawn twice
    counts twice). The accountant composes the round's ``B`` slots at ``q = 1/N`` each
    (``sampling="with_replacement"`` of :func:`dprec.accounting.dprec_epsilon`, as defined on the
    *Which guarantee do I have?* page for each threat model), once per round in which a message
    reached the server. Every threat model has a bound for ``relation="zero"``;
    ``relation="add_remove"`` has none against the server (and, for REC's messages as sent, none
    against a message observer): ``inf``, logged with the reason, as in the other modes.
    ``method="paper"`` is refused (ValueError naming ``method``): it is no guarantee.

    Every mode's per-round log line ends with the local guarantee (what one client's own messages
    reveal, no amplification: per message, and over the most messages it sends with probability
    ``1 - delta / 10``, at ``delta + delta / 10``), also in :attr:`DPRECRound.local`.

    ``N`` (``num_clients``) should be given when the population is known. Otherwise it is the
    number of nodes connected when the first round is configured: undercounting it only
    overstates epsilon, but sampling without replacement is accounted only for ``B <= N``, so a
    later round in which the wrapped strategy samples more than ``N`` nodes (more nodes
    connected since) makes :meth:`configure_train` raise ``ValueError`` before any message is
    sent.

    A strategy whose own array aggregation differs from FedAvg's (FedAdam, FedAvgM, Krum,
    ...) can be wrapped, but its array logic is replaced by the DP-REC mean (a warning is
    logged).

    Parameters
    ----------
    strategy : flwr.serverapp.strategy.Strategy
        The strategy to wrap. With ``"without_replacement"`` it must sample distinct nodes
        uniformly at random (FedAvg's sampling) for the accounting to hold. With ``"poisson"``
        its ``configure_train`` is called on a view of the grid holding only the selected
        nodes, with its ``fraction_train``, ``min_train_nodes`` and ``min_available_nodes``
        (where it has them) set for the duration of the call so that it messages every one of
        them (FedAvg and its subclasses do); a strategy that messages any other set of nodes
        makes the round raise ``ValueError``.
    codec : DPRECCodec
        The codec the clients use (its parameters travel in the train config).
    delta : float
        The delta at which epsilon is reported, in (0, 1).
    num_rounds : int, optional
        The planned number of rounds of the accountant (with ``method="sound"``, the one Flower
        uses, no bits are refused: against ``"central"`` the accountant falls back on the
        ``"messages"`` bound where REC's total-variation cost cannot be paid); default: the
        ``num_rounds`` passed to :meth:`start`.
    num_clients : int, optional
        The population size ``N`` for accounting; give it when the population is known.
        Default: the number of connected nodes when the first round is configured. Sampling
        without replacement refuses (``ValueError`` from :meth:`configure_train`, nothing sent)
        a round that samples more than ``N`` nodes.
    reverse : {"bound", "exact"}
        The accountant's reverse-divergence method; both give the same numbers here (each
        round's divergence is exact and symmetric).
    threat_model : {"server", "messages", "central"}, optional
        Whom the logged epsilon holds against, passed to the accountant
        (:func:`dprec.accounting.dprec_epsilon`); default ``"server"``: Flower's server knows
        which node sent each message.
    relation : {"zero", "add_remove"}, optional
        The neighbouring relation of the logged ``"dprec-epsilon"``; default ``"zero"`` (a
        client's update against a zero update). ``"add_remove"`` has no bound under these
        sampling schemes (an added client adds a message): ``inf``, logged with the reason.
    method : {"sound"}
        ``"sound"`` (default). ``"paper"`` (Algorithm 7) is only defined for clients sampled
        with replacement and is no guarantee: ValueError naming ``method`` in every mode.
    sampling : {"without_replacement", "poisson", "with_replacement"}
        Who selects each round's nodes and how it is accounted (see above).
    sampling_rate : float, optional
        Required for (and only for) ``sampling="poisson"``: each connected node's probability
        ``q`` in (0, 1] of taking part in a round.
    rng : numpy.random.Generator, optional
        ``"poisson"`` only: the generator of the node selection. Default: a fresh
        ``np.random.default_rng()`` seeded from the OS entropy source. For tests: a generator
        whose seed is known makes the selection predictable to whoever knows it, which voids
        the amplification by sampling against them.
    clients_per_round : int, optional
        Required for (and only for) ``sampling="with_replacement"``: ``B``, the slots drawn each
        round, in ``[1, 2**53]`` (ValueError naming ``clients_per_round`` otherwise, TypeError for
        a non-int).
    weighted_by_key : str, optional
        Weight each client's update by this key of its ``MetricRecord`` (e.g.
        ``"num-examples"``) instead of uniformly. The accounting assumes data-independent
        weights, so the reported epsilon does not cover weights that depend on the data.
        The weights are divided by the largest before they are summed (float64, ``math.fsum``),
        so no claim overflows them.
    max_weight : float, optional
        The largest weight a reply may claim, ``> 0``; default: no cap (honest clients' sizes
        vary too widely for one default). With ``weighted_by_key`` a reply above it is dropped
        (``"above-max-weight"``); the train metrics of a reply whose metric weight (the wrapped
        strategy's ``weighted_by_key``, Flower's ``"num-examples"``) is above it are left out of
        the metric aggregation (without a cap: above ``float max / replies``, which would overflow
        the wrapped strategy's sum). A client claiming exactly ``max_weight`` still gets
        ``max_weight / (max_weight + the others' weights)`` of the mean: set it near the largest
        honest value.
    keep_messages : bool
        Keep every aggregated message's bytes in :attr:`history` (for audits and tests).

    Attributes
    ----------
    strategy : Strategy
    codec : DPRECCodec
    current_arrays : flwr.app.ArrayRecord
        The global arrays of the round being trained.
    sampling : str
    sampling_rate : float or None
    clients_per_round : int or None
        ``B`` of ``sampling="with_replacement"``.
    threat_model, relation, method : str
        As given (defaults filled in).
    accountant : dprec.accounting.DPRECRoundAccountant or None
        Created when the first round is configured.
    guarantee : dprec.accounting.PrivacyGuarantee or None
        The guarantee so far (None before the first accounted round).
    max_weight : float or None
        As given.
    history : list of DPRECRound
        One entry per configured training round.
    """

    def __init__(
        self,
        strategy: Strategy,
        codec: DPRECCodec,
        *,
        delta: float,
        num_rounds: int | None = None,
        num_clients: int | None = None,
        reverse: str = "bound",
        weighted_by_key: str | None = None,
        max_weight: float | None = None,
        keep_messages: bool = False,
        sampling: str = "without_replacement",
        sampling_rate: float | None = None,
        rng: np.random.Generator | None = None,
        clients_per_round: int | None = None,
        threat_model: str | None = None,
        relation: str | None = None,
        method: str = "sound",
    ) -> None:
        super().__init__()
        if not isinstance(strategy, Strategy):
            raise TypeError(_wrong_strategy_api(strategy))
        if isinstance(strategy, DPRECStrategy):
            raise TypeError("strategy is already a DPRECStrategy")
        if not isinstance(codec, DPRECCodec):
            raise TypeError(f"codec must be a DPRECCodec, got {type(codec).__name__}")
        if isinstance(delta, bool) or not isinstance(delta, (int, float)):
            raise TypeError(f"delta must be a float, got {type(delta).__name__}")
        if not 0.0 < float(delta) < 1.0:
            raise ValueError(f"delta must be in (0, 1), got {delta!r}")
        for name, value in (("num_rounds", num_rounds), ("num_clients", num_clients)):
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                    raise TypeError(f"{name} must be an int or None, got {type(value).__name__}")
                if value < 1:
                    raise ValueError(f"{name} must be >= 1, got {value}")
        if reverse not in ("bound", "exact"):
            raise ValueError(f"reverse must be 'bound' or 'exact', got {reverse!r}")
        if weighted_by_key is not None and not isinstance(weighted_by_key, str):
            raise TypeError(f"weighted_by_key must be a str or None, got {type(weighted_by_key).__name__}")
        if max_weight is not None:
            max_weight = check_positive(max_weight, "max_weight")
        if not isinstance(keep_messages, bool):
            raise TypeError(f"keep_messages must be a bool, got {type(keep_messages).__name__}")
        if not isinstance(sampling, str) or sampling not in STRATEGY_SAMPLING:
            raise ValueError(f"sampling must be one of {STRATEGY_SAMPLING}, got {sampling!r}")
        if sampling == "poisson":
            if sampling_rate is None:
                raise ValueError("sampling_rate is required for sampling='poisson' (each node's probability)")
            if isinstance(sampling_rate, bool) or not isinstance(sampling_rate, (int, float, np.floating, np.integer)):
                raise TypeError(f"sampling_rate must be a float, got {type(sampling_rate).__name__}")
            if not 0.0 < float(sampling_rate) <= 1.0:
                raise ValueError(f"sampling_rate must be in (0, 1], got {sampling_rate!r}")
            if rng is not None and not isinstance(rng, np.random.Generator):
                raise TypeError(f"rng must be a numpy.random.Generator or None, got {type(rng).__name__}")
        else:
            if sampling_rate is not None:
                raise ValueError("sampling_rate is only used with sampling='poisson'")
            if rng is not None:
                raise ValueError(
                    "rng is only used with sampling='poisson' (sampling='with_replacement' draws its slots from "
                    "secrets.SystemRandom; otherwise the wrapped strategy samples)"
                )
        if sampling == "with_replacement":
            if clients_per_round is None:
                raise ValueError(
                    "clients_per_round is required for sampling='with_replacement' (B, the slots drawn each round)"
                )
            if isinstance(clients_per_round, bool) or not isinstance(clients_per_round, (int, np.integer)):
                raise TypeError(f"clients_per_round must be an int, got {type(clients_per_round).__name__}")
            if not 1 <= clients_per_round <= 2**53:
                raise ValueError(f"clients_per_round must be in [1, 2**53], got {clients_per_round!r}")
            if method == "paper":
                raise ValueError(
                    "method='paper' (Algorithm 7) is not a guarantee under a threat model; DPRECStrategy logs "
                    "and reports guarantees: use method='sound' with sampling='with_replacement' (or "
                    "dprec.accounting.dprec_epsilon(method='paper') to reproduce the paper's numbers)"
                )
        elif clients_per_round is not None:
            raise ValueError(
                "clients_per_round is only used with sampling='with_replacement' (FedAvg's fraction_train and "
                "min_train_nodes size a sample without replacement; sampling_rate a Poisson one)"
            )
        from ..accounting import dprec_rec  # noqa: PLC0415 - SciPy is optional

        # ValueError naming threat_model / relation / method (with the valid choices) now, not after a round.
        self.method, self.threat_model, self.relation = dprec_rec._resolve(method, threat_model, relation, sampling)
        self.strategy = strategy
        self.codec = codec
        self.delta = float(delta)
        self.num_rounds = None if num_rounds is None else int(num_rounds)
        self.num_clients = None if num_clients is None else int(num_clients)
        self.reverse = reverse
        self.weighted_by_key = weighted_by_key
        self.max_weight = max_weight
        self.keep_messages = keep_messages
        self.sampling = sampling
        self.sampling_rate = None if sampling_rate is None else float(sampling_rate)
        self.clients_per_round = None if clients_per_round is None else int(clients_per_round)
        # The with-replacement slots: always the OS entropy source (no seed to know or to leak).
        self._slot_rng = secrets.SystemRandom() if sampling == "with_replacement" else None
        # Private randomness for the node selection: OS entropy unless a test passes its own generator.
        self._rng = (np.random.default_rng() if rng is None else rng) if sampling == "poisson" else None
        self.current_arrays: ArrayRecord = ArrayRecord()
        self._template: dict[str, np.ndarray] = {}
        self.accountant: Any = None
        self.history: list[DPRECRound] = []
        self._pending: dict[int, DPRECRound] = {}
        # Round -> the metadata of its train messages: a Grid sets each message_id when it pushes the
        # message (after configure_train returned), and replies name it in reply_to_message_id.
        self._sent: dict[int, list[Any]] = {}
        # Seeds of every DP-REC message received so far (8 bytes of entropy each: honest seeds do not
        # repeat), to drop a replayed one.
        self._seen_seeds: set[int] = set()
        self._float32_wire: dict[bytes, int] = {}
        if not (isinstance(strategy, FedAvg) and type(strategy).aggregate_train is FedAvg.aggregate_train):
            log(
                WARNING,
                "DPRECStrategy: %s aggregates arrays its own way; DP-REC replaces that by the mean of the decoded "
                "updates (only its node selection, configuration and metric aggregation are used)",
                type(strategy).__name__,
            )
        if weighted_by_key is not None:
            log(
                WARNING,
                "DPRECStrategy: weighting updates by %r; the DP-REC accounting assumes data-independent weights",
                weighted_by_key,
            )

    def __repr__(self) -> str:
        how = ""
        if self.sampling == "poisson":
            how = f", sampling='poisson', sampling_rate={self.sampling_rate!r}"
        elif self.sampling == "with_replacement":
            how = f", sampling='with_replacement', clients_per_round={self.clients_per_round!r}"
        return (
            f"DPRECStrategy({self.strategy!r}, {self.codec!r}, delta={self.delta!r}{how}, "
            f"threat_model={self.threat_model!r}, relation={self.relation!r})"
        )

    def _sampling_text(self) -> str:
        if self.sampling == "poisson":
            return f"Poisson sampling at rate {self.sampling_rate:g}"
        if self.sampling == "with_replacement":
            return f"sampling with replacement, {self.clients_per_round} slots per round"
        return "sampling without replacement"

    @property
    def epsilon(self) -> float:
        """Epsilon spent so far against :attr:`threat_model` under :attr:`relation` (0.0 before the
        first aggregated round; ``inf`` where no bound is proved)."""
        return 0.0 if self.accountant is None else float(self.accountant.epsilon)

    @property
    def guarantee(self) -> Any:
        """The :class:`dprec.accounting.PrivacyGuarantee` so far (None before the first accounted round)."""
        accounting = None if self.accountant is None else self.accountant.accounting
        return None if accounting is None else accounting.guarantee

    def _privacy_text(self, conversion: str = "") -> str:
        """``threat model 'server', relation 'zero', <sampling>[, <conversion>]`` for the logs."""
        text = f"threat model {self.threat_model!r}, relation {self.relation!r}, {self._sampling_text()}"
        return f"{text}, {conversion}" if conversion else text

    def _record_privacy(self, stats: DPRECRound, accounting: Any) -> None:
        """Copy the accounting's epsilon, threat model, relations and reasons into ``stats``."""
        stats.threat_model, stats.relation = str(self.threat_model), str(self.relation)
        if accounting is None:
            stats.epsilon, stats.delta = 0.0, self.delta
            return
        stats.epsilon, stats.delta = float(accounting.epsilon), float(accounting.delta)
        stats.epsilons = {k: float(v) for k, v in accounting.epsilons.items()}
        stats.reasons = dict(accounting.reasons)
        stats.local = getattr(accounting, "local", None)
        # "rdp-balle, both tails: max over directions at ..." -> "rdp-balle, both tails"
        stats.conversion = str(getattr(accounting, "conversion", "") or "").split(":")[0]

    def _epsilon_text(self, stats: DPRECRound) -> str:
        """``epsilon = 3.2000 at delta = 1e-05 (threat model ..., relation ..., ...)``, or inf with the reason."""
        where = self._privacy_text(stats.conversion)
        if math.isfinite(stats.epsilon):
            text = f"epsilon = {stats.epsilon:.4f} at delta = {stats.delta:g} ({where})"
        else:
            reason = stats.reasons.get(stats.relation, "no bound is proved")
            text = f"epsilon = inf at delta = {stats.delta:g} ({where}): no guarantee, {reason}"
        return text

    def _local_text(self, stats: DPRECRound) -> str:
        """``; local epsilon = 1.6890 per message at delta 1e-05; 5.0700 at delta 1.1e-05 for a client sent at
        most 3 messages (...)``, or ""."""
        local = stats.local
        if local is None:
            return ""
        return (
            f"; local epsilon (one client's own messages, against the server, relation 'zero', no amplification) = "
            f"{local.per_message:.4f} per message at delta {stats.delta:g}; {local.epsilon_max:.4f} at delta "
            f"{local.delta_max:g} for a client sent at most {local.max_participations} messages (probability >= "
            f"1 - {local.tail_probability:g} under honest uniform sampling of N = {self.accountant.num_clients})"
        )

    def _privacy_metrics(self, stats: DPRECRound, metrics: MetricRecord) -> MetricRecord:
        metrics["dprec-epsilon"] = stats.epsilon
        for rel, eps in stats.epsilons.items():
            metrics[f"dprec-epsilon.{stats.threat_model}.{rel}"] = eps
        metrics["dprec-delta"] = stats.delta
        return metrics

    def summary(self) -> None:
        """Log the DP-REC settings, then the wrapped strategy's summary."""
        log(INFO, "\t├──> DP-REC settings:")
        log(INFO, "\t│\t├── Codec: %s", self.codec)
        log(INFO, "\t│\t├── delta: %g (%s)", self.delta, self._privacy_text())
        how = (
            "uniform mean"
            if self.weighted_by_key is None
            else f"weighted by {self.weighted_by_key!r}"
            + ("" if self.max_weight is None else f" (at most {self.max_weight:g} per reply)")
        )
        log(INFO, "\t│\t└── Aggregation: %s", how)
        self.strategy.summary()

    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
    ) -> Result:
        """Run the strategy: Flower's ``Strategy.start``; ``num_rounds`` also plans the accounting.

        Parameters are those of ``flwr.serverapp.strategy.Strategy.start``. When the wrapper
        was built without ``num_rounds``, this call's ``num_rounds`` is the accountant's planned
        total.

        Returns
        -------
        flwr.serverapp.strategy.Result
            Its ``train_metrics_clientapp[round]`` hold the DP-REC metrics of each round.
        """
        if self.num_rounds is None:
            self.num_rounds = int(num_rounds)
        return super().start(
            grid=grid,
            initial_arrays=initial_arrays,
            num_rounds=num_rounds,
            timeout=timeout,
            train_config=train_config,
            evaluate_config=evaluate_config,
            evaluate_fn=evaluate_fn,
        )

    # -- training ---------------------------------------------------------------------------

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Stash the global arrays, add the codec parameters, and sample (or let the wrapped strategy sample).

        With ``sampling="poisson"``, each connected node is selected independently with
        probability ``sampling_rate`` and the wrapped strategy builds the train messages for
        exactly the selected nodes; a round that selects none returns no message.

        Raises
        ------
        ValueError
            Sampling without replacement, when the wrapped strategy samples more nodes than the
            accounting's ``N`` (``num_clients``, or the nodes connected in the first round):
            raised before any message is returned, so nothing is sent that round.
        """
        self.current_arrays = arrays
        template = self._template = _float_arrays(arrays)
        if not template:
            raise ValueError("arrays has no floating-point arrays for DP-REC to update")
        layout = self.codec.layout(template)  # checks the codec against the model before anything is sent
        config = ConfigRecord(dict(config.items()))
        for key in (*_CONFIG_KEYS, CONFIG_SLOT):
            config.pop(key, None)
        config.update(codec_config(self.codec))
        if self.sampling == "poisson":
            nodes = self._wait_for_nodes(grid)
            num_available = len(nodes)
            if self.accountant is None:  # before anything is sent: the bits checked for the planned run
                self.accountant = self._new_accountant(template, num_available, 0)
            chosen = self.select_nodes(nodes)
            messages = self._messages_for(chosen, server_round, arrays, config, grid)
        elif self.sampling == "with_replacement":
            # Every slot is sent: at least one node; and never fewer than the accounting's N (each slot's rate
            # would be 1/N_t > 1/N, more than is accounted).
            at_least = 1 if self.accountant is None else int(self.accountant.num_clients)
            nodes = self._wait_for_nodes(grid, at_least=at_least)
            num_available = len(set(nodes))
            if self.accountant is None:  # before anything is sent
                self.accountant = self._new_accountant(template, num_available, int(self.clients_per_round))
            messages = self._slot_messages(self.select_nodes(nodes), server_round, arrays, config, grid)
        else:
            if self.accountant is not None:  # fewer than N connected would sample at a rate above B / N
                self._wait_for_nodes(grid, at_least=int(self.accountant.num_clients))
            messages = list(self.strategy.configure_train(server_round, arrays, config, grid))
            num_available = len(list(grid.get_node_ids()))
        dst = [m.metadata.dst_node_id for m in messages]
        if self.sampling != "with_replacement" and len(set(dst)) != len(dst):
            raise ValueError(
                "the wrapped strategy sent several train messages to one node; DP-REC accounting needs "
                "distinct nodes (sampling without replacement)"
            )
        num_sampled = len(messages)
        if self.sampling == "without_replacement":
            self._check_sample_size(server_round, num_sampled, num_available)  # before any message is returned
        if num_sampled and self.accountant is None:
            self.accountant = self._new_accountant(template, num_available, num_sampled)
        if self.accountant is not None:
            if self.sampling != "poisson" and num_available < self.accountant.num_clients:
                log(
                    WARNING,
                    "DPRECStrategy: %d nodes connected in round %d, fewer than the N = %d of the accounting; "
                    "epsilon understates this round's sampling rate",
                    num_available,
                    server_round,
                    self.accountant.num_clients,
                )
            elif self.sampling == "poisson" and num_available > self.accountant.num_clients:
                log(
                    WARNING,
                    "DPRECStrategy: %d nodes connected in round %d, more than the N = %d of the accounting; "
                    "a central observer's REC total-variation cost counts only ceil(q N) = %d messages per round",
                    num_available,
                    server_round,
                    self.accountant.num_clients,
                    self.accountant.clients_per_round,
                )
        stats = DPRECRound(server_round=server_round, num_sampled=num_sampled, num_available=num_available)
        self._pending[server_round] = stats
        self._sent[server_round] = [m.metadata for m in messages]
        self.history.append(stats)
        log(
            INFO,
            "DP-REC: round %d samples %d of %d nodes%s (%s); %d groups, %d bits, %d-byte messages",
            server_round,
            num_sampled,
            num_available,
            f" ({len(set(dst))} distinct)" if self.sampling == "with_replacement" else "",
            self._sampling_text(),
            layout.num_groups,
            layout.total_bits,
            layout.message_nbytes,
        )
        return messages

    def _check_sample_size(self, server_round: int, num_sampled: int, num_available: int) -> None:
        """Refuse (before anything is sent) a sample larger than the accounting's ``N``.

        Sampling without replacement is accounted for ``B <= N``; the accountant would refuse a
        larger ``B`` only in :meth:`aggregate_train`, after the clients trained and replied.
        """
        if self.accountant is not None:
            n = int(self.accountant.num_clients)
        else:
            n = self.num_clients if self.num_clients is not None else num_available
        if num_sampled <= n:
            return
        origin = (
            "it was given as num_clients"
            if self.num_clients is not None
            else "it was taken from the nodes connected when the first round was configured"
        )
        raise ValueError(
            f"DPRECStrategy: round {server_round} samples B = {num_sampled} of {num_available} connected nodes, "
            f"more than the accounting's num_clients N = {n} ({origin}); sampling without replacement is "
            f"accounted only for B <= N, so nothing was sent this round. Give DPRECStrategy num_clients= the "
            f"population size (or the wrapped strategy a min_available_nodes equal to it, so that the first "
            f"round sees every node)"
        )

    def select_nodes(self, node_ids: Iterable[int]) -> list[int]:
        """The wrapper's sampling: Poisson, or ``clients_per_round`` slots with replacement.

        ``sampling="poisson"``: each of ``node_ids`` independently with probability
        ``sampling_rate``. ``sampling="with_replacement"``: ``clients_per_round`` slots, each a
        node drawn uniformly from ``node_ids`` (a node may be drawn several times).

        Parameters
        ----------
        node_ids : iterable of int
            The connected nodes (duplicates are counted once).

        Returns
        -------
        list of int
            Poisson: the selected nodes, in increasing order (possibly none); the draws come from
            the strategy's generator (OS entropy unless ``rng`` was given), one per node in
            increasing order of node id. With replacement: the ``B`` slots' nodes in the order
            drawn, from ``secrets.SystemRandom`` (OS entropy).
        """
        nodes = sorted({int(n) for n in node_ids})
        if self.sampling == "with_replacement":
            if not nodes:
                raise ValueError("sampling='with_replacement' draws its slots from at least one node; none given")
            return [self._slot_rng.choice(nodes) for _ in range(int(self.clients_per_round))]
        if self.sampling != "poisson":
            raise ValueError(
                "select_nodes is for sampling='poisson' or 'with_replacement'; otherwise the wrapped strategy samples"
            )
        draws = self._rng.random(len(nodes))
        return [n for n, u in zip(nodes, draws) if u < self.sampling_rate]

    def _wait_for_nodes(self, grid: Grid, at_least: int = 0) -> list[int]:
        """The connected nodes, once the wrapped strategy's ``min_available_nodes`` (and ``at_least``) are connected."""
        need = max(int(getattr(self.strategy, "min_available_nodes", 0) or 0), at_least)
        while len(nodes := list(grid.get_node_ids())) < need:
            log(INFO, "Waiting for nodes to connect: %d connected (minimum required: %d).", len(nodes), need)
            time.sleep(1)
        return nodes

    def _messages_for(
        self, chosen: list[int], server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> list[Message]:
        """The wrapped strategy's train messages for exactly the nodes ``chosen`` (none if none)."""
        if not chosen:
            return []
        strategy = self.strategy
        # FedAvg messages int(fraction_train * connected) nodes, at least min_train_nodes, after waiting for
        # min_available_nodes: on a grid of the chosen nodes, these make it message every one of them.
        overrides = {"fraction_train": 1.0, "min_train_nodes": len(chosen), "min_available_nodes": len(chosen)}
        saved = {key: getattr(strategy, key) for key in overrides if hasattr(strategy, key)}
        try:
            for key in saved:
                setattr(strategy, key, overrides[key])
            messages = list(strategy.configure_train(server_round, arrays, config, _NodesGrid(grid, chosen)))
        finally:
            for key, value in saved.items():
                setattr(strategy, key, value)
        dst = sorted(m.metadata.dst_node_id for m in messages)
        if dst != chosen:
            raise ValueError(
                f"sampling={self.sampling!r}: {type(strategy).__name__}.configure_train sent train messages to "
                f"nodes {dst}, "
                f"not to exactly the {len(chosen)} selected ones {chosen}; wrap FedAvg or a FedAvg-like strategy"
            )
        return messages

    def _slot_messages(
        self, slots: list[int], server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> list[Message]:
        """One train message per slot (drawn with replacement): the wrapped strategy's message for the slot's node,
        its ConfigRecord (the one with the codec's parameters) extended by :data:`CONFIG_SLOT`.

        A node drawn ``k`` times gets ``k`` messages that differ in their slot, so that each is a message of its own
        (a Grid that derives message ids from the content gives them distinct ids); the arrays are shared.
        """
        chosen = sorted(set(slots))
        base = {int(m.metadata.dst_node_id): m for m in self._messages_for(chosen, server_round, arrays, config, grid)}
        out = []
        for slot, node in enumerate(slots):
            template = base[node]
            found = _find_config(template.content, CONFIG_SIGMA)
            content = RecordDict()
            for name, record in template.content.items():
                if found is not None and name == found[0]:
                    record = ConfigRecord(dict(record.items()))
                    record[CONFIG_SLOT] = slot
                content[name] = record
            meta = template.metadata
            out.append(
                Message(
                    content,
                    dst_node_id=node,
                    message_type=meta.message_type,
                    ttl=meta.ttl,
                    group_id=meta.group_id or None,
                )
            )
        return out

    def _new_accountant(self, template: Mapping[str, np.ndarray], num_available: int, num_sampled: int) -> Any:
        n = self.num_clients if self.num_clients is not None else num_available
        if n < 1:
            raise ValueError("no nodes are connected; give num_clients or the wrapped strategy's min_available_nodes")
        if self.sampling == "poisson":
            # The codec's accountant: bits and groups from the layout (REC's bound takes the smallest
            # group's K), the rate itself for Poisson sampling.
            return self.codec.accountant(
                template,
                num_clients=n,
                sampling_rate=self.sampling_rate,
                delta=self.delta,
                sampling="poisson",
                rounds=self.num_rounds,
                reverse=self.reverse,
                threat_model=self.threat_model,
                relation=self.relation,
                method=self.method,
            )
        return self.codec.accountant(
            template,
            num_clients=n,
            clients_per_round=num_sampled,
            delta=self.delta,
            sampling=self.sampling,  # "without_replacement" or "with_replacement" (B slots per round)
            rounds=self.num_rounds,
            reverse=self.reverse,
            threat_model=self.threat_model,
            relation=self.relation,
            method=self.method,
        )

    def _float32_wire_nbytes(self, layout: Layout, template: Mapping[str, np.ndarray]) -> int:
        """Per-client size of the same arrays sent as a float32 ArrayRecord (cached per layout)."""
        if layout.digest not in self._float32_wire:
            key = getattr(self.strategy, "arrayrecord_key", "arrays")
            record = ArrayRecord({k: Array(np.zeros(v.shape, dtype=np.float32)) for k, v in template.items()})
            self._float32_wire[layout.digest] = wire_nbytes(record, key)
        return self._float32_wire[layout.digest]

    def _aggregate_metrics(self, replies: list[Message], stats: DPRECRound) -> MetricRecord | None:
        """The wrapped strategy's train-metric aggregation over the replies whose metrics are usable.

        A reply without a ``MetricRecord``, without the wrapped strategy's weighting key in its
        first one (what Flower's ``aggregate_metricrecords`` reads), with a weight that is not a
        finite number in ``[0, max_weight]`` or with a value that is not finite is left out of
        the metrics (its update is still aggregated): one such reply no longer costs the round
        every client's metrics. Weights whose sum overflows give no metrics (Flower's average
        would make every metric 0).
        """
        fn = getattr(self.strategy, "train_metrics_aggr_fn", None)
        if fn is None:
            return None
        key = getattr(self.strategy, "weighted_by_key", "num-examples")
        # Without a cap, one above float max / n is what would overflow the wrapped strategy's sum.
        limit = self.max_weight if self.max_weight is not None else sys.float_info.max / max(1, len(replies))
        usable = []
        for reply in replies:
            try:
                problem = _metrics_problem(reply, key, limit)
            except Exception as exc:  # noqa: BLE001 - an odd record: its metrics only are left out
                problem = _describe(exc)
            if problem is not None:
                stats.num_metrics_dropped += 1
                log(
                    WARNING,
                    "DP-REC round %d: the train metrics of node %d are left out of the metric aggregation: %s",
                    stats.server_round,
                    reply.metadata.src_node_id,
                    problem,
                )
                continue
            usable.append(RecordDict(dict(reply.content.metric_records.items())))
        if not usable:
            return None
        total = sum(float(next(iter(r.metric_records.values()))[key]) for r in usable)
        if not math.isfinite(total):
            # Flower's aggregate_metricrecords divides by this sum: every weight would be 0 (a loss of 0.0).
            log(WARNING, "DP-REC round %d: the metric weights %r overflow; no train metrics", stats.server_round, key)
            return None
        try:
            return fn(usable, key)
        except Exception as exc:  # noqa: BLE001 - a metric must not cost the round its update
            log(WARNING, "DP-REC: the wrapped strategy could not aggregate the train metrics: %s", _describe(exc))
            return None

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Decode and average the replies' DP-REC messages in one pass; apply the mean to the global arrays.

        The mean is over the messages kept (with Poisson sampling, a number that varies from
        round to round): at most one per train message of this round, from its node (with
        replacement, a node drawn ``k`` times may send ``k``, each answering another message);
        every other reply, and any that fails, is dropped (logged, counted in
        ``"dprec-dropped"``; see the class docstring). A round is accounted once a DP-REC message
        reached the server, aggregated or not (under Poisson sampling, always). Without any
        message to aggregate it returns ``(None, None)`` if the round was not accounted, else
        ``None`` (``sampling="without_replacement"``) or the unchanged global arrays
        (``"poisson"``) with the DP-REC metrics.
        """
        replies = list(replies)
        stats = self._pending.pop(server_round, None)
        sent = self._sent.pop(server_round, [])
        if stats is None:
            raise ValueError(f"round {server_round} was not configured by this DPRECStrategy (configure_train)")
        if self.sampling == "poisson":
            # Every Poisson round is composed, whatever comes back (nothing, if no node was selected).
            self.accountant.step()
            stats.accounted = True
        template = self._template
        layout = self.codec.layout(template)

        def drop(node: Any, reason: str, detail: str) -> None:
            stats.num_rejected += 1
            stats.dropped[reason] = stats.dropped.get(reason, 0) + 1
            log(WARNING, "DP-REC round %d: dropped the reply of node %s (%s): %s", server_round, node, reason, detail)

        # 1. Origin: one reply per train message of this round, from its node (one per sampled node, except
        # with replacement, where a node drawn k times has k messages).
        ids = {m.message_id: int(m.dst_node_id) for m in sent if m.message_id}
        sent_to = Counter(int(m.dst_node_id) for m in sent)
        nodes = set(sent_to)
        # Replies are grouped by the message they answer (where the grid set message ids; else by node, a node
        # answering at most as many times as it was sent messages).
        by_key: dict[Any, list[Message]] = {}
        for reply in replies:
            try:
                node = _sender(reply, ids, nodes)
            except Exception as exc:  # noqa: BLE001 - metadata of a malformed reply
                node, src = None, f"? ({_describe(exc)})"
            else:
                src = reply.metadata.src_node_id
                if not reply.has_error() and int(src) in nodes:
                    # A sampled node's reply reached the server, whatever is dropped below (a copy, a
                    # wrong id, bytes that do not parse): it may carry the node's data, so the round
                    # is accounted.
                    stats.accounted = True
            if node is None:
                drop(src, "unsolicited", "not a reply from the node of one of this round's train messages")
            elif reply.has_error():
                stats.num_failed += 1
                log(INFO, "DP-REC: error reply from node %d: %s", node, _clip_text(str(reply.error.reason), 200))
            else:
                key = reply.metadata.reply_to_message_id if ids else node
                by_key.setdefault(key, []).append(reply)
        single: list[tuple[int, Message]] = []
        for key, key_replies in by_key.items():
            node = int(key_replies[0].metadata.src_node_id)
            allowed = 1 if ids else sent_to[node]
            if len(key_replies) > allowed:
                if self.sampling != "with_replacement":
                    what = f"node {node} replied {len(key_replies)} times this round"
                elif ids:
                    what = f"node {node} answered its train message {_short(key)} {len(key_replies)} times"
                else:
                    what = f"node {node} replied {len(key_replies)} times to {allowed} train messages this round"
                for _ in key_replies:
                    drop(node, "duplicate-reply", what)
            else:
                single.extend((node, reply) for reply in key_replies)

        # 2. The DP-REC message of each (any failure drops that reply only).
        parsed: list[tuple[int, Message, DPRECMessage, int]] = []
        for node, reply in single:
            try:
                name, record, msg = _read_reply(reply, layout)
                parsed.append((node, reply, msg, wire_nbytes(record, name)))
            except Exception as exc:  # noqa: BLE001 - bad bytes, wrong layout, MemoryError, ...
                drop(node, "bad-message", _describe(exc))

        # 3. Seeds: each message once, and new.
        seeds = Counter(msg.seed for _, _, msg, _ in parsed)
        kept: list[tuple[int, Message, DPRECMessage, int]] = []
        raw_weights: list[float] = []
        for node, reply, msg, wire in parsed:
            if seeds[msg.seed] > 1:
                drop(node, "duplicate-seed", f"its seed is in {seeds[msg.seed]} replies of this round")
                continue
            if msg.seed in self._seen_seeds:
                drop(node, "replayed-seed", "its seed was received in an earlier round")
                continue
            if self.weighted_by_key is not None:
                try:
                    weight = _metric(reply, self.weighted_by_key)
                except Exception as exc:  # noqa: BLE001 - a missing, non-finite or negative weight
                    drop(node, "bad-weight", _describe(exc))
                    continue
                if self.max_weight is not None and weight > self.max_weight:
                    what = f"{self.weighted_by_key!r} = {weight:g} > max_weight = {self.max_weight:g}"
                    drop(node, "above-max-weight", what)
                    continue
                raw_weights.append(weight)
            kept.append((node, reply, msg, wire))
        self._seen_seeds.update(seeds)
        msgs = [msg for _, _, msg, _ in kept]
        log(
            INFO,
            "aggregate_train: %d DP-REC messages, %d failures, %d dropped",
            len(msgs),
            stats.num_failed,
            stats.num_rejected,
        )

        weights = None
        if msgs and self.weighted_by_key is not None:
            # Divided by the largest first: two claims of 1e308 would overflow the sum to inf and make
            # every weight 0 (the model would not move, the round would still be accounted).
            w = np.asarray(raw_weights, dtype=np.float64)
            top = float(w.max())
            if not top > 0.0:
                log(WARNING, "DP-REC round %d: every weight %r is 0; no update", server_round, self.weighted_by_key)
                msgs = []
            else:
                w = w / top
                weights = w / math.fsum(w.tolist())
        if not msgs:
            return self._no_update(stats)
        accounting = self._account(stats)  # before aggregating: the server holds the messages now
        mean = self.codec.aggregate(msgs, template, weights=weights)
        new = ArrayRecord()
        for key, arr in self.current_arrays.items():
            if key in mean:
                g = template[key]
                new[key] = Array(np.asarray(g + mean[key], dtype=g.dtype))
            else:
                new[key] = arr
        stats.num_aggregated = len(msgs)
        self._record_privacy(stats, accounting)
        stats.message_bytes = tuple(m.nbytes for m in msgs)
        stats.wire_bytes = tuple(wire for _, _, _, wire in kept)
        stats.float32_wire_bytes = self._float32_wire_nbytes(layout, template)
        if self.keep_messages:
            stats.messages = tuple(m.to_bytes() for m in msgs)
        per_client = _mean_int(stats.wire_bytes)
        log(
            INFO,
            "DP-REC round %d: %s after %d rounds (%d %s %d clients); "
            "%s bytes per client on the wire vs %d as float32 (%.0fx less)%s",
            server_round,
            self._epsilon_text(stats),
            self.accountant.rounds,
            stats.num_sampled,
            "slots over" if self.sampling == "with_replacement" else "of",
            self.accountant.num_clients,
            per_client,
            stats.float32_wire_bytes,
            stats.float32_wire_bytes / per_client,
            self._local_text(stats),
        )
        metrics = self._aggregate_metrics([reply for _, reply, _, _ in kept], stats)
        metrics = MetricRecord() if metrics is None else metrics
        metrics = self._privacy_metrics(stats, metrics)
        metrics["dprec-clients"] = stats.num_aggregated
        metrics["dprec-message-bytes"] = _mean_int(stats.message_bytes)
        metrics["dprec-wire-bytes"] = per_client
        metrics["float32-wire-bytes"] = stats.float32_wire_bytes
        return new, self._drop_metrics(stats, metrics)

    def _account(self, stats: DPRECRound) -> Any:
        """Step the accountant for a round in which a message reached the server (Poisson: stepped already)."""
        if self.sampling == "poisson":
            return self.accountant.accounting
        return self.accountant.step(clients_per_round=stats.num_sampled)

    @staticmethod
    def _drop_metrics(stats: DPRECRound, metrics: MetricRecord) -> MetricRecord:
        """Add the failed and dropped counts (in a round that sent train messages)."""
        if stats.num_sampled:
            metrics["dprec-failed"] = stats.num_failed
            metrics["dprec-dropped"] = stats.num_rejected
            for reason in DROP_REASONS:
                if stats.dropped.get(reason):
                    metrics[f"dprec-dropped.{reason}"] = stats.dropped[reason]
            if stats.num_metrics_dropped:
                metrics["dprec-metrics-dropped"] = stats.num_metrics_dropped
        return metrics

    def _no_update(self, stats: DPRECRound) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """What a round without an aggregated message returns.

        ``(None, None)`` if nothing was accounted (Flower keeps its arrays). A round in which
        a message reached the server is accounted; it returns the ``"dprec-*"`` metrics, with
        ``None`` (Flower keeps its arrays) or, under Poisson sampling, the unchanged global arrays.
        """
        if not stats.accounted:
            self._record_privacy(stats, None if self.accountant is None else self.accountant.accounting)
            if stats.num_sampled and (stats.num_rejected or stats.num_failed):
                return None, self._drop_metrics(stats, MetricRecord())  # no update, but say what was dropped
            return None, None
        self._record_privacy(stats, self._account(stats))
        log(
            INFO,
            "DP-REC round %d: no update (%d nodes selected, %d messages aggregated, %d replies dropped); global "
            "arrays unchanged, %s after %d rounds%s",
            stats.server_round,
            stats.num_sampled,
            stats.num_aggregated,
            stats.num_rejected,
            self._epsilon_text(stats),
            self.accountant.rounds,
            self._local_text(stats),
        )
        metrics = self._privacy_metrics(stats, MetricRecord())
        metrics["dprec-clients"] = 0
        metrics = self._drop_metrics(stats, metrics)
        return (self.current_arrays if self.sampling == "poisson" else None), metrics

    # -- evaluation -------------------------------------------------------------------------

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Delegated to the wrapped strategy."""
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """Delegated to the wrapped strategy."""
        return self.strategy.aggregate_evaluate(server_round, replies)


class _NodesGrid:
    """A view of a Grid whose ``get_node_ids`` lists only the given nodes (Poisson sampling's selection)."""

    def __init__(self, grid: Grid, node_ids: list[int]) -> None:
        self._grid = grid
        self._node_ids = list(node_ids)

    def get_node_ids(self) -> list[int]:
        return list(self._node_ids)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._grid, name)


def _read_reply(reply: Message, layout: Layout) -> tuple[str, ConfigRecord, DPRECMessage]:
    """The DP-REC record of a reply (its name and the record) and its parsed message, checked against ``layout``."""
    found = _find_config(reply.content, MESSAGE_KEY)
    if found is None:
        raise ValueError(f"no ConfigRecord holds {MESSAGE_KEY!r} (is dprec_mod in the ClientApp's mods?)")
    name, record = found
    blob = record[MESSAGE_KEY]
    if not isinstance(blob, bytes):
        raise TypeError(f"{MESSAGE_KEY!r} holds {type(blob).__name__}, not bytes")
    # Compared with the layout (length, groups, digest, bits) before any per-group work: nothing to check after.
    return name, record, DPRECMessage.from_bytes(blob, layout)


def _sender(reply: Message, ids: dict[str, int], nodes: set[int]) -> int | None:
    """The sampled node whose train message ``reply`` answers, or None.

    ``ids`` maps the message ids of this round's train messages to their destination nodes. A
    Grid sets them when it pushes the messages; where it set none (``configure_train`` driven by
    hand, or a grid that pushed copies) only the sender is compared with ``nodes``.
    """
    meta = reply.metadata
    src = int(meta.src_node_id)
    if ids:
        return src if ids.get(meta.reply_to_message_id) == src else None
    return src if src in nodes else None


def _weight_value(value: Any, key: str) -> float:
    """A metric used as a weight: a finite number >= 0 (ValueError naming ``key`` otherwise)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"metric {key!r} must be a finite number >= 0, got {_short(value)}")
    return float(value)


def _metric(reply: Message, key: str) -> float:
    for rec in reply.content.metric_records.values():
        if key in rec:
            return _weight_value(rec[key], key)
    raise ValueError(f"no MetricRecord holds the weight {key!r}")


def _metrics_problem(reply: Message, key: str, max_weight: float) -> str | None:
    """Why a reply's train metrics cannot enter the metric aggregation weighted by ``key``, or None."""
    records = list(reply.content.metric_records.values())
    if not records:
        return "no MetricRecord"
    if key not in records[0]:
        return f"its first MetricRecord lacks the weighting key {key!r}"
    try:
        weight = _weight_value(records[0][key], key)
    except (TypeError, ValueError, OverflowError) as exc:  # OverflowError: an int beyond float64
        return _describe(exc)
    if weight > max_weight:
        return f"{key!r} = {weight:g} > max_weight = {max_weight:g}"
    for rec in records:
        for name, value in rec.items():
            values = value if isinstance(value, list) else [value]
            try:
                finite = all(math.isfinite(v) for v in values)
            except (TypeError, OverflowError):
                finite = False
            if not finite:
                return f"metric {_short(name)} is not a finite number"
    return None


def _mean_int(values: tuple[int, ...]) -> int | float:
    """The mean of per-client sizes: an int when they are all equal (the usual case)."""
    if len(set(values)) == 1:
        return int(values[0])
    return float(np.mean(values))


def _wrong_strategy_api(strategy: Any) -> str:
    """Why ``strategy`` cannot be wrapped, naming its API and the fix (both of Flower's APIs call a class FedAvg)."""
    cls = type(strategy)
    where = f"{cls.__module__}.{cls.__qualname__}"
    if cls.__module__.startswith("flwr.server.strategy"):
        return (
            f"strategy is a {where}, a strategy of Flower's legacy API (NumPyClient apps, ServerApp(server_fn=...)); "
            "DPRECStrategy wraps the Message API's strategies: keep the legacy app and wrap it in "
            "dprec.flower.DPRECLegacyStrategy(strategy, codec, delta=...) in the server_fn, or "
            f"use flwr.serverapp.strategy.{cls.__name__} "
            f"(from flwr.serverapp.strategy import {cls.__name__}) with a ServerApp whose main() calls "
            "strategy.start(grid=..., ...), as in the docs' Flower page"
        )
    return (
        f"strategy must be a Message-API strategy (an instance of flwr.serverapp.strategy.Strategy, e.g. "
        f"flwr.serverapp.strategy.FedAvg), got {where}"
    )
