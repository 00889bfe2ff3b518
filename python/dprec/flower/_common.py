"""Shared by the client mod and the server strategies: the ConfigRecord keys, the codec's parameters in a
ConfigRecord, and bounded texts of untrusted values."""

from __future__ import annotations

import json
import reprlib
from collections.abc import Mapping
from logging import ERROR
from typing import Any

import numpy as np

try:
    from flwr.app import (
        ArrayRecord,
        ConfigRecord,
        Error,
        Message,
        MessageType,
        MetricRecord,
        RecordDict,
    )
    from flwr.common import log
    from flwr.common.constant import ErrorCode
    from flwr.common.serde import recorddict_to_proto
except ImportError as exc:  # pragma: no cover - exercised only without flwr
    raise ImportError(
        'dprec.flower needs Flower\'s Message API (flwr >= 1.22, Python >= 3.10): pip install "dprec[flower]"'
    ) from exc

from ..constants import DEFAULT_BITS
from ..rec.codec import DPRECCodec

#: ConfigRecord key (server to client): the codec's sigma (float).
CONFIG_SIGMA = "dprec.sigma"
#: ConfigRecord key (server to client): the codec's clip multiplier ``c`` (float).
CONFIG_CLIP_MULTIPLIER = "dprec.clip-multiplier"
#: ConfigRecord key (server to client): bits per group (int), or a JSON object ``{tensor: bits}`` (str).
CONFIG_BITS = "dprec.bits"
#: ConfigRecord key (server to client): max group size (int); absent means ``None``.
CONFIG_MAX_GROUP_SIZE = "dprec.max-group-size"
#: ConfigRecord key (server to client), ``sampling="with_replacement"`` only: the message's slot in the
#: round (int, 0 to B - 1), so that the train messages of a node drawn several times differ.
CONFIG_SLOT = "dprec.slot"
#: ConfigRecord key (server to client), adaptive clipping only: the standard deviation ``s`` (float) of the
#: noise the client adds to its quantile bit (:class:`~dprec.flower.AdaptiveClipping`).
CONFIG_QUANTILE_NOISE = "dprec.quantile-noise"
#: Key, in the reply's DP-REC ConfigRecord, of the client's noisy quantile bit: the integer ``1[norm <= C] M + Z``
#: (an integer-valued float64, of fixed size on the wire),
#: ``Z`` a discrete Gaussian of scale ``s M`` (:func:`dprec.flower._adaptive.noisy_bit`).
QUANTILE_BIT_KEY = "dprec.quantile-bit"
#: Name of the reply's ConfigRecord that carries the message (client to server).
RECORD_KEY = "dprec"
#: Key of the message bytes in that ConfigRecord.
MESSAGE_KEY = "dprec.message"
#: Key of the client's local diagnostics (a MetricRecord) in ``context.state``.
STATE_KEY = "dprec"
#: Values of ``DPRECStrategy(sampling=...)``.
STRATEGY_SAMPLING = ("without_replacement", "poisson", "with_replacement")

#: ``make_dprec_mod(min_bits=...)`` default: the fewest bits per group a capped client accepts, the
#: codec's default. REC's bound against the server takes the smallest group's ``K = 2^bits``
#: candidates and grows as it shrinks (1 bit about doubles epsilon at ``c = 1``).
DEFAULT_MIN_BITS = DEFAULT_BITS
#: Default cap on the candidates of one encode, the sum over groups of ``2^bits``: the larger of this
#: and :data:`DEFAULT_CANDIDATES_PER_PARAMETER` per parameter of the model. The encode holds 16 bytes
#: per candidate (1 GiB at 2^26), and a group has at least 2 of them, so it also bounds the groups.
#: ``max_group_size=1, bits=24`` on 650 parameters would need 10.9e9 (an 81 GiB array).
DEFAULT_MAX_CANDIDATES = 2**26
#: Candidates per parameter the default cap allows on a large model: 4 (64 bytes of encode memory per
#: parameter), e.g. ``max_group_size >= 32`` at 7 bits.
DEFAULT_CANDIDATES_PER_PARAMETER = 4
#: Default cap on the candidate-elements of one encode, the sum over groups of ``2^bits x`` the
#: group's size: the larger of :data:`DEFAULT_MAX_CANDIDATE_ELEMENTS` and this many per parameter of
#: the model, so that the encode's arithmetic may grow with the model the client trains anyway (7 bits
#: use 2^7 per parameter). ``bits=24`` on 650 parameters would be 10.9e9 (30 s).
DEFAULT_CANDIDATE_ELEMENTS_PER_PARAMETER = 2**10
#: The floor of that cap: 2^32 candidate-elements take about 7 s on a 2-core machine.
DEFAULT_MAX_CANDIDATE_ELEMENTS = 2**32
#: Why :class:`DPRECStrategy` drops a reply: the suffixes of the ``"dprec-dropped.<reason>"`` metrics.
DROP_REASONS = (
    "unsolicited",  # not from the node of one of this round's train messages, in reply to it
    "duplicate-reply",  # a train message answered more than once this round (all its replies)
    "bad-message",  # no DP-REC message, or bytes that are not one for this model and codec (any failure)
    "duplicate-seed",  # a seed in several of this round's replies that passed the origin checks (all of them)
    "replayed-seed",  # a seed already received in an earlier round
    "bad-weight",  # weighted_by_key missing, not a finite number >= 0
    "above-max-weight",  # weighted_by_key above max_weight
)

