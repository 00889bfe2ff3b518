"""The server side of the Message API: :class:`DPRECStrategy` and :class:`DPRECRound`."""

from __future__ import annotations

import functools
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
from ..rec.kernels import MAX_SIGMA, MIN_SIGMA
from ._adaptive import AdaptiveClipping
from ._common import (
    _CONFIG_KEYS,
    CONFIG_QUANTILE_NOISE,
    CONFIG_SIGMA,
    CONFIG_SLOT,
    DROP_REASONS,
    MESSAGE_KEY,
    QUANTILE_BIT_KEY,
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
    streamed : bool
        Whether the replies were decoded and accumulated as they arrived (rounds run by
        :meth:`DPRECStrategy.start`), rather than when ``aggregate_train`` was called.
    nodes : tuple of int
        The node of each aggregated message, in aggregation order.
    clip_norm, sigma : float
        The round's clip norm ``C_t`` and the codec's ``sigma = C_t / c`` (fixed without adaptive clipping).
    unclipped_fraction : float
        Adaptive clipping: the noisy fraction of aggregated updates within ``C_t`` (the mean of the clients'
        noisy bits; NaN in a round without an update or without adaptive clipping).
    next_clip_norm : float
        The clip norm of the next round (NaN until the round is aggregated).
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
    streamed: bool = False
    nodes: tuple[int, ...] = ()
    clip_norm: float = 0.0
    sigma: float = 0.0
    unclipped_fraction: float = math.nan
    next_clip_norm: float = math.nan


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
      reply that fails (see *Untrusted replies* below); averages the rest (uniform weights; decoded
      as they arrived, see *Streaming* below), returns ``global + mean`` for the
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
    appears in another reply of the round that passed the origin checks (every copy: which one is the original cannot be
    told, and dropping all makes the round independent of the order of arrival) or was already
    received in an earlier round, or, with ``weighted_by_key``, when its weight is missing,
    not a finite number ``>= 0`` or above ``max_weight``. A client can still send a well-formed
    message for any update it likes: the server checks where a message comes from and that it
    is new, not what it encodes.

    Streaming. Under :meth:`start` the round's train messages are pushed and the replies pulled as
    they arrive; each pulled batch is checked, parsed and decoded into float64 sums
    (:meth:`DPRECCodec.accumulate`, one array per tensor), so the server never holds one decoded
    update per client. :meth:`aggregate_train` settles the round on all of its replies (the same
    drops whatever the order of arrival; the sums rebuilt from the kept messages when one accumulated
    on arrival is dropped). The mean is ``float32(sums / count)``.

    Adaptive clipping (default; ``adaptive_clipping=False`` turns it off): each round's codec has
    ``sigma = C_t / c``, ``C_t`` set from the noisy fraction of the previous round's aggregated updates
    that fitted (:class:`AdaptiveClipping`); the clients' bits are accounted (the accountant's
    ``quantile_noise``).

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
        The weights are divided by the power of two below the largest before they are summed
        (float64), so no claim overflows them.
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
    adaptive_clipping : bool or AdaptiveClipping
        ``True`` (default): the clip norm follows a private quantile of the clients' update norms
        (:class:`AdaptiveClipping` with its defaults; each message carries a noisy bit, accounted);
        ``False``: the codec's clip norm, fixed; or an :class:`AdaptiveClipping` with other settings.

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
        adaptive_clipping: bool | AdaptiveClipping = True,
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
            if not 0.0 < float(sampling_rate) <= 1.0:  # NaN fails too
                raise ValueError(
                    f"DPRECStrategy (Flower Message API): sampling_rate must be in (0, 1], got {sampling_rate!r}; "
                    "it is each node's probability of taking part in a round (0.1: a tenth of the nodes)"
                )
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
        if isinstance(adaptive_clipping, bool):
            adaptive = AdaptiveClipping() if adaptive_clipping else None
        elif isinstance(adaptive_clipping, AdaptiveClipping):
            adaptive = adaptive_clipping
        else:
            raise TypeError(
                f"adaptive_clipping must be a bool or a dprec.flower.AdaptiveClipping, got {type(adaptive_clipping).__name__}"
            )
        if sampling == "without_replacement":
            problem = _sample_plan_problem(
                strategy, "fraction_train", "min_train_nodes", "min_available_nodes", num_clients
            )
            if problem:
                raise ValueError(f"DPRECStrategy (Flower Message API): {problem}")
        from ..accounting import dprec_rec  # noqa: PLC0415 - SciPy is optional

        # ValueError naming threat_model / relation / method (with the valid choices) now, not after a round.
        self.method, self.threat_model, self.relation = dprec_rec._resolve(method, threat_model, relation, sampling)
        self.strategy = strategy
        self.codec = codec
        self.adaptive_clipping = adaptive
        #: The clip norm of the next round (adaptive clipping; else the codec's, fixed).
        self.clip_norm = float(codec.clip_norm)
        self._quantile_noise: float | None = None
        if adaptive is not None:
            self.clip_norm = float(adaptive.initial_clip_norm or codec.clip_norm)
            self._quantile_noise = adaptive.noise_for(codec.clip_multiplier)
            if not MIN_SIGMA <= self.clip_norm / codec.clip_multiplier <= MAX_SIGMA:
                raise ValueError(
                    f"AdaptiveClipping: initial_clip_norm={self.clip_norm!r} makes sigma = C / c = "
                    f"{self.clip_norm / codec.clip_multiplier:.6g}, outside [{MIN_SIGMA:.6g}, {MAX_SIGMA:.6g}] "
                    f"(a normal float32 whose candidates cannot overflow)"
                )
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
        # Round -> its replies so far and the float64 sums of those accumulated (see _receive).
        self._rounds: dict[int, _RoundState] = {}
        self._last_round: int | None = None
        self._wait_for_population = True  # DPRECLegacyStrategy's core: False (its clients are chosen already)
        # Seeds of every DP-REC message received so far (8 bytes of entropy each: honest seeds do not
        # repeat), to drop a replayed one.
        self._seen_seeds: set[int] = set()
        self._float32_wire: dict[tuple, int] = {}
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
            grid=_StreamingGrid(grid, self),  # type: ignore[arg-type] - a proxy: the grid's methods, streamed train rounds
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
        codec = self._round_codec()  # adaptive clipping: sigma = C_t / c this round
        layout = codec.layout(template)  # checks the codec against the model before anything is sent
        config = ConfigRecord(dict(config.items()))
        for key in (*_CONFIG_KEYS, CONFIG_SLOT, CONFIG_QUANTILE_NOISE):
            config.pop(key, None)
        config.update(codec_config(codec))
        if self.quantile_noise is not None:
            config[CONFIG_QUANTILE_NOISE] = self.quantile_noise
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
            if self.accountant is not None and self._wait_for_population:
                # Fewer than N connected would sample at a rate above B / N.
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
        stats.clip_norm, stats.sigma = codec.clip_norm, codec.sigma
        self._rounds[server_round] = _RoundState(
            stats, self._sent[server_round], template, layout, _Sums(codec, template)
        )
        self._last_round = server_round
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
        # The codec's accountant: bits and groups from the layout (REC's bound takes the smallest group's K);
        # Poisson sampling at its rate, the other schemes with this round's B (slots, with replacement).
        scheme: dict[str, Any] = (
            {"sampling_rate": self.sampling_rate} if self.sampling == "poisson" else {"clients_per_round": num_sampled}
        )
        return self.codec.accountant(
            template,
            num_clients=n,
            delta=self.delta,
            sampling=self.sampling,
            rounds=self.num_rounds,
            reverse=self.reverse,
            threat_model=self.threat_model,
            relation=self.relation,
            method=self.method,
            quantile_noise=self.quantile_noise,
            **scheme,
        )

    def _float32_wire_nbytes(self, layout: Layout, template: Mapping[str, np.ndarray]) -> int:
        """Per-client size of the same arrays sent as a float32 ArrayRecord (cached per layout)."""
        # Keyed by names and shapes (not the layout's digest, which changes with sigma every adaptive round).
        shapes = tuple((k, tuple(v.shape)) for k, v in template.items())
        if shapes not in self._float32_wire:
            key = getattr(self.strategy, "arrayrecord_key", "arrays")
            record = ArrayRecord({k: Array(np.zeros(v.shape, dtype=np.float32)) for k, v in template.items()})
            self._float32_wire[shapes] = wire_nbytes(record, key)
        return self._float32_wire[shapes]

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
        """Decode and average the replies' DP-REC messages; apply the mean to the global arrays.

        Under :meth:`start` the replies were already decoded and accumulated as they arrived
        (the grid's push/pull, see *Streaming* in the class docstring); this call only settles
        the round, and ``replies`` (Flower's list of the same replies) is not read again: a
        subclass that filters replies does so in :meth:`_receive`'s place, not here. Called by hand, it first receives ``replies`` the same way (in the order given).

        The mean is over the messages kept (with Poisson sampling, a number that varies from
        round to round): at most one per train message of this round, from its node (with
        replacement, a node drawn ``k`` times may send ``k``, each answering another message);
        every other reply, and any that fails, is dropped (logged, counted in
        ``"dprec-dropped"``; see the class docstring). Which replies are kept does not depend on
        the order of arrival. A round is accounted once a DP-REC message reached the server,
        aggregated or not (under Poisson sampling, always). Without any message to aggregate it
        returns ``(None, None)`` if the round was not accounted, else ``None``
        (``sampling="without_replacement"``) or the unchanged global arrays (``"poisson"``) with
        the DP-REC metrics.
        """
        state = self._rounds.pop(server_round, None)
        self._pending.pop(server_round, None)
        self._sent.pop(server_round, None)
        if state is None:
            raise ValueError(f"round {server_round} was not configured by this DPRECStrategy (configure_train)")
        if not state.streamed:
            self._receive(state, replies)
        stats = state.stats
        stats.streamed = state.streamed
        if self.sampling == "poisson":
            # Every Poisson round is composed, whatever comes back (nothing, if no node was selected).
            self.accountant.step()
            stats.accounted = True
        kept = self._settle(state)
        msgs = [e.msg for e in kept]
        stats.nodes = tuple(int(e.node) for e in kept)
        log(
            INFO,
            "aggregate_train: %d DP-REC messages, %d failures, %d dropped",
            len(msgs),
            stats.num_failed,
            stats.num_rejected,
        )
        if kept and not max(e.weight for e in kept) > 0.0:
            log(WARNING, "DP-REC round %d: every weight %r is 0; no update", server_round, self.weighted_by_key)
            kept, msgs = [], []
        if not msgs:
            return self._no_update(stats)
        accounting = self._account(stats)  # the server holds the messages: accounted before the update is applied
        self._adapt(stats, kept)
        mean = state.sums.mean(kept)
        template = state.template
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
        stats.wire_bytes = tuple(e.wire for e in kept)
        stats.float32_wire_bytes = self._float32_wire_nbytes(state.layout, template)
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
        metrics = self._aggregate_metrics([e.reply for e in kept], stats)
        metrics = MetricRecord() if metrics is None else metrics
        metrics = self._privacy_metrics(stats, metrics)
        metrics["dprec-clients"] = stats.num_aggregated
        metrics["dprec-message-bytes"] = _mean_int(stats.message_bytes)
        metrics["dprec-wire-bytes"] = per_client
        metrics["float32-wire-bytes"] = stats.float32_wire_bytes
        metrics["dprec-clip-norm"] = stats.clip_norm
        if self.adaptive_clipping is not None:
            metrics["dprec-unclipped-fraction"] = stats.unclipped_fraction
            metrics["dprec-next-clip-norm"] = stats.next_clip_norm
        return new, self._drop_metrics(stats, metrics)

    def _adapt(self, stats: DPRECRound, kept: list[_Entry]) -> None:
        """Adaptive clipping: the next clip norm from the noisy fraction of unclipped updates among ``kept``."""
        stats.next_clip_norm = self.clip_norm
        if self.adaptive_clipping is None or not kept:
            return
        stats.unclipped_fraction = math.fsum(e.bit for e in kept) / len(kept)
        self.clip_norm = stats.next_clip_norm = self.adaptive_clipping.next_clip_norm(
            stats.clip_norm, stats.unclipped_fraction
        )

    @property
    def quantile_noise(self) -> float | None:
        """Adaptive clipping's noise scale ``s`` on the clients' bits (None without adaptive clipping); read-only:
        the accountant takes it when it is created."""
        return self._quantile_noise

    def _round_codec(self) -> DPRECCodec:
        """The codec of the next round: the strategy's, or with adaptive clipping ``sigma = clip_norm / c``."""
        if self.adaptive_clipping is None:
            return self.codec
        c = self.codec.clip_multiplier
        # sigma stays a normal float32 whose candidates cannot overflow (rec.kernels' range), and the clip norm is
        # the codec's (sigma c: the round's clip norm exactly as the clients compute it).
        sigma = min(max(self.clip_norm / c, MIN_SIGMA), MAX_SIGMA)
        codec = DPRECCodec(
            sigma=sigma,
            clip_multiplier=c,
            bits=self.codec.bits,
            max_group_size=self.codec.max_group_size,
            backend=self.codec.backend,
        )
        self.clip_norm = codec.clip_norm
        return codec

    # -- streaming --------------------------------------------------------------------------

    def _streaming_state(self, messages: list[Message]) -> _RoundState | None:
        """The state of the round whose train messages ``messages`` are (those configure_train just returned)."""
        state = self._rounds.get(self._last_round) if self._last_round is not None else None
        if state is None or state.streamed or not messages or len(messages) != len(state.sent):
            return None
        if all(m.metadata is meta for m, meta in zip(messages, state.sent)):
            return state
        return None

    def _receive(self, state: _RoundState, replies: Iterable[Message]) -> None:
        """Read a batch of replies as they arrive: check each one's origin, parse its message, and
        accumulate those that pass every check so far (one pass per group for the whole batch).

        Provisional: a later reply may make an accumulated one a duplicate (of its train message or
        of its seed); :meth:`_settle` then rebuilds the sums. Per-reply failures are final.
        """
        batch: list[_Entry] = []
        for reply in replies:
            entry = self._read_entry(state, reply)
            entry.order = len(state.entries)
            state.entries.append(entry)
            if entry.node is None or entry.failed or entry.problem is not None:
                continue
            first_of_key = state.keys.get(entry.key, 0) == 0
            state.keys[entry.key] = state.keys.get(entry.key, 0) + 1
            seed = entry.msg.seed
            fresh = seed not in state.seeds and seed not in self._seen_seeds
            state.seeds[seed] = state.seeds.get(seed, 0) + 1
            if first_of_key and fresh:
                batch.append(entry)
        if batch:
            state.sums.add(batch)

    def _read_entry(self, state: _RoundState, reply: Message) -> _Entry:
        """One reply's origin, message and weight (a failure of any is recorded, not raised)."""
        stats = state.stats
        try:
            node = _sender(reply, state.ids, state.nodes)
        except Exception as exc:  # noqa: BLE001 - metadata of a malformed reply
            return _Entry(reply, None, f"? ({_describe(exc)})")
        src = reply.metadata.src_node_id
        if not reply.has_error() and int(src) in state.nodes:
            # A sampled node's reply reached the server, whatever is dropped later (a copy, a wrong id, bytes
            # that do not parse): it may carry the node's data, so the round is accounted.
            stats.accounted = True
        entry = _Entry(reply, node, src)
        if node is None:
            return entry
        if reply.has_error():
            entry.failed = True
            return entry
        entry.key = reply.metadata.reply_to_message_id if state.ids else node
        try:
            name, record, entry.msg = _read_reply(reply, state.layout)
            entry.wire = wire_nbytes(record, name)
            if self.quantile_noise is not None:
                entry.bit = _quantile_bit(record, self.quantile_noise)
        except Exception as exc:  # noqa: BLE001 - bad bytes, wrong layout, no quantile bit, MemoryError, ...
            entry.problem = ("bad-message", _describe(exc))
            return entry
        if self.weighted_by_key is not None:
            try:
                entry.weight = _metric(reply, self.weighted_by_key)
            except Exception as exc:  # noqa: BLE001 - a missing, non-finite or negative weight
                entry.problem = ("bad-weight", _describe(exc))
                return entry
            if self.max_weight is not None and entry.weight > self.max_weight:
                what = f"{self.weighted_by_key!r} = {entry.weight:g} > max_weight = {self.max_weight:g}"
                entry.problem = ("above-max-weight", what)
        return entry

    def _settle(self, state: _RoundState) -> list[_Entry]:
        """Classify every reply of the round as the whole round shows it (independent of the order of
        arrival), log and count the drops, rebuild the sums if an accumulated reply is dropped, and
        accumulate any kept one not accumulated yet. Returns the kept replies in arrival order."""
        stats = state.stats
        server_round = stats.server_round

        def drop(entry: _Entry, reason: str, detail: str) -> None:
            stats.num_rejected += 1
            stats.dropped[reason] = stats.dropped.get(reason, 0) + 1
            log(
                WARNING,
                "DP-REC round %d: dropped the reply of node %s (%s): %s",
                server_round,
                entry.src,
                reason,
                detail,
            )

        # 1. Origin: one reply per train message of this round, from its node (one per sampled node, except
        # with replacement, where a node drawn k times has k messages).
        by_key: dict[Any, list[_Entry]] = {}
        for entry in state.entries:
            if entry.node is None:
                drop(entry, "unsolicited", "not a reply from the node of one of this round's train messages")
            elif entry.failed:
                stats.num_failed += 1
                log(
                    INFO,
                    "DP-REC: error reply from node %d: %s",
                    entry.node,
                    _clip_text(str(entry.reply.error.reason), 200),
                )
            else:
                by_key.setdefault(entry.key, []).append(entry)
        single: list[_Entry] = []
        for key, entries in by_key.items():
            node = entries[0].node
            allowed = 1 if state.ids else state.sent_to[node]
            if len(entries) > allowed:
                if self.sampling != "with_replacement":
                    what = f"node {node} replied {len(entries)} times this round"
                elif state.ids:
                    what = f"node {node} answered its train message {_short(key)} {len(entries)} times"
                else:
                    what = f"node {node} replied {len(entries)} times to {allowed} train messages this round"
                for entry in entries:
                    drop(entry, "duplicate-reply", what)
            else:
                single.extend(entries)
        single.sort(key=lambda e: e.order)

        # 2. Each one's message (any failure drops that reply only); 3. seeds: each message once, and new.
        parsed = []
        for entry in single:
            if entry.problem is not None and entry.problem[0] == "bad-message":
                drop(entry, *entry.problem)
            else:
                parsed.append(entry)
        seeds = Counter(e.msg.seed for e in parsed)
        kept: list[_Entry] = []
        for entry in parsed:
            seed = entry.msg.seed
            if seeds[seed] > 1:
                drop(entry, "duplicate-seed", f"its seed is in {seeds[seed]} replies of this round")
            elif seed in self._seen_seeds:
                drop(entry, "replayed-seed", "its seed was received in an earlier round")
            elif entry.problem is not None:
                drop(entry, *entry.problem)
            else:
                kept.append(entry)
        self._seen_seeds.update(seeds)
        kept_ids = {id(e) for e in kept}
        if any(e.accumulated and id(e) not in kept_ids for e in state.entries):
            # A reply accumulated on arrival turned out a duplicate (of its train message or of its seed): the
            # sums are rebuilt from the kept ones (one more pass, in such rounds only) rather than subtracted,
            # so that they are exactly the sums of the kept messages in arrival order.
            state.sums.reset(state.entries)
            state.sums.add(kept)
            return kept
        late = [e for e in kept if not e.accumulated]
        state.sums.add(late)
        # In the order they were accumulated (arrival order, those settled late last): the order of the sums.
        if not late:
            return kept
        late_ids = {id(e) for e in late}
        return [e for e in kept if id(e) not in late_ids] + late

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


