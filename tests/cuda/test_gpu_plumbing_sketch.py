"""CountSketch's GPU path, run without a GPU.

tests/fake_cuda.py stands in for ``dprec._cuda`` (device memory is registered host memory,
every pointer is checked against its allocation) and computes with the host emulation of
the CUDA count-sketch kernels (``dprec._gpu_emulation``), so the values here are the
values a GPU produces. Covered: ``CountSketch.encode`` / ``decode`` on GPU arrays (results
allocated on the device in the caller's framework, ``out=`` accumulation, dtype
conversion, the stream used, the checks on shapes, devices, contiguity, finiteness and the
median's row cap). The kernels on a real GPU are in tests/cuda/test_cuda_sketch.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import dprec
from dprec.transforms.sketch import MAX_GPU_MEDIAN_ROWS, CountSketch
from tests import fake_cuda as fc
from tests.conftest import requires_native
from tests.fake_cuda import FakeGpuArray

pytestmark = requires_native

fake_cuda = fc.fake_cuda  # the fixture, for pytest to find in this module


def _host(a) -> np.ndarray:
    return a.host() if isinstance(a, FakeGpuArray) else a.get()


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


CASES = [(1, 1, 1), (7, 3, 5), (1000, 5, 64), (4099, 16, 257), (513, 33, 100)]


@pytest.mark.parametrize("dim, rows, cols", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("normalize", [True, False])
def test_encode_gpu_array_bit_identical_to_cpu(fake_cuda, dim, rows, cols, dtype, normalize):
    cs = CountSketch(dim, rows, cols, seed=321, group=4, normalize=normalize)
    x = np.random.default_rng(dim).standard_normal(dim).astype(dtype)
    table = cs.encode(FakeGpuArray(fake_cuda, x))
    assert isinstance(table, dprec.cuda.DeviceArray)  # a third-party array: dprec's own
    assert table.shape == (rows, cols) and table.dtype == dtype
    assert _same_bits(table.get(), cs.encode(x, backend="cpu"))


@pytest.mark.parametrize("dim, rows, cols", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("method", ["mean", "median"])
def test_decode_gpu_table_bit_identical_to_cpu(fake_cuda, dim, rows, cols, dtype, method):
    cs = CountSketch(dim, rows, cols, seed=77)
    t = np.random.default_rng(cols).standard_normal((rows, cols)).astype(dtype)
    t[:, ::3] = 0.0  # empty cells: signed zeros in the median
    if method == "median" and rows > MAX_GPU_MEDIAN_ROWS:
        with pytest.raises(ValueError, match="rows must be at most"):
            cs.decode(FakeGpuArray(fake_cuda, t), method)
        return
    got = cs.decode(FakeGpuArray(fake_cuda, t), method)
    assert isinstance(got, dprec.cuda.DeviceArray) and got.shape == (dim,)
    assert _same_bits(got.get(), cs.decode(t, method, backend="cpu"))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_encode_out_accumulates_like_the_cpu(fake_cuda, dtype):
    """Sketches of several clients add into one GPU table, bit for bit as on the CPU."""
    cs = CountSketch(3001, 5, 97, seed=5)
    rng = np.random.default_rng(3)
    start = rng.standard_normal(cs.shape).astype(dtype)
    gpu_table = FakeGpuArray(fake_cuda, start)
    cpu_table = start.copy()
    for _ in range(3):
        x = rng.standard_normal(3001).astype(dtype)
        assert cs.encode(FakeGpuArray(fake_cuda, x), out=gpu_table) is gpu_table
        cs.encode(x, out=cpu_table, backend="cpu")
        assert _same_bits(gpu_table.host(), cpu_table)


def test_encode_converts_x_to_the_tables_dtype(fake_cuda):
    cs = CountSketch(500, 3, 40, seed=6)
    rng = np.random.default_rng(4)
    for x_dtype, t_dtype in [(np.float64, np.float32), (np.float32, np.float64), (np.float16, np.float64)]:
        x = rng.standard_normal(500).astype(x_dtype)
        out = FakeGpuArray(fake_cuda, np.zeros(cs.shape, t_dtype))
        cs.encode(FakeGpuArray(fake_cuda, x), out=out)
        want = cs.encode(
            x.astype(np.float32) if x_dtype == np.float16 else x, out=np.zeros(cs.shape, t_dtype), backend="cpu"
        )
        assert _same_bits(out.host(), want), (x_dtype, t_dtype)


def test_float16_input_is_sketched_in_float32(fake_cuda):
    """(bfloat16 has no __cuda_array_interface__ typestr: it is tested with torch on a GPU.)"""
    cs = CountSketch(257, 3, 16, seed=8)
    h = np.random.default_rng(5).standard_normal(257).astype(np.float16)
    arr, as_f32 = FakeGpuArray(fake_cuda, h), h.astype(np.float32)
    table = cs.encode(arr)
    assert table.dtype == np.float32
    assert [c.name for c in fake_cuda.calls if c.name == "to_float32"] == ["to_float32"]
    assert _same_bits(table.get(), cs.encode(as_f32, backend="cpu"))
    dec = cs.decode(FakeGpuArray(fake_cuda, table.get().astype(np.float16)))
    assert dec.dtype == np.float32


def test_every_call_runs_on_the_interfaces_stream(fake_cuda):
    cs = CountSketch(100, 3, 10, seed=1)
    for entry, expected in [(12345, 12345), (1, 0), (None, 0), (fc._ABSENT, 0)]:
        x = FakeGpuArray(fake_cuda, np.ones(100, np.float32), stream=entry)
        fake_cuda.calls.clear()
        table = cs.encode(x)
        assert table.stream == expected
        assert fake_cuda.kernel_streams() == {expected}
        assert {c.name for c in fake_cuda.calls if c.stream is not None} >= {"count_sketch_encode", "norm_stats"}
        t = FakeGpuArray(fake_cuda, table.get(), stream=entry)
        fake_cuda.calls.clear()
        cs.decode(t, "median")
        assert fake_cuda.kernel_streams() == {expected}


def test_new_table_starts_from_zero(fake_cuda):
    """The fake's fresh memory is 0xFF bytes (NaN): a missing memset would show."""
    cs = CountSketch(10, 2, 1000, seed=1)  # most cells untouched
    table = cs.encode(FakeGpuArray(fake_cuda, np.ones(10, np.float32))).get()
    assert np.isfinite(table).all() and np.count_nonzero(table) <= 20


