"""Pure-NumPy DP-REC kernels (SPEC §3): the reference the native kernels are tested against."""

from __future__ import annotations

import numpy as np

from .philox import stream_normals

# Elements per chunk, so that the reference never holds more than this many normals.
_CHUNK = 1 << 20


def candidate(seed: int, group: int, index: int, size: int, sigma: float) -> np.ndarray:
    """Candidate ``index`` of group ``group``: ``float32(sigma) * z``, float32."""
    z = stream_normals(seed, size, substream=index, group=group)
    return np.float32(sigma) * z


def dot_products(phi: np.ndarray, seed: int, group: int, n_candidates: int) -> np.ndarray:
    """``out[k] = sum_i z_k[i] * phi[i]`` in float64, one candidate at a time."""
    d = phi.size
    out = np.zeros(n_candidates, dtype=np.float64)
    for k in range(n_candidates):
        total = 0.0
        for i0 in range(0, d, _CHUNK):
            n = min(_CHUNK, d - i0)
            z = stream_normals(seed, n, substream=k, group=group, offset=i0)
            total += float(np.dot(z.astype(np.float64), phi[i0 : i0 + n].astype(np.float64)))
        out[k] = total
    return out


def gumbel_argmax(logits: np.ndarray, gumbel: np.ndarray) -> int:
    """``argmax(logits + gumbel)``, the first index on ties."""
    return int(np.argmax(logits + gumbel))


def accumulate(out: np.ndarray, group: int, seeds: np.ndarray, indices: np.ndarray, coefs: np.ndarray) -> None:
    """``out += coef[c] * z_c`` for each client in order, in out's dtype (bit-exact with native)."""
    d = out.size
    for seed, index, coef in zip(seeds.tolist(), indices.tolist(), coefs.tolist()):
        c = out.dtype.type(coef)
        for i0 in range(0, d, _CHUNK):
            n = min(_CHUNK, d - i0)
            z = stream_normals(seed, n, substream=index, group=group, offset=i0)
            out[i0 : i0 + n] += c * z.astype(out.dtype, copy=False)