_CONFIG_KEYS = (CONFIG_SIGMA, CONFIG_CLIP_MULTIPLIER, CONFIG_BITS, CONFIG_MAX_GROUP_SIZE)
# Flower's legacy API (NumPyClient, flwr.server.strategy) in Message form (flwr's recorddict_compat): a train
# message holds these two records, its reply the next four. DP-REC's entries travel in the fit config and the fit
# metrics under their own "dprec." keys.
_LEGACY_FITINS_PARAMETERS = "fitins.parameters"
_LEGACY_FITINS_CONFIG = "fitins.config"
_LEGACY_FITRES_PARAMETERS = "fitres.parameters"
_LEGACY_FITRES_METRICS = "fitres.metrics"
_LEGACY_FITRES_STATUS = "fitres.status"
_DPREC_PREFIX = "dprec."
# Longest text of an untrusted value (a config entry, a peer's error reason) in an error or log line.
_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 80
_SHORT.maxlist = _SHORT.maxdict = 8
_MAX_REASON = 500


def _short(value: Any) -> str:
    """A bounded repr of an untrusted value, for error replies and logs."""
    return _SHORT.repr(value)


def _clip_text(text: str, limit: int = _MAX_REASON) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------------------
# Codec parameters in a ConfigRecord
# --------------------------------------------------------------------------------------


def codec_config(codec: DPRECCodec) -> dict[str, Any]:
    """The ConfigRecord entries that describe ``codec`` to the clients.

    Parameters
    ----------
    codec : DPRECCodec

    Returns
    -------
    dict
        ``{"dprec.sigma": float, "dprec.clip-multiplier": float, "dprec.bits": int or str}``
        plus ``"dprec.max-group-size": int`` when the codec has one. A per-tensor ``bits``
        mapping is written as a JSON object (ConfigRecords hold no mappings).
    """
    if not isinstance(codec, DPRECCodec):
        raise TypeError(f"codec must be a DPRECCodec, got {type(codec).__name__}")
    bits = codec.bits
    out: dict[str, Any] = {
        CONFIG_SIGMA: float(codec.sigma),
        CONFIG_CLIP_MULTIPLIER: float(codec.clip_multiplier),
        CONFIG_BITS: json.dumps(bits, sort_keys=True) if isinstance(bits, dict) else int(bits),
    }
    if codec.max_group_size is not None:
        out[CONFIG_MAX_GROUP_SIZE] = int(codec.max_group_size)
    return out


