"""The Python GPU paths of dprec.transforms.hadamard, run without a GPU.

tests/fake_cuda.py stands in for ``dprec._cuda`` (device memory is registered host memory,
every pointer is checked against its allocation, kernels compute with the host emulation
of the CUDA kernels), so these tests check what the Python layer does with GPU arrays:
which framework and shape come back, in-place versus out-of-place, float16 conversion,
the stream every call is queued on, and the errors. The kernels themselves are checked in
tests/cuda/test_gpu_emulation_hadamard.py (emulation) and tests/cuda/test_cuda_hadamard.py (a GPU).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dprec
from dprec._runtime import native as _native
from dprec.transforms.hadamard import RandomizedHadamard, fwht
from tests import fake_cuda as fc
from tests.conftest import CUDA, requires_native
from tests.fake_cuda import FakeCuda, FakeGpuArray

pytestmark = requires_native

fake_cuda = fc.fake_cuda  # the fixture, for pytest to find in this module

STREAM = 4242


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(np.uint32 if a.dtype == np.float32 else np.uint64)


def _host(x) -> np.ndarray:
    return x.host() if isinstance(x, FakeGpuArray) else x.get()


def _cpu_fwht(x: np.ndarray, normalize: bool = True) -> np.ndarray:
    return fwht(x, normalize=normalize, backend="cpu")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1,), (8,), (3, 16), (2, 2, 1024), (1 << 15,)])
def test_fwht_out_of_place_on_a_gpu_array(fake_cuda: FakeCuda, dtype, shape):
    rng = np.random.default_rng(sum(shape))
    host = rng.standard_normal(shape).astype(dtype)
    x = FakeGpuArray(fake_cuda, host, stream=STREAM)
    for normalize in (True, False):
        y = fwht(x, normalize=normalize)
        assert isinstance(y, dprec.cuda.DeviceArray)  # the framework of a bare interface
        assert y.shape == shape and y.dtype == np.dtype(dtype)
        assert np.array_equal(_bits(y.get()), _bits(_cpu_fwht(host, normalize)))
        assert np.array_equal(x.host(), host), "x must be untouched"
    assert fake_cuda.kernel_streams() == {STREAM}
    assert len(fake_cuda.calls_named("fwht")) == 2
    assert fake_cuda.calls_named("norm_stats"), "GPU input is checked for NaN and infinity"


def test_fwht_in_place_on_a_gpu_array(fake_cuda: FakeCuda):
    host = np.random.default_rng(1).standard_normal((5, 64)).astype(np.float32)
    x = FakeGpuArray(fake_cuda, host, stream=STREAM)
    allocations = len(fake_cuda.calls_named("DeviceBuffer"))
    assert fwht(x, inplace=True) is x
    assert np.array_equal(_bits(x.host()), _bits(_cpu_fwht(host)))
    call = fake_cuda.calls_named("fwht")[0]
    assert call.args[0] == call.args[1] == x.ptr and call.stream == STREAM
    assert len(fake_cuda.calls_named("DeviceBuffer")) == allocations, "in place allocates nothing"


def test_fwht_converts_half_precision_to_float32(fake_cuda: FakeCuda):
    host = np.random.default_rng(2).standard_normal(32).astype(np.float16)
    x = FakeGpuArray(fake_cuda, host)
    y = fwht(x)
    assert y.dtype == np.float32
    assert np.array_equal(_bits(y.get()), _bits(_cpu_fwht(host)))
    with pytest.raises(TypeError, match="float32 or float64"):
        fwht(x, inplace=True)


def test_fwht_gpu_errors(fake_cuda: FakeCuda):
    with pytest.raises(ValueError, match="x must be C-contiguous"):
        fwht(FakeGpuArray(fake_cuda, np.zeros((4, 4), np.float32), strides=(4, 16)))
    with pytest.raises(ValueError, match="power-of-two"):
        fwht(FakeGpuArray(fake_cuda, np.zeros(12, np.float32)))
    with pytest.raises(TypeError, match="integer"):
        fwht(FakeGpuArray(fake_cuda, np.zeros(8, np.int32)))
    with pytest.raises(ValueError, match="NaN"):
        fwht(FakeGpuArray(fake_cuda, np.array([1, np.nan, 0, 0], np.float32)))
    with pytest.raises(ValueError, match="infinite"):
        fwht(FakeGpuArray(fake_cuda, np.array([1, np.inf], np.float64)), inplace=True)
    with pytest.raises(ValueError, match="at least one axis"):
        fwht(FakeGpuArray(fake_cuda, np.ones(1, np.float32), shape=()))
    with pytest.raises(ValueError, match="empty"):
        fwht(FakeGpuArray(fake_cuda, np.zeros((0, 4), np.float32)))
    ro = FakeGpuArray(fake_cuda, np.ones(8, np.float32), readonly=True)
    with pytest.raises(ValueError, match="read-only"):
        fwht(ro, inplace=True)
    np.testing.assert_allclose(fwht(ro).get()[0], np.sqrt(8))  # out of place is fine
    with pytest.raises(ValueError, match="backend='cpu' runs on the host"):
        fwht(FakeGpuArray(fake_cuda, np.ones(8, np.float32)), backend="cpu")
    with pytest.raises(ValueError, match="on the host, but backend='cuda'"):
        fwht(np.ones(8, np.float32), backend="cuda")
    assert len(fake_cuda.calls_named("fwht")) == 1, "no kernel runs on bad input (only for the read-only x)"


@pytest.mark.parametrize("dim", [1, 3, 8, 1000, 8193])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rotation_on_gpu_arrays(fake_cuda: FakeCuda, dim, dtype):
    rng = np.random.default_rng(dim)
    rot = RandomizedHadamard(dim, seed=99, repeats=2, group=5)
    host = rng.standard_normal((3, dim)).astype(dtype)
    x = FakeGpuArray(fake_cuda, host, stream=STREAM)
    z = rot.forward(x)
    assert isinstance(z, dprec.cuda.DeviceArray) and z.shape == (3, rot.padded_dim) and z.dtype == np.dtype(dtype)
    want = rot.forward(host, backend="cpu")
    assert np.array_equal(_bits(z.get()), _bits(want))
    back = rot.inverse(z)
    assert back.shape == (3, dim)
    assert np.array_equal(_bits(back.get()), _bits(rot.inverse(want, backend="cpu")))
    np.testing.assert_allclose(back.get(), host, atol=1e-5 if dtype == np.float32 else 1e-12)
    assert np.array_equal(x.host(), host)
    assert fake_cuda.kernel_streams() == {STREAM}
    assert [c.args[-1] for c in fake_cuda.calls_named("randomized_hadamard")] == [False, True]


def test_rotation_gpu_errors(fake_cuda: FakeCuda):
    rot = RandomizedHadamard(10, seed=1)
    with pytest.raises(ValueError, match="length dim=10"):
        rot.forward(FakeGpuArray(fake_cuda, np.ones(16, np.float32)))
    with pytest.raises(ValueError, match="padded_dim=16"):
        rot.inverse(FakeGpuArray(fake_cuda, np.ones(10, np.float32)))
    with pytest.raises(ValueError, match="y must be C-contiguous"):
        rot.inverse(FakeGpuArray(fake_cuda, np.ones((16, 2), np.float32), shape=(2, 16), strides=(4, 8)))
    with pytest.raises(TypeError, match="integer"):
        rot.forward(FakeGpuArray(fake_cuda, np.ones(10, np.int64)))
    with pytest.raises(ValueError, match="NaN"):
        rot.forward(FakeGpuArray(fake_cuda, np.full(10, np.nan, np.float32)))
    with pytest.raises(ValueError, match="backend='reference' runs on the host"):
        rot.forward(FakeGpuArray(fake_cuda, np.ones(10, np.float32)), backend="reference")
    with pytest.raises(ValueError, match="on the host, but backend='cuda'"):
        rot.inverse(np.ones(16), backend="cuda")
    half = rot.forward(FakeGpuArray(fake_cuda, np.ones(10, np.float16)))
    assert half.dtype == np.float32


def test_binding_layer_checks(fake_cuda: FakeCuda):
    """The fake mirrors bind_cuda_hadamard.cpp's checks (so plumbing bugs fail loudly)."""
    buf = fake_cuda.DeviceBuffer(0, 0, 64)  # sixteen float32, legacy default stream
    with pytest.raises(ValueError, match="power of two"):
        fake_cuda.fwht(0, 0, buf.ptr, buf.ptr, "float32", 1, 12, True)
    with pytest.raises(ValueError, match="not CUDA device memory"):  # 2 x 16 floats in 64 bytes
        fake_cuda.fwht(0, 0, buf.ptr, buf.ptr, "float32", 2, 16, True)
    with pytest.raises(TypeError, match="float32 or float64"):
        fake_cuda.fwht(0, 0, buf.ptr, buf.ptr, "float16", 1, 16, True)
    with pytest.raises(ValueError, match="different"):
        fake_cuda.randomized_hadamard(0, 0, buf.ptr, buf.ptr, "float32", 1, 8, 8, 1, 0, 1, False)


