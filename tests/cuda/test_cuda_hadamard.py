"""The GPU Walsh-Hadamard transform and randomized rotation against the CPU, bit for bit:
single long vectors and batches of short rows, float32/float64, PyTorch and CuPy inputs,
the caller's stream, in place, and bad input. Every test here needs a GPU and skips with
the reason when there is none; tests/cuda/test_gpu_emulation_hadamard.py and
tests/cuda/test_gpu_plumbing_hadamard.py cover what can be checked without one.
"""

from __future__ import annotations

import numpy as np
import pytest

from dprec._runtime import native as _native
from dprec.transforms.hadamard import RandomizedHadamard, fwht
from tests.conftest import gpu_test_modules, requires_cuda

torch, cupy = gpu_test_modules()  # skips this module without a usable GPU (with the reason)
pytestmark = requires_cuda

_TORCH = {np.float32: torch.float32, np.float64: torch.float64}


def _bits(x) -> np.ndarray:
    a = x.cpu().numpy() if hasattr(x, "cpu") else (x.get() if hasattr(x, "get") else np.asarray(x))
    a = np.ascontiguousarray(a)
    return a.view(np.uint32 if a.dtype == np.float32 else np.uint64)


def _random(shape, dtype, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("log2n", [0, 1, 2, 5, 10, 12, 13, 14, 16, 18, 20, 22, 23, 24])
def test_single_vector_bit_identical_to_cpu(dtype, log2n):
    host = _random(1 << log2n, dtype, log2n)
    x = torch.from_numpy(host).cuda()
    for normalize in (True, False):
        y = fwht(x, normalize=normalize)
        assert isinstance(y, torch.Tensor) and y.device == x.device and y.dtype == x.dtype
        assert np.array_equal(_bits(y), _bits(fwht(host, normalize=normalize, backend="cpu"))), normalize
    assert np.array_equal(_bits(x), _bits(host)), "out of place leaves x alone"


def _free_bytes() -> int:
    return torch.cuda.mem_get_info()[0]


def test_single_vector_2_26_float32():
    # A plain 1-D vector (no CuPy, no 2-D slicing): the largest size of the performance targets, two passes
    # with the opt-in buffers.
    host = _random(1 << 26, np.float32, 26)
    want = fwht(host.copy(), normalize=True, backend="cpu")
    x = torch.from_numpy(host).cuda()
    assert fwht(x, normalize=True, inplace=True) is x
    assert np.array_equal(_bits(x), _bits(want))


@pytest.mark.parametrize(
    ("dtype", "log2n", "rows"),
    [
        # the largest single-pass shapes: one 128 KiB tile per row (2^15 float32, 2^14
        # float64), a batch filling many blocks
        (np.float32, 15, 64),
        (np.float64, 14, 64),
        # the largest two-pass shapes with the opt-in: 15 + 12 stages (float32, 512 MiB)
        # and 14 + 12 (float64, 512 MiB), 32-byte column runs in the strided pass
        (np.float32, 27, 1),
        (np.float64, 26, 1),
        # the first shapes of each plan change: 2^16 (tile + 3 stages in the store) and
        # 2^23/2^24 (tile and strided buffers of different sizes)
        (np.float32, 16, 3),
        (np.float32, 23, 1),
        (np.float64, 23, 1),
    ],
)
def test_largest_single_and_two_pass_shapes(dtype, log2n, rows):
    n = 1 << log2n
    size = rows * n * np.dtype(dtype).itemsize
    if _free_bytes() < 3 * size + (1 << 28):
        pytest.skip(f"needs {3 * size >> 20} MiB of free device memory")
    host = _random((rows, n), dtype, log2n)
    want = fwht(host, normalize=log2n % 2 == 1, backend="cpu")
    x = torch.from_numpy(host).cuda()
    y = fwht(x, normalize=log2n % 2 == 1)
    assert np.array_equal(_bits(y), _bits(want))
    del y
    fwht(x, normalize=log2n % 2 == 1, inplace=True)
    assert np.array_equal(_bits(x), _bits(want))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unaligned_views_take_the_scalar_path(dtype):
    # A view 1 element into its storage is not 16-byte aligned: the kernel's load and store
    # fall back from 16-byte vectors to scalars, with the same bits.
    rows, n = 3, 1 << 16
    storage = torch.from_numpy(_random(rows * n + 1, dtype, 7)).cuda()
    view = storage[1:].view(rows, n)
    assert view.data_ptr() % 16 != 0
    host = view.cpu().numpy()
    want = fwht(host, backend="cpu")
    assert np.array_equal(_bits(fwht(view)), _bits(want))
    fwht(view, inplace=True)
    assert np.array_equal(_bits(view), _bits(want))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("rows", "log2n"), [(1 << 14, 10), (1 << 12, 12), (1000, 3), (3, 15), (7, 1), (5, 0)])
