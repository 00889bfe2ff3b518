"""Native CPU kernels for issue 4: _core.fwht and _core.count_sketch_encode / _decode.

Checked against straightforward NumPy written here (scipy's Hadamard matrix for small n, an
O(n log n) radix-2 loop for large n; bincount sketches with buckets and signs from the
NumPy reference Philox stream), for thread-count invariance, and for bad input reaching
the binding.
"""

from __future__ import annotations

import numpy as np
import pytest

from dprec import philox
from dprec._runtime import native as _native
from tests.conftest import NATIVE, requires_native

pytestmark = requires_native

_core = _native.native() if NATIVE else None


def np_fwht(x: np.ndarray) -> np.ndarray:
    """Radix-2 FWHT over the last axis, stages h = 1, 2, 4, ... in x's dtype (the kernel's
    documented arithmetic order, so float results agree bit for bit)."""
    x = np.array(x, copy=True)
    n = x.shape[-1]
    h = 1
    while h < n:
        y = x.reshape(x.shape[:-1] + (n // (2 * h), 2, h))
        a = y[..., 0, :].copy()
        b = y[..., 1, :]
        y[..., 0, :] += b
        y[..., 1, :] = a - b
        h *= 2
    return x


def native_fwht(x: np.ndarray, normalize: bool = False) -> np.ndarray:
    y = np.ascontiguousarray(x).copy()
    _core.fwht(y.reshape(-1), y.shape[-1], normalize)
    return y


def norm_scale(n: int, dtype) -> np.floating:
    k = n.bit_length() - 1
    if k % 2 == 0:
        return dtype(2.0 ** (-k // 2))
    return dtype(1.0 / np.sqrt(float(n)))


# ---- FWHT ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", list(range(0, 11)))
def test_fwht_matches_hadamard_matrix(k, dtype, rng):
    scipy_linalg = pytest.importorskip("scipy.linalg")
    n = 1 << k
    x = rng.standard_normal(n)
    h = scipy_linalg.hadamard(n).astype(np.float64)
    want = h @ x
    got = native_fwht(x.astype(dtype))
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * np.sqrt(n) * max(1, k))
    got_n = native_fwht(x.astype(dtype), normalize=True)
    np.testing.assert_allclose(got_n, want / np.sqrt(n), rtol=0, atol=tol * max(1, k))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", [11, 12, 13, 14, 15, 16, 18, 20])
def test_fwht_large_matches_numpy(k, dtype, rng):
    """Sizes beyond the in-cache block (2^13 float32, 2^12 float64) take the blocked path."""
    n = 1 << k
    x = rng.standard_normal(n).astype(dtype)
    got = native_fwht(x)
    # Same arithmetic in the same order: bit for bit.
    np.testing.assert_array_equal(got, np_fwht(x))
    # Against float64: float64 to rounding; float32 within a relative L2 error of 4e-7 * k
    # (each of the k stages adds at most one rounding of relative size 2^-24 per element).
    exact = np_fwht(x.astype(np.float64))
    rel = np.linalg.norm(got.astype(np.float64) - exact) / np.linalg.norm(exact)
    assert rel < (1e-15 if dtype == np.float64 else 4e-7) * k


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(5, 1), (7, 2), (64, 8), (33, 256), (3, 1 << 15), (2, 1 << 16)])
def test_fwht_batched_equals_looped(shape, dtype, rng):
    x = rng.standard_normal(shape).astype(dtype)
    got = native_fwht(x)
    np.testing.assert_array_equal(got, np_fwht(x))
    looped = np.stack([native_fwht(row) for row in x])
    np.testing.assert_array_equal(got, looped)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", [0, 1, 3, 4, 9, 14, 17])
def test_fwht_normalize(k, dtype, rng):
    n = 1 << k
    x = rng.standard_normal((2, n)).astype(dtype)
    got = native_fwht(x, normalize=True)
    np.testing.assert_array_equal(got, np_fwht(x) * norm_scale(n, dtype))
    # Orthonormal: an involution and norm-preserving, to rounding.
    back = native_fwht(got, normalize=True)
    tol = 1e-13 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(back, x, rtol=0, atol=tol * max(1, k))
    np.testing.assert_allclose(np.linalg.norm(got, axis=-1), np.linalg.norm(x, axis=-1), rtol=tol * max(1, k))


@pytest.mark.parametrize(
    "dtype,shape",
    [
        # Block sizes follow the machine's caches (runtime.cache_sizes()) and the row: with a
        # 1 MiB L2 and 32 KiB L1d, float32 2^21 takes blocks of 2^15 under two radix-8 levels
        # (the fewest passes), 2^22 blocks of 2^17 under a radix-8 and a radix-4 level
        (np.float32, (1, 1 << 21)),
        (np.float32, (1, 1 << 22)),
        (np.float32, (3, 1 << 18)),
        # float64: L2 blocks of 2^16 (with 1 MiB); single rows on 2 and 3 threads are split
        # into one block per thread whatever the L2
        (np.float64, (1, 1 << 20)),
        (np.float64, (2, 1 << 19)),
    ],
)
@pytest.mark.parametrize("normalize", [False, True])
def test_fwht_multilevel_rows_bit_identical(dtype, shape, normalize, threads, rng):
    """Rows long enough for several levels of in-cache blocks and radix-8 passes across
    them (rows that fit the L3 level by level, larger ones sub-row by sub-row; and batches
    of such rows) give the radix-2 loop's bits, on one, two and three threads."""
    x = rng.standard_normal(shape).astype(dtype)
    want = np_fwht(x)
    if normalize:
        want = want * norm_scale(shape[-1], dtype)
    for t in (1, 2, 3):
        threads(t)
        np.testing.assert_array_equal(native_fwht(x, normalize=normalize), want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 1 << 20), (3, 1 << 17), (300, 128)])
