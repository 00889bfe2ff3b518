"""Pure-NumPy DP-REC kernels: the reference the native kernels are tested against."""

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


# The order of sum_of_squares (as the native kernel sums): chunks of this many elements, lanes.
SUM_SQUARES_CHUNK = 1 << 16
SUM_SQUARES_LANES = 8


def sum_of_squares(x: np.ndarray, divisor: float = 1.0) -> float:
    """``sum((x / divisor)**2)`` in float64 (the division skipped when ``divisor == 1``), the clip
    norm's sum, in a fixed order that the native kernel reproduces bit for bit whatever its
    thread count: chunks of ``SUM_SQUARES_CHUNK`` elements; within a chunk, element ``j`` goes to
    lane ``j % 8``, each lane summed in element order; the lanes combined as
    ``((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7))``; the chunk sums added in chunk order.
    """
    flat = x.reshape(-1)
    total = 0.0
    for i in range(0, flat.size, SUM_SQUARES_CHUNK):
        chunk = flat[i : i + SUM_SQUARES_CHUNK]
        # Zero padding to whole rows of lanes adds +0 to a lane, which changes no sum.
        lanes = np.zeros((-(-chunk.size // SUM_SQUARES_LANES), SUM_SQUARES_LANES), dtype=np.float64)
        lanes.reshape(-1)[: chunk.size] = chunk
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            if divisor != 1.0:
                lanes /= divisor
            lanes *= lanes
            # accumulate, not reduce: its prefix sums are sequential by definition (reduce may sum
            # pairwise), so the lanes' order is the one documented above in every NumPy version.
            np.add.accumulate(lanes, axis=0, out=lanes)
            s = lanes[-1].tolist()
        total += ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))
    return total


def gumbel_from_words(words: np.ndarray) -> np.ndarray:
    """Standard Gumbel variates (float64) of 53-bit uniform integers ``m < 2**53``:
    ``-log(-log(u))`` with ``u = (m + 1/2) 2**-53``, always finite."""
    # In place, the same IEEE operations as -log(-log((m + 0.5) * 2**-53)) without temporaries.
    g = words.astype(np.float64)
    g += 0.5
    g *= 2.0**-53
    np.log(g, out=g)
    np.negative(g, out=g)
    np.log(g, out=g)
    np.negative(g, out=g)
    return g


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
