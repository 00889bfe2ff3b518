"""The client side of distributed DP over Flower's SecAgg+: :func:`distributed_dp_mod`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from logging import ERROR
from typing import Any

import numpy as np
from flwr.app import Context, Message, MetricRecord
from flwr.common import Code, FitRes, Status, log, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.common.constant import ErrorCode
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, RECORD_KEY_STATE

try:
    import flwr.compat.common.recorddict_compat as _compat
except ImportError:  # pragma: no cover - flwr < 1.23
    import flwr.common.recorddict_compat as _compat  # type: ignore[no-redef]

from ._common import _error_reply as _common_error_reply
from ._common import _is_legacy, _is_train, _short
from ._secagg import (
    count_from_config,
    pipeline_from_config,
    secagg_ranges,
    words_to_secagg,
)

#: Key of the client's local diagnostics in ``context.state``: a MetricRecord with the last round's ``norm``,
#: ``clipped`` and ``clip-norm``, and the counts ``rounds`` and ``failed-rounds`` (a zero update sent instead).
DDP_STATE_KEY = "dprec-ddp"
_AFTER = "distributed_dp_mod goes right after Flower's secaggplus_mod: ClientApp(..., mods=[secaggplus_mod, distributed_dp_mod])"


class _TrainingFailed(Exception):
    """A failure the mod detects in the app's reply; its text names no client data."""


@dataclass(frozen=True)
class _Options:
    min_noise_multiplier: float | None = None
    keep_metrics: bool = False
    rng: Any = None


_DEFAULT = _Options()
# The most sketch cells per model parameter the mod accepts (a sketch is meant to shrink the message).
_MAX_CELLS_PER_PARAMETER = 4