def test_fwht_thread_count_invariant(shape, dtype, threads, rng):
    x = rng.standard_normal(shape).astype(dtype)
    threads(1)
    one = native_fwht(x, normalize=True)
    threads(2)
    two = native_fwht(x, normalize=True)
    assert one.tobytes() == two.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "shape", [(1, 1), (5, 8), (300, 128), (3, 1 << 13), (2, 1 << 16), (1, 1 << 18), (1, 1 << 20), (2, 1 << 21)]
)
@pytest.mark.parametrize("normalize", [False, True])
def test_fwht_from_src_equals_copy_then_in_place(shape, dtype, normalize, threads, rng):
    """The out-of-place transform (the copy fused into each block's first pass) gives the
    in-place transform's bits, on every path (short rows, one block, multi-level, rows beyond
    the L3 tree), at 1 and 2 threads, and leaves src untouched."""
    src = rng.standard_normal(shape).astype(dtype).reshape(-1)
    kept = src.copy()
    want = native_fwht(src.reshape(shape), normalize).reshape(-1)
    for t in (1, 2):
        threads(t)
        out = np.full_like(src, np.nan)
        _core.fwht(out, shape[-1], normalize, src)
        np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8))
        np.testing.assert_array_equal(src, kept)
    same = src.copy()  # src is x itself: in place
    _core.fwht(same, shape[-1], normalize, same)
    np.testing.assert_array_equal(same.view(np.uint8), want.view(np.uint8))


def test_fwht_src_is_checked():
    x = np.zeros(64, np.float32)
    with pytest.raises(ValueError, match="src must have the size of x"):
        _core.fwht(x, 8, False, np.zeros(32, np.float32))
    with pytest.raises(TypeError, match="src must have dtype float32"):
        _core.fwht(x, 8, False, np.zeros(64, np.float64))
    with pytest.raises(TypeError, match="src must be a NumPy array"):
        _core.fwht(x, 8, False, [0.0] * 64)
    with pytest.raises(ValueError, match="src must be C-contiguous"):
        _core.fwht(x, 8, False, np.zeros(128, np.float32)[::2])
    buf = np.zeros(72, np.float32)
    with pytest.raises(ValueError, match="src and x overlap"):
        _core.fwht(buf[8:], 8, False, buf[:64])
    with pytest.raises(ValueError, match="src and x overlap"):
        _core.fwht(buf[:64], 8, False, buf[8:])
    _core.fwht(buf[:32], 8, False, buf[32:64])  # adjacent, not overlapping


