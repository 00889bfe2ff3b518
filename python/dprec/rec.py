"""DP-REC kernels for one group (SPEC §3): candidates, log-likelihood ratios,
Gumbel-max sampling, decoding and server-side aggregation.

Group ``g`` of a message with seed ``seed`` has ``K = 2**bits`` candidates;
candidate ``k`` is ``sigma * z_k`` with ``z_k[i]`` the standard normal of element ``i``
of the Philox stream ``(seed, substream=k, group=g, domain=0)``. For a clipped update
``phi`` the log-likelihood ratio of candidate ``k`` under ``q = N(phi, sigma^2 I)``
against ``p = N(0, sigma^2 I)`` is, up to a constant, ``<z_k, phi> / sigma``.

Most users want :class:`dprec.DPRECCodec`; these functions are its building blocks.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _backend
from ._validation import (
    check_bits,
    check_index,
    check_positive,
    check_seed,
    check_size,
    check_u32,
    float_array,
    private_rng,
)
from .reference import rec as _ref

__all__ = ["candidate", "logits", "gumbel_noise", "sample_index", "encode_group", "accumulate"]


def candidate(seed: int, group: int, index: int, size: int, *, sigma: float = 1.0, backend: str = "auto") -> np.ndarray:
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
        Prior standard deviation (> 0).
    backend : {"auto", "cpu", "reference"}

    Returns
    -------
    numpy.ndarray of float32, shape (size,)
    """
    seed = check_seed(seed)
    group = check_u32(group, "group")
    index = check_index(index, 24)
    size = check_size(size, "size")
    sigma = check_positive(sigma, "sigma")
    if _backend.resolve(backend) == "reference":
        return _ref.candidate(seed, group, index, size, sigma)
    out = np.empty(size, dtype=np.float32)
    _backend.native().stream_normals(seed, index, group, 0, 0, float(np.float32(sigma)), out)
    return out


def logits(
    phi: Any, seed: int, group: int, bits: int, *, sigma: float, scale: float = 1.0, backend: str = "auto"
) -> np.ndarray:
    """Log-likelihood ratios ``l_k = scale * <z_k, phi> / sigma`` for ``k < 2**bits``.

    Computed tile by tile without materialising the ``K x d`` candidates, accumulated in
    float64 (each float32 product is exact in float64), and identical for any thread
    count. ``scale`` lets the caller fold a clipping factor in without copying ``phi``.

    Parameters
    ----------
    phi : array_like, 1-D
        The (clipped) update of this group; float16/bfloat16 are converted to float32.
    seed, group, bits : int
        Stream seed, group id and bits (K = 2**bits, 1 <= bits <= 24).
    sigma : float
        Prior standard deviation.
    scale : float
        Factor applied to phi, e.g. the global clipping factor min(1, C/||phi||).

    Returns
    -------
    numpy.ndarray of float64, shape (2**bits,)
    """
    phi = float_array(phi, "phi").reshape(-1)
    check_size(phi.size, "phi.size")
    seed = check_seed(seed)
    group = check_u32(group, "group")
    bits = check_bits(bits)
    sigma = check_positive(sigma, "sigma")
    if not (np.isfinite(scale) and scale >= 0):
        raise ValueError(f"scale must be finite and >= 0, got {scale!r}")
    return _logits_validated(phi, seed, group, bits, sigma, float(scale), backend)


def _logits_validated(
    phi: np.ndarray, seed: int, group: int, bits: int, sigma: float, scale: float, backend: str
) -> np.ndarray:
    """:func:`logits` for arguments already checked: ``phi`` a finite, non-empty, 1-D,
    C-contiguous float32/float64 array. The codec checks a whole update once and calls
    this per group, so that no group is scanned twice."""
    k = 1 << bits
    if _backend.resolve(backend) == "reference":
        dots = _ref.dot_products(phi, seed, group, k)
    else:
        dots = np.empty(k, dtype=np.float64)
        _backend.native().rec_dot_products(phi, seed, group, dots)
    return dots * (scale / sigma)


