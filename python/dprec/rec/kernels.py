"""DP-REC kernels for one group: candidates, log-likelihood ratios,
Gumbel-max sampling, decoding and server-side aggregation.

Group ``g`` of a message with seed ``seed`` has ``K = 2**bits`` candidates;
candidate ``k`` is ``sigma * z_k`` with ``z_k[i]`` the standard normal of element ``i``
of the Philox stream ``(seed, substream=k, group=g, domain=0)``. For a clipped update
``phi`` the log-likelihood ratio of candidate ``k`` under ``q = N(phi, sigma^2 I)``
against ``p = N(0, sigma^2 I)`` is, up to a constant, ``<z_k, phi> / sigma``.

Most users want :class:`dprec.DPRECCodec`; these functions are its building blocks.

GPU arrays (PyTorch CUDA tensors, CuPy arrays, ``__cuda_array_interface__`` or
``__dlpack__`` producers) run on the CUDA backend, on the caller's current stream, and
results come back in the caller's framework on the same device (see :mod:`dprec.cuda`).
Candidates are bit-identical to the CPU's; logits agree to float64 rounding.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from .._runtime import arrays as _arrays
from .._runtime import dispatch as _dispatch
from .._runtime.arrays import Array
from .._runtime.validation import check_bits, check_index, check_seed, check_size, check_u32, private_rng
from ..reference import rec as _rec

__all__ = ["candidate", "logits", "gumbel_noise", "sample_index", "sample_indices", "encode_group", "accumulate"]

_F32 = np.finfo(np.float32)
#: Largest |z| the normal transform (version 1) can produce: the Box-Muller radius
#: ``sqrt(-2 ln u)`` of the smallest uniform ``u = 2**-25`` (as computed in float32:
#: 5.88705), times |cos| or |sin| <= 1.
MAX_ABS_NORMAL = 5.887050151824951
#: Largest prior sigma: ``float32(sigma) * z`` is finite for every normal ``z``.
MAX_SIGMA = float(np.float32(float(_F32.max) / MAX_ABS_NORMAL))
#: Smallest prior sigma: the smallest normal float32 (below it ``float32(sigma)`` is
#: subnormal or 0 and candidates lose their precision or vanish).
MIN_SIGMA = float(_F32.tiny)


def _check_sigma(value: Any, name: str = "sigma") -> float:
    """A prior standard deviation: a real number (not bool) whose float32 is a normal
    number, ``MIN_SIGMA <= sigma <= MAX_SIGMA`` (about 1.18e-38 .. 5.78e37), so that
    ``float32(sigma) * z`` neither overflows nor underflows to zero."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    v = float(value)
    if not (np.isfinite(v) and v > 0.0):
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    if not MIN_SIGMA <= v <= MAX_SIGMA:
        raise ValueError(
            f"{name} must be in [{MIN_SIGMA:.6g}, {MAX_SIGMA:.6g}] (a normal float32 whose product with the "
            f"largest standard normal, {MAX_ABS_NORMAL:.6g}, is finite in float32), got {value!r}"
        )
    return v