def test_fwht_empty_batch_is_a_no_op():
    x = np.zeros(0, np.float32)
    _core.fwht(x, 8, True)


@pytest.mark.parametrize("n", [0, -1, 3, 6, 12, 1 << 31])
def test_fwht_rejects_bad_n(n):
    with pytest.raises(ValueError, match="n must be a power of two"):
        _core.fwht(np.zeros(16, np.float32), n, False)


def test_fwht_rejects_bad_arrays():
    with pytest.raises(ValueError, match="multiple of n"):
        _core.fwht(np.zeros(12, np.float32), 8, False)
    with pytest.raises(TypeError, match="x must have dtype"):
        _core.fwht(np.zeros(8, np.int32), 8, False)
    with pytest.raises(TypeError, match="x must have dtype"):
        _core.fwht(np.zeros(8, np.float16), 8, False)
    ro = np.zeros(8, np.float64)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="x must be writeable"):
        _core.fwht(ro, 8, False)
    with pytest.raises(ValueError, match="x must be C-contiguous"):
        _core.fwht(np.zeros(16, np.float32)[::2], 8, False)
    with pytest.raises(ValueError, match="x must be 1-D"):
        _core.fwht(np.zeros((2, 8), np.float32), 8, False)


# ---- count-sketch -------------------------------------------------------------------------


def sketch_hashes(dim: int, seed: int, group: int, rows: int, cols: int):
    """Buckets and signs from the NumPy reference Philox stream (docs/contract.md, domains 1 and 2)."""
    buckets = np.empty((rows, dim), np.int64)
    signs = np.empty((rows, dim), np.float64)
    for r in range(rows):
        wb = philox.words(seed, dim, substream=r, group=group, domain=1, backend="reference")
        ws = philox.words(seed, dim, substream=r, group=group, domain=2, backend="reference")
        buckets[r] = (wb.astype(np.uint64) * np.uint64(cols)) >> np.uint64(32)
        signs[r] = np.where(ws < np.uint32(1 << 31), 1.0, -1.0)
    return buckets, signs


def np_encode(x, seed, group, rows, cols, scale):
    buckets, signs = sketch_hashes(x.size, seed, group, rows, cols)
    table = np.zeros((rows, cols), np.float64)
    for r in range(rows):
        table[r] += np.bincount(buckets[r], weights=signs[r] * x.astype(np.float64) * scale, minlength=cols)
    return table


def np_decode(table, dim, seed, group, rows, cols, median, median_scale):
    buckets, signs = sketch_hashes(dim, seed, group, rows, cols)
    vals = signs * table.astype(np.float64)[np.arange(rows)[:, None], buckets]
    if median:
        return np.median(vals, axis=0) * median_scale
    return vals.sum(axis=0)


def encode(x, seed, group, rows, cols, scale, table=None):
    if table is None:
        table = np.zeros(rows * cols, x.dtype)
    _core.count_sketch_encode(x, seed, group, rows, cols, scale, table)
    return table.reshape(rows, cols)


def decode(table, dim, seed, group, rows, cols, median, median_scale=1.0):
    out = np.empty(dim, table.dtype)
    _core.count_sketch_decode(table.reshape(-1), seed, group, rows, cols, median, median_scale, out)
    return out


SKETCH_CASES = [
    # dim, rows, cols, seed, group
    (1, 1, 1, 0, 0),
    (7, 3, 5, 1, 0),
    (1000, 5, 64, 12345, 0),
    (4099, 4, 1000, 2**63 + 17, 9),
    (20000, 7, 3001, 0xDEADBEEF, 2**32 - 1),
    (3001, 40, 17, 3, 1),  # more rows than the vectorised median sort handles
    (500, 33, 8, 4, 0),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("dim,rows,cols,seed,group", SKETCH_CASES)
def test_sketch_encode_matches_numpy(dim, rows, cols, seed, group, dtype, rng):
    x = rng.standard_normal(dim).astype(dtype)
    scale = 1.0 / rows
    got = encode(x, seed, group, rows, cols, scale)
    want = np_encode(x, seed, group, rows, cols, scale)
    tol = 1e-12 if dtype == np.float64 else 2e-6
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.sqrt(dim) / rows)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("median", [False, True])
@pytest.mark.parametrize("dim,rows,cols,seed,group", SKETCH_CASES)
def test_sketch_decode_matches_numpy(dim, rows, cols, seed, group, median, dtype, rng):
    table = rng.standard_normal((rows, cols)).astype(dtype)
    median_scale = float(rows)
    got = decode(table, dim, seed, group, rows, cols, median, median_scale)
    want = np_decode(table, dim, seed, group, rows, cols, median, median_scale)
    tol = 1e-12 if dtype == np.float64 else 1e-6
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * rows)


