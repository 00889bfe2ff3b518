"""Flower's SecAgg+ protocol run in one process over given words: :func:`secagg_plus_sum`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.client.mod import secaggplus_mod
from flwr.common import Code, FitIns, FitRes, Parameters, Status, ndarrays_to_parameters
from flwr.common import serde as _serde
from flwr.server import LegacyContext, ServerConfig
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import FedAvg
from flwr.server.workflow import SecAggPlusWorkflow

try:
    import flwr.compat.common.recorddict_compat as _compat
except ImportError:  # pragma: no cover - flwr < 1.23
    import flwr.common.recorddict_compat as _compat  # type: ignore[no-redef]

from ._secagg import max_secagg_clients, modular_sum_from_secagg, secagg_ranges, words_to_secagg

__all__ = ["secagg_plus_sum"]


class WordsWorkflow(SecAggPlusWorkflow):
    """Flower's ``SecAggPlusWorkflow`` with :func:`secagg_ranges`: it carries ``bits``-bit words exactly.

    Parameters
    ----------
    bits : int
        8 to 31 (:func:`secagg_ranges`).
    num_shares, reconstruction_threshold, timeout
        SecAgg+'s own (``flwr.server.workflow.SecAggPlusWorkflow``).
    """

    def __init__(self, bits: int, num_shares: int | float, reconstruction_threshold: int | float, *,
                 timeout: float | None = None) -> None:
        super().__init__(num_shares, reconstruction_threshold, timeout=timeout, **secagg_ranges(bits))

    def _check_init_params(self) -> None:
        # SecAgg+ warns when num_shares exceeds modulus_range / quantization_range (an overflow of weighted float
        # sums); words below 2**bits of weight 1 sum exactly mod 2**bits however many there are: check the rest.
        q = self.quantization_range
        self.quantization_range = 1
        try:
            super()._check_init_params()
        finally:
            self.quantization_range = q


class _Proxy(ClientProxy):
    """A client the in-process workflow addresses by node id (SecAgg+ reads ``node_id`` only)."""

    def __init__(self, node_id: int) -> None:
        super().__init__(str(node_id))
        self.node_id = node_id

    def get_properties(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - unused by SecAgg+
        raise NotImplementedError

    get_parameters = fit = evaluate = reconnect = get_properties


class _Sampled(FedAvg):
    """Configures one fit round for exactly the given clients and keeps what SecAgg+ hands ``aggregate_fit``."""

    def __init__(self, nodes: list[int]) -> None:
        super().__init__()
        self.nodes = nodes
        self.aggregate: list[np.ndarray] | None = None

    def configure_fit(self, server_round: int, parameters: Parameters, client_manager: Any) -> list:
        return [(_Proxy(n), FitIns(parameters, {})) for n in self.nodes]

    def aggregate_fit(self, server_round: int, results: list, failures: list) -> tuple:
        from flwr.common import parameters_to_ndarrays  # noqa: PLC0415

        self.aggregate = parameters_to_ndarrays(results[0][1].parameters) if results else None
        return None, {}


class _Grid:
    """``send_and_receive`` of a Grid whose nodes are ``secaggplus_mod`` over clients that return fixed words."""

    def __init__(self, clients: dict[int, tuple[Context, list[np.ndarray]]]) -> None:
        self._clients = clients

    def send_and_receive(self, messages: Sequence[Message], *, timeout: float | None = None) -> list[Message]:
        replies = []
        for sent in messages:
            # What a node receives is its own copy: the workflow sends one content object to every node, and
            # secaggplus_mod pops entries of what it receives.
            msg = Message(_serde.recorddict_from_proto(_serde.recorddict_to_proto(sent.content)),
                          dst_node_id=sent.metadata.dst_node_id, message_type=sent.metadata.message_type,
                          group_id=sent.metadata.group_id)
            context, arrays = self._clients[int(msg.metadata.dst_node_id)]

            def fit(m: Message, _: Context, arrays: list[np.ndarray] = arrays) -> Message:
                res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arrays), 1, {})
                return Message(_compat.fitres_to_recorddict(res, keep_input=True), reply_to=m)

            replies.append(secaggplus_mod(msg, context, fit))
        return replies


#: The most shares per client :func:`secagg_plus_sum` uses (odd, as SecAgg+ wants).
_MAX_SHARES = 11


@contextlib.contextmanager
def _quiet_flower() -> Iterator[None]:
    """Flower logs a few INFO lines per SecAgg+ round: keep them out of a comparison's output."""
    import logging  # noqa: PLC0415

    logger = logging.getLogger("flwr")
    saved = logger.level
    logger.setLevel(max(saved, logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(saved)


@contextlib.contextmanager
def _task_identity() -> Iterator[None]:
    """Flower stamps the messages it creates with the running app's identity: lend one when no app runs (as
    Flower's own in-process legacy driver does), and restore the previous state."""
    try:
        from flwr.supercore.task_identity import TaskIdentity  # noqa: PLC0415
    except ImportError:  # older flwr: no identity to stamp
        yield
        return
    saved = {k: TaskIdentity.__dict__[k] for k in ("_task_id", "_run_id", "_node_id")}
    if saved["_run_id"] is None:
        TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 0
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(TaskIdentity, k, v)


def secagg_plus_sum(words: Sequence[np.ndarray] | np.ndarray, bits: int) -> np.ndarray:
    """The sum mod ``2**bits`` of the clients' ``words`` as Flower's SecAgg+ computes it, in one process.

    Each client is Flower's ``secaggplus_mod`` over an app that returns its words (sent as
    :func:`words_to_secagg`), the server Flower's ``SecAggPlusWorkflow`` with :func:`secagg_ranges`: key
    agreement, Shamir shares of every client's mask seed and key with up to 10 neighbours (threshold: a
    majority of the shares), pairwise and private masks, the masked sum and the unmasking all run as in a
    deployment, over direct calls instead of a network.
    ``dprec compare``'s rows with ``transport="flower"`` aggregate through it, so the equality of their results
    with the in-process simulator's (:func:`dprec.secagg.modular_sum`) is checked on every round.

    Parameters
    ----------
    words : sequence of numpy.ndarray, or a 2-D array
        One vector per client (at least 2), integers in ``[0, 2**bits)``, all of one length.
    bits : int
        8 to 31.

    Returns
    -------
    numpy.ndarray
        The modular sum (:func:`dprec.secagg.storage_dtype` of ``bits``).
    """
    secagg_ranges(bits)
    vectors = [np.asarray(w).reshape(-1) for w in words]
    n = len(vectors)
    if not 2 <= n <= max_secagg_clients(bits):
        raise ValueError(f"words must hold 2 to {max_secagg_clients(bits)} clients' vectors, got {n}")
    if len({v.size for v in vectors}) != 1:
        raise ValueError("words must all have the same length")
    for i, v in enumerate(vectors):
        if v.dtype.kind not in "iu" or (v.size and (int(v.min()) < 0 or int(v.max()) >= 1 << bits)):
            raise ValueError(f"words[{i}] must hold integers in [0, 2**{bits})")
    nodes = list(range(1, n + 1))
    clients = {
        node: (Context(run_id=1, node_id=node, node_config={}, state=RecordDict(), run_config={}),
               [words_to_secagg(v, bits)])
        for node, v in zip(nodes, vectors)
    }
    strategy = _Sampled(nodes)
    server = LegacyContext(Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={}),
                           config=ServerConfig(num_rounds=1), strategy=strategy)
    server.state.config_records["config"] = ConfigRecord({"current_round": 1})
    server.state.array_records["parameters"] = ArrayRecord()
    # Up to 11 clients share with all; beyond, each with its 10 ring neighbours (SecAgg+'s point: O(n k), not
    # O(n^2)); a majority of the shares unmasks.
    shares = n if n <= _MAX_SHARES else _MAX_SHARES
    workflow = WordsWorkflow(bits, 1.0 if shares == n else shares, 0.5)
    with _task_identity(), _quiet_flower():
        workflow(_Grid(clients), server)  # type: ignore[arg-type]
    if strategy.aggregate is None:
        raise RuntimeError("SecAgg+ halted before unmasking")
    return modular_sum_from_secagg(strategy.aggregate[0], bits, n)