def test_host_and_gpu_arrays_do_not_mix(fake_cuda):
    cs = CountSketch(8, 2, 4, seed=1)
    gx = FakeGpuArray(fake_cuda, np.ones(8, np.float32))
    gt = FakeGpuArray(fake_cuda, np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match="out is on cpu but x is on cuda:0"):
        cs.encode(gx, out=np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match="out is on cuda:0 but x is on cpu"):
        cs.encode(np.ones(8, np.float32), out=gt)


def test_backends_that_run_on_the_host_reject_gpu_arrays(fake_cuda):
    cs = CountSketch(8, 2, 4, seed=1)
    gx = FakeGpuArray(fake_cuda, np.ones(8, np.float32))
    gt = FakeGpuArray(fake_cuda, np.zeros((2, 4), np.float32))
    for backend in ("cpu", "reference"):
        with pytest.raises(ValueError, match=f"x is on cuda:0, but backend='{backend}'"):
            cs.encode(gx, backend=backend)
        with pytest.raises(ValueError, match=f"table is on cuda:0, but backend='{backend}'"):
            cs.decode(gt, backend=backend)
    with pytest.raises(ValueError, match="x is on the host, but backend='cuda' needs GPU arrays"):
        cs.encode(np.ones(8), backend="cuda")
    with pytest.raises(ValueError, match="table is on the host, but backend='cuda' needs GPU arrays"):
        cs.decode(np.zeros((2, 4)), backend="cuda")
    assert cs.encode(gx, backend="cuda").shape == (2, 4)