def test_sketch_hand_checked_tiny_example():
    """dim 3, one row, 2 columns: table[h(j)] += s(j) x_j, with h and s read off the stream."""
    seed, rows, cols = 7, 1, 2
    wb = philox.words(seed, 3, substream=0, domain=1, backend="reference")
    ws = philox.words(seed, 3, substream=0, domain=2, backend="reference")
    x = np.array([1.0, 10.0, 100.0])
    want = np.zeros(2)
    for j in range(3):
        b = (int(wb[j]) * cols) >> 32
        s = 1.0 if int(ws[j]) < 2**31 else -1.0
        want[b] += s * x[j]
    np.testing.assert_array_equal(encode(x, seed, 0, rows, cols, 1.0).reshape(-1), want)


def test_sketch_is_linear_and_accumulates(rng):
    dim, rows, cols, seed = 5000, 5, 257, 99
    x = rng.standard_normal(dim)
    y = rng.standard_normal(dim)
    sx = encode(x, seed, 0, rows, cols, 0.2)
    both = encode(y, seed, 0, rows, cols, 0.2, table=sx.reshape(-1).copy())
    np.testing.assert_allclose(both, encode(x + y, seed, 0, rows, cols, 0.2), rtol=1e-12, atol=1e-12)


def test_sketch_median_recovers_heavy_hitters(rng):
    dim, rows, cols, seed = 100000, 7, 2000, 5
    x = rng.standard_normal(dim).astype(np.float32) * 0.01
    heavy = rng.choice(dim, 10, replace=False)
    x[heavy] = 100.0
    table = encode(x, seed, 0, rows, cols, 1.0 / rows)
    est = decode(table, dim, seed, 0, rows, cols, True, float(rows))
    np.testing.assert_allclose(est[heavy], 100.0, atol=1.0)
    assert set(np.argsort(-np.abs(est))[:10]) == set(heavy)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cols", [4096, 1 << 17])
def test_sketch_thread_count_invariant(dtype, cols, threads, rng):
    """Encode groups rows into work items by thread count and L2 size (one item of every row,
    or one per row when a table row is too large for the L2): the same bits on 1, 2, 3 threads."""
    dim, rows, seed = 300000, 5, 3
    x = rng.standard_normal(dim).astype(dtype)
    results = []
    for t in (1, 2, 3):
        threads(t)
        table = encode(x, seed, 0, rows, cols, 1.0 / rows)
        mean = decode(table, dim, seed, 0, rows, cols, False)
        med = decode(table, dim, seed, 0, rows, cols, True, float(rows))
        results.append((table.tobytes(), mean.tobytes(), med.tobytes()))
    assert results[0] == results[1] == results[2]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("rows", "cols", "n_threads"), [(3, 1 << 16, 8), (5, 1 << 16, 2), (15, 1 << 16, 3), (2, 64, 7)])
def test_sketch_encode_with_helping_threads_matches_reference_bits(dtype, rows, cols, n_threads, threads, rng):
    """With rows not a multiple of the threads, threads left without rows compute buckets and
    addends of blocks ahead of a busy row's owner (more threads than cores here, so owners
    also wait on descheduled helpers): the table is still np.add.at's, row by row in element
    order, bit for bit, at odd sizes and over repeated calls."""
    from dprec.reference import sketch as ref

    dim, seed = 3 * 65536 + 4093, 11
    x = rng.standard_normal(dim).astype(dtype)
    want = ref.count_sketch_encode(x, seed, rows, cols)
    threads(n_threads)
    for _ in range(3):
        got = encode(x, seed, 0, rows, cols, 1.0 / rows).reshape(rows, cols)
        np.testing.assert_array_equal(got, want)