@dataclass(eq=False)
class _Entry:
    """One reply of a round, read once when it arrives."""

    reply: Message
    node: int | None  # the sampled node whose train message it answers; None: unsolicited (or unreadable)
    src: Any  # its sender, for the log
    order: int = 0  # arrival position
    failed: bool = False  # an error reply
    key: Any = None  # the train message it answers: its message id, or (no ids) its node
    msg: DPRECMessage | None = None
    wire: int = 0
    problem: tuple[str, str] | None = None  # (reason, detail): a failure of this reply alone
    weight: float = 1.0
    bit: float = 0.0  # adaptive clipping: the noisy quantile bit, clamped
    accumulated: bool = False


class _Sums:
    """The round's float64 sums ``sum_c (w_c / 2^e) decode(message_c)``, one array per tensor (allocated at the
    first add), with ``2^e`` the power of two just below the largest weight so far (1 for uniform weights).

    A larger weight rescales the sums by a power of two (exact): no claimed weight, however large, overflows them,
    and uniform weights accumulate exactly ``codec.accumulate(messages, zeros)``.
    """

    def __init__(self, codec: DPRECCodec, template: Mapping[str, np.ndarray]) -> None:
        self._codec = codec
        self._shapes = {k: v.shape for k, v in template.items()}
        self._sums: dict[str, np.ndarray] | None = None
        self._exponent: int | None = None

    def add(self, entries: list[_Entry]) -> None:
        """Add the entries' weighted decoded updates in one pass."""
        if not entries:
            return
        top = max(e.weight for e in entries)
        if top > 0.0:
            exponent = math.frexp(top)[1] - 1  # 2^exponent <= top < 2^(exponent + 1)
            if self._exponent is None or exponent > self._exponent:
                if self._sums is not None and self._exponent is not None:
                    for s in self._sums.values():
                        np.ldexp(s, self._exponent - exponent, out=s)
                self._exponent = exponent
        if self._sums is None:
            self._sums = {k: np.zeros(shape) for k, shape in self._shapes.items()}
        weights = np.array([self.scaled(e.weight) for e in entries])
        self._codec.accumulate([e.msg for e in entries], self._sums, weights=weights)
        for e in entries:
            e.accumulated = True

    def reset(self, entries: list[_Entry]) -> None:
        """Back to no sums (and no entry accumulated)."""
        self._sums, self._exponent = None, None
        for e in entries:
            e.accumulated = False

    def scaled(self, weight: float) -> float:
        return math.ldexp(weight, -(self._exponent or 0))

    def mean(self, kept: list[_Entry]) -> dict[str, np.ndarray]:
        """The sums divided by the kept entries' (scaled) weights, as float32."""
        assert self._sums is not None
        total = math.fsum(self.scaled(e.weight) for e in kept)
        return {k: np.divide(s, total, out=s).astype(np.float32) for k, s in self._sums.items()}


