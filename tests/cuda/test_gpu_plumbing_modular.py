"""The CUDA backend's SecAgg server-side operations (``mod_sum``, ``mod_lift``), run without a GPU.

tests/fake_cuda.py stands in for ``dprec._cuda`` (device memory is registered host memory,
every pointer is checked against its allocation, the kernels compute with the host emulation
``dprec._gpu_emulation``, so the values are a GPU's). The operations are called as the public
functions will call them: ``dprec._runtime.dispatch.kernels("cuda")`` with :class:`dprec._runtime.arrays.Array`
arguments. Covered: pointers (views at an offset, outputs made by ``_arrays.empty``), the
stream of the input, the shapes and dtype strings passed, accumulation, the checks of the
binding (mirrored by the fake) and the client-side operations' refusal. The kernels on a real
GPU are in tests/cuda/test_cuda_modular.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dprec
from dprec._runtime import arrays as _arrays
from dprec._runtime import dispatch as _dispatch
from tests import fake_cuda as fc
from tests import modular_numpy as ref
from tests.conftest import CUDA
from tests.fake_cuda import FakeGpuArray

fake_cuda = fc.fake_cuda  # the fixture, for pytest to find in this module


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _host(a: _arrays.Array) -> np.ndarray:
    obj = a.obj
    return obj.host() if isinstance(obj, FakeGpuArray) else obj.get()


@pytest.fixture
def cuda(fake_cuda):
    return _dispatch.kernels("cuda")


@pytest.mark.parametrize("bits", [1, 8, 32, 33, 64])
@pytest.mark.parametrize("accumulate", [False, True])
def test_mod_sum_pointers_stream_and_shape(fake_cuda, cuda, bits, accumulate):
    rng = np.random.default_rng(bits)
    dt = ref.storage(bits)
    data = ref.random_values(rng, (13, 301), bits)
    start = ref.random_values(rng, 301, bits)
    xs = _arrays.read(FakeGpuArray(fake_cuda, data, stream=4242), "xs")
    out = _arrays.read(FakeGpuArray(fake_cuda, start, stream=4242), "out")
    fake_cuda.calls.clear()
    cuda.mod_sum(xs, bits, out, accumulate)
    (call,) = fake_cuda.calls_named("mod_sum")
    assert call.stream == 4242
    assert call.args == (xs.ptr, np.dtype(dt).name, 13, 301, bits, out.ptr, np.dtype(dt).name, accumulate)
    assert _same_bits(_host(out), ref.sum_numpy(data, bits, start if accumulate else None))


def test_mod_sum_into_a_new_device_array(fake_cuda, cuda):
    """An output made like the input (a dprec DeviceArray for a third-party array) on its
    stream; its 0xFF bytes are ignored when accumulate is False."""
    data = ref.random_values(np.random.default_rng(1), (7, 1000), 48)
    xs = _arrays.read(FakeGpuArray(fake_cuda, data, stream=77), "xs")
    out = _arrays.empty(xs, (1000,), "uint64")
    assert isinstance(out.obj, dprec.cuda.DeviceArray) and out.stream == 77
    cuda.mod_sum(xs, 48, out, False)
    assert _same_bits(out.obj.get(), ref.sum_numpy(data, 48))
    assert fake_cuda.kernel_streams() == {77}


def test_mod_sum_of_rows_at_an_offset(fake_cuda, cuda):
    """Clients 3 .. 8 of a larger batch, through a flat view: the pointer moves by whole rows
    (the fake's bounds check catches an n * m that runs past the allocation)."""
    data = ref.random_values(np.random.default_rng(2), (10, 257), 32)
    xs = _arrays.read(FakeGpuArray(fake_cuda, data), "xs")
    part = xs.flat(3 * 257, 6 * 257).reshaped((6, 257))
    out = _arrays.read(FakeGpuArray(fake_cuda, np.zeros(257, np.uint32)), "out")
    cuda.mod_sum(part, 32, out, False)
    assert _same_bits(_host(out), ref.sum_numpy(data[3:9], 32))
    assert fake_cuda.calls_named("mod_sum")[0].args[0] == xs.ptr + 3 * 257 * 4
    # the fake's bounds check: six rows from row 5 run one row past the allocation
    with pytest.raises(ValueError, match="xs is not CUDA device memory for the whole call"):
        fake_cuda.mod_sum(0, 0, xs.offset(5 * 257), "uint32", 6, 257, 32, out.ptr, "uint32", False)


def test_mod_sum_flat_xs_is_split_by_out(fake_cuda, cuda):
    """A 1-D xs of n * m elements is n rows of out's length."""
    data = ref.random_values(np.random.default_rng(3), (4, 50), 16)
    xs = _arrays.read(FakeGpuArray(fake_cuda, data.reshape(-1)), "xs")
    out = _arrays.empty(xs, (50,), "uint32")
    cuda.mod_sum(xs, 16, out, False)
    assert _same_bits(out.obj.get(), ref.sum_numpy(data, 16))
    assert fake_cuda.calls_named("mod_sum")[0].args[2:4] == (4, 50)


def test_mod_sum_shape_mismatch_is_refused_before_the_kernel(fake_cuda, cuda):
    xs = _arrays.read(FakeGpuArray(fake_cuda, np.zeros((4, 50), np.uint32)), "xs")
    for m in (49, 51, 200 // 3):
        out = _arrays.empty(xs, (m,), "uint32")
        with pytest.raises(ValueError, match=f"xs must have shape \\(n, {m}\\)"):
            cuda.mod_sum(xs, 16, out, False)
    out = _arrays.empty(xs, (25,), "uint32")  # 200 = 8 * 25, but xs is (4, 50)
    with pytest.raises(ValueError, match="xs must have shape \\(n, 25\\)"):
        cuda.mod_sum(xs, 16, out, False)
    assert not fake_cuda.calls_named("mod_sum")


def test_mod_sum_dtype_and_bits_checks(fake_cuda, cuda):
    """What the binding refuses (the fake mirrors bind_cuda_modular.cpp)."""
    x32 = _arrays.read(FakeGpuArray(fake_cuda, np.zeros((2, 8), np.uint32)), "xs")
    x64 = _arrays.read(FakeGpuArray(fake_cuda, np.zeros((2, 8), np.uint64)), "xs")
    o32, o64 = _arrays.empty(x32, (8,), "uint32"), _arrays.empty(x32, (8,), "uint64")
    with pytest.raises(TypeError, match="xs must have dtype uint64 for bits = 33"):
        cuda.mod_sum(x32, 33, o64, False)
    with pytest.raises(TypeError, match="xs must have dtype uint32 for bits = 12"):
        cuda.mod_sum(x64, 12, o32, False)
    with pytest.raises(TypeError, match="out must have dtype uint32 for bits = 12"):
        cuda.mod_sum(x32, 12, o64, False)
    with pytest.raises(ValueError, match="bits must be in 1 .. 64, got 65"):
        cuda.mod_sum(x64, 65, o64, False)
    f32 = _arrays.read(FakeGpuArray(fake_cuda, np.zeros((2, 8), np.float32)), "xs")
    with pytest.raises(TypeError, match="xs must be uint32 or uint64"):
        cuda.mod_sum(f32, 12, o32, False)


@pytest.mark.parametrize("bits", [1, 31, 32, 33, 63, 64])
@pytest.mark.parametrize("dtype, scale", [(np.int64, 1.0), (np.float64, 0.125), (np.float32, 1.0 / 3.0)])
def test_mod_lift_pointers_stream_and_values(fake_cuda, cuda, bits, dtype, scale):
    rng = np.random.default_rng(bits)
    data = ref.random_values(rng, (3, 333), bits, full_width=True)
    x = _arrays.read(FakeGpuArray(fake_cuda, data, stream=999), "x")
    out = _arrays.empty(x, x.shape, np.dtype(dtype).name)
    fake_cuda.calls.clear()
    cuda.mod_lift(x, bits, scale, out)
    (call,) = fake_cuda.calls_named("mod_lift")
    assert call.stream == 999
    assert call.args == (x.ptr, np.dtype(ref.storage(bits)).name, 999, bits, scale, out.ptr, np.dtype(dtype).name)
    assert _same_bits(out.obj.get().reshape(-1), ref.lift_numpy(data.reshape(-1), bits, scale, dtype))


def test_mod_lift_checks(fake_cuda, cuda):
    x = _arrays.read(FakeGpuArray(fake_cuda, np.zeros(10, np.uint32)), "x")
    with pytest.raises(ValueError, match="out must have 10 elements like x, got 9"):
        cuda.mod_lift(x, 8, 1.0, _arrays.empty(x, (9,), "float64"))
    with pytest.raises(ValueError, match="scale must be 1 for an int64 out"):
        cuda.mod_lift(x, 8, 0.5, _arrays.empty(x, (10,), "int64"))
    with pytest.raises(ValueError, match="scale must be finite"):
        cuda.mod_lift(x, 8, float("nan"), _arrays.empty(x, (10,), "float32"))
    with pytest.raises(TypeError, match="out must be int64, float64 or float32"):
        cuda.mod_lift(x, 8, 1.0, _arrays.empty(x, (10,), "uint32"))
    with pytest.raises(TypeError, match="x must have dtype uint64 for bits = 40"):
        cuda.mod_lift(x, 40, 1.0, _arrays.empty(x, (10,), "float64"))
    short = _arrays.read(FakeGpuArray(fake_cuda, np.zeros(9, np.uint32)), "x")
    # a size past the allocation is caught by the fake's bounds check
    with pytest.raises(ValueError, match="x is not CUDA device memory for the whole call"):
        fake_cuda.mod_lift(0, 0, short.ptr, "uint32", 10, 8, 1.0, _arrays.empty(x, (10,), "int64").ptr, "int64")


def test_sum_then_lift_on_the_fake_gpu(fake_cuda, cuda):
    """The server's round: 200 clients' signed vectors mod 2**24, summed and lifted on the GPU."""
    rng = np.random.default_rng(9)
    signed = rng.integers(-1000, 1000, size=(200, 4096))
    xs = _arrays.read(FakeGpuArray(fake_cuda, (signed % (1 << 24)).astype(np.uint32)), "xs")
    total = _arrays.empty(xs, (4096,), "uint32")
    cuda.mod_sum(xs, 24, total, False)
    lifted = _arrays.empty(xs, (4096,), "float64")
    cuda.mod_lift(total, 24, 0.5, lifted)
    assert np.array_equal(lifted.obj.get(), signed.sum(axis=0) * 0.5)
    assert [c.name for c in fake_cuda.calls if c.name.startswith("mod_")] == ["mod_sum", "mod_lift"]


@pytest.mark.parametrize(
    "op, args",
    [
        ("discrete_gaussian", lambda a: (a, 1, 2.0)),
        ("skellam", lambda a: (a, 1, 4.0)),
        ("conditional_round", lambda a: (a, 1, 0, 0, a)),
        ("mod_reduce", lambda a: (a, 8, a)),
    ],
)
def test_client_side_operations_run_on_the_host(fake_cuda, cuda, op, args):
    a = _arrays.read(FakeGpuArray(fake_cuda, np.zeros(8, np.int64)), "x")
    with pytest.raises(ValueError, match=f"{op} is a client-side SecAgg operation .* runs on the host"):
        getattr(cuda, op)(*args(a))
    assert not [c for c in fake_cuda.calls if c.stream is not None]  # nothing was queued


def test_bench_script_without_a_gpu_exits_cleanly():
    script = Path(__file__).resolve().parents[2] / "bench" / "bench_gpu_secagg.py"
    if not script.exists():
        pytest.skip("bench/ is not shipped beside the tests")
    if CUDA:
        pytest.skip("a GPU is present: the benchmark would measure (scripts/gpu_check.sh runs it)")
    proc = subprocess.run([sys.executable, str(script), "--quick"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("bench_gpu_secagg: cannot run here:") and len(proc.stdout.splitlines()) == 1