def test_cache_sizes_are_reported():
    """runtime.cache_sizes(): the sizes the blocking uses, plausible and from a named source."""
    from dprec import runtime

    c = runtime.cache_sizes()
    assert set(c) == {"l1d", "l2", "l3", "source"}
    assert 4 << 10 <= c["l1d"] <= 4 << 20
    assert 64 << 10 <= c["l2"] <= 256 << 20
    assert 256 << 10 <= c["l3"] <= 4 << 30
    assert isinstance(c["source"], str) and c["source"]
    assert runtime.cache_sizes() == c  # queried once
    assert runtime.cache_summary().startswith("L1d ")


def test_sketch_rejects_bad_input():
    x = np.zeros(10, np.float32)
    t = np.zeros(12, np.float32)
    out = np.zeros(10, np.float32)
    with pytest.raises(ValueError, match="rows must be"):
        _core.count_sketch_encode(x, 0, 0, 0, 12, 1.0, t)
    with pytest.raises(ValueError, match="cols must be"):
        _core.count_sketch_encode(x, 0, 0, 1, 0, 1.0, t)
    with pytest.raises(ValueError, match="cols must be"):
        _core.count_sketch_encode(x, 0, 0, 1, 2**32, 1.0, t)
    with pytest.raises(ValueError, match="rows must be"):
        _core.count_sketch_decode(t, 0, 0, -1, 12, False, 1.0, out)
    with pytest.raises(ValueError, match="table must have rows"):
        _core.count_sketch_encode(x, 0, 0, 3, 5, 1.0, t)
    with pytest.raises(ValueError, match="table must have rows"):
        _core.count_sketch_decode(t, 0, 0, 2, 5, False, 1.0, out)
    with pytest.raises(ValueError, match="x must not be empty"):
        _core.count_sketch_encode(np.zeros(0, np.float32), 0, 0, 3, 4, 1.0, t)
    with pytest.raises(ValueError, match="out must not be empty"):
        _core.count_sketch_decode(t, 0, 0, 3, 4, False, 1.0, np.zeros(0, np.float32))
    with pytest.raises(TypeError, match="same dtype"):
        _core.count_sketch_encode(x.astype(np.float64), 0, 0, 3, 4, 1.0, t)
    with pytest.raises(TypeError, match="same dtype"):
        _core.count_sketch_decode(t, 0, 0, 3, 4, False, 1.0, out.astype(np.float64))
    with pytest.raises(TypeError, match="must have dtype"):
        _core.count_sketch_encode(x.astype(np.int32), 0, 0, 3, 4, 1.0, t.astype(np.int32))
    with pytest.raises(ValueError, match="scale must be finite"):
        _core.count_sketch_encode(x, 0, 0, 3, 4, float("nan"), t)
    with pytest.raises(ValueError, match="median_scale must be finite"):
        _core.count_sketch_decode(t, 0, 0, 3, 4, True, float("inf"), out)
    ro = t.copy()
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="table must be writeable"):
        _core.count_sketch_encode(x, 0, 0, 3, 4, 1.0, ro)
    with pytest.raises(ValueError, match="x must be C-contiguous"):
        _core.count_sketch_encode(np.zeros(20, np.float32)[::2], 0, 0, 3, 4, 1.0, t)