@dataclass(eq=False)
class _RoundState:
    """What :class:`DPRECStrategy` knows of a round between configure_train and aggregate_train."""

    stats: DPRECRound
    sent: list[Any]  # the train messages' metadata (a Grid sets their message ids when it pushes them)
    template: dict[str, np.ndarray]
    layout: Layout
    sums: _Sums
    streamed: bool = False  # the replies were received as they arrived (start's grid)
    entries: list[_Entry] = field(default_factory=list)
    keys: dict[Any, int] = field(default_factory=dict)  # train message -> replies so far
    seeds: dict[int, int] = field(default_factory=dict)  # seed -> replies so far
    _ids: dict[str, int] | None = None

    @property
    def ids(self) -> dict[str, int]:
        """Message id -> destination node of the train messages (read at the first reply: set at push time)."""
        if self._ids is None:
            self._ids = {m.message_id: int(m.dst_node_id) for m in self.sent if m.message_id}
        return self._ids

    @functools.cached_property
    def sent_to(self) -> Counter:
        """Node -> train messages sent to it this round."""
        return Counter(int(m.dst_node_id) for m in self.sent)

    @functools.cached_property
    def nodes(self) -> set[int]:
        """The nodes sent a train message this round."""
        return set(self.sent_to)


class _StreamingGrid:
    """The grid :meth:`DPRECStrategy.start` hands to Flower's loop: the round's train messages are pushed and
    their replies pulled, each batch decoded and accumulated as it arrives; everything else is the grid's."""

    def __init__(self, grid: Grid, strategy: DPRECStrategy) -> None:
        self._grid = grid
        self._strategy = strategy

    def __getattr__(self, name: str) -> Any:
        return getattr(self._grid, name)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        messages = list(messages)
        state = self._strategy._streaming_state(messages)
        if state is None:
            return self._grid.send_and_receive(messages, timeout=timeout)
        state.streamed = True
        waiting = set(self._grid.push_messages(messages))
        del messages
        end = time.time() + (timeout if timeout is not None else 0.0)
        replies: list[Message] = []
        # The grid's own pull interval (InMemoryGrid's); 1 s otherwise (Flower's gRPC grid sleeps 3 s between pulls).
        interval = float(getattr(self._grid, "pull_interval", 1.0) or 1.0)
        while waiting:
            expired = timeout is not None and time.time() >= end
            batch = list(self._grid.pull_messages(waiting))  # once more at the deadline: what arrived meanwhile
            if batch:
                replies.extend(batch)
                waiting.difference_update(m.metadata.reply_to_message_id for m in batch)
                self._strategy._receive(state, batch)
            elif expired:
                break
            else:
                time.sleep(interval)
        return replies


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


