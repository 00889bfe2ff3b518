"""The client side: :func:`dprec_mod` and :func:`make_dprec_mod`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from logging import DEBUG, ERROR
from typing import Any

import numpy as np
from flwr.app import (
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MetricRecord,
)
from flwr.common import Parameters, log
from flwr.common.constant import ErrorCode

try:
    from flwr.compat.common.recorddict_compat import parameters_to_arrayrecord
except ImportError:  # pragma: no cover - flwr < 1.23 kept it in flwr.common
    from flwr.common.recorddict_compat import parameters_to_arrayrecord

from .._runtime.validation import check_int, check_positive
from ..constants import DEFAULT_BITS, MAX_BITS, MIN_BITS
from ..rec.codec import DPRECCodec
from ._adaptive import MAX_QUANTILE_NOISE, noisy_bit
from ._common import (
    _CONFIG_KEYS,
    _DPREC_PREFIX,
    _LEGACY_FITRES_METRICS,
    _LEGACY_FITRES_PARAMETERS,
    _LEGACY_FITRES_STATUS,
    CONFIG_QUANTILE_NOISE,
    CONFIG_SIGMA,
    DEFAULT_CANDIDATE_ELEMENTS_PER_PARAMETER,
    DEFAULT_CANDIDATES_PER_PARAMETER,
    DEFAULT_MAX_CANDIDATE_ELEMENTS,
    DEFAULT_MAX_CANDIDATES,
    DEFAULT_MIN_BITS,
    MESSAGE_KEY,
    QUANTILE_BIT_KEY,
    RECORD_KEY,
    STATE_KEY,
    _error_reply,
    _find_config,
    _float_arrays,
    _is_float,
    _is_legacy,
    _is_train,
    _short,
    codec_from_config,
)

# --------------------------------------------------------------------------------------
# Client
# --------------------------------------------------------------------------------------


def dprec_mod(msg: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
    """Flower client mod: compress the train reply's model update with DP-REC.

    Add it to the ``ClientApp`` (``ClientApp(mods=[dprec_mod])``, or
    ``@app.train(mods=[dprec_mod])``) and wrap the server's strategy in
    :class:`DPRECStrategy`. On train messages it

    1. reads the codec parameters from the message's ``ConfigRecord`` (the keys of
       :func:`codec_config`, put there by :class:`DPRECStrategy`), keeps the incoming global
       ``ArrayRecord``, and checks both before the client trains: the parameters' types and
       ranges, ``bits`` naming only floating-point arrays of the global model, finite non-empty
       global arrays, and an encode within the default caps on candidates and candidate-elements,
       which grow with the model (see :func:`make_dprec_mod`, which sets other limits, and privacy
       caps);
    2. runs the rest of the app (``call_next``);
    3. computes the update ``reply - global`` of the floating-point arrays, encodes it with
       a fresh seed and private randomness from the OS entropy source, and replaces the
       reply's ``ArrayRecord`` by ``ConfigRecord({"dprec.message": bytes})`` named
       ``"dprec"``; other records (the ``MetricRecord``) are kept. With adaptive clipping (the
       train config holds :data:`CONFIG_QUANTILE_NOISE`, ``s``) the record also holds
       :data:`QUANTILE_BIT_KEY`: the integer ``1[norm <= clip norm] M + Z`` (as an integer-valued
       float), ``Z`` an exact discrete Gaussian of scale ``s M`` (a lattice of ``M`` steps per unit),
       the noise from the OS entropy source.

    Legacy apps (``ClientApp(client_fn=..., mods=[dprec_mod])`` with a ``NumPyClient``, the
    server's strategy wrapped in :class:`DPRECLegacyStrategy`) work the same way: their train
    messages are Flower's ``FitIns`` in Message form (``"fitins.parameters"``, arrays keyed
    ``"0"`` to ``"n-1"``, and ``"fitins.config"``, which carries the codec's parameters). The
    reply stays a ``FitRes``, as the legacy server reads it: ``"fitres.parameters"`` holds no
    tensors and the DP-REC record's entries (``"dprec.message"``) are added to the fit metrics
    (``"fitres.metrics"``). A ``FitRes`` whose status is not OK, or whose metrics already hold a
    ``"dprec."`` key, gets an error reply (the legacy server counts it as a failure).

    The update's norm before clipping and whether it was clipped are stored in
    ``context.state["dprec"]`` (a ``MetricRecord`` that stays on the client: ``norm``,
    ``clipped``, ``clip-norm``, ``message-bytes`` of the last round, and ``rounds`` /
    ``clipped-rounds`` counted over the run); they are never sent, nor logged.
    Non-train messages and error replies of the app pass through untouched.

    On train messages the mod never raises. A failure before training is an error reply naming the problem
    (from the server's parameters and the shapes of the arrays only). After training, the
    texts of exceptions may describe the client's data (an update with NaN says training
    diverged), so they are neither sent nor logged: an exception of the app's train function
    is answered with ``ErrorCode.CLIENT_APP_RAISED_EXCEPTION`` and an encoding failure with
    ``"dprec_mod: the client could not encode its update"``; the client's log names only the
    exception's type.

    Parameters
    ----------
    msg : flwr.app.Message
    context : flwr.app.Context
    call_next : callable
        The next mod or the app's function, ``(Message, Context) -> Message``.

    Returns
    -------
    flwr.app.Message
        The compressed reply, or an error reply (``ErrorCode.MOD_FAILED_PRECONDITION``)
        naming the problem: no DP-REC keys in the message's config (the server strategy is
        not wrapped in :class:`DPRECStrategy` or :class:`DPRECLegacyStrategy`), codec
        parameters out of range or too costly to encode, not exactly one ArrayRecord in the
        message or the reply, or reply arrays whose keys, shapes or dtypes do not match the
        global ones.
    """
    return _dprec_mod(msg, context, call_next, _DEFAULT_LIMITS)


@dataclass(frozen=True)
class _Limits:
    """What a client accepts from the server (see :func:`make_dprec_mod`)."""

    max_clip_multiplier: float | None
    min_bits: int
    max_candidates: int | None  # None: the larger of DEFAULT_MAX_CANDIDATES and per parameter
    max_candidate_elements: int | None  # None: DEFAULT_CANDIDATE_ELEMENTS_PER_PARAMETER per parameter
    min_quantile_noise: float | None = None  # the smallest noise on the quantile bit the client accepts


_DEFAULT_LIMITS = _Limits(None, MIN_BITS, None, None)


def make_dprec_mod(
    *args: Any,
    max_clip_multiplier: float | None = None,
    min_bits: int = DEFAULT_MIN_BITS,
    max_candidates: int | None = None,
    max_candidate_elements: int | None = None,
    min_quantile_noise: float | None = None,
) -> Callable[[Message, Context, Callable], Message]:
    """:func:`dprec_mod` with client-side caps on the privacy and the work the server may ask for.

    The codec parameters come from the server. A client that does not trust it to pick them caps
    what sets its guarantee for a given sampling and number of rounds: ``c``
    (``clip_multiplier``) and the bits per group. The accountant's sound bound for REC's
    messages takes the smallest group's ``K = 2^bits`` candidates and grows as ``K`` shrinks
    (at ``c = 1``, 1 bit per group about doubles the epsilon of 7 bits), so a cap on ``c``
    alone does not bound it. A train message asking for more than the caps, or for an encode
    above the cost caps, gets an error reply (``ErrorCode.MOD_FAILED_PRECONDITION``) and the
    client does not train on its data.

    Parameters
    ----------
    max_clip_multiplier : float, optional
        The largest ``c`` this client accepts, ``> 0``; default: no cap.
    min_bits : int
        The fewest bits per group this client accepts, in [1, 24] (the smallest group's bits,
        which the accounting takes); default :data:`DEFAULT_MIN_BITS` (7, the codec's default).
    max_candidates : int, optional
        The most candidates one encode may hold, the sum over groups of ``2^bits`` (16 bytes of
        memory each), ``>= 2``; default: the larger of :data:`DEFAULT_MAX_CANDIDATES` (2^26) and
        :data:`DEFAULT_CANDIDATES_PER_PARAMETER` (4) times the parameters of the model.
    max_candidate_elements : int, optional
        The most candidate-elements one encode may compute, the sum over groups of
        ``2^bits x`` the group's size, ``>= 2``; default: the larger of
        :data:`DEFAULT_MAX_CANDIDATE_ELEMENTS` (2^32) and :data:`DEFAULT_CANDIDATE_ELEMENTS_PER_PARAMETER`
        (2^10) times the parameters of the model.
    min_quantile_noise : float, optional
        Adaptive clipping (:class:`AdaptiveClipping`): the smallest noise scale ``s > 0`` on the quantile bit
        this client accepts (a smaller ``s`` spends more privacy: ``1 / s^2`` adds to ``c^2`` in each
        message's divergence); default ``2 / max_clip_multiplier`` when ``max_clip_multiplier`` is given
        (the default ``s`` at the capped ``c``), else no cap.

    Returns
    -------
    callable
        A Flower mod: ``ClientApp(mods=[make_dprec_mod(max_clip_multiplier=0.5)])``.
    """
    if args:
        # make_dprec_mod itself given as a mod (mods=[make_dprec_mod]): Flower calls it with (msg, context, call_next).
        raise TypeError(
            "make_dprec_mod makes a mod and takes keyword arguments only: use ClientApp(mods=[make_dprec_mod(...)]) "
            "(called, e.g. make_dprec_mod(max_clip_multiplier=0.5)), or ClientApp(mods=[dprec_mod])"
        )
    cap = None if max_clip_multiplier is None else check_positive(max_clip_multiplier, "max_clip_multiplier")
    limits = _Limits(
        max_clip_multiplier=cap,
        min_bits=check_int(min_bits, "min_bits", MIN_BITS, MAX_BITS),
        max_candidates=None if max_candidates is None else check_int(max_candidates, "max_candidates", 2, 2**63 - 1),
        max_candidate_elements=None
        if max_candidate_elements is None
        else check_int(max_candidate_elements, "max_candidate_elements", 2, 2**63 - 1),
        min_quantile_noise=_min_noise(min_quantile_noise, cap),
    )

    def capped_dprec_mod(msg: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
        return _dprec_mod(msg, context, call_next, limits)

    return capped_dprec_mod


def _min_noise(min_quantile_noise: float | None, max_clip_multiplier: float | None) -> float | None:
    """The client's floor on the quantile bit's noise: as given, else ``2 / max_clip_multiplier`` when ``c`` is
    capped (the bit then costs at most a quarter of the capped ``c^2``: a cap on ``c`` alone would let the server
    ask for a noise-free bit), else none."""
    if min_quantile_noise is not None:
        return check_positive(min_quantile_noise, "min_quantile_noise")
    return None if max_clip_multiplier is None else 2.0 / max_clip_multiplier


class _Refusal(Exception):
    """A train message the client does not train on; the text names the problem (server data only)."""


def _check_codec(codec: DPRECCodec, template: dict[str, np.ndarray], limits: _Limits) -> None:
    """Refuse (:class:`_Refusal`) a codec beyond ``limits`` or that cannot encode an update like ``template``.

    Counted arithmetically from the shapes, before the layout is built: ``max_group_size=1`` on a
    large model would otherwise build millions of groups first.
    """
    bits = codec.bits
    if isinstance(bits, dict):
        unknown = sorted(set(bits) - set(template))
        if unknown:
            raise _Refusal(
                f"the server's bits name tensors that are not floating-point arrays of the global model: "
                f"{_short(unknown)}; not training"
            )
    groups = candidates = elements = parameters = 0
    fewest: tuple[int, str] | None = None
    for name, a in template.items():
        n = int(a.size)
        if n == 0:
            raise _Refusal(f"the global array {_short(name)} is empty; not training")
        b = bits.get(name, DEFAULT_BITS) if isinstance(bits, dict) else bits
        chunk = n if codec.max_group_size is None else min(n, codec.max_group_size)
        g = -(-n // chunk)
        groups, candidates, elements = groups + g, candidates + (g << b), elements + (n << b)
        parameters += n
        if fewest is None or b < fewest[0]:
            fewest = (b, name)
    if fewest is not None and fewest[0] < limits.min_bits:
        raise _Refusal(
            f"the server asks for bits={fewest[0]} (tensor {_short(fewest[1])}), fewer bits per group than this "
            f"client's min_bits={limits.min_bits}; not training (fewer candidates per group spend more privacy)"
        )
    max_candidates = limits.max_candidates
    if max_candidates is None:
        max_candidates = max(DEFAULT_MAX_CANDIDATES, DEFAULT_CANDIDATES_PER_PARAMETER * parameters)
    if candidates > max_candidates:
        raise _Refusal(
            f"the server's bits and max_group_size make one encode hold {candidates} candidates (2^bits for each "
            f"of {groups} groups), above this client's max_candidates={max_candidates}; not training"
        )
    max_elements = limits.max_candidate_elements
    if max_elements is None:
        max_elements = max(DEFAULT_MAX_CANDIDATE_ELEMENTS, DEFAULT_CANDIDATE_ELEMENTS_PER_PARAMETER * parameters)
    if elements > max_elements:
        raise _Refusal(
            f"the server's bits make one encode compute {elements} candidate-elements (2^bits x group size, "
            f"summed over {groups} groups), above this client's max_candidate_elements={max_elements}; not training"
        )
    codec.layout(template)  # anything else the codec refuses (a group above 2**34 elements), before training


def _prepare(msg: Message, limits: _Limits) -> tuple[DPRECCodec, set[str], dict[str, np.ndarray], float | None]:
    """The server's codec and the global arrays of a train message, checked before the client trains.

    Raises :class:`_Refusal` with a text built from the server's data only.
    """
    found = _find_config(msg.content, CONFIG_SIGMA)
    if found is None:
        raise _Refusal(
            f"the train message's ConfigRecord lacks the DP-REC keys ({', '.join(_CONFIG_KEYS[:3])}); "
            + (
                "wrap the server_fn's strategy in dprec.flower.DPRECLegacyStrategy"
                if _is_legacy(msg)
                else "wrap the ServerApp's strategy in dprec.flower.DPRECStrategy"
            )
        )
    try:
        codec = codec_from_config(found[1])
    except (KeyError, TypeError, ValueError) as exc:
        raise _Refusal(f"bad DP-REC codec parameters in the message's config: {exc}") from None
    noise = _quantile_noise(found[1], limits)
    if limits.max_clip_multiplier is not None and codec.clip_multiplier > limits.max_clip_multiplier:
        raise _Refusal(
            f"the server asks for clip_multiplier={codec.clip_multiplier:g}, above this client's "
            f"max_clip_multiplier={limits.max_clip_multiplier:g}; not training (a larger c spends more privacy)"
        )
    if len(msg.content.array_records) != 1:
        raise _Refusal(f"expects exactly one ArrayRecord in the train message, found {len(msg.content.array_records)}")
    global_record = next(iter(msg.content.array_records.values()))
    global_keys = set(global_record.keys())
    global_floats = _float_arrays(global_record)
    if not global_floats:
        raise _Refusal("the global ArrayRecord has no floating-point arrays to update")
    _check_codec(codec, global_floats, limits)
    for key, g in global_floats.items():
        # A NaN in the global model would make every update NaN: refused now, not after training.
        if not np.all(np.isfinite(g)):
            raise _Refusal(f"the global array {_short(key)} holds NaN or infinity; not training")
    return codec, global_keys, global_floats, noise


def _quantile_noise(config: ConfigRecord, limits: _Limits) -> float | None:
    """The server's noise on the quantile bit (adaptive clipping), checked; None without adaptive clipping."""
    if CONFIG_QUANTILE_NOISE not in config:
        return None
    value = config[CONFIG_QUANTILE_NOISE]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value <= MAX_QUANTILE_NOISE):
        raise _Refusal(f"the server's {CONFIG_QUANTILE_NOISE} must be a float in (0, 2**24], got {_short(value)}")
    if limits.min_quantile_noise is not None and value < limits.min_quantile_noise:
        raise _Refusal(
            f"the server asks for {CONFIG_QUANTILE_NOISE}={value:g}, below this client's "
            f"min_quantile_noise={limits.min_quantile_noise:g}; not training (less noise on the bit spends more privacy)"
        )
    return float(value)


def _dprec_mod(
    msg: Message, context: Context, call_next: Callable[[Message, Context], Message], limits: _Limits
) -> Message:
    """:func:`dprec_mod`'s work, within ``limits``."""
    if not _is_train(msg) or msg.has_error() or not msg.has_content():
        return call_next(msg, context)
    try:
        codec, global_keys, global_floats, noise = _prepare(msg, limits)
    except _Refusal as exc:
        return _error_reply(msg, str(exc))
    except Exception as exc:  # noqa: BLE001 - anything the server's message makes fail: a reply, not a crash
        # Before training only the server's data was read: its text names no private data.
        return _error_reply(msg, f"could not read the train message ({type(exc).__name__}: {exc})")

    try:
        reply = call_next(msg, context)
    except Exception as exc:  # noqa: BLE001 - its text may describe the data (a diverged loss)
        log(ERROR, "dprec_mod: the train function raised %s; its text is not logged nor sent", type(exc).__name__)
        return _error_reply(
            msg,
            "the ClientApp's train function raised an exception (not forwarded: it may describe private data)",
            ErrorCode.CLIENT_APP_RAISED_EXCEPTION,
        )
    try:
        if reply.has_error():
            return reply
        return _encode_reply(msg, reply, context, codec, global_keys, global_floats, noise)
    except Exception as exc:  # noqa: BLE001 - e.g. NaN in the update (training diverged), MemoryError, not a Message
        log(ERROR, "dprec_mod: encoding the update raised %s; its text is not logged nor sent", type(exc).__name__)
        return _error_reply(msg, "the client could not encode its update")


def _encode_reply(
    msg: Message,
    reply: Message,
    context: Context,
    codec: DPRECCodec,
    global_keys: set[str],
    global_floats: dict[str, np.ndarray],
    noise: float | None = None,
) -> Message:
    """Replace the reply's arrays by the DP-REC message of ``reply - global`` (or an error reply about its shape).

    Both of Flower's formats share this path: a Message-API reply loses its ``ArrayRecord`` and gains the
    ``ConfigRecord`` named :data:`RECORD_KEY`; a legacy one (a ``FitRes``, see :func:`_is_legacy`) keeps the form
    the legacy server reads, its ``"fitres.parameters"`` emptied (no tensors) and the same record's entries added
    to ``"fitres.metrics"``.
    """
    legacy = _is_legacy(msg)
    n_arrays = len(reply.content.array_records)
    if n_arrays != 1:
        return _error_reply(msg, f"expects exactly one ArrayRecord in the train reply, found {n_arrays}")
    if legacy:
        problem = _legacy_reply_problem(reply)
        if problem is not None:
            return _error_reply(msg, problem)
    elif RECORD_KEY in reply.content:
        return _error_reply(msg, f"the train reply already has a record named {RECORD_KEY!r}")
    name, record = next(iter(reply.content.array_records.items()))
    if set(record.keys()) != global_keys:
        extra = sorted(set(record.keys()) - global_keys)
        lacking = sorted(global_keys - set(record.keys()))
        return _error_reply(
            msg,
            f"the reply's ArrayRecord keys do not match the global ones (extra: {extra}, missing: {lacking})",
        )
    update: dict[str, np.ndarray] = {}
    for key, g in global_floats.items():
        r = record[key].numpy()
        if r.shape != g.shape:
            return _error_reply(msg, f"reply array {key!r} has shape {r.shape}, the global one {g.shape}")
        if not _is_float(r.dtype):
            return _error_reply(msg, f"reply array {key!r} has dtype {r.dtype}, the global one {g.dtype}")
        dtype = np.result_type(r.dtype, g.dtype, np.float32)
        update[key] = np.subtract(r, g, dtype=dtype)

    message, info = codec.encode(update, return_info=True)  # seed and private draw from the OS entropy source
    blob = message.to_bytes()
    dprec_record = ConfigRecord({MESSAGE_KEY: blob})  # every DP-REC entry of the reply, in either format
    if noise is not None:
        # Adaptive clipping: whether the update was within the clip norm, plus noise from the OS entropy source.
        # An integer on a lattice, sent as an integer-valued float64: exact, and of fixed size on the wire (a
        # ConfigRecord int is a varint, whose length would vary with the noise).
        dprec_record[QUANTILE_BIT_KEY] = float(noisy_bit(info.norm <= info.clip_norm, noise))
    if legacy:
        # The legacy server reads a FitRes: "fitres.parameters" must stay, with no tensors; the entries ride in
        # the fit metrics (a FitRes's metrics take bytes), where DPRECLegacyStrategy finds them by their prefix.
        reply.content.array_records[name] = _no_parameters()
        reply.content.config_records[_LEGACY_FITRES_METRICS].update(dprec_record)
    else:
        del reply.content[name]
        reply.content[RECORD_KEY] = dprec_record

    prev = context.state.metric_records.get(STATE_KEY)
    rounds = int(prev.get("rounds", 0)) if prev is not None else 0
    clipped_rounds = int(prev.get("clipped-rounds", 0)) if prev is not None else 0
    context.state[STATE_KEY] = MetricRecord(
        {
            "norm": float(info.norm),
            "clipped": int(bool(info.clipped)),
            "clip-norm": float(info.clip_norm),
            "message-bytes": len(blob),
            "rounds": rounds + 1,
            "clipped-rounds": clipped_rounds + int(bool(info.clipped)),
        }
    )
    # The norm and the clipping are private: they stay in context.state, out of the logs.
    log(DEBUG, "dprec_mod: %d-byte message, %d arrays left out", len(blob), len(global_keys) - len(global_floats))
    return reply


def _legacy_reply_problem(reply: Message) -> str | None:
    """Why a reply to a legacy train message cannot carry the DP-REC message, or None.

    The texts name the app's keys and status code only, never its status message (the app's text).
    """
    content = reply.content
    if _LEGACY_FITRES_PARAMETERS not in content.array_records or _LEGACY_FITRES_METRICS not in content.config_records:
        return (
            f"the reply to a legacy train message (a FitIns) is not a FitRes (no {_LEGACY_FITRES_PARAMETERS!r} "
            f"ArrayRecord and {_LEGACY_FITRES_METRICS!r} ConfigRecord)"
        )
    status = content.config_records.get(_LEGACY_FITRES_STATUS)
    code = None if status is None else status.get("code")
    if code != 0:  # Code.OK; the legacy server counts any other as a failure and reads nothing else
        return f"the client's fit returned the status code {_short(code)}, not OK; its parameters are not sent"
    clash = sorted(k for k in content.config_records[_LEGACY_FITRES_METRICS] if k.startswith(_DPREC_PREFIX))
    if clash:
        return f"the client's fit metrics already hold keys starting with {_DPREC_PREFIX!r}: {_short(clash)}"
    return None


def _no_parameters() -> ArrayRecord:
    """A legacy ``"fitres.parameters"`` record with no tensors (what flwr makes of ``Parameters([], "")``)."""
    return parameters_to_arrayrecord(Parameters(tensors=[], tensor_type=""), keep_input=True)