def test_batches_bit_identical_to_cpu(dtype, rows, log2n):
    host = _random((rows, 1 << log2n), dtype, rows + log2n)
    y = fwht(torch.from_numpy(host).cuda())
    assert np.array_equal(_bits(y), _bits(fwht(host, backend="cpu")))


def test_in_place_and_half_precision():
    host = _random((4, 4096), np.float32, 1)
    x = torch.from_numpy(host).cuda()
    assert fwht(x, inplace=True) is x
    assert np.array_equal(_bits(x), _bits(fwht(host, backend="cpu")))
    h = torch.from_numpy(host).cuda().to(torch.bfloat16)
    y = fwht(h)
    assert y.dtype == torch.float32
    assert np.array_equal(_bits(y), _bits(fwht(h.cpu(), backend="cpu")))
    with pytest.raises(TypeError, match="float32 or float64"):
        fwht(h, inplace=True)


def test_runs_on_the_callers_stream():
    host = _random((64, 1 << 14), np.float32, 2)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        x = torch.from_numpy(host).cuda(non_blocking=False)
        y = fwht(x)
        z = fwht(y)  # orthonormal: back to x, up to rounding
    s.synchronize()
    assert np.array_equal(_bits(y), _bits(fwht(host, backend="cpu")))
    np.testing.assert_allclose(z.cpu().numpy(), host, atol=1e-5)


@pytest.mark.skipif(cupy is None, reason="CuPy is not installed")
def test_cupy_input_gives_cupy_output():
    host = _random((3, 1 << 16), np.float64, 3)
    x = cupy.asarray(host)
    y = fwht(x)
    assert isinstance(y, cupy.ndarray)
    assert np.array_equal(_bits(cupy.asnumpy(y)), _bits(fwht(host, backend="cpu")))
    rot = RandomizedHadamard(1000, seed=5, repeats=2)
    z = rot.forward(cupy.asarray(host[:, :1000]))
    assert isinstance(z, cupy.ndarray)
    assert np.array_equal(_bits(cupy.asnumpy(z)), _bits(rot.forward(host[:, :1000], backend="cpu")))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("dim", [1, 3, 1000, 8193, (1 << 20) + 1, 5_000_000])
def test_rotation_bit_identical_to_cpu(dtype, dim):
    rows = 1 if dim > 10_000 else 4
    rot = RandomizedHadamard(dim, seed=0xABCDEF, repeats=2, group=9)
    host = _random((rows, dim), dtype, dim)
    x = torch.from_numpy(host).cuda()
    z = rot.forward(x)
    want = rot.forward(host, backend="cpu")
    assert z.shape == (rows, rot.padded_dim)
    assert np.array_equal(_bits(z), _bits(want))
    back = rot.inverse(z)
    assert back.shape == (rows, dim)
    assert np.array_equal(_bits(back), _bits(rot.inverse(want, backend="cpu")))


def test_bad_input():
    x = torch.ones(8, device="cuda")
    with pytest.raises(ValueError, match="contiguous"):
        fwht(torch.ones(8, 8, device="cuda").T)
    with pytest.raises(ValueError, match="power-of-two"):
        fwht(torch.ones(12, device="cuda"))
    with pytest.raises(TypeError, match="integer"):
        fwht(torch.ones(8, device="cuda", dtype=torch.int32))
    with pytest.raises(ValueError, match="NaN"):
        fwht(torch.tensor([1.0, float("nan")], device="cuda"))
    with pytest.raises(ValueError, match="backend='cpu' runs on the host"):
        fwht(x, backend="cpu")
    with pytest.raises(ValueError, match="on the host, but backend='cuda'"):
        fwht(np.ones(8), backend="cuda")
    with pytest.raises(ValueError, match="length dim=10"):
        RandomizedHadamard(10, seed=1).forward(x)
    cm = _native.cuda_module()
    with pytest.raises(ValueError, match="not CUDA device memory"):
        host = np.ones(8, np.float32)
        cm.fwht(0, 0, host.ctypes.data, host.ctypes.data, "float32", 1, 8, True)
