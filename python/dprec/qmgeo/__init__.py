"""QMGeo (Wang and Gursoy): stochastic quantization to ``R`` levels whose randomness is the privacy.

:func:`quantize` and :func:`dequantize` (the corrected pmf; see the QMGeo page of the docs),
:func:`pack` and :func:`unpack` (indices at ``index_bits(R)`` bits each), and
:class:`QMGeoCodec` / :class:`QMGeoMessage` for whole model updates.

Modules: :mod:`dprec.qmgeo.quantizer` (quantizer and packing) and :mod:`dprec.qmgeo.codec`
(codec and wire format). The accounting is :mod:`dprec.accounting.qmgeo`.
"""

from __future__ import annotations

from .codec import (
    QMGEO_FORMAT_VERSION,
    QMGEO_MAGIC,
    QMGeoCodec,
    QMGeoEncodeInfo,
    QMGeoLayout,
    QMGeoMessage,
    QMGeoPaperFormulas,
)
from .quantizer import (
    MAX_LEVELS,
    MAX_PACK_INDICES,
    MAX_QUANTIZE_ELEMENTS,
    MIN_P,
    dequantize,
    index_bits,
    pack,
    quantize,
    unpack,
)

__all__ = [
    "quantize",
    "dequantize",
    "index_bits",
    "pack",
    "unpack",
    "MAX_LEVELS",
    "MAX_QUANTIZE_ELEMENTS",
    "MAX_PACK_INDICES",
    "MIN_P",
    "QMGeoCodec",
    "QMGeoMessage",
    "QMGeoLayout",
    "QMGeoEncodeInfo",
    "QMGeoPaperFormulas",
    "QMGEO_MAGIC",
    "QMGEO_FORMAT_VERSION",
]
