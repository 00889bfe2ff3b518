"""CountSketch on a real GPU against the CPU (docs/contract.md, docs/secagg.md): encode and decode bit for bit,
out= accumulation, PyTorch and CuPy inputs, streams, bad input. Every test here needs a
GPU and skips with the reason when there is none; tests/cuda/test_gpu_emulation_sketch.py and
tests/cuda/test_gpu_plumbing_sketch.py cover what can be checked without one.
"""

from __future__ import annotations

import numpy as np
import pytest

from dprec.transforms.sketch import MAX_GPU_MEDIAN_ROWS, CountSketch
from tests.conftest import gpu_test_modules, requires_cuda

torch, cupy = gpu_test_modules()  # skips this module without a usable GPU (with the reason)
pytestmark = requires_cuda


def _host(a) -> np.ndarray:
    if hasattr(a, "cpu"):
        return a.cpu().numpy()
    if cupy is not None and isinstance(a, cupy.ndarray):
        return cupy.asnumpy(a)
    return a.get()


def _same_bits(a, b) -> bool:
    a, b = _host(a) if not isinstance(a, np.ndarray) else a, _host(b) if not isinstance(b, np.ndarray) else b
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize(
    "log2_d, rows, cols",
    [(0, 1, 1), (10, 5, 7), (16, 15, 1 << 10), (20, 5, 1 << 16), (22, 5, 1 << 16), (22, 3, 1 << 16)],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_encode_decode_bit_identical_to_cpu(log2_d, rows, cols, dtype):
    d = (1 << log2_d) + (3 if log2_d >= 10 else 0)  # not a multiple of 4
    cs = CountSketch(d, rows, cols, seed=0x5EED + log2_d, group=log2_d)
    g = torch.Generator(device="cuda").manual_seed(log2_d)
    x = torch.randn(d, generator=g, device="cuda", dtype=dtype)
    x_host = x.cpu().numpy()
    table = cs.encode(x)
    assert isinstance(table, torch.Tensor) and table.device == x.device and table.dtype == dtype
    cpu_table = cs.encode(x_host, backend="cpu")
    assert _same_bits(table, cpu_table)
    for method in ("mean", "median"):
        out = cs.decode(table, method)
        assert isinstance(out, torch.Tensor) and out.device == x.device and out.shape == (d,)
        assert _same_bits(out, cs.decode(cpu_table, method, backend="cpu"))


def test_encode_over_several_batches_is_bit_identical():
    """d above the GPU's 2**23-pair batch: chunks of both rows processed in turn."""
    d = (1 << 23) + 5
    cs = CountSketch(d, 2, 1000, seed=3)
    x = torch.randn(d, device="cuda")
    assert _same_bits(cs.encode(x), cs.encode(x.cpu().numpy(), backend="cpu"))


@pytest.mark.parametrize("rows, cols", [(1, 1), (5, 1), (1, 3), (7, 3)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_encode_few_columns_bit_identical(rows, cols, dtype):
    """cols = 1 and 3 at d = 2**22 + 1: every cell adds ~10**6 values in order (one warp per
    cell), into a new table and accumulated into a random one."""
    d = (1 << 22) + 1
    cs = CountSketch(d, rows, cols, seed=0xC01 + cols, group=rows)
    g = torch.Generator(device="cuda").manual_seed(rows * 10 + cols)
    x = torch.randn(d, generator=g, device="cuda", dtype=dtype) * 100
    x_host = x.cpu().numpy()
    assert _same_bits(cs.encode(x), cs.encode(x_host, backend="cpu"))
    start = torch.randn(cs.shape, generator=g, device="cuda", dtype=dtype)
    host = start.cpu().numpy()
    cs.encode(x, out=start)
    cs.encode(x_host, out=host, backend="cpu")
    assert _same_bits(start, host)


@pytest.mark.parametrize("cols", [2, 1000, 1 << 16])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_encode_many_rows_of_long_rows_bit_identical(cols, dtype):
    """rows = 40 at d = 2**23 + 5: every batch takes all 40 rows and a short chunk of each
    (41 sorts of ~2**23 pairs), the rows never sorted; long runs (cols = 2) fold one warp per
    cell, short ones one thread per run."""
    d = (1 << 23) + 5
    cs = CountSketch(d, 40, cols, seed=0x40 + cols)
    g = torch.Generator(device="cuda").manual_seed(cols)
    x = torch.randn(d, generator=g, device="cuda", dtype=dtype)
    assert _same_bits(cs.encode(x), cs.encode(x.cpu().numpy(), backend="cpu"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_out_accumulates_several_clients(dtype):
    cs = CountSketch(100_003, 5, 1 << 12, seed=11)
    table = torch.randn(cs.shape, device="cuda", dtype=dtype)
    host = table.cpu().numpy().copy()
    for _ in range(3):
        x = torch.randn(100_003, device="cuda", dtype=dtype)
        assert cs.encode(x, out=table) is table
        cs.encode(x.cpu().numpy(), out=host, backend="cpu")
    assert _same_bits(table, host)


def test_encode_is_the_same_on_every_run_and_stream():
    cs = CountSketch(1 << 20, 5, 1 << 16, seed=1)
    x = torch.randn(1 << 20, device="cuda")
    first = cs.encode(x)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        second = cs.encode(x)
        decoded = cs.decode(second, "median")
    torch.cuda.current_stream().wait_stream(s)
    assert _same_bits(first, second)
    assert _same_bits(decoded, cs.decode(first, "median"))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_sketched_in_float32(dtype):
    cs = CountSketch(10_001, 3, 500, seed=2)
    x = torch.randn(10_001, device="cuda").to(dtype)
    table = cs.encode(x)
    assert table.dtype == torch.float32
    assert _same_bits(table, cs.encode(x.float().cpu().numpy(), backend="cpu"))


def test_mixed_dtypes_with_out():
    cs = CountSketch(5000, 4, 64, seed=5)
    x = torch.randn(5000, device="cuda", dtype=torch.float64)
    out = torch.zeros(cs.shape, device="cuda", dtype=torch.float32)
    cs.encode(x, out=out)
    assert _same_bits(out, cs.encode(x.cpu().numpy(), out=np.zeros(cs.shape, np.float32), backend="cpu"))


@pytest.mark.skipif(cupy is None, reason="CuPy is not installed")
def test_cupy_arrays():
    cs = CountSketch(65_537, 5, 4096, seed=9)
    x = cupy.random.default_rng(1).standard_normal(65_537, dtype=cupy.float32)
    table = cs.encode(x)
    assert isinstance(table, cupy.ndarray)
    cpu_table = cs.encode(cupy.asnumpy(x), backend="cpu")
    assert _same_bits(table, cpu_table)
    out = cs.decode(table, "median")
    assert isinstance(out, cupy.ndarray)
    assert _same_bits(out, cs.decode(cpu_table, "median", backend="cpu"))


def test_bad_input():
    cs = CountSketch(8, 2, 4, seed=1)
    x = torch.ones(8, device="cuda")
    with pytest.raises(ValueError, match="x must be contiguous"):
        cs.encode(torch.ones(16, device="cuda")[::2])
    with pytest.raises(ValueError, match="out is on cpu but x is on cuda:0"):
        cs.encode(x, out=np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match="out is on cuda:0 but x is on cpu"):
        cs.encode(np.ones(8, np.float32), out=torch.zeros((2, 4), device="cuda"))
    with pytest.raises(ValueError, match="x contains NaN"):
        cs.encode(torch.tensor([1.0, float("nan")] * 4, device="cuda"))
    with pytest.raises(TypeError, match="integer"):
        cs.encode(torch.ones(8, device="cuda", dtype=torch.int32))
    with pytest.raises(ValueError, match="backend='cpu'"):
        cs.encode(x, backend="cpu")
    with pytest.raises(ValueError, match="table must have shape"):
        cs.decode(torch.zeros((4, 2), device="cuda"))
    big = CountSketch(8, MAX_GPU_MEDIAN_ROWS + 1, 4, seed=1)
    with pytest.raises(ValueError, match="rows must be at most"):
        big.decode(torch.zeros(big.shape, device="cuda"), "median")