def test_bad_gpu_input_is_rejected(fake_cuda):
    cs = CountSketch(8, 2, 4, seed=1)

    def gpu(a, **kw):
        return FakeGpuArray(fake_cuda, a, **kw)

    with pytest.raises(ValueError, match="x must be C-contiguous"):
        cs.encode(gpu(np.ones(16, np.float32), shape=(8,), strides=(8,)))
    with pytest.raises(ValueError, match="table must be C-contiguous"):
        cs.decode(gpu(np.zeros((4, 2), np.float32), shape=(2, 4), strides=(4, 8)))
    with pytest.raises(ValueError, match="out must be C-contiguous"):
        cs.encode(gpu(np.ones(8, np.float32)), out=gpu(np.zeros((4, 2), np.float32), shape=(2, 4), strides=(4, 8)))
    with pytest.raises(ValueError, match="x must have shape \\(8,\\)"):
        cs.encode(gpu(np.ones(9, np.float32)))
    with pytest.raises(ValueError, match="x must have shape"):
        cs.encode(gpu(np.ones((2, 4), np.float32)))
    with pytest.raises(ValueError, match="table must have shape"):
        cs.decode(gpu(np.zeros((4, 2), np.float32)))
    with pytest.raises(ValueError, match="out must have shape"):
        cs.encode(gpu(np.ones(8, np.float32)), out=gpu(np.zeros((2, 5), np.float32)))
    with pytest.raises(TypeError, match="out must have dtype"):
        cs.encode(gpu(np.ones(8, np.float32)), out=gpu(np.zeros((2, 4), np.int32)))
    with pytest.raises(ValueError, match="out must be writeable"):
        cs.encode(gpu(np.ones(8, np.float32)), out=gpu(np.zeros((2, 4), np.float32), readonly=True))
    with pytest.raises(TypeError, match="x must be a floating-point array"):
        cs.encode(gpu(np.ones(8, np.int32)))
    with pytest.raises(ValueError, match="x contains NaN"):
        cs.encode(gpu(np.array([1, 2, np.nan, 4, 5, 6, 7, 8], np.float32)))
    with pytest.raises(ValueError, match="x contains infinite"):
        cs.encode(gpu(np.array([1, 2, np.inf, 4, 5, 6, 7, 8])))
    with pytest.raises(ValueError, match="table contains infinite"):
        cs.decode(gpu(np.full((2, 4), -np.inf, np.float32)))
    with pytest.raises(ValueError, match="x must not be empty"):
        CountSketch(1, 1, 1, seed=0).encode(gpu(np.ones(0, np.float32)))
    with pytest.raises(ValueError, match="method"):
        cs.decode(gpu(np.zeros((2, 4), np.float32)), "max")
    # nothing reached the kernels
    assert not fake_cuda.calls_named("count_sketch_encode") and not fake_cuda.calls_named("count_sketch_decode")


def test_gpu_median_row_cap(fake_cuda):
    rows = MAX_GPU_MEDIAN_ROWS + 1
    cs = CountSketch(20, rows, 8, seed=2)
    t = FakeGpuArray(fake_cuda, np.ones((rows, 8), np.float32))
    with pytest.raises(ValueError, match=f"rows must be at most {MAX_GPU_MEDIAN_ROWS} .* got {rows}"):
        cs.decode(t, "median")
    host = np.ones((rows, 8), np.float32)
    assert _same_bits(cs.decode(t, "mean").get(), cs.decode(host, "mean", backend="cpu"))  # mean has no cap
    ok = CountSketch(20, MAX_GPU_MEDIAN_ROWS, 8, seed=2)
    t32 = np.random.default_rng(0).standard_normal((MAX_GPU_MEDIAN_ROWS, 8)).astype(np.float32)
    assert _same_bits(ok.decode(FakeGpuArray(fake_cuda, t32), "median").get(), ok.decode(t32, "median", backend="cpu"))


def test_sketch_of_the_sum_is_the_sum_of_sketches_on_the_gpu(fake_cuda):
    """Linearity through the GPU path: decode(sum of tables) ~ decode(table of the sum)."""
    cs = CountSketch(2000, 5, 500, seed=10)
    rng = np.random.default_rng(9)
    xs = [rng.standard_normal(2000) for _ in range(4)]
    total = FakeGpuArray(fake_cuda, np.zeros(cs.shape))
    for x in xs:
        cs.encode(FakeGpuArray(fake_cuda, x), out=total)
    direct = cs.encode(FakeGpuArray(fake_cuda, np.sum(xs, axis=0))).get()
    np.testing.assert_allclose(total.host(), direct, rtol=1e-12, atol=1e-12)
