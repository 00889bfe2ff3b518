"""DP-REC (Triastcyn, Reisser and Louizos): relative entropy coding of a clipped update.

:class:`DPRECCodec` compresses a whole model update to a 64-bit seed plus ``b`` bits per
group and decodes and aggregates messages on the server; :class:`DPRECMessage` and
:class:`Layout` are the wire format (see "Randomness and wire formats" in the docs); the
functions below are the per-group kernels the codec is built from.

Modules: :mod:`dprec.rec.codec` (the codec), :mod:`dprec.rec.message` (the wire format, no
kernels: a server can parse and check messages without them), :mod:`dprec.rec.kernels` (one
group: candidates, logits, Gumbel-max sampling, aggregation).
"""

from __future__ import annotations

from .codec import DEFAULT_BITS, DPRECCodec, EncodeInfo
from .kernels import (
    MAX_ABS_NORMAL,
    MAX_SIGMA,
    MIN_SIGMA,
    accumulate,
    candidate,
    encode_group,
    gumbel_noise,
    logits,
    sample_index,
    sample_indices,
)
from .message import FLAG_UNIFORM_BITS, FORMAT_VERSION, MAGIC, DPRECMessage, Layout, LayoutGroup

__all__ = [
    "DPRECCodec",
    "DPRECMessage",
    "EncodeInfo",
    "Layout",
    "LayoutGroup",
    "DEFAULT_BITS",
    "FORMAT_VERSION",
    "MAGIC",
    "FLAG_UNIFORM_BITS",
    "candidate",
    "logits",
    "gumbel_noise",
    "sample_index",
    "sample_indices",
    "encode_group",
    "accumulate",
    "MAX_ABS_NORMAL",
    "MAX_SIGMA",
    "MIN_SIGMA",
]
