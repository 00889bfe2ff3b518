"""The server side of Flower's legacy API: :class:`DPRECLegacyStrategy`.

Legacy apps (``NumPyClient``, ``ClientApp(client_fn=...)``, ``ServerApp(server_fn=...)`` returning
``ServerAppComponents(strategy=flwr.server.strategy.FedAvg(...), ...)``) run their strategy inside Flower's
legacy ``Server``: ``configure_fit`` / ``aggregate_fit`` on ``FitIns`` / ``FitRes``. The wrapper keeps no DP-REC
logic of its own: it drives a private :class:`DPRECStrategy` (the *core*) whose Message-API strategy messages
exactly the clients the legacy strategy chose, and translates between the two forms.
"""

from __future__ import annotations

from collections.abc import Mapping
from logging import INFO, WARNING
from typing import Any

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Error,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.common import (
    Code,
    EvaluateIns,
    EvaluateRes,
    FitIns,
    FitRes,
    Parameters,
    Scalar,
    Status,
    log,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.common.constant import ErrorCode
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import Strategy
from flwr.serverapp.strategy import FedAvg
from flwr.serverapp.strategy import Strategy as MessageStrategy

from ..rec.codec import DPRECCodec
from ._adaptive import AdaptiveClipping
from ._common import _DPREC_PREFIX, _clip_text, _describe, _short
from ._strategy import DPRECRound, DPRECStrategy, _sample_plan_problem

# The ConfigRecord of the core's train messages, and the name of the record of the replies built here.
_CONFIG_NAME = "config"
_REPLY_RECORD = "dprec"
_REPLY_METRICS = "metrics"
# The ArrayRecord name the core measures the float32 arrays under ("float32-wire-bytes"): the legacy reply's.
_ARRAYS_NAME = "fitres.parameters"


class _LegacyWrapper(Strategy):
    """What the wrappers of a legacy-API strategy share: delegated evaluation and initialization, and the wrapped
    strategy's ``aggregate_fit`` of one synthetic mean ``FitRes`` with its metric function kept for the clients'
    results."""

    strategy: Strategy

    # -- delegated ----------------------------------------------------------------------------

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        """Delegated to the wrapped strategy."""
        return self.strategy.initialize_parameters(client_manager)

    def configure_evaluate(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, EvaluateIns]]:
        """Delegated to the wrapped strategy."""
        return self.strategy.configure_evaluate(server_round, parameters, client_manager)

    def aggregate_evaluate(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, EvaluateRes]],
        failures: list[tuple[ClientProxy, EvaluateRes] | BaseException],
    ) -> tuple[float | None, dict[str, Scalar]]:
        """Delegated to the wrapped strategy."""
        return self.strategy.aggregate_evaluate(server_round, results, failures)

    def evaluate(self, server_round: int, parameters: Parameters) -> tuple[float, dict[str, Scalar]] | None:
        """Delegated to the wrapped strategy."""
        return self.strategy.evaluate(server_round, parameters)

    def _strategy_aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        """The wrapped strategy's ``aggregate_fit`` of the one mean ``FitRes``, its metric function out of the way.

        A user's ``fit_metrics_aggregation_fn`` expects the clients' metrics, not the mean's empty ones: it is
        called on the real results by :meth:`_fit_metrics` instead.
        """
        strategy = self.strategy
        if "fit_metrics_aggregation_fn" not in vars(strategy):
            return strategy.aggregate_fit(server_round, results, failures)
        saved = strategy.fit_metrics_aggregation_fn
        strategy.fit_metrics_aggregation_fn = _no_metrics
        try:
            return strategy.aggregate_fit(server_round, results, failures)
        finally:
            strategy.fit_metrics_aggregation_fn = saved

    def _fit_metrics(
        self, server_round: int, results: list[tuple[ClientProxy, FitRes]], *, skip_empty: bool = False
    ) -> dict[str, Scalar]:
        """The wrapped strategy's ``fit_metrics_aggregation_fn`` over the (aggregated) results, without their
        ``"dprec."`` keys (``skip_empty``: only the results that carry metrics, none when none do)."""
        fn = getattr(self.strategy, "fit_metrics_aggregation_fn", None)
        pairs = [
            (res.num_examples, {k: v for k, v in res.metrics.items() if not str(k).startswith(_DPREC_PREFIX)})
            for _, res in results
        ]
        if skip_empty:
            pairs = [(n, m) for n, m in pairs if m]
        if fn is None or not pairs:
            return {}
        try:
            return dict(fn(pairs) or {})
        except Exception as exc:  # noqa: BLE001 - a metric must not cost the round its update
            log(WARNING, "round %d: fit_metrics_aggregation_fn failed: %s", server_round, _describe(exc))
            return {}