def distributed_dp_mod(msg: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
    """Flower client mod: the client's part of distributed DP (DDG or Skellam) under Flower's SecAgg+.

    Put it right after Flower's ``secaggplus_mod`` (``ClientApp(client_fn=..., mods=[secaggplus_mod,
    distributed_dp_mod])``) and wrap the server's strategy in :class:`DistributedDPStrategy`, whose
    :meth:`~DistributedDPStrategy.secagg_workflow` runs SecAgg+. On the ``FitIns`` of the masked-vector stage it

    1. rebuilds the round's pipeline from the ``"dprec.ddp."`` entries of the fit config (clip norm, bits,
       scale, noise, shared seed, sketch; every value checked) and checks that SecAgg+ was set up to carry
       integers mod ``2**bits`` exactly (:func:`secagg_ranges`), before the client trains;
    2. runs the app (``call_next``, e.g. a ``NumPyClient.fit``);
    3. clips the update ``fit parameters - global parameters`` (the floating-point arrays, flattened in order),
       sketches, rotates, scales, rounds (conditional randomized rounding) and adds its noise share, reduces
       mod ``2**bits`` (:meth:`dprec.secagg.DistributedPipeline.encode`: the rounding and the noise from the OS
       entropy source), and hands those words to ``secaggplus_mod`` as the ``FitRes`` parameters, with weight
       ``num_examples = 1`` (the mean is unweighted). With adaptive clipping a second array holds the noisy
       clipping bit ``1[norm <= clip] M + Z`` mod ``2**bits`` (``Z`` an exact discrete Gaussian).

    ``secaggplus_mod`` masks what this mod returns; the server sees only the sum. The fit metrics are left out of
    the reply (a client's loss or accuracy would reach the server in the clear, outside the guarantee):
    :func:`make_distributed_dp_mod` ``(keep_metrics=True)`` keeps them. The update's norm, whether it was
    clipped and the rounds whose training failed stay in ``context.state["dprec-ddp"]``. Non-train messages
    pass through. The mod never raises. A problem with the server's configuration, found before training, is an
    error reply naming it. Once training has started, a failure must not show (whether training fails, an
    exception or a non-finite update, can depend on the client's data): the client sends a zero update (bit 1)
    with its noise share, which the server cannot tell apart, and logs only the failure's type locally.
    """
    return _distributed_dp_mod(msg, context, call_next, _DEFAULT)


def make_distributed_dp_mod(
    *args: Any,
    min_noise_multiplier: float | None = None,
    keep_metrics: bool = False,
    rng: np.random.Generator | None = None,
) -> Callable[[Message, Context, Callable[[Message, Context], Message]], Message]:
    """A :func:`distributed_dp_mod` with the client's own limits.

    Parameters
    ----------
    min_noise_multiplier : float, optional
        Refuse (an error reply, before training) a round whose noise, summed over the round's clients, is
        below this multiple of the clip norm: ``noise_stddev sqrt(clients) / clip < min_noise_multiplier``.
    keep_metrics : bool
        Send the fit metrics to the server (default False: they are not covered by the guarantee).
    rng : numpy.random.Generator, optional
        Where the rounding and the noise come from; default: the OS entropy source. Reproducible runs and
        tests only: never a generator the server can reproduce.
    """
    if args:
        raise TypeError(
            "make_distributed_dp_mod(...) returns the mod: use mods=[secaggplus_mod, make_distributed_dp_mod(...)], "
            "not the factory itself (its options are keyword arguments)"
        )
    if min_noise_multiplier is not None:
        if isinstance(min_noise_multiplier, bool) or not isinstance(min_noise_multiplier, (int, float)):
            raise TypeError(f"min_noise_multiplier must be a float, got {type(min_noise_multiplier).__name__}")
        if not (math.isfinite(min_noise_multiplier) and min_noise_multiplier > 0):
            raise ValueError(f"min_noise_multiplier must be finite and > 0, got {min_noise_multiplier!r}")
    if not isinstance(keep_metrics, bool):
        raise TypeError(f"keep_metrics must be a bool, got {type(keep_metrics).__name__}")
    if rng is not None and not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator or None, got {type(rng).__name__}")
    options = _Options(None if min_noise_multiplier is None else float(min_noise_multiplier), keep_metrics, rng)

    def mod(msg: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
        return _distributed_dp_mod(msg, context, call_next, options)

    mod.__name__ = mod.__qualname__ = "distributed_dp_mod"
    return mod


def _secagg_problem(msg: Message, context: Context, bits: int) -> str | None:
    """Why SecAgg+ would not carry this client's words exactly, or None."""
    if RECORD_KEY_CONFIGS not in msg.content.config_records or RECORD_KEY_STATE not in context.state.config_records:
        return f"the train message did not come through Flower's SecAgg+ ({_AFTER})"
    state = context.state.config_records[RECORD_KEY_STATE]
    want = secagg_ranges(bits)
    got = {
        "clipping_range": state.get("clipping_range"),
        "quantization_range": state.get("target_range"),
        "modulus_range": state.get("mod_range"),
        "max_weight": state.get("max_weight"),
    }
    wrong = {k: _short(v) for k, v in got.items() if v != want[k]}
    if wrong:
        return (
            f"SecAgg+ was set up with {wrong}, not the ranges that carry {bits}-bit words exactly ({want}): the "
            "server must use DistributedDPStrategy.secagg_workflow(...) as DefaultWorkflow's fit_workflow"
        )
    return None


def _distributed_dp_mod(
    msg: Message, context: Context, call_next: Callable[[Message, Context], Message], options: _Options
) -> Message:
    if not _is_train(msg):
        return call_next(msg, context)
    if not _is_legacy(msg):
        return _error_reply(msg, f"the train message is not a FitIns of SecAggPlusWorkflow ({_AFTER})")
    try:
        fitins = _compat.recorddict_to_fitins(msg.content, keep_input=True)
        config = fitins.config
        global_arrays = parameters_to_ndarrays(fitins.parameters)
        floats = [i for i, a in enumerate(global_arrays) if a.dtype.kind == "f"]
        dim = int(sum(global_arrays[i].size for i in floats))
        pipe = pipeline_from_config(config, dim=dim, max_cells=max(1, _MAX_CELLS_PER_PARAMETER * dim))
        count = count_from_config(config)
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        return _error_reply(msg, f"bad distributed-DP configuration from the server: {exc}")
    problem = _secagg_problem(msg, context, pipe.bits)
    if problem is None and not all(np.all(np.isfinite(global_arrays[i])) for i in floats):
        problem = "the global parameters hold a NaN or an infinity"
    if problem is None and options.min_noise_multiplier is not None:
        z = pipe.noise_stddev * math.sqrt(pipe.num_clients) / pipe.clip
        if z < options.min_noise_multiplier:
            problem = (f"the round's noise multiplier {z:.4g} (noise {pipe.noise_stddev:.4g} x sqrt({pipe.num_clients}) "
                       f"clients / clip {pipe.clip:.4g}) is below the client's min_noise_multiplier="
                       f"{options.min_noise_multiplier}")
    if problem is not None:
        return _error_reply(msg, problem)

    # From here on a failure must not show: whether a client's training fails (an exception, NaN weights) can
    # depend on its data, and a missing vector tells the server so. Any failure sends a zero update (bit 1)
    # with the client's noise share, which the zero-out relation already covers; the client's log and
    # context.state record it.
    failure, metrics = None, {}
    update = np.zeros(dim)
    try:
        reply = call_next(msg, context)
        if reply.has_error():
            raise _TrainingFailed("error reply")
        fitres = _compat.recorddict_to_fitres(reply.content, keep_input=True)
        if fitres.status.code != Code.OK:
            raise _TrainingFailed(f"FitRes status {fitres.status.code.name}")
        trained = parameters_to_ndarrays(fitres.parameters)
        if len(trained) != len(global_arrays) or any(
            trained[i].shape != global_arrays[i].shape or trained[i].dtype.kind != "f" for i in floats
        ):
            raise _TrainingFailed("FitRes parameters of other shapes or dtypes than the global ones")
        trained_update = np.concatenate(
            [np.asarray(trained[i], np.float64).reshape(-1) - np.asarray(global_arrays[i], np.float64).reshape(-1)
             for i in floats]
        )
        if not math.isfinite(float(np.linalg.norm(trained_update))):
            raise _TrainingFailed("non-finite update")
        update, metrics = trained_update, dict(fitres.metrics)
    except Exception as exc:  # noqa: BLE001 - its text may describe the client's data: only its type is logged
        # The mod's own texts name no data; any other exception (the app's) is named by its type only.
        failure = str(exc) if isinstance(exc, _TrainingFailed) else type(exc).__name__
        log(ERROR, "distributed_dp_mod: training failed (%s): sending a zero update with the noise share", failure)
    norm = float(np.linalg.norm(update))
    try:
        words = [words_to_secagg(pipe.encode(update, rng=options.rng), pipe.bits)]
        if count is not None:
            from ..secagg.noise import sample_discrete_gaussian  # noqa: PLC0415

            lattice, noise = count
            value = int(norm <= pipe.clip) * lattice + int(sample_discrete_gaussian(1, noise, rng=options.rng)[0])
            words.append(words_to_secagg(np.array([value % (1 << pipe.bits)]), pipe.bits))
    except Exception as exc:  # noqa: BLE001 - e.g. out of memory; nothing the client's data decides
        log(ERROR, "distributed_dp_mod: encoding failed (%s)", type(exc).__name__)
        return _error_reply(msg, "the client could not encode its update", ErrorCode.CLIENT_APP_RAISED_EXCEPTION)

    state: Any = context.state.metric_records.get(DDP_STATE_KEY)
    rounds = int(state["rounds"]) + 1 if state is not None and "rounds" in state else 1
    failed = (int(state["failed-rounds"]) if state is not None and "failed-rounds" in state else 0) + int(
        failure is not None)
    context.state.metric_records[DDP_STATE_KEY] = MetricRecord(
        {"norm": norm, "clipped": int(norm > pipe.clip), "clip-norm": pipe.clip, "rounds": rounds,
         "failed-rounds": failed}
    )
    res = FitRes(
        status=Status(code=Code.OK, message="dprec distributed DP"),
        parameters=ndarrays_to_parameters(words),
        num_examples=1,
        metrics=metrics if options.keep_metrics else {},
    )
    return Message(_compat.fitres_to_recorddict(res, keep_input=True), reply_to=msg)


def _error_reply(msg: Message, reason: str, code: int = ErrorCode.MOD_FAILED_PRECONDITION) -> Message:
    return _common_error_reply(msg, reason, code, mod="distributed_dp_mod")