def _sample_plan_problem(
    strategy: Any, fraction_name: str, min_name: str, available_name: str, num_clients: int | None
) -> str | None:
    """Why the wrapped strategy's own sampling (without replacement) cannot be accounted, or None.

    Its fraction must be in (0, 1]; with a known population ``N`` (``num_clients``), its minimum sample ``B`` and
    the nodes it waits for must not exceed ``N`` (B <= N without replacement: more would sample at a rate above
    the accounted ``B / N``).
    """
    cls = type(strategy).__name__
    fraction = getattr(strategy, fraction_name, None)
    minimum = getattr(strategy, min_name, None)
    fixed_size = fraction == 0.0 and isinstance(minimum, int) and minimum >= 1  # legacy: a sample of min clients
    if (
        isinstance(fraction, (int, float))
        and not isinstance(fraction, bool)
        and not (0.0 < fraction <= 1.0 or fixed_size)
    ):
        return (
            f"the wrapped {cls}'s {fraction_name}={fraction!r} is not a sampling rate in (0, 1]: sampling without "
            f"replacement draws B = {fraction_name} x N of the N nodes; give {cls} a {fraction_name} in (0, 1]"
        )
    if num_clients is None:
        return None
    for name in (min_name, available_name):
        value = getattr(strategy, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > num_clients:
            return (
                f"the wrapped {cls}'s {name}={value} exceeds num_clients={num_clients}: sampling without "
                f"replacement is accounted for B <= N nodes of the population N; lower {name}, or give num_clients "
                f"the population size (sampling='with_replacement' allows B > N)"
            )
    return None


def _quantile_bit(record: ConfigRecord, noise: float) -> float:
    """A reply's noisy quantile bit (adaptive clipping): an integer ``Y`` (or an integer-valued float), as ``Y / M``
    clamped to [-10 s, 1 + 10 s]."""
    value = record.get(QUANTILE_BIT_KEY)
    if value is None:
        raise ValueError(f"no {QUANTILE_BIT_KEY!r} (adaptive clipping; is the client's dprec too old?)")
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) <= 2.0**53)
    if isinstance(value, bool) or not whole:
        raise ValueError(f"{QUANTILE_BIT_KEY!r} must be an integer (the bit on its lattice), got {_short(value)}")
    return AdaptiveClipping.bit_value(int(value), noise)


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