def codec_from_config(config: Mapping[str, Any]) -> DPRECCodec:
    """Rebuild the server's codec from the entries written by :func:`codec_config`.

    Parameters
    ----------
    config : Mapping[str, Any]
        A ConfigRecord (or dict) holding at least ``"dprec.sigma"``,
        ``"dprec.clip-multiplier"`` and ``"dprec.bits"``.

    Returns
    -------
    DPRECCodec
        With the default backend (``"auto"``).

    Raises
    ------
    KeyError
        If a required key is missing.
    TypeError, ValueError
        For values of the wrong type or out of range (a ``"dprec.bits"`` string that is not a
        flat JSON object included); the texts show at most 80 characters of a value.
    """
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a mapping (a ConfigRecord), got {type(config).__name__}")
    missing = [k for k in (CONFIG_SIGMA, CONFIG_CLIP_MULTIPLIER, CONFIG_BITS) if k not in config]
    if missing:
        raise KeyError(f"config lacks the DP-REC keys {missing}")
    bits: Any = config[CONFIG_BITS]
    if isinstance(bits, str):
        try:
            bits = json.loads(bits)
        except json.JSONDecodeError as exc:
            raise ValueError(f"config[{CONFIG_BITS!r}] is not a JSON object: {_short(bits)}") from exc
        except RecursionError:
            # json raises it for arrays or objects nested a few thousand deep; a bits object is flat.
            raise ValueError(f"config[{CONFIG_BITS!r}] is nested too deeply to be a {{tensor: bits}} object") from None
        if not isinstance(bits, dict):
            raise ValueError(f"config[{CONFIG_BITS!r}] must be an int or a JSON object, got {_short(bits)}")
    return DPRECCodec(
        sigma=config[CONFIG_SIGMA],
        clip_multiplier=config[CONFIG_CLIP_MULTIPLIER],
        bits=bits,
        max_group_size=config.get(CONFIG_MAX_GROUP_SIZE),
    )


def wire_nbytes(record: ArrayRecord | ConfigRecord | MetricRecord, key: str) -> int:
    """Serialized size of ``record`` stored under ``key`` in a message's RecordDict.

    Measured with Flower's own protobuf serialization of a ``RecordDict``
    (``flwr.common.serde.recorddict_to_proto``), so it includes the record's name, its
    keys and the protobuf framing.

    Parameters
    ----------
    record : ArrayRecord, ConfigRecord or MetricRecord
    key : str
        The record's name in the RecordDict.

    Returns
    -------
    int
    """
    if not isinstance(key, str):
        raise TypeError(f"key must be a str, got {type(key).__name__}")
    if not isinstance(record, (ArrayRecord, ConfigRecord, MetricRecord)):
        raise TypeError(f"record must be an ArrayRecord, ConfigRecord or MetricRecord, got {type(record).__name__}")
    return int(recorddict_to_proto(RecordDict({key: record})).ByteSize())


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def _is_train(msg: Message) -> bool:
    mtype = msg.metadata.message_type
    return mtype == MessageType.TRAIN or mtype.startswith(MessageType.TRAIN + ".")


def _is_legacy(msg: Message) -> bool:
    """Whether a train message is in the legacy API's form (a ``FitIns``: ``"fitins.parameters"``, ``"fitins.config"``)."""
    content = msg.content
    return _LEGACY_FITINS_PARAMETERS in content.array_records and _LEGACY_FITINS_CONFIG in content.config_records


def _is_float(dtype: np.dtype) -> bool:
    return np.dtype(dtype).kind == "f"


def _float_arrays(record: ArrayRecord) -> dict[str, np.ndarray]:
    """The real floating-point arrays of an ArrayRecord, as NumPy arrays, by key."""
    out = {}
    for key, arr in record.items():
        a = arr.numpy()
        if _is_float(a.dtype):
            out[key] = a
    return out


def _error_reply(
    msg: Message, reason: str, code: int = ErrorCode.MOD_FAILED_PRECONDITION, *, mod: str = "dprec_mod"
) -> Message:
    """An error reply to ``msg`` from ``mod``; ``reason`` (logged here too) must hold no private data of the client."""
    reason = _clip_text(reason)
    log(ERROR, "%s: %s", mod, reason)
    return Message(Error(code=code, reason=f"{mod}: {reason}"), reply_to=msg)


def _find_config(content: RecordDict, key: str) -> tuple[str, ConfigRecord] | None:
    """The first ConfigRecord of ``content`` that holds ``key``."""
    for name, rec in content.config_records.items():
        if key in rec:
            return name, rec
    return None


def _describe(exc: BaseException) -> str:
    """``Type: text`` of an exception raised while reading an untrusted reply, bounded for the log."""
    return _clip_text(f"{type(exc).__name__}: {exc}", 300)