def _check_real(value: Any, name: str) -> float:
    """A real number (not bool, not str), as a float."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    return float(value)


def _real_array(values: Any, name: str) -> np.ndarray:
    """``values`` as a float64 array; TypeError naming ``name`` unless it is a real number
    or an array_like of real numbers (bool, str, complex and other objects are refused)."""
    if isinstance(values, (str, bytes, bytearray, bool, np.bool_)):
        raise TypeError(f"{name} must be a real number or an array of real numbers, got {type(values).__name__}")
    try:
        a = np.asarray(values)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name} must be a real number or an array of real numbers: {e}") from None
    if a.dtype.kind == "O":
        for v in a.reshape(-1).tolist():
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (numbers.Real, np.floating, np.integer)):
                raise TypeError(f"{name} must hold real numbers, got an element of type {type(v).__name__}")
    elif a.dtype.kind not in "fiu":
        raise TypeError(f"{name} must hold real numbers, got dtype {a.dtype}")
    return a.astype(np.float64)


def candidate(
    seed: int,
    group: int,
    index: int,
    size: int,
    *,
    sigma: float = 1.0,
    out: Any = None,
    backend: str = "auto",
) -> Any:
    """Regenerate candidate ``index`` of a group: ``float32(sigma) * z_index``, in O(size).

    This is the server's decode of one group: only candidate ``index`` is generated.

    Parameters
    ----------
    seed : int
        The message's 64-bit seed.
    group, index : int
        Group id (< 2**32) and candidate index (< 2**24).
    size : int
        Elements in the group, 1 .. 2**34.
    sigma : float
        Prior standard deviation: a real number in [``MIN_SIGMA``, ``MAX_SIGMA``]
        (about 1.18e-38 .. 5.78e37), so that ``float32(sigma)`` is a normal float32 and
        ``float32(sigma) * z`` is finite for the largest ``|z|`` (``MAX_ABS_NORMAL`` =
        5.88705); ValueError naming ``sigma`` otherwise. The result is therefore always finite.
    out : array, optional
        A C-contiguous float32 array of ``size`` elements to write into: a NumPy array,
        or a GPU array (decoded on its device, on the caller's stream). Returned.
    backend : {"auto", "cpu", "cuda", "reference"}
        "auto" follows ``out``; ``backend="cuda"`` without ``out`` returns a
        :class:`dprec.cuda.DeviceArray` on device 0.

    Returns
    -------
    ``out``, or a new numpy.ndarray of float32, shape (size,)
    """
    seed = check_seed(seed)
    group = check_u32(group, "group")
    index = check_index(index, 24)
    size = check_size(size, "size")
    sigma = _check_sigma(sigma)
    kernels, o = _arrays.destination(out, (size,), "float32", backend)
    kernels.stream_normals(o, seed, index, group, 0, 0, float(np.float32(sigma)))
    return o.result()


def logits(
    phi: Any, seed: int, group: int, bits: int, *, sigma: float, scale: float = 1.0, backend: str = "auto"
) -> Any:
    """Log-likelihood ratios ``l_k = scale * <z_k, phi> / sigma`` for ``k < 2**bits``.

    Computed tile by tile without materialising the ``K x d`` candidates, accumulated in
    float64 (each float32 product is exact in float64), and identical for any thread
    count. ``scale`` lets the caller fold a clipping factor in without copying ``phi``.

    Parameters
    ----------
    phi : array_like, 1-D
        The (clipped) update of this group; float16/bfloat16 are converted to float32.
        A GPU array is processed on its device; checking that it is finite makes this
        call wait for the caller's stream once.
    seed, group, bits : int
        Stream seed, group id and bits (K = 2**bits, 1 <= bits <= 24).
    sigma : float
        Prior standard deviation, in [``MIN_SIGMA``, ``MAX_SIGMA``] as for :func:`candidate`.
    scale : float
        Factor applied to phi, e.g. the global clipping factor min(1, C/||phi||): a finite
        real number >= 0 (bool and str raise TypeError naming ``scale``).

    Returns
    -------
    float64 array of shape (2**bits,): NumPy for host input; for GPU input an array of
    the caller's framework on the same device.

    Raises
    ------
    ValueError
        If a logit is not finite (``scale * <z_k, phi> / sigma`` overflows float64, e.g.
        for ``phi`` near the float64 maximum): finite input never yields inf/NaN logits.
        For a GPU ``phi`` this check waits for the caller's stream.
    """
    seed = check_seed(seed)
    group = check_u32(group, "group")
    bits = check_bits(bits)
    sigma = _check_sigma(sigma)
    scale = _check_real(scale, "scale")
    if not (np.isfinite(scale) and scale >= 0):
        raise ValueError(f"scale must be finite and >= 0, got {scale!r}")
    a = _arrays.read(phi, "phi")
    kernels = _dispatch.select(backend, a, "phi")
    a = _arrays.float_input(a, "phi")
    out = _arrays.empty(a, (1 << bits,), "float64")
    kernels.dot_products(a.reshaped((a.size,)), seed, group, float(scale) / sigma, out)
    _arrays.require_finite(out, "logits", _LOGITS_OVERFLOW)
    return out.result()


_LOGITS_OVERFLOW = (
    "logits overflowed float64: scale * <z_k, phi> / sigma is not finite for this phi, scale and sigma "
    "(phi too large, or sigma too small)"
)


def gumbel_noise(n: int, rng: np.random.Generator | None = None) -> np.ndarray:
    """``n`` i.i.d. standard Gumbel variates (float64) from private randomness.

    With ``rng=None`` the noise comes from a Generator seeded by the OS entropy source,
    never from a seed the server knows. Uniforms are ``(m + 1/2) 2**-53`` so the
    transform ``-log(-log(u))`` is always finite.
    """
    return _rec.gumbel_from_words(_gumbel_words(check_size(n, "n"), rng))


def _gumbel_words(n: int, rng: np.random.Generator | None = None) -> np.ndarray:
    """The 53-bit uniform integers (uint64) behind :func:`gumbel_noise`,
    ``rng.integers(0, 2**53, n, dtype=uint64)``: one 64-bit word of ``rng`` each (so ``n``
    words are the concatenation of any split of them into draws)."""
    rng = private_rng(rng)
    if type(rng.bit_generator) in _RAW_64_BIT:
        # The same words, about 3x faster: for a power-of-two range, integers' Lemire method
        # keeps the top bits of each 64-bit output (tests/rec/test_kernels.py checks it, and that the
        # generator ends in the same state).
        return rng.bit_generator.random_raw(n) >> 11
    return rng.integers(0, 1 << 53, size=n, dtype=np.uint64)


# Bit generators whose raw outputs are the 64-bit words that Generator methods draw (MT19937's
# raw outputs are 32-bit).
_RAW_64_BIT = (np.random.PCG64, np.random.PCG64DXSM, np.random.Philox, np.random.SFC64)


def _noise(n: int, rng: np.random.Generator | None, gumbel: Any, shape: tuple[int, ...]) -> np.ndarray:
    """Gumbel noise of ``shape`` (n values): drawn privately, or the caller's (host) array."""
    if gumbel is None:
        return gumbel_noise(n, rng).reshape(shape)
    if rng is not None:
        raise ValueError("pass either rng or gumbel, not both")
    if _arrays.is_gpu_array(gumbel):
        raise ValueError("gumbel must be a host (NumPy) array: the private noise is drawn on the host and uploaded")
    g = _arrays.float_input(gumbel, "gumbel").host
    assert g is not None
    if g.shape != shape:
        raise ValueError(f"gumbel must have the shape of logits {shape}, got {g.shape}")
    return g.astype(np.float64, copy=False).reshape(shape)


def _logits_input(logits: Any, backend: str) -> tuple[Any, Array]:
    """The kernels and the checked float64 logits (host or GPU) of a sampling call."""
    a = _arrays.read(logits, "logits")
    kernels = _dispatch.select(backend, a, "logits")
    if a.on_gpu and a.dtype != "float64":
        # No float64 conversion on the device: the GPU takes what rec.logits returns.
        raise TypeError(f"logits on the GPU must be float64 (as rec.logits returns them), got {a.dtype}")
    a = _arrays.float_input(a, "logits")
    if a.dtype != "float64":
        a = _arrays.convert(a, "float64")
    return kernels, a


def sample_index(
    logits: Any,
    *,
    rng: np.random.Generator | None = None,
    gumbel: Any = None,
    backend: str = "auto",
) -> int:
    """Draw ``k* ~ softmax(logits)`` by Gumbel-max: ``argmax_k (logits[k] + G_k)``.

    Parameters
    ----------
    logits : array_like, 1-D
        Host or GPU (float64) array; on a GPU the argmax runs there and the call waits
        for the caller's stream.
    rng : numpy.random.Generator, optional
        Source of the private Gumbel noise; default: fresh OS entropy.
    gumbel : array_like, optional
        Explicit Gumbel noise (same length as logits, on the host), for tests; excludes
        ``rng``.
    """
    kernels, a = _logits_input(logits, backend)
    if gumbel is not None and not _arrays.is_gpu_array(gumbel):
        gumbel = _arrays.float_input(gumbel, "gumbel").host.reshape(1, -1)  # any shape of the right size
    return int(_sample(kernels, a.reshaped((1, a.size)), rng, gumbel)[0])


def _sample(kernels: Any, lg: Array, rng: np.random.Generator | None, gumbel: Any) -> np.ndarray:
    """Gumbel-max of each row of the checked (G, K) float64 logits ``lg``."""
    n_groups, k = lg.shape
    noise = _noise(n_groups * k, rng, gumbel, (n_groups, k))
    offsets = np.arange(0, n_groups * k + 1, k, dtype=np.int64)
    return kernels.gumbel_argmax(lg, noise.reshape(-1), offsets)


def sample_indices(
    logits: Any,
    *,
    rng: np.random.Generator | None = None,
    gumbel: Any = None,
    backend: str = "auto",
) -> np.ndarray:
    """Batched Gumbel-max: one index per row of a ``(G, K)`` logits array.

    Row ``g`` gets ``argmax_k (logits[g, k] + G_{g,k})`` (first index on ties). The
    noise is drawn on the host from private randomness, row after row, so row ``g``
    gets the same noise as the ``g``-th of G consecutive :func:`sample_index` calls with
    the same ``rng``. GPU logits are reduced on their device, all rows at once.

    Parameters
    ----------
    logits : array_like, shape (G, K)
        Host array, or a float64 GPU array.
    rng, gumbel : as in :func:`sample_index`; ``gumbel`` has shape (G, K).

    Returns
    -------
    numpy.ndarray of int64, shape (G,)
    """
    kernels, a = _logits_input(logits, backend)
    if len(a.shape) != 2:
        raise ValueError(f"logits must be 2-D (groups, candidates), got shape {a.shape}")
    return _sample(kernels, a, rng, gumbel)


def encode_group(
    phi: Any,
    seed: int,
    group: int,
    bits: int,
    *,
    sigma: float,
    scale: float = 1.0,
    rng: np.random.Generator | None = None,
    backend: str = "auto",
) -> int:
    """Encode one group: the index ``k*`` drawn from ``softmax(logits)``."""
    lg = logits(phi, seed, group, bits, sigma=sigma, scale=scale, backend=backend)
    return sample_index(lg, rng=rng, backend=backend)


def _uint_array(values: Any, name: str, dtype: Any, check: Any) -> np.ndarray:
    """A 1-D unsigned array; each element is checked unless the dtype already bounds it.

    Python sequences are checked one by one, without NumPy's float coercion of large
    integers; unsigned NumPy arrays of at most ``dtype``'s width are checked at once.
    """
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got shape {values.shape}")
        if values.dtype.kind == "u" and values.dtype.itemsize <= np.dtype(dtype).itemsize:
            out = values.astype(dtype)
            if out.size and dtype == np.uint32:
                check(int(out.max()), f"max({name})")
            return out
        items = values.tolist()
    else:
        try:
            items = list(values)
        except TypeError:
            raise TypeError(f"{name} must be a sequence of integers, got {type(values).__name__}") from None
    return np.array([check(v, f"{name}[{i}]") for i, v in enumerate(items)], dtype=dtype)


def accumulate(
    out: Any,
    group: int,
    seeds: Any,
    indices: Any,
    *,
    sigma: Any,
    weights: Any = None,
    backend: str = "auto",
) -> Any:
    """Server aggregation of one group in one pass: ``out += sum_c w_c sigma_c z_{c}``.

    ``z_c`` is candidate ``indices[c]`` of stream ``seeds[c]``. Clients are added in the
    order given; in float32 each step is ``out + float32(w_c sigma_c) * z_c``, in float64
    ``out + (w_c sigma_c) * float64(z_c)``, so native and reference agree bit for bit.

    Parameters
    ----------
    out : float32 or float64 array, C-contiguous, writeable
        Accumulator, updated in place and returned: a 1-D NumPy array, or a GPU array
        (any shape; flat order), which is updated on its device and stream. The GPU
        computes every element exactly as the CPU does, so the results are bit-identical.
    group : int
    seeds : array_like of uint64, shape (n,)
    indices : array_like of int, shape (n,), each < 2**24
    sigma : float or array_like, shape (n,)
        Real numbers in [``MIN_SIGMA``, ``MAX_SIGMA``] (see :func:`candidate`).
    weights : array_like, shape (n,), optional (default 1)
        Finite real numbers (bool, str and other objects raise TypeError naming ``weights``).

    Raises
    ------
    TypeError
        For an argument of the wrong type (named in the message).
    ValueError
        For a value out of range, and when ``sum_c |w_c sigma_c| * MAX_ABS_NORMAL``
        exceeds the largest finite value of ``out``'s dtype: the weighted sum could then
        overflow to inf, so such weights are refused before ``out`` is touched. (An ``out``
        that already holds values near its dtype's maximum can still overflow.)
    """
    o = _arrays.read(out, "out")
    kernels = _dispatch.select(backend, o, "out")
    if o.dtype not in ("float32", "float64") or not (o.on_gpu or isinstance(o.obj, np.ndarray)):
        raise TypeError(f"out must be a float32 or float64 numpy.ndarray, or such a GPU array, got {o!r}")
    if not o.on_gpu and (len(o.shape) != 1 or not o.host.flags.c_contiguous):
        raise ValueError("out must be a 1-D, C-contiguous, writeable array")
    if o.readonly:
        raise ValueError("out must be a 1-D, C-contiguous, writeable array (it is read-only)")
    check_size(o.size, "out.size")
    group, seeds_u, idx_u, coefs = _client_params(group, seeds, indices, sigma, weights, np.dtype(o.dtype))
    kernels.accumulate(o, group, seeds_u, idx_u, coefs)
    return out


def _client_params(
    group: Any, seeds: Any, indices: Any, sigma: Any, weights: Any, out_dtype: Any = np.float32
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """Checked (group, seeds uint64, indices uint32, coefs = weights * sigma float64).

    ``sum |coefs| * MAX_ABS_NORMAL`` must not exceed the maximum of ``out_dtype``, so that
    the weighted sum of candidates cannot overflow it.
    """
    dtype_max = float(np.finfo(out_dtype).max)
    group = check_u32(group, "group")
    seeds_u = _uint_array(seeds, "seeds", np.uint64, check_seed)
    n = seeds_u.size
    if n == 0:
        raise ValueError("seeds must not be empty")
    idx_u = _uint_array(indices, "indices", np.uint32, lambda k, name: check_index(k, 24, name))
    if idx_u.size != n:
        raise ValueError(f"indices must have length {n} (one per seed), got {idx_u.size}")
    if np.ndim(sigma) == 0 and not isinstance(sigma, (str, bytes)):
        sig = np.full(n, _check_sigma(sigma.item() if isinstance(sigma, np.ndarray) else sigma))
    else:
        sig = _real_array(sigma, "sigma")
        if sig.shape != (n,):
            raise ValueError(f"sigma must be a real number or have shape ({n},) (one per seed), got shape {sig.shape}")
        if not (np.isfinite(sig).all() and (sig > 0).all()):
            raise ValueError("sigma must be finite and > 0")
        if not ((sig >= MIN_SIGMA).all() and (sig <= MAX_SIGMA).all()):
            raise ValueError(f"sigma must be in [{MIN_SIGMA:.6g}, {MAX_SIGMA:.6g}] (see rec.candidate)")
    w = np.ones(n) if weights is None else _real_array(weights, "weights")
    if w.shape != (n,):
        raise ValueError(f"weights must have shape ({n},) (one per seed), got {w.shape}")
    if not np.isfinite(w).all():
        raise ValueError("weights contains NaN or infinite values")
    coefs = w * sig
    with np.errstate(over="ignore"):
        bound = float(np.sum(np.abs(coefs))) * MAX_ABS_NORMAL if np.isfinite(coefs).all() else np.inf
    if not bound <= dtype_max:
        raise ValueError(
            f"weights * sigma too large: sum |weights[c] * sigma[c]| * {MAX_ABS_NORMAL:.6g} (the largest |z|) "
            f"= {bound:.6g} exceeds the {np.dtype(out_dtype).name} maximum {dtype_max:.6g}, so the sum could overflow"
        )
    return group, np.ascontiguousarray(seeds_u), np.ascontiguousarray(idx_u), np.ascontiguousarray(coefs)
