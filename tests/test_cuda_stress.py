"""The CUDA backend at its limits, on a real GPU: out of memory and back, the largest
transforms, and the shapes that stress a kernel's plan. Every test here needs a GPU and
skips with the reason when there is none.

The tests that fill the device keep to themselves (``test_out_of_memory_*`` release what
they took before they return); run them without pytest-xdist on a GPU shared with
nothing else.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import dprec
from dprec import rec
from dprec.hadamard import RandomizedHadamard, fwht
from dprec.sketch import CountSketch

from .conftest import CUDA, requires_cuda

if not CUDA:
    pytest.skip(f"no usable CUDA backend: {dprec.cuda.unavailable_reason()}", allow_module_level=True)
pytestmark = requires_cuda

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # pragma: no cover - dprec sees a GPU that torch does not
    pytest.skip("PyTorch has no CUDA support here", allow_module_level=True)

try:
    import cupy
except ImportError:  # pragma: no cover - CuPy is optional
    cupy = None


def _bits(x) -> np.ndarray:
    if hasattr(x, "cpu"):
        a = x.cpu().numpy()
    elif cupy is not None and isinstance(x, cupy.ndarray):
        a = cupy.asnumpy(x)
    elif hasattr(x, "get"):
        a = x.get()
    else:
        a = np.asarray(x)
    a = np.ascontiguousarray(a)
    return a.view({4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _free_bytes() -> int:
    free, _ = torch.cuda.mem_get_info()
    return int(free)


def _fill_device(keep_small_block: bool) -> list:
    """Take (nearly) all free device memory with PyTorch tensors and return them.

    With ``keep_small_block`` a small freed block stays in PyTorch's cache, so that small
    framework allocations (a function's output) still succeed while anything that needs
    new device memory fails."""
    spare = torch.empty(1 << 16, dtype=torch.float64, device="cuda") if keep_small_block else None
    held = []
    size = 1 << 34
    while size >= 1 << 20:
        try:
            held.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
        except torch.OutOfMemoryError:
            size >>= 1
    del spare
    return held


def _release(held: list) -> None:
    held.clear()
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def _cpu_logits(phi_host: np.ndarray, seed: int, bits: int) -> np.ndarray:
    return rec.logits(phi_host, seed, 3, bits, sigma=0.5, backend="cpu")


@pytest.mark.parametrize("framework", ["torch", "cupy"])
def test_out_of_memory_then_retry(framework):
    """A failed allocation raises MemoryError, leaves nothing behind, and the next calls
    (the same one, and other kernels) work: no stale CUDA error resurfaces later."""
    if framework == "cupy" and cupy is None:
        pytest.skip("CuPy is not installed")
    d, bits, seed = (1 << 22) + 3, 7, 1234
    phi_host = np.random.default_rng(0).standard_normal(d).astype(np.float32)
    phi = torch.from_numpy(phi_host).cuda() if framework == "torch" else cupy.asarray(phi_host)
    want = _cpu_logits(phi_host, seed, bits)
    held = _fill_device(keep_small_block=True)
    try:
        with pytest.raises(MemoryError, match="out of memory"):
            for _ in range(4):  # a scratch allocation, or the output, must fail before long
                rec.logits(phi, seed, 3, bits, sigma=0.5)
                held.append(torch.empty(1 << 20, dtype=torch.uint8, device="cuda"))
    finally:
        _release(held)
    got = rec.logits(phi, seed, 3, bits, sigma=0.5)
    np.testing.assert_allclose(_bits(got).view(np.float64), want, rtol=1e-12, atol=1e-9)
    x = torch.randn(1 << 20, device="cuda")
    assert np.array_equal(_bits(fwht(x)), _bits(fwht(x.cpu().numpy(), backend="cpu")))
    cs = CountSketch(1 << 20, 3, 1 << 12, seed=1)
    assert np.array_equal(_bits(cs.encode(x)), _bits(cs.encode(x.cpu().numpy(), backend="cpu")))
    torch.cuda.synchronize()


def test_out_of_memory_in_a_device_array_then_retry():
    """dprec's own allocations (DeviceArray) fail with MemoryError and recover too."""
    free = _free_bytes()
    with pytest.raises(MemoryError, match="out of memory"):
        dprec.cuda.DeviceArray((free // 4) * 2, "float32")
    out = rec.candidate(1, 2, 3, 1000, sigma=1.0, backend="cuda")
    assert np.array_equal(_bits(out), _bits(rec.candidate(1, 2, 3, 1000, sigma=1.0, backend="cpu")))


@pytest.mark.parametrize("log2n", [26, 30])
def test_fwht_at_2_26_and_2_30_bit_identical_to_cpu(log2n):
    n = 1 << log2n
    if _free_bytes() < 3 * 4 * n + (1 << 30):
        pytest.skip(f"needs {3 * 4 * n >> 30} GiB of free device memory")
    host = np.random.default_rng(log2n).standard_normal(n, dtype=np.float32)
    x = torch.from_numpy(host).cuda()
    y = fwht(x)
    want = fwht(host, backend="cpu")
    assert np.array_equal(_bits(y), _bits(want))
    del y
    fwht(x, inplace=True)
    assert np.array_equal(_bits(x), _bits(want))


@pytest.mark.parametrize("repeats", [1, 3])
@pytest.mark.parametrize("dim", [(1 << 22) + 7, (1 << 24) - 1])
def test_rotation_with_padding_and_repeats_bit_identical_to_cpu(dim, repeats):
    rot = RandomizedHadamard(dim, seed=0xFACE, repeats=repeats, group=2)
    assert rot.padded_dim > dim
    host = np.random.default_rng(dim).standard_normal((2, dim), dtype=np.float32)
    z = rot.forward(torch.from_numpy(host).cuda())
    want = rot.forward(host, backend="cpu")
    assert np.array_equal(_bits(z), _bits(want))
    back = rot.inverse(z)
    assert np.array_equal(_bits(back), _bits(rot.inverse(want, backend="cpu")))


@pytest.mark.parametrize(
    "d, rows, cols",
    [((1 << 24) + 5, 5, 1 << 16), ((1 << 23) + 1, 15, 1 << 10), ((1 << 22) + 1, 3, 1), ((1 << 22) + 1, 40, 3)],
)
def test_sketch_encode_across_batches_bit_identical_to_cpu(d, rows, cols):
    cs = CountSketch(d, rows, cols, seed=0x5EED, group=1)
    x = torch.randn(d, device="cuda", generator=torch.Generator(device="cuda").manual_seed(d))
    assert np.array_equal(_bits(cs.encode(x)), _bits(cs.encode(x.cpu().numpy(), backend="cpu")))


def test_gumbel_argmax_at_24_bits_matches_the_cpu():
    k = 1 << 24
    lg_host = np.random.default_rng(24).standard_normal(k)
    noise = rec.gumbel_noise(k, np.random.default_rng(7))
    lg = torch.from_numpy(lg_host).cuda()
    assert rec.sample_index(lg, gumbel=noise) == rec.sample_index(lg_host, gumbel=noise)