def test_without_a_cuda_backend_gpu_arrays_are_refused(monkeypatch):
    """No usable CUDA backend: a GPU array is a clear ValueError, not a crash."""
    fake = FakeCuda()
    x = FakeGpuArray(fake, np.ones(8, np.float32))  # memory allocated while nothing is installed
    fc.install(monkeypatch, fake)
    monkeypatch.setattr(_native, "_cuda_reason", "no GPU here (test)")
    with pytest.raises(ValueError, match="no GPU here"):
        fwht(x)


class _DlpackOnCuda:
    """Claims to live on cuda:0 through the DLPack protocol (nothing else)."""

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None):  # pragma: no cover - never reached without a backend
        raise AssertionError("must not be consumed when no CUDA backend is usable")


@pytest.mark.skipif(CUDA, reason="a usable CUDA backend is present")
def test_gpu_arrays_without_cuda_are_a_clear_error():
    gpu = _DlpackOnCuda()
    for call in (
        lambda: fwht(gpu),
        lambda: fwht(gpu, inplace=True),
        lambda: RandomizedHadamard(4, 1).forward(gpu),
        lambda: RandomizedHadamard(4, 1).inverse(gpu),
    ):
        with pytest.raises(ValueError, match="backend='cuda' is not available"):
            call()


def test_bench_script_without_a_gpu_exits_cleanly():
    script = Path(__file__).resolve().parents[2] / "bench" / "bench_gpu_hadamard.py"
    if not script.exists():
        pytest.skip("bench/ is not shipped beside the tests")
    if CUDA:
        pytest.skip("a GPU is present: the benchmark would measure (run it by hand)")
    proc = subprocess.run([sys.executable, str(script), "--quick"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "nothing to measure on this machine" in proc.stdout


def test_gpu_overflow_is_refused_as_on_the_host(fake_cuda: FakeCuda):
    """One validation path: an overflowing transform raises on the GPU too, and in place the
    caller's array is left as it was (the transform is first tried on a copy)."""
    host = np.full((2, 8), 3e38, np.float32)
    for inplace in (False, True):
        x = FakeGpuArray(fake_cuda, host.copy(), stream=STREAM)
        with pytest.raises(ValueError, match="overflows float32"):
            fwht(x, normalize=False, inplace=inplace)
        assert np.array_equal(x.host(), host)
    x = FakeGpuArray(fake_cuda, np.full(5, 3e38, np.float32), stream=STREAM)
    with pytest.raises(ValueError, match="rotation of x overflows"):
        RandomizedHadamard(5, 1).forward(x)
    # Values just small enough: transformed in place, no trial copy.
    small = np.full(8, 1.0, np.float32)
    x = FakeGpuArray(fake_cuda, small.copy(), stream=STREAM)
    fwht(x, normalize=False, inplace=True)
    assert np.array_equal(x.host(), _cpu_fwht(small, normalize=False))
