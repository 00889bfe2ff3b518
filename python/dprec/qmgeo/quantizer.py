"""QMGeo stochastic quantization (Wang and Gursoy): the quantizer and its levels.

:func:`quantize` maps each coordinate of ``w`` to one of ``R`` levels
``Bin(j) = -w_max + 2 j w_max / (R - 1)`` at random, with the corrected pmf that
:func:`dprec.accounting.qmgeo.qmgeo_pmf` defines and the accounting analyses. ``p = 1`` is plain
(unbiased) stochastic rounding between ``Bin(r)`` and ``Bin(r+1)``; for ``p < 1`` the quantizer is
biased towards the middle of the range (the geometric tails spread mass over all levels).
:func:`dequantize` maps indices back to ``Bin(j)``. :func:`pack` writes indices at
``index_bits(R) = ceil(log2 R)`` bits each into bytes, :func:`unpack` reads them back.

Usage notes:

* Values outside ``[-w_max, w_max]`` are clipped to it; NaN and infinity raise ValueError.
* Each call draws one client-private 64-bit seed (OS entropy, or from ``rng``), which is never
  returned. The result does not depend on the thread count, and the CPU kernel and the NumPy
  reference (:mod:`dprec.reference.qmgeo`) are bit-identical.
* Indices are uint16 (``R <= 2**16``).
* ``literal=True`` (the paper's eqs. (9)-(11) as printed) raises NotImplementedError, see
  :func:`quantize`.
* Host only: GPU arrays are refused (ValueError); copy them to the host first.
* :func:`unpack` refuses (ValueError) a payload of the wrong length, with a padding bit set, or
  holding an index ``>= R``; ``n = 0`` (an empty payload) is allowed.

See the *QMGeo* page of the documentation for the pmf, the randomness layout and what is exact,
and *Randomness contract and wire formats* for the bit layout of a payload.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from .._runtime import arrays as _arrays
from .._runtime import dispatch as _dispatch
from .._runtime.validation import check_int, check_positive, check_u32, private_seed

__all__ = [
    "quantize", "dequantize", "index_bits", "pack", "unpack", "MAX_LEVELS", "MAX_QUANTIZE_ELEMENTS",
    "MAX_PACK_INDICES", "MIN_P",
    # the codec (dprec.qmgeo.codec), re-exported at the end of this module
]

#: Most levels R: indices are uint16 (and the accounting's MAX_LEVELS is the same).
MAX_LEVELS = 1 << 16
#: Most elements of one call: two Philox words per element and sub-stream, 2**34 words per stream.
MAX_QUANTIZE_ELEMENTS = 1 << 33
#: Most indices :func:`pack` and :func:`unpack` take (fewer than 2**40; keeps n * bits far from overflowing).
MAX_PACK_INDICES = (1 << 40) - 1
#: Smallest p accepted (2**-512): keeps every float64 intermediate of the sampler a normal
#: number. Any smaller p gives a geometric indistinguishable from uniform anyway.
MIN_P = 2.0**-512

_LITERAL_REASON = (
    "literal=True (Wang and Gursoy's eqs. (9)-(11) as printed) is not implemented: the printed normalisers do not "
    "define a distribution. Eq. (10) normalises p q^(k-1) on k = 1..r+1 by 1 - q^r, so its mass sums to "
    "(1 - q^(r+1)) / (1 - q^r) > 1 for r >= 1 and it divides by zero at r = 0; eq. (11) likewise uses 1 - q^(R-r-2) "
    "on R-r-1 values and divides by zero at r = R-2. Repairing the normalisers while keeping eq. (9)'s swapped "
    "branch weights would give a quantizer that sends w = Bin(r) above Bin(r) with probability 1, which neither the "
    "paper's analysis nor dprec.accounting.qmgeo describes. Use the corrected pmf (literal=False)."
)


def quantize(
    w: Any,
    w_max: Any,
    levels: Any,
    p: Any,
    *,
    rng: np.random.Generator | None = None,
    literal: bool = False,
    group: int = 0,
    backend: str = "auto",
) -> np.ndarray:
    """QMGeo level indices of ``w`` (the corrected pmf; see the *QMGeo* page of the docs).

    Parameters
    ----------
    w : array_like
        Host floating-point values (NumPy, a PyTorch CPU tensor, anything ``numpy.asarray``
        takes), any shape, ``1 .. 2**33`` elements. float16, bfloat16 and float32 values are
        used as their (exact) float64 values, without a float64 copy of float32 input. Values outside ``[-w_max, w_max]`` are **clipped** to it. Integer
        arrays are refused (TypeError), NaN and infinity too (ValueError naming ``w``), and so are
        GPU arrays (ValueError: quantization is the client's host-side step).
    w_max : float
        The clipping bound ``Wmax``, finite and > 0.
    levels : int
        ``R``, the number of levels, ``2 <= R <= 2**16``.
    p : float
        The geometric success probability, ``2**-512 <= p <= 1``; ``p = 1`` is plain
        stochastic rounding (unbiased), smaller ``p`` spreads more mass to far levels.
    rng : numpy.random.Generator, optional
        Where the private seed comes from (tests, reproducible runs); by default the OS entropy
        source. The seed is never returned.
    literal : bool
        ``True`` asks for the paper's eq. (9)-(11) as printed: NotImplementedError, because the
        printed normalisers do not define a distribution (the message says why).
    group : int
        Philox group id (< 2**32), e.g. the tensor number when one seed serves several calls.
    backend : {"auto", "cpu", "reference"}

    Returns
    -------
    numpy.ndarray of uint16, the shape of ``w``
        Level indices ``j`` in ``[0, R)``; :func:`dequantize` gives ``Bin(j)``.
    """
    if not isinstance(literal, (bool, np.bool_)):
        raise TypeError(f"literal must be a bool, got {type(literal).__name__}")
    group = check_u32(group, "group")
    levels = check_int(levels, "levels", 2, MAX_LEVELS)
    w_max = check_w_max(w_max, levels)
    p = _probability(p, "p")
    if literal:
        raise NotImplementedError(_LITERAL_REASON)
    a = _arrays.read(w, "w")
    kernels = _dispatch.select_host(backend, a, "w", "QMGeo quantization")
    # float32 or float64 (float16 / bfloat16 widened to float32); the kernels widen float32 to
    # float64 themselves (exact), so no float64 copy is made.
    src = _arrays.float_input(a, "w", max_size=MAX_QUANTIZE_ELEMENTS)
    seed = private_seed(rng)  # after validation: a refused call draws nothing from rng
    out = _arrays.empty(src, src.shape, "uint16")
    kernels.qmgeo_quantize(src, seed, group, w_max, levels, p, out)
    return out.result()


def dequantize(indices: Any, w_max: Any, levels: Any) -> np.ndarray:
    """The levels ``Bin(j) = -w_max + j * (2 w_max / (R - 1))`` of the indices ``j`` (float64).

    Computed exactly as :func:`dprec.accounting.qmgeo.qmgeo_pmf` places its levels (so
    ``Bin(0) = -w_max``; ``Bin(R-1)`` is ``w_max`` up to float64 rounding).

    Parameters
    ----------
    indices : array_like of integers
        Level indices in ``[0, R)`` (any integer dtype, any shape, host memory); floating-point
        or boolean arrays are refused (TypeError), indices out of range too (ValueError).
    w_max : float
        The clipping bound used by :func:`quantize`, finite and > 0.
    levels : int
        ``R``, ``2 <= R <= 2**16``.

    Returns
    -------
    numpy.ndarray of float64, the shape of ``indices``
    """
    levels = check_int(levels, "levels", 2, MAX_LEVELS)
    w_max = check_w_max(w_max, levels)
    j = _host_integers(indices, "indices", "dequantize")
    if j.size and (int(j.min()) < 0 or int(j.max()) >= levels):
        raise ValueError(f"indices must be in [0, levels) = [0, {levels}), got values in [{j.min()}, {j.max()}]")
    step = 2.0 * w_max / (levels - 1)
    return -w_max + j.astype(np.float64) * step


def index_bits(levels: Any) -> int:
    """The bits per index on the wire, ``ceil(log2 levels)``.

    Parameters
    ----------
    levels : int
        ``R``, ``2 <= R <= 2**16``.

    Returns
    -------
    int
        ``b`` in ``[1, 16]``: 1 for ``R = 2``, 3 for ``R = 5 .. 8``, 16 for ``R > 2**15``.
    """
    return (check_int(levels, "levels", 2, MAX_LEVELS) - 1).bit_length()


def pack(indices: Any, levels: Any, *, backend: str = "auto") -> np.ndarray:
    """The wire payload of QMGeo level indices: ``index_bits(levels)`` bits each, in bytes.

    Index ``i`` (flat C order) occupies bits ``[i b, (i + 1) b)`` of the payload, least
    significant bit first; bit ``t`` of the payload is bit ``t % 8`` of byte ``t // 8`` (the
    payload read as a little-endian integer is ``sum_i indices[i] << (i b)``), and the padding
    bits of the last byte are 0. *Randomness contract and wire formats* in the docs has a worked
    example.

    Parameters
    ----------
    indices : array_like of integers
        Level indices in ``[0, levels)``, any integer dtype, any shape (flattened in C order),
        host memory, ``0 .. 2**40 - 1`` elements (an empty array gives an empty payload).
        Floating-point and boolean arrays are refused (TypeError), out-of-range values and GPU
        arrays too (ValueError naming ``indices``).
    levels : int
        ``R``, ``2 <= R <= 2**16``.
    backend : {"auto", "cpu", "reference"}

    Returns
    -------
    numpy.ndarray of uint8, shape ``(ceil(n b / 8),)``
        ``b = index_bits(levels)``; :func:`unpack` reads it back.

    Raises
    ------
    TypeError
        ``indices`` is not an integer array; ``levels`` not an integer.
    ValueError
        An index outside ``[0, levels)``, too many indices, ``levels`` out of range, GPU data
        or ``backend="cuda"``.
    """
    levels = check_int(levels, "levels", 2, MAX_LEVELS)
    bits = (levels - 1).bit_length()
    _check_host_backend(backend, "QMGeo packing")
    j = _host_integers(indices, "indices", "QMGeo packing")
    if j.size > MAX_PACK_INDICES:
        raise ValueError(f"indices must have fewer than 2**40 elements, got {j.size}")
    if j.size and (int(j.min()) < 0 or int(j.max()) >= levels):  # before the uint16 conversion can wrap
        raise ValueError(f"indices must be in [0, levels) = [0, {levels}), got values in [{j.min()}, {j.max()}]")
    src = _arrays.read(np.ascontiguousarray(j.reshape(-1), dtype=np.uint16), "indices")
    kernels = _dispatch.select(backend, src, "indices")
    out = _arrays.empty(None, ((j.size * bits + 7) // 8,), "uint8")
    kernels.qmgeo_pack(src, bits, out)
    return out.result()


def unpack(payload: Any, levels: Any, count: Any, *, backend: str = "auto") -> np.ndarray:
    """The ``count`` QMGeo level indices of a payload written by :func:`pack`.

    Parameters
    ----------
    payload : bytes, bytearray, memoryview or 1-D uint8 array
        Exactly ``ceil(count * b / 8)`` bytes, ``b = index_bits(levels)`` (host memory).
    levels : int
        ``R``, ``2 <= R <= 2**16``, as given to :func:`pack`.
    count : int
        How many indices, ``0 .. 2**40 - 1``.
    backend : {"auto", "cpu", "reference"}

    Returns
    -------
    numpy.ndarray of uint16, shape ``(count,)``
        Indices in ``[0, levels)``.

    Raises
    ------
    TypeError
        ``payload`` is not bytes-like nor a uint8 array; ``levels`` or ``count`` not an integer.
    ValueError
        ``payload`` has the wrong length or is corrupted (a padding bit set, or an index
        ``>= levels``, naming its position); ``levels`` or ``count`` out of range; GPU data.
    """
    levels = check_int(levels, "levels", 2, MAX_LEVELS)
    count = check_int(count, "count", 0, MAX_PACK_INDICES)
    bits = (levels - 1).bit_length()
    _check_host_backend(backend, "QMGeo unpacking")
    data = _payload_bytes(payload)
    want = (count * bits + 7) // 8
    if data.size != want:
        raise ValueError(
            f"payload must have ceil(count * bits / 8) = {want} bytes for count = {count} indices of {bits} bits "
            f"(levels = {levels}), got {data.size}"
        )
    src = _arrays.read(data, "payload")
    kernels = _dispatch.select(backend, src, "payload")
    out = _arrays.empty(None, (count,), "uint16")
    kernels.qmgeo_unpack(src, bits, levels, out)
    return out.result()


def _check_host_backend(backend: Any, what: str) -> None:
    """A backend for a host-only step (packing is also the server's, so not
    :func:`dprec._runtime.dispatch.select_host` and its "client's step"): ``"cuda"`` is a ValueError
    saying that ``what`` runs on the host; a bad name is reported before any array is read."""
    if isinstance(backend, str) and backend == "cuda":
        raise ValueError(f"backend='cuda' was asked for, but {what} runs on the host (payloads are bytes on the "
                         "wire): use backend='auto', 'cpu' or 'reference'")
    _dispatch.check_backend(backend)


def _refuse_gpu(x: Any, name: str, what: str) -> None:
    if _arrays.is_gpu_array(x):
        raise ValueError(f"{name} is a GPU array, but {what} runs on the host; copy it to the host first")


def _host_integers(x: Any, name: str, what: str) -> np.ndarray:
    """``x`` as a NumPy integer array (host memory, else ValueError saying that ``what`` runs on
    the host; TypeError for other dtypes)."""
    _refuse_gpu(x, name, what)
    a = _arrays.to_numpy(x, name)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array, got dtype {a.dtype}")
    return a


def _payload_bytes(x: Any) -> np.ndarray:
    """A payload as a contiguous 1-D uint8 NumPy array (a view where possible)."""
    _refuse_gpu(x, "payload", "QMGeo unpacking")
    if isinstance(x, (bytes, bytearray)):
        return np.frombuffer(x, dtype=np.uint8)
    if isinstance(x, memoryview):
        return np.frombuffer(x if x.c_contiguous else x.tobytes(), dtype=np.uint8)
    a = _arrays.to_numpy(x, "payload")
    if a.dtype != np.uint8:
        raise TypeError(f"payload must be bytes, bytearray, memoryview or a uint8 array, got dtype {a.dtype}")
    if a.ndim != 1:
        raise ValueError(f"payload must be 1-D, got shape {a.shape}")
    return np.ascontiguousarray(a)


def _probability(value: Any, name: str) -> float:
    """A real number in ``[MIN_P, 1]``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    v = float(value)
    if not MIN_P <= v <= 1.0:  # NaN fails too
        raise ValueError(f"{name} must be in [2**-512, 1] (a probability), got {value!r}")
    return v


def check_w_max(w_max: Any, levels: int, name: str = "w_max") -> float:
    """``w_max`` as a float whose level spacing ``2 w_max / (levels - 1)`` is a normal float64.

    Below that (``w_max`` under about ``1.1e-308 * (levels - 1)``) the spacing underflows to a
    subnormal or to 0 and no level index can be computed exactly; above ``2**1022`` the range
    ``2 w_max`` overflows (at ``2**1023``) or comes within one ulp of it. Either is a ValueError naming ``name``.
    """
    w = check_positive(w_max, name)
    if not w <= _MAX_W_MAX:
        raise ValueError(f"{name} must be at most 2**1022 (so that 2 {name} is finite), got {w_max!r}")
    step = 2.0 * w / (levels - 1)
    if not step >= _TINY:
        raise ValueError(
            f"{name} = {w_max!r} is too small for levels = {levels}: the level spacing 2 {name} / (levels - 1) = "
            f"{step!r} is below the smallest normal float64 ({_TINY!r}); use {name} >= {_TINY * (levels - 1) / 2!r}"
        )
    return w


_TINY = float(np.finfo(np.float64).tiny)
_MAX_W_MAX = 2.0**1022