def _fwht_bits(x: np.ndarray, n: int, normalize: bool) -> np.ndarray:
    y = x.copy()
    _core.fwht(y, n, normalize)
    return y.view(np.uint32 if y.dtype == np.float32 else np.uint64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("log2n,batch", [(3, 1), (10, 1), (15, 1), (18, 1), (20, 1), (3, 37), (9, 64), (13, 5), (15, 3)])
def test_fwht_every_isa_and_thread_count_bit_identical(isa, threads, dtype, log2n, batch):
    """Each ISA's kernels (baseline, AVX2, AVX-512 shuffles and fused stages) give the scalar bits."""
    import dprec

    n = 1 << log2n
    x = np.random.default_rng(log2n * 1000 + batch).standard_normal(n * batch).astype(dtype)
    dprec.runtime.set_isa("baseline")
    threads(1)
    ref = {norm: _fwht_bits(x, n, norm) for norm in (False, True)}
    dprec.runtime.set_isa(isa)
    for t in (1, 2):
        threads(t)
        for norm in (False, True):
            np.testing.assert_array_equal(_fwht_bits(x, n, norm), ref[norm])
    if log2n <= 15:  # and the NumPy radix-2 reference, where it is quick
        y = np_fwht(x.reshape(batch, n).astype(dtype)).reshape(-1)
        np.testing.assert_array_equal(ref[False], y.view(ref[False].dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sketch_mean_decode_adds_rows_in_order_in_float64_at_any_chunk(dtype, rng, threads):
    """The mean decode's work items span many elements (the table is read once per item); each
    element still adds its rows in increasing order in float64, so the result is that sum
    rounded once, bit for bit, for sizes around the item and tile bounds and any thread count."""
    rows, cols, seed, group = 5, 1 << 12, 99, 3
    table = rng.standard_normal((rows, cols)).astype(dtype)
    for dim in (4095, 4097, 65536 + 4, 300_001):
        buckets, signs = sketch_hashes(dim, seed, group, rows, cols)
        want = np.zeros(dim)
        for r in range(rows):  # sequential in r, as the kernel adds
            want += signs[r] * table[r].astype(np.float64)[buckets[r]]
        want = want.astype(dtype)
        for n in (1, 2):
            threads(n)
            got = decode(table, dim, seed, group, rows, cols, False)
            assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), (dim, n)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("median", [False, True])
def test_sketch_decode_every_isa_and_thread_count_bit_identical(isa, threads, dtype, median):
    """Each ISA's decode (on AVX-512 the fused Philox-and-load kernel, which the median takes
    in lane order by adding each cell to -0.0) gives the baseline's bits: sizes with whole
    groups of 64 elements and tails, odd and even rows on both sides of the sorting network's
    limit, and sparse tables whose empty cells read as +-0.0 (so zero medians keep their sign)."""
    import dprec

    rng = np.random.default_rng(31)
    for rows, cols, dim in [(1, 64, 64), (2, 257, 1000), (5, 1 << 12, 4096 + 68), (15, 4099, 9000), (32, 64, 2048 + 3),
                            (33, 17, 700)]:
        table = rng.standard_normal((rows, cols)).astype(dtype)
        table[:, rng.random(cols) < 0.5] = 0.0  # empty cells: +0.0, read with sign -1 as -0.0
        dprec.runtime.set_isa("baseline")
        threads(1)
        want = decode(table, dim, 77, 5, rows, cols, median, float(rows))
        dprec.runtime.set_isa(isa)
        for n in (1, 2):
            threads(n)
            got = decode(table, dim, 77, 5, rows, cols, median, float(rows))
            assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), (rows, cols, dim, n)
        if median:
            assert np.signbit(want[want == 0]).any() or rows % 2 == 0, "no -0.0 median: the case is not exercised"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fwht_isa_follows_the_choice_and_auto_gives_the_same_bits(dtype, isa, threads):
    """A chosen ISA runs the FWHT itself; under "auto" the fastest SIMD table on a timed probe
    does (a speed choice only: the bits equal the baseline's)."""
    import dprec

    n = 1 << 16
    x = np.random.default_rng(5).standard_normal(n).astype(dtype)
    threads(1)
    dprec.runtime.set_isa("baseline")
    want = _fwht_bits(x, n, True)
    try:
        dprec.runtime.set_isa(isa)
        assert dprec.runtime.fwht_isa(dtype) == isa
        assert dprec.runtime.get_isa_setting() == isa
        dprec.runtime.set_isa("auto")
        assert dprec.runtime.get_isa_setting() == "auto"
        chosen = dprec.runtime.fwht_isa(dtype)
        simd = [name for name in dprec.runtime.available_isas() if name != "baseline"]
        assert chosen in (simd or ["baseline"])
        for t in (1, 2):
            threads(t)
            np.testing.assert_array_equal(_fwht_bits(x, n, True), want)
    finally:
        dprec.runtime.set_isa("auto")
    with pytest.raises(TypeError, match="dtype must be float32 or float64"):
        dprec.runtime.fwht_isa(np.int32)
