"""Count-sketch (docs/contract.md, docs/secagg.md): Philox buckets and signs, a hand-checked example,
linearity, the variance identity by Monte Carlo, heavy hitters, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from dprec._runtime import native as _native
from dprec.reference import sketch as ref_sketch
from dprec.transforms.sketch import MAX_ROWS, CountSketch
from tests.conftest import BACKENDS
from tests.philox_independent import stream


def _independent_bucket_sign(seed, dim, row, cols, group=0):
    bucket = (stream(seed, dim, row, group, 1).astype(np.uint64) * np.uint64(cols)) >> np.uint64(32)
    sign = np.where(stream(seed, dim, row, group, 2) < 2**31, 1.0, -1.0)
    return bucket.astype(np.int64), sign


@pytest.mark.parametrize("cols", [1, 2, 7, 1000, 2**32 - 1])
def test_reference_buckets_and_signs_follow_the_philox_contract(cols):
    seed, group = 0xFEEDFACECAFEBEEF, 11
    for row in (0, 1, 4):
        b, s = _independent_bucket_sign(seed, 1001, row, cols, group)
        np.testing.assert_array_equal(ref_sketch.buckets(seed, 1001, row, cols, group), b)
        np.testing.assert_array_equal(ref_sketch.signs(seed, 1001, row, group), s)
        assert b.min() >= 0 and b.max() < cols


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_element_lands_in_its_philox_bucket_with_its_sign(backend):
    # sketch the unit vectors e_j one at a time: exactly one entry per row is nonzero
    sk = CountSketch(50, rows=3, cols=13, seed=99, group=4, normalize=False)
    buckets = [_independent_bucket_sign(99, 50, r, 13, 4) for r in range(3)]
    for j in (0, 1, 17, 49):
        x = np.zeros(50)
        x[j] = 1.0
        t = sk.encode(x, backend=backend)
        for r, (b, s) in enumerate(buckets):
            expected = np.zeros(13)
            expected[b[j]] = s[j]
            np.testing.assert_array_equal(t[r], expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_hand_checked_tiny_example(backend):
    # seed 7, group 0. Words (Philox domain 1 / domain 2), bucket = (w * 2) >> 32, sign = w < 2**31:
    #   row 0: bucket words d6a62573 71eade72 3ac9655a -> 1 0 0; sign words 36500fee c9492745 138a91f3 -> + - +
    #   row 1: bucket words 3ff90ec5 c8057bed a21a1d20 -> 0 1 1; sign words a857a852 042774a2 93c2f6b8 -> - + -
    # x = (1, 2, 4): row 0 = [-2 + 4, 1] = [2, 1]; row 1 = [-1, 2 - 4] = [-1, -2]
    x = np.array([1.0, 2.0, 4.0])
    raw = CountSketch(3, rows=2, cols=2, seed=7, normalize=False).encode(x, backend=backend)
    np.testing.assert_array_equal(raw, [[2.0, 1.0], [-1.0, -2.0]])
    sk = CountSketch(3, rows=2, cols=2, seed=7)
    t = sk.encode(x, backend=backend)
    np.testing.assert_array_equal(t, [[1.0, 0.5], [-0.5, -1.0]])
    # mean decode: x0 = (+1)(0.5) + (-1)(-0.5) = 1; x1 = (-1)(1) + (+1)(-1) = -2; x2 = (+1)(1) + (-1)(-1) = 2
    np.testing.assert_array_equal(sk.decode(t, backend=backend), [1.0, -2.0, 2.0])
    # median of two rows = their mean, times rows = 2: the same here
    np.testing.assert_array_equal(sk.decode(t, "median", backend=backend), [1.0, -2.0, 2.0])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_linearity_and_accumulation(backend, dtype, rng):
    sk = CountSketch(5000, rows=5, cols=301, seed=123)
    a = rng.standard_normal(5000).astype(dtype)
    b = rng.standard_normal(5000).astype(dtype)
    ta = sk.encode(a, backend=backend)
    tb = sk.encode(b, backend=backend)
    assert ta.dtype == dtype and ta.shape == (5, 301)
    eps = np.finfo(dtype).eps
    # each table entry sums ~dim/cols terms of size ~1/rows
    tol = 50 * eps * (5000 / 301)
    np.testing.assert_allclose(ta + tb, sk.encode(a + b, backend=backend), rtol=0, atol=tol)
    acc = np.zeros((5, 301), dtype=dtype)
    assert sk.encode(a, out=acc, backend=backend) is acc
    sk.encode(b, out=acc, backend=backend)
    np.testing.assert_allclose(acc, ta + tb, rtol=0, atol=tol)
    np.testing.assert_allclose(sk.encode(3 * a, backend=backend), 3 * ta, rtol=0, atol=tol)


def test_backends_agree(rng):
    sk = CountSketch(20_000, rows=7, cols=999, seed=5, group=2)
    x = rng.standard_normal(20_000).astype(np.float32)
    ref = sk.encode(x, backend="reference")
    for b in BACKENDS:
        t = sk.encode(x, backend=b)
        np.testing.assert_allclose(t, ref, rtol=0, atol=1e-4)
        for method in ("mean", "median"):
            np.testing.assert_allclose(
                sk.decode(t, method, backend=b), sk.decode(ref, method, backend="reference"), atol=1e-4
            )


@pytest.mark.parametrize("backend", BACKENDS)
def test_encode_is_deterministic(backend, rng):
    x = rng.standard_normal(10_000).astype(np.float32)
    sk = CountSketch(10_000, 5, 100, seed=1)
    assert np.array_equal(sk.encode(x, backend=backend), sk.encode(x, backend=backend))


@pytest.mark.parametrize("backend", BACKENDS)
def test_mean_decode_error_matches_theory(backend, rng):
    # E ||S^T S g - g||^2 = (d - 1) ||g||^2 / (rows * cols) over random hashes (seeds).
    d, rows, cols, trials = 200, 3, 20, 200
    g = rng.standard_normal(d)
    errs = np.empty(trials)
    for t in range(trials):
        sk = CountSketch(d, rows, cols, seed=1000 + t)
        errs[t] = np.sum((sk.decode(sk.encode(g, backend=backend), backend=backend) - g) ** 2)
    expected = (d - 1) * np.sum(g**2) / (rows * cols)
    se = errs.std(ddof=1) / np.sqrt(trials)
    assert abs(errs.mean() - expected) <= 4 * se, (errs.mean(), expected, se)


@pytest.mark.parametrize("backend", BACKENDS)
def test_mean_decode_is_unbiased(backend, rng):
    d = 50
    g = rng.standard_normal(d)
    mean = np.zeros(d)
    trials = 400
    for t in range(trials):
        sk = CountSketch(d, 2, 10, seed=t)
        mean += sk.decode(sk.encode(g, backend=backend), backend=backend)
    mean /= trials
    # per-coordinate variance (d-1)||g||^2/(d rows cols) ~ ||g||^2/20; 5 standard errors
    assert np.max(np.abs(mean - g)) <= 5 * np.sqrt(np.sum(g**2) / 20 / trials)


@pytest.mark.parametrize("backend", BACKENDS)
def test_median_decode_recovers_heavy_hitters(backend, rng):
    d = 10_000
    x = rng.standard_normal(d)
    spikes = rng.choice(d, 5, replace=False)
    x[spikes] = 100.0
    sk = CountSketch(d, rows=7, cols=500, seed=2024)
    est = sk.decode(sk.encode(x, backend=backend), "median", backend=backend)
    assert set(np.argsort(-np.abs(est))[:5]) == set(spikes)
    np.testing.assert_allclose(est[spikes], 100.0, atol=15)  # noise per bucket ~ sqrt(d/cols) ~ 4.5
    # unnormalised sketches decode the same
    raw = CountSketch(d, rows=7, cols=500, seed=2024, normalize=False)
    np.testing.assert_allclose(
        raw.decode(raw.encode(x, backend=backend), "median", backend=backend), est, rtol=1e-12, atol=1e-9
    )


def test_properties_and_repr():
    sk = CountSketch(10, 3, 4, seed=5, group=6, normalize=False)
    assert (sk.dim, sk.rows, sk.cols, sk.seed, sk.group, sk.normalize, sk.shape) == (10, 3, 4, 5, 6, False, (3, 4))
    assert sk.scale == 1.0 and CountSketch(10, 4, 4, 5).scale == 0.25
    assert repr(sk).startswith("CountSketch(dim=10, rows=3, cols=4")


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_input(backend):
    for kwargs in (
        dict(dim=0, rows=1, cols=1, seed=0),
        dict(dim=(1 << 34) + 1, rows=1, cols=1, seed=0),
        dict(dim=4, rows=0, cols=1, seed=0),
        dict(dim=4, rows=MAX_ROWS + 1, cols=1, seed=0),
        dict(dim=4, rows=1, cols=0, seed=0),
        dict(dim=4, rows=1, cols=1 << 32, seed=0),
        dict(dim=4, rows=16, cols=1 << 31, seed=0),
        dict(dim=4, rows=1, cols=1, seed=-1),
        dict(dim=4, rows=1, cols=1, seed=1 << 64),
        dict(dim=4, rows=1, cols=1, seed=0, group=1 << 32),
    ):
        with pytest.raises(ValueError):
            CountSketch(**kwargs)
    with pytest.raises(TypeError):
        CountSketch(4, 1.5, 2, 0)
    with pytest.raises(TypeError):
        CountSketch(4, 1, 2, 0, normalize=1)
    sk = CountSketch(4, 2, 3, seed=1)
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        sk.encode(np.ones(5), backend=backend)
    with pytest.raises(ValueError, match="empty"):
        sk.encode(np.ones(0), backend=backend)
    with pytest.raises(TypeError, match="integer"):
        sk.encode(np.ones(4, dtype=np.int32), backend=backend)
    with pytest.raises(ValueError, match="NaN"):
        sk.encode(np.array([1.0, np.nan, 0, 0]), backend=backend)
    with pytest.raises(ValueError, match="shape"):
        sk.encode(np.ones(4), out=np.zeros((3, 2)), backend=backend)
    with pytest.raises(TypeError, match="dtype"):
        sk.encode(np.ones(4), out=np.zeros((2, 3), dtype=np.int64), backend=backend)
    ro = np.zeros((2, 3))
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        sk.encode(np.ones(4), out=ro, backend=backend)
    with pytest.raises(ValueError, match="method"):
        sk.decode(np.zeros((2, 3)), "max", backend=backend)
    with pytest.raises(ValueError, match="shape"):
        sk.decode(np.zeros((3, 2)), backend=backend)
    with pytest.raises(ValueError, match="infinite"):
        sk.decode(np.full((2, 3), np.inf), backend=backend)
    with pytest.raises(ValueError, match="cuda"):
        sk.encode(np.ones(4), backend="cuda")  # host data: "needs GPU arrays", or no CUDA backend here
    # float16 is computed in float32
    assert sk.encode(np.ones(4, dtype=np.float16), backend=backend).dtype == np.float32


class _FakeDlpackGpuArray:
    """Claims to live on CUDA device 0 through DLPack; never dereferenced."""

    def __dlpack_device__(self):
        return (2, 0)


@pytest.mark.skipif(_native.cuda_available(), reason="this machine has a usable CUDA backend")
def test_sketch_gpu_arrays_without_a_cuda_backend_say_why():
    # The GPU path itself is tested with a fake CUDA module (test_gpu_plumbing_sketch.py)
    # and on a GPU (test_cuda_sketch.py).
    gpu = _FakeDlpackGpuArray()
    sk = CountSketch(4, 2, 3, seed=1)
    for call, name in (
        (lambda: sk.encode(gpu), "x"),
        (lambda: sk.encode(np.ones(4), out=gpu), "out"),
        (lambda: sk.decode(gpu), "table"),
    ):
        with pytest.raises(ValueError, match=f"{name} is a GPU array .* CUDA backend is unavailable"):
            call()


@pytest.mark.parametrize("backend", BACKENDS)
def test_median_decode_across_chunks(backend, rng):
    # longer than the reference's 2**16-element median chunk, with an odd number of rows
    d, rows, cols = 70_001, 3, 64
    sk = CountSketch(d, rows, cols, seed=8, normalize=False)
    t = rng.standard_normal((rows, cols))
    vals = np.stack(
        [s * t[r][b] for r, (b, s) in enumerate(_independent_bucket_sign(8, d, r, cols) for r in range(rows))]
    )
    np.testing.assert_array_equal(sk.decode(t, "median", backend=backend), np.median(vals, axis=0))
    np.testing.assert_allclose(sk.decode(t, backend=backend), vals.sum(axis=0), rtol=1e-12, atol=1e-12)