def gumbel_noise(n: int, rng: np.random.Generator | None = None) -> np.ndarray:
    """``n`` i.i.d. standard Gumbel variates (float64) from private randomness.

    With ``rng=None`` the noise comes from a Generator seeded by the OS entropy source,
    never from a seed the server knows. Uniforms are ``(m + 1/2) 2**-53`` so the
    transform ``-log(-log(u))`` is always finite.
    """
    n = check_size(n, "n")
    rng = private_rng(rng)
    u = (rng.integers(0, 1 << 53, size=n, dtype=np.uint64).astype(np.float64) + 0.5) * 2.0**-53
    return -np.log(-np.log(u))


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
    rng : numpy.random.Generator, optional
        Source of the private Gumbel noise; default: fresh OS entropy.
    gumbel : array_like, optional
        Explicit Gumbel noise (same length as logits), for tests; excludes ``rng``.
    """
    lg = float_array(logits, "logits").astype(np.float64, copy=False).reshape(-1)
    if gumbel is None:
        g = gumbel_noise(lg.size, rng)
    else:
        if rng is not None:
            raise ValueError("pass either rng or gumbel, not both")
        g = float_array(gumbel, "gumbel").astype(np.float64, copy=False).reshape(-1)
        if g.size != lg.size:
            raise ValueError(f"gumbel must have the length of logits ({lg.size}), got {g.size}")
    if _backend.resolve(backend) == "reference":
        return _ref.gumbel_argmax(lg, g)
    return int(_backend.native().gumbel_argmax(np.ascontiguousarray(lg), np.ascontiguousarray(g)))


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
    """Encode one group: the index ``k*`` drawn from ``softmax(logits)`` (SPEC §3 steps 3-5)."""
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
    out: np.ndarray,
    group: int,
    seeds: Any,
    indices: Any,
    *,
    sigma: Any,
    weights: Any = None,
    backend: str = "auto",
) -> np.ndarray:
    """Server aggregation of one group in one pass: ``out += sum_c w_c sigma_c z_{c}``.

    ``z_c`` is candidate ``indices[c]`` of stream ``seeds[c]``. Clients are added in the
    order given; in float32 each step is ``out + float32(w_c sigma_c) * z_c``, in float64
    ``out + (w_c sigma_c) * float64(z_c)``, so native and reference agree bit for bit.

    Parameters
    ----------
    out : numpy.ndarray, float32 or float64, 1-D, C-contiguous, writeable
        Accumulator, updated in place and returned.
    group : int
    seeds : array_like of uint64, shape (n,)
    indices : array_like of int, shape (n,), each < 2**24
    sigma : float or array_like, shape (n,)
    weights : array_like, shape (n,), optional (default 1)
    """
    if not isinstance(out, np.ndarray) or out.dtype not in (np.float32, np.float64):
        raise TypeError("out must be a float32 or float64 numpy.ndarray")
    if out.ndim != 1 or not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError("out must be a 1-D, C-contiguous, writeable array")
    check_size(out.size, "out.size")
    group = check_u32(group, "group")
    seeds_u = _uint_array(seeds, "seeds", np.uint64, check_seed)
    n = seeds_u.size
    if n == 0:
        raise ValueError("seeds must not be empty")
    idx_u = _uint_array(indices, "indices", np.uint32, lambda k, name: check_index(k, 24, name))
    if idx_u.size != n:
        raise ValueError(f"indices must have length {n} (one per seed), got {idx_u.size}")
    sig = np.broadcast_to(np.asarray(sigma, dtype=np.float64), (n,))
    if not (np.isfinite(sig).all() and (sig > 0).all()):
        raise ValueError("sigma must be finite and > 0")
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (n,):
        raise ValueError(f"weights must have shape ({n},), got {w.shape}")
    if not np.isfinite(w).all():
        raise ValueError("weights contains NaN or infinite values")
    coefs = np.ascontiguousarray(w * sig)
    if _backend.resolve(backend) == "reference":
        _ref.accumulate(out, group, seeds_u, idx_u, coefs)
    else:
        _backend.native().rec_accumulate(out, group, seeds_u, idx_u, coefs)
    return out