class DPRECLegacyStrategy(_LegacyWrapper):
    """Wrap a strategy of Flower's legacy API (``flwr.server.strategy``) so that training runs through DP-REC.

    For legacy apps: ``NumPyClient`` clients (``ClientApp(client_fn=..., mods=[dprec_mod])``) and a
    ``ServerApp(server_fn=...)`` whose ``ServerAppComponents`` hold this wrapper around ``FedAvg``,
    ``FedProx``, ``FedAdam``, ``FedYogi``, ``FedAvgM``, ... The DP-REC logic is :class:`DPRECStrategy`'s
    (``"without_replacement"`` sampling: the legacy strategy samples its clients uniformly without
    replacement through the ``ClientManager``), run on a private instance (the *core*):

    * :meth:`configure_fit` lets the wrapped strategy choose the clients and build their ``FitIns``, has the
      core configure a round for exactly those nodes (it records ``B`` and ``N``, checks the codec against the
      model and ``B <= N``), and adds every ``"dprec."`` entry of the core's train config (the codec's
      parameters, :func:`codec_config`) to each ``FitIns`` config, replacing any ``"dprec."`` key already there;
    * :meth:`aggregate_fit` turns each ``FitRes`` into the reply the core reads (its ``"dprec."`` fit metrics,
      where :func:`dprec_mod` puts the DP-REC message, and its numeric metrics with ``"num-examples"`` =
      ``num_examples``) and each client without a result into an error reply, lets the core drop, decode,
      average and account, then hands the wrapped strategy one ``FitRes`` holding ``global + mean``
      (``num_examples=1``) through its own ``aggregate_fit``: FedAvg and FedProx return it unchanged (bit for
      bit), FedAdam, FedYogi and FedAvgM apply their server step to the DP mean (post-processing: no privacy
      cost), each array kept in the global model's dtype (the legacy FedOpt strategies return float64, integer
      buffers included, which would change the next round's DP-REC layout). Its metrics are the wrapped strategy's ``fit_metrics_aggregation_fn`` over the results (their
      ``"dprec."`` keys left out) merged with the core's ``"dprec-*"`` metrics (epsilon, bytes, drops).

    Failures are passed on to the wrapped strategy, so its ``accept_failures=False`` still discards a round with
    a failure; that round is accounted all the same when a DP-REC message reached the server. A round in which
    no message was aggregated returns no parameters (the legacy server keeps its own) and the DP-REC metrics.
    Evaluation, ``initialize_parameters`` and ``evaluate`` are delegated unchanged.

    Parameters
    ----------
    strategy : flwr.server.strategy.Strategy
        The legacy strategy to wrap; it must sample distinct clients uniformly at random (FedAvg's sampling)
        and send every client the global parameters it is given, for the accounting to hold.
    codec : DPRECCodec
    delta : float
    num_rounds, num_clients : int, optional
        As :class:`DPRECStrategy`'s. The legacy server's ``ServerConfig(num_rounds=...)`` is not seen by the
        strategy; ``num_rounds`` only plans the accountant (optional with the sound method). Without
        ``num_clients``, ``N`` is the number of clients connected when the first round is configured: give the
        wrapped strategy a ``min_available_clients`` equal to the population, or ``num_clients``.
    reverse, threat_model, relation, weighted_by_key, max_weight, keep_messages, adaptive_clipping
        As :class:`DPRECStrategy`'s (adaptive clipping on by default: the clip norm follows a private quantile
        of the update norms, its noisy bits riding in the fit metrics). ``weighted_by_key="num-examples"`` weights by each ``FitRes.num_examples``;
        another key names a numeric fit metric.

    Attributes
    ----------
    strategy : flwr.server.strategy.Strategy
    codec : DPRECCodec
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
        threat_model: str | None = None,
        relation: str | None = None,
        weighted_by_key: str | None = None,
        max_weight: float | None = None,
        keep_messages: bool = False,
        adaptive_clipping: bool | AdaptiveClipping = True,
    ) -> None:
        super().__init__()
        if isinstance(strategy, DPRECLegacyStrategy):
            raise TypeError("strategy is already a DPRECLegacyStrategy")
        if not isinstance(strategy, Strategy):
            raise TypeError(_wrong_legacy_api(strategy))
        problem = _sample_plan_problem(
            strategy, "fraction_fit", "min_fit_clients", "min_available_clients", num_clients
        )
        if problem:
            raise ValueError(f"DPRECLegacyStrategy (Flower legacy API): {problem}")
        self.strategy = strategy
        self._nodes = _ChosenNodes()
        # Validates every argument (errors name them) and holds all DP-REC state: nothing here is module-global.
        self._core = DPRECStrategy(
            self._nodes,
            codec,
            delta=delta,
            num_rounds=num_rounds,
            num_clients=num_clients,
            reverse=reverse,
            threat_model=threat_model,
            relation=relation,
            weighted_by_key=weighted_by_key,
            max_weight=max_weight,
            keep_messages=keep_messages,
            sampling="without_replacement",
            adaptive_clipping=adaptive_clipping,
        )
        # The legacy strategy has sampled its clients when the core configures a round: the core must not wait for
        # N connected clients then (a client that left would block the round forever); it warns instead.
        self._core._wait_for_population = False
        self.codec = self._core.codec
        # Round -> node -> the core's train message to that node (the replies answer them).
        self._sent: dict[int, dict[int, Message]] = {}

    @property
    def quantile_noise(self) -> float | None:
        """Adaptive clipping's noise scale ``s`` on the clients' bits (None without adaptive clipping)."""
        return self._core.quantile_noise

    def __repr__(self) -> str:
        core = self._core
        return (
            f"DPRECLegacyStrategy({self.strategy!r}, {self.codec!r}, delta={core.delta!r}, "
            f"threat_model={core.threat_model!r}, relation={core.relation!r})"
        )

    # -- what DPRECStrategy exposes -----------------------------------------------------------

    @property
    def history(self) -> list[DPRECRound]:
        """One :class:`DPRECRound` per configured training round."""
        return self._core.history

    @property
    def accountant(self) -> Any:
        """The :class:`dprec.accounting.DPRECRoundAccountant` (None before the first configured round)."""
        return self._core.accountant

    @property
    def epsilon(self) -> float:
        """Epsilon spent so far against :attr:`threat_model` under :attr:`relation` (see :attr:`DPRECStrategy.epsilon`)."""
        return self._core.epsilon

    @property
    def guarantee(self) -> Any:
        """The :class:`dprec.accounting.PrivacyGuarantee` so far (None before the first accounted round)."""
        return self._core.guarantee

    @property
    def delta(self) -> float:
        return self._core.delta

    @property
    def threat_model(self) -> str:
        return self._core.threat_model

    @property
    def relation(self) -> str:
        return self._core.relation

    # -- training -----------------------------------------------------------------------------

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        """The wrapped strategy's ``FitIns``, each config extended by the core's ``"dprec."`` entries.

        Raises
        ------
        ValueError
            As :meth:`DPRECStrategy.configure_train` (more clients than ``N``, a codec that does not fit the
            model), when the wrapped strategy chose a client twice, or when it sends a client other parameters
            than the global ones; nothing is sent that round.
        """
        instructions = list(self.strategy.configure_fit(server_round, parameters, client_manager))
        if not instructions:
            return instructions
        nodes = [_node_id(proxy) for proxy, _ in instructions]
        if len(set(nodes)) != len(nodes):
            raise ValueError(
                f"{type(self.strategy).__name__}.configure_fit chose a client several times; DP-REC accounting "
                "needs distinct clients (sampling without replacement)"
            )
        for _, ins in instructions:
            if ins.parameters is not parameters and list(ins.parameters.tensors) != list(parameters.tensors):
                raise ValueError(
                    f"{type(self.strategy).__name__}.configure_fit sends a client other parameters than the global "
                    "ones; DP-REC decodes each update against the global parameters"
                )
        arrays = ArrayRecord({str(i): Array(a) for i, a in enumerate(parameters_to_ndarrays(parameters))})
        self._nodes.nodes = nodes
        try:
            messages = list(
                self._core.configure_train(server_round, arrays, ConfigRecord(), _ClientManagerGrid(client_manager))
            )
        finally:
            self._nodes.nodes = []
        sent = {int(m.metadata.dst_node_id): m for m in messages}
        self._sent[server_round] = sent
        out = []
        for node, (proxy, ins) in zip(nodes, instructions):
            config = {k: v for k, v in ins.config.items() if not k.startswith(_DPREC_PREFIX)}
            config.update(_dprec_entries(sent[node].content[_CONFIG_NAME]))
            out.append((proxy, FitIns(ins.parameters, config)))
        return out

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        """Decode, average and account through the core; the wrapped strategy applies the DP mean.

        Returns
        -------
        tuple
            The wrapped strategy's ``aggregate_fit`` of one ``FitRes`` holding ``global + mean`` (``None`` when no
            message was aggregated, or when the wrapped strategy discards the round), and the metrics: the
            wrapped strategy's ``fit_metrics_aggregation_fn`` over the results and the core's ``"dprec-*"``.
        """
        sent = self._sent.pop(server_round, None)
        if sent is None:
            raise ValueError(f"round {server_round} was not configured by this DPRECLegacyStrategy (configure_fit)")
        results, failures = list(results), list(failures)
        replies: list[Message] = []
        answered: set[int] = set()
        for proxy, res in results:
            node = _node_id(proxy)
            answered.add(node)
            replies.append(Message(_reply_content(res), reply_to=_instruction(sent, node, server_round)))
        for failure in failures:
            if isinstance(failure, tuple):
                node = _node_id(failure[0])
                answered.add(node)
                code = getattr(getattr(failure[1], "status", None), "code", None)
                reason = f"fit status {getattr(code, 'name', _short(code))}"
                replies.append(_failure(_instruction(sent, node, server_round), reason))
            else:
                log(INFO, "DP-REC round %d: a fit failed: %s", server_round, _clip_text(str(failure), 300))
        # The legacy server reports every chosen client in results or failures: the rest are the failures without
        # a client (exceptions, error replies of the client mod among them).
        for node, msg in sent.items():
            if node not in answered:
                replies.append(_failure(msg, "no fit result (a failure of the round)"))

        new, core_metrics = self._core.aggregate_train(server_round, replies)
        # The user's fit metrics over the results whose messages were aggregated (as the Message API does).
        stats = next((h for h in reversed(self._core.history) if h.server_round == server_round), None)
        aggregated = set(stats.nodes) if stats is not None else set()
        metrics = self._fit_metrics(server_round, [(p, r) for p, r in results if int(p.node_id) in aggregated])
        if core_metrics is not None:
            metrics.update(dict(core_metrics.items()))
        if new is None:
            return None, metrics
        updated = [new[str(i)].numpy() for i in range(len(new))]
        mean = FitRes(
            status=Status(code=Code.OK, message="DP-REC: global + mean of the decoded updates"),
            parameters=ndarrays_to_parameters(updated),
            num_examples=1,
            metrics={},
        )
        parameters, _ = self._strategy_aggregate_fit(server_round, [(results[0][0], mean)], failures)
        return (None if parameters is None else _with_dtypes(parameters, updated)), metrics

class _ChosenNodes(FedAvg):
    """The core's Message-API strategy: one train message to each node the legacy strategy chose.

    A FedAvg (its ``aggregate_train`` is FedAvg's, so the core does not warn) whose metric aggregation is off: the
    legacy strategy's ``fit_metrics_aggregation_fn`` aggregates the fit metrics.
    """

    def __init__(self) -> None:
        super().__init__(arrayrecord_key=_ARRAYS_NAME, configrecord_key=_CONFIG_NAME, min_train_nodes=1)
        self.min_available_nodes = 0  # the legacy strategy waited for its clients
        self.train_metrics_aggr_fn = None
        self.nodes: list[int] = []

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Any) -> list[Message]:
        record = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        return [
            Message(record, dst_node_id=node, message_type=MessageType.TRAIN, group_id=str(server_round))
            for node in self.nodes
        ]


class _ClientManagerGrid:
    """The Grid method the core calls while configuring a round: the connected nodes, from the ClientManager."""

    def __init__(self, client_manager: ClientManager) -> None:
        self._client_manager = client_manager

    def get_node_ids(self) -> list[int]:
        return [_node_id(proxy) for proxy in self._client_manager.all().values()]


def _node_id(proxy: ClientProxy) -> int:
    """A client proxy's node id (``GridClientProxy.node_id``; else its ``cid`` as an int)."""
    node = getattr(proxy, "node_id", None)
    if isinstance(node, (int, np.integer)) and not isinstance(node, bool):
        return int(node)
    try:
        return int(proxy.cid)
    except (AttributeError, TypeError, ValueError):
        raise TypeError(f"client proxy {_short(proxy)} has no node_id (nor an integer cid)") from None


def _instruction(sent: Mapping[int, Message], node: int, server_round: int) -> Message:
    """The core's train message to ``node``; for a node it did not message, one the core will not recognise."""
    if node in sent:
        return sent[node]
    return Message(RecordDict(), dst_node_id=node, message_type=MessageType.TRAIN, group_id=str(server_round))


def _failure(instruction: Message, reason: str) -> Message:
    """The error reply the core counts as a failure of the node ``instruction`` went to."""
    return Message(Error(code=ErrorCode.UNKNOWN, reason=reason), reply_to=instruction)


def _dprec_entries(record: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if str(k).startswith(_DPREC_PREFIX)}


def _reply_content(res: FitRes) -> RecordDict:
    """What the core reads of a reply: the ``"dprec."`` fit metrics (the DP-REC message), and the numeric metrics.

    A ``FitRes`` whose entries do not fit Flower's records gives a reply without a DP-REC record (the core drops
    it as ``"bad-message"``) or without metrics (its weight, with ``weighted_by_key``, is then missing).
    """
    content = RecordDict()
    try:
        content[_REPLY_RECORD] = ConfigRecord(_dprec_entries(res.metrics))
    except Exception as exc:  # noqa: BLE001 - an untrusted FitRes
        log(WARNING, "DP-REC: a FitRes's DP-REC entries are not a ConfigRecord: %s", _describe(exc))
    numeric = {
        k: v
        for k, v in res.metrics.items()
        if not str(k).startswith(_DPREC_PREFIX) and isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    numeric["num-examples"] = res.num_examples
    for candidate in (numeric, {"num-examples": res.num_examples}):
        try:
            content[_REPLY_METRICS] = MetricRecord(candidate)
            break
        except Exception:  # noqa: BLE001, S112 - e.g. an int beyond int64: try with less
            continue
    return content


def _with_dtypes(parameters: Parameters, like: list[np.ndarray]) -> Parameters:
    """``parameters`` with each array in the dtype of its counterpart in ``like`` (the global model's).

    The legacy FedOpt strategies (FedAdam, FedYogi, FedAdagrad) return float64 arrays, integer buffers included;
    the next round's DP-REC layout (which arrays are encoded, the groups the accountant counts) would change with
    them. The model keeps its dtypes instead: post-processing of the DP mean, rounding the server's step to the
    model's precision. Arrays that already match, as FedAvg's do, are returned as they are (the same bytes).
    """
    arrays = parameters_to_ndarrays(parameters)
    if len(arrays) != len(like) or any(a.shape != b.shape for a, b in zip(arrays, like)):
        return parameters  # not the model's arrays: the wrapped strategy's own business
    if all(a.dtype == b.dtype for a, b in zip(arrays, like)):
        return parameters
    return ndarrays_to_parameters([a if a.dtype == b.dtype else a.astype(b.dtype) for a, b in zip(arrays, like)])


def _no_metrics(_: Any) -> dict[str, Scalar]:
    return {}


def _wrong_legacy_api(strategy: Any) -> str:
    """Why ``strategy`` cannot be wrapped by DPRECLegacyStrategy, naming its API and the fix."""
    cls = type(strategy)
    where = f"{cls.__module__}.{cls.__qualname__}"
    if isinstance(strategy, MessageStrategy):
        return (
            f"strategy is a {where}, a strategy of Flower's Message API (flwr.serverapp.strategy, a ServerApp whose "
            "main() calls strategy.start(grid=...)); DPRECLegacyStrategy wraps the legacy API's strategies "
            "(flwr.server.strategy, ServerApp(server_fn=...)): use dprec.flower.DPRECStrategy(strategy, codec, "
            "delta=...) and call its start(grid=..., initial_arrays=..., num_rounds=...) in the ServerApp's main(), "
            "as in the docs' Flower page"
        )
    return (
        f"strategy must be a legacy-API strategy (an instance of flwr.server.strategy.Strategy, e.g. "
        f"flwr.server.strategy.FedAvg), got {where}"
    )
