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
from dprec.transforms.hadamard import RandomizedHadamard, fwht
from dprec.transforms.sketch import CountSketch
from tests.conftest import gpu_test_modules, requires_cuda

torch, cupy = gpu_test_modules()  # skips this module without a usable GPU (with the reason)
pytestmark = requires_cuda


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


# ---------------------------------------------------------------------------------------
# Memory: the caller's allocator, stream-ordered frees, DLPack lifetimes (items 4, 7, 8)
# ---------------------------------------------------------------------------------------


def test_scratch_comes_from_pytorchs_caching_allocator():
    x = torch.randn((1 << 22) + 3, device="cuda")
    torch.cuda.synchronize()
    reserved = dprec.cuda.memory_pool_reserved()
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    rec.logits(x, 5, 1, 7, sigma=1.0)  # norm scratch + LLR partial sums
    CountSketch(x.numel(), 3, 1 << 12, seed=1).encode(x)  # the sort's keys, values, CUB storage
    torch.cuda.synchronize()
    assert torch.cuda.memory_stats()["allocation.all.allocated"] >= before + 5
    assert dprec.cuda.memory_pool_reserved() == reserved  # dprec's own pool untouched


def test_dprec_runs_while_pytorch_caches_all_free_memory():
    """PyTorch keeps freed blocks in its cache: with dprec's scratch in that same cache a call
    succeeds where a separate allocator would find the device full."""
    x = torch.randn(1 << 24, device="cuda")
    held = _fill_device(keep_small_block=False)
    del held[:]  # back to PyTorch's cache, not to the driver
    try:
        assert _free_bytes() < 64 << 20
        z = torch.empty_like(x)
        y = fwht(x)  # a work buffer of 64 MiB, and the norm check's scratch
        rot = RandomizedHadamard(x.numel() - 5, seed=3)
        rot.forward(x[: x.numel() - 5].reshape(1, -1))
        del z, y
    finally:
        _release(held)


def test_a_device_array_is_freed_in_stream_order_without_waiting():
    s = torch.cuda.Stream()
    a = dprec.cuda.DeviceArray(1 << 20, "float32", stream=s.cuda_stream)
    with torch.cuda.stream(s):
        torch.cuda._sleep(50_000_000)
        del a
        assert not s.query()  # freeing did not synchronise the stream (or the device)
    s.synchronize()


def test_the_pool_keeps_memory_up_to_its_release_threshold():
    threshold = dprec.cuda.memory_pool_release_threshold()
    assert 0 < threshold <= 1 << 30
    try:
        dprec.cuda.set_memory_pool_release_threshold(64 << 20)
        a = dprec.cuda.DeviceArray(8 << 20, "uint32")  # 32 MiB, below the threshold
        del a
        torch.cuda.synchronize()
        assert dprec.cuda.memory_pool_reserved() >= 32 << 20  # kept for reuse
        dprec.cuda.set_memory_pool_release_threshold(0)
        b = dprec.cuda.DeviceArray(1, "uint32")
        del b
        gc.collect()
        dprec.cuda.empty_cache()
        assert dprec.cuda.memory_pool_reserved() < 32 << 20  # handed back
    finally:
        dprec.cuda.set_memory_pool_release_threshold(threshold)


class _DLPackOnly:
    """A GPU array that only speaks DLPack (like a JAX array)."""

    def __init__(self, t) -> None:
        self.t = t

    def __dlpack__(self, stream=None):
        return self.t.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def test_a_dlpack_import_is_released_only_after_its_work():
    legacy = torch.cuda.default_stream()
    assert legacy.cuda_stream == 0, "PyTorch's default stream is not the legacy default stream here"
    out = torch.zeros(1 << 20, device="cuda")
    rec.candidate(1, 2, 3, out.numel(), sigma=1.0, out=out)  # kernels loaded
    torch.cuda.synchronize()
    with torch.cuda.stream(legacy):
        torch.cuda._sleep(50_000_000)
        rec.candidate(1, 2, 3, out.numel(), sigma=1.0, out=out)  # a PyTorch tensor: no wait
        assert not legacy.query()
        torch.cuda._sleep(50_000_000)
        rec.candidate(1, 2, 3, out.numel(), sigma=1.0, out=_DLPackOnly(out))
        # The import was released on return, and only after its kernel had run.
        assert legacy.query()
    want = rec.candidate(1, 2, 3, out.numel(), sigma=1.0, backend="cpu")
    assert np.array_equal(_bits(out), _bits(want))


# ---------------------------------------------------------------------------------------
# Kernel loading (lazy module loading waits for the device)
# ---------------------------------------------------------------------------------------

_FIRST_CALLS = """
import numpy as np, torch, dprec
from dprec import rec
s = torch.cuda.Stream()
out = torch.zeros(1 << 20, device="cuda")
out.fill_(1.0); torch.cuda._sleep(1000); torch.cuda.synchronize()  # PyTorch's kernels loaded
with torch.cuda.stream(s):
    torch.cuda._sleep(50_000_000)
    dprec.philox.normals(7, out.numel(), out=out)  # the first dprec call: may wait, once
    torch.cuda._sleep(50_000_000)
    # Another kernel, never launched before: loaded already, so nothing waits.
    rec.accumulate(out, 0, np.array([1, 2], np.uint64), np.array([3, 4]), sigma=0.5)
    print("waited" if s.query() else "queued")
s.synchronize()
"""


@pytest.mark.parametrize("loading", ["LAZY", "EAGER"])
def test_a_kernel_first_used_later_does_not_wait(loading):
    import os
    import subprocess
    import sys

    env = dict(os.environ, CUDA_MODULE_LOADING=loading)
    r = subprocess.run([sys.executable, "-c", _FIRST_CALLS], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "queued"
