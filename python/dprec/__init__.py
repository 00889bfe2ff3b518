"""dprec: private, communication-efficient federated learning.

DP-REC (Triastcyn, Reisser and Louizos) compresses a clipped model update to a 64-bit
seed plus ``b`` bits per tensor under a differential-privacy guarantee. The hot kernels
are native C++ (SIMD, multi-threaded) and CUDA (for GPU arrays, when built); every kernel
also has a pure-NumPy reference in :mod:`dprec.reference`, selectable with
``backend="reference"``.

Packages
--------
dprec.rec
    DP-REC: :class:`DPRECCodec` (whole-model encode, decode, aggregate), the wire format
    (:class:`DPRECMessage`, :class:`Layout`) and the per-group kernels.
dprec.qmgeo
    QMGeo: the stochastic quantizer, bit packing, :class:`QMGeoCodec` and :class:`QMGeoMessage`.
dprec.secagg
    Secure aggregation with distributed DP: discrete Gaussian and Skellam samplers, conditional
    rounding, arithmetic mod 2**bits, the DDG and Skellam pipelines.
dprec.transforms
    The fast Walsh-Hadamard transform, the randomized Hadamard rotation, the count-sketch.
dprec.philox
    The shared Philox4x32-10 stream and its normal transform (the randomness contract).
dprec.accounting
    Privacy accounting (needs SciPy) of every mechanism, per threat model.
dprec.torch, dprec.flower
    The PyTorch helpers (needs PyTorch) and the Flower integration (needs flwr).
dprec.compare
    ``dprec compare`` and ``dprec demo``: every mechanism trains a model at one epsilon.
dprec.cuda, dprec.runtime
    The CUDA backend (availability, devices, memory) and the CPU threads and SIMD selection.

The optional packages are not imported by ``import dprec``.
"""

from __future__ import annotations

from typing import Any

from . import _compat, cuda, philox, qmgeo, rec, runtime, transforms
from ._runtime.dispatch import available_backends
from ._version import __version__
from .constants import NORMAL_TRANSFORM_VERSION
from .qmgeo import QMGeoCodec, QMGeoMessage
from .rec import DPRECCodec, DPRECMessage, EncodeInfo, Layout
from .runtime import get_num_threads, set_num_threads

__all__ = [
    "DPRECCodec",
    "DPRECMessage",
    "EncodeInfo",
    "Layout",
    "NORMAL_TRANSFORM_VERSION",
    "QMGeoCodec",
    "QMGeoMessage",
    "available_backends",
    "cuda",
    "get_num_threads",
    "philox",
    "qmgeo",
    "rec",
    "runtime",
    "set_num_threads",
    "transforms",
    "__version__",
]

_compat.install()


def __getattr__(name: str) -> Any:
    # dprec.hadamard, dprec.sketch, dprec.codec, ... (old paths): the module at its new path, with a DeprecationWarning.
    return _compat.moved_attribute(name)
