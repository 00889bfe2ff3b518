"""dprec: private, communication-efficient federated learning.

DP-REC (Triastcyn, Reisser and Louizos) compresses a clipped model update to a 64-bit
seed plus ``b`` bits per tensor under a differential-privacy guarantee. The hot kernels
are native C++ (SIMD, multi-threaded) and CUDA (for GPU arrays, when built); every kernel
also has a pure-NumPy reference in :mod:`dprec.reference`, selectable with
``backend="reference"``.

Modules
-------
dprec.codec
    :class:`DPRECCodec` and :class:`DPRECMessage`: whole-model encode, decode, aggregate.
dprec.rec
    Per-group kernels: candidates, log-likelihood ratios, Gumbel-max, aggregation.
dprec.hadamard
    Fast Walsh-Hadamard transform and the randomized Hadamard rotation.
dprec.sketch
    :class:`CountSketch`, the linear count-sketch of secure-aggregation compression.
dprec.secagg
    Secure aggregation with distributed DP: exact discrete Gaussian and Skellam samplers,
    conditional rounding, arithmetic mod 2**bits (CPU and CUDA), the DDG and Skellam pipelines.
dprec.qmgeo
    QMGeo (SPEC §5): the stochastic quantizer (corrected pmf), bit packing, and
    :class:`QMGeoCodec` / :class:`QMGeoMessage` (encode, decode, aggregate whole updates).
dprec.philox
    The shared Philox4x32-10 stream and its normal transform (the randomness contract).
dprec.cuda
    The CUDA backend: availability (and why not), devices, :class:`dprec.cuda.DeviceArray`.
dprec.runtime
    Threads and SIMD instruction-set selection.
dprec.accounting
    Privacy accounting (needs SciPy): DP-REC's Algorithm 7 under three client-sampling
    schemes, the round accountant, and the sampled Gaussian, DDG, Skellam, QMGeo and joint-noise
    mechanisms. ``DPRECCodec.epsilon`` / ``.accountant`` tie a codec to it.
dprec.torch
    PyTorch helpers (needs PyTorch): model update in, decode template, update applied back.
dprec.flower
    Flower integration (needs flwr): the client mod ``dprec_mod`` and ``DPRECStrategy``.
dprec.compare
    ``dprec compare``: every mechanism trains a NumPy model at one epsilon, calibrated per threat
    model (needs SciPy and scikit-learn); ``dprec.demo`` is its quick preset, ``dprec demo``.

The optional modules are not imported by ``import dprec``.
"""

from __future__ import annotations

from . import cuda, hadamard, philox, qmgeo, rec, runtime, sketch
from ._dispatch import available_backends
from .codec import DPRECCodec, DPRECMessage, EncodeInfo, Layout
from .constants import NORMAL_TRANSFORM_VERSION
from .qmgeo import QMGeoCodec, QMGeoMessage
from .runtime import get_num_threads, set_num_threads

__version__ = "0.1.0"

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
    "hadamard",
    "philox",
    "qmgeo",
    "rec",
    "runtime",
    "set_num_threads",
    "sketch",
    "__version__",
]

