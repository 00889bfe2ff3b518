"""The SecAgg server-side kernels on a real GPU: the modular sum of 1000 clients' vectors is the
exact sum mod M, the centered lift is the CPU's formula bit for bit, PyTorch and CuPy inputs,
streams, the grid-stride loop past 2**24 columns, bad pointers. The operations are called
through the CUDA backend (``dprec._runtime.dispatch.kernels("cuda")``) as the public functions call
them. Every test here needs a GPU and skips with the reason when there is none;
tests/cuda/test_gpu_emulation_modular.py and tests/cuda/test_gpu_plumbing_modular.py cover what can be
checked without one.
"""

from __future__ import annotations

import numpy as np
import pytest

from dprec._runtime import arrays as _arrays
from dprec._runtime import dispatch as _dispatch
from dprec._runtime import native as _native
from tests import modular_numpy as ref
from tests.conftest import EMULATION, gpu_emulation, gpu_test_modules, requires_cuda

torch, cupy = gpu_test_modules()  # skips this module without a usable GPU (with the reason)
pytestmark = requires_cuda

_SIGNED = {np.dtype(np.uint32): (np.int32, torch.int32, torch.uint32),
           np.dtype(np.uint64): (np.int64, torch.int64, torch.uint64)}


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _to_gpu(a: np.ndarray):
    """A torch CUDA tensor of ``a``; unsigned dtypes travel as their signed twins (PyTorch's
    support of uint32 / uint64 beyond views and copies is limited)."""
    a = np.ascontiguousarray(a)
    if a.dtype in _SIGNED:
        np_signed, _, t_unsigned = _SIGNED[a.dtype]
        return torch.from_numpy(a.view(np_signed)).to("cuda").view(t_unsigned)
    return torch.from_numpy(a).to("cuda")


def _to_host(t) -> np.ndarray:
    if cupy is not None and isinstance(t, cupy.ndarray):
        return cupy.asnumpy(t)
    for np_dtype, (_, t_signed, t_unsigned) in _SIGNED.items():
        if t.dtype == t_unsigned:
            return t.view(t_signed).cpu().numpy().view(np_dtype)
    return t.cpu().numpy()


def _cuda():
    return _dispatch.kernels("cuda")


def _sum(xs, bits: int, out=None, accumulate: bool = False):
    """mod_sum through the backend; a new torch output when ``out`` is None."""
    a = _arrays.read(xs, "xs")
    o = _arrays.read(out, "out") if out is not None else _arrays.empty(a, (a.shape[-1],), a.dtype)
    _cuda().mod_sum(a, bits, o, accumulate)
    return o.obj


def _lift(x, bits: int, scale: float = 1.0, dtype: str = "int64"):
    a = _arrays.read(x, "x")
    o = _arrays.empty(a, a.shape, dtype)
    _cuda().mod_lift(a, bits, scale, o)
    return o.obj


@pytest.mark.parametrize("bits", [8, 16, 32, 33, 48, 64])
def test_sum_of_1000_clients_is_exact(bits):
    """1000 clients x 10,000 coordinates: the exact column sums mod M, new and accumulated."""
    rng = np.random.default_rng(bits)
    xs = ref.random_values(rng, (1000, 10_000), bits)
    want = ref.sum_numpy(xs, bits)
    got = _sum(_to_gpu(xs), bits)
    assert isinstance(got, torch.Tensor) and got.device.type == "cuda"
    assert _same_bits(_to_host(got), want)
    assert _same_bits(_to_host(got)[:50], ref.sum_python(xs[:, :50], bits))  # exact by definition
    start = ref.random_values(rng, 10_000, bits)
    acc = _to_gpu(start)
    assert _sum(_to_gpu(xs), bits, acc, accumulate=True) is acc
    assert _same_bits(_to_host(acc), ref.sum_numpy(xs, bits, start))


@pytest.mark.parametrize("bits", ref.BITS)
def test_sum_edge_values_and_bits_above_m(bits):
    rng = np.random.default_rng(bits + 1)
    xs = ref.random_values(rng, (37, 1031), bits, full_width=True)  # rows: 2 x 16 unrolled + 5
    assert _same_bits(_to_host(_sum(_to_gpu(xs), bits)), ref.sum_python(xs, bits))
    top = np.full((1000, 3), (1 << bits) - 1, ref.storage(bits))
    assert _to_host(_sum(_to_gpu(top), bits)).tolist() == [(-1000) % (1 << bits)] * 3


def test_sum_past_the_grid_cap():
    """2**24 + 3 columns: more than the 2**16 x 256 threads of the grid, which then loop."""
    m = (1 << 24) + 3
    rng = np.random.default_rng(0)
    xs = rng.integers(0, 1 << 32, size=(2, m), dtype=np.uint32)
    got = _to_host(_sum(_to_gpu(xs), 32))
    assert _same_bits(got, ref.sum_numpy(xs, 32))


@pytest.mark.parametrize("bits", ref.BITS)
@pytest.mark.parametrize("dtype, scale", [("int64", 1.0), ("float64", 2.0**-16), ("float64", -0.3),
                                          ("float32", 1.0), ("float32", 1.0 / 3.0)])
def test_lift_is_the_cpu_formula(bits, dtype, scale):
    """Bit for bit: int64 -> float64 and float64 -> float32 round to nearest on both sides."""
    rng = np.random.default_rng(bits)
    x = ref.random_values(rng, 100_003, bits, full_width=True)
    got = _to_host(_lift(_to_gpu(x), bits, scale, dtype))
    assert _same_bits(got, ref.lift_numpy(x, bits, scale, np.dtype(dtype)))
    edges = np.array(ref.edge_values(bits), ref.storage(bits))
    assert _same_bits(_to_host(_lift(_to_gpu(edges), bits, scale, dtype)),
                      ref.lift_python(edges, bits, scale, np.dtype(dtype)))


@pytest.mark.skipif(not EMULATION, reason="dprec._gpu_emulation is not built")
def test_gpu_equals_its_host_emulation():
    emu = gpu_emulation()
    rng = np.random.default_rng(5)
    for bits in (1, 31, 32, 33, 64):
        xs = ref.random_values(rng, (53, 4099), bits, full_width=True)
        want = np.empty(4099, ref.storage(bits))
        emu.mod_sum(xs.reshape(-1), 53, 4099, bits, want, False)
        total = _sum(_to_gpu(xs), bits)
        assert _same_bits(_to_host(total), want)
        for dtype, scale in [(np.int64, 1.0), (np.float64, 0.7), (np.float32, 1e-3)]:
            lifted = np.empty(4099, dtype)
            emu.mod_lift(want, bits, scale, lifted)
            assert _same_bits(_to_host(_lift(total, bits, scale, np.dtype(dtype).name)), lifted)


def test_cpu_backend_agrees_when_implemented():
    """The GPU against the CPU kernels (skips while the CPU backend has its stub)."""
    if not _native.native_available():
        pytest.skip("the native CPU module is not built")
    cpu = _dispatch.kernels("cpu")
    rng = np.random.default_rng(6)
    for bits in (20, 32, 33, 64):
        xs = ref.random_values(rng, (100, 5000), bits)
        host_out = _arrays.empty(None, (5000,), np.dtype(ref.storage(bits)).name)
        try:
            cpu.mod_sum(_arrays.read(xs, "xs"), bits, host_out, False)
        except NotImplementedError:
            pytest.skip("the CPU backend does not implement mod_sum yet")
        total = _sum(_to_gpu(xs), bits)
        assert _same_bits(_to_host(total), host_out.host)
        for dtype, scale in [("int64", 1.0), ("float64", 0.01), ("float32", 3.0)]:
            h = _arrays.empty(None, (5000,), dtype)
            cpu.mod_lift(_arrays.read(host_out.host, "x"), bits, scale, h)
            assert _same_bits(_to_host(_lift(total, bits, scale, dtype)), h.host)


def test_lift_in_place():
    """uint64 values lifted into their own memory (an int64 view of the same tensor)."""
    rng = np.random.default_rng(7)
    x = ref.random_values(rng, 10_000, 40)
    t = _to_gpu(x)
    view = t.view(torch.int64)
    _cuda().mod_lift(_arrays.read(t, "x"), 40, 1.0, _arrays.read(view, "out"))
    assert _same_bits(view.cpu().numpy(), ref.lift_numpy(x, 40))


def test_runs_on_the_current_stream():
    rng = np.random.default_rng(8)
    xs = ref.random_values(rng, (300, 20_000), 24)
    g = _to_gpu(xs)
    first = _to_host(_sum(g, 24))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        total = _sum(g, 24)
        lifted = _lift(total, 24, 0.5, "float64")
    torch.cuda.current_stream().wait_stream(s)
    assert _same_bits(_to_host(total), first)
    assert _same_bits(_to_host(lifted), ref.lift_numpy(first, 24, 0.5, np.float64))


@pytest.mark.skipif(cupy is None, reason="CuPy is not installed")
def test_cupy_arrays():
    rng = np.random.default_rng(9)
    for bits in (16, 64):
        xs = ref.random_values(rng, (250, 3001), bits)
        total = _sum(cupy.asarray(xs), bits)
        assert isinstance(total, cupy.ndarray)
        assert _same_bits(cupy.asnumpy(total), ref.sum_numpy(xs, bits))
        lifted = _lift(total, bits, 0.25, "float32")
        assert isinstance(lifted, cupy.ndarray)
        want = ref.lift_numpy(ref.sum_numpy(xs, bits), bits, 0.25, np.float32)
        assert _same_bits(cupy.asnumpy(lifted), want)


def test_bad_pointers_and_arguments():
    cm = _native.cuda_module()
    stream = torch.cuda.current_stream().cuda_stream
    host = np.zeros(8, np.uint32)
    gpu = torch.zeros(8, dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="xs is not CUDA device memory"):
        cm.mod_sum(0, stream, host.ctypes.data, "uint32", 2, 4, 8, gpu.data_ptr(), "uint32", False)
    with pytest.raises(ValueError, match="out is a null pointer"):
        cm.mod_sum(0, stream, gpu.data_ptr(), "uint32", 2, 4, 8, 0, "uint32", False)
    with pytest.raises(ValueError, match="out is not aligned"):
        cm.mod_lift(0, stream, gpu.data_ptr(), "uint32", 2, 8, 1.0, gpu.data_ptr() + 4, "int64")
    with pytest.raises(TypeError, match="xs must have dtype uint64 for bits = 64"):
        cm.mod_sum(0, stream, gpu.data_ptr(), "uint32", 2, 4, 64, gpu.data_ptr(), "uint32", False)
    with pytest.raises(ValueError, match="device must be in"):
        cm.mod_sum(torch.cuda.device_count(), stream, gpu.data_ptr(), "uint32", 2, 4, 8, gpu.data_ptr(), "uint32",
                   False)
    a = _arrays.read(gpu, "x")
    with pytest.raises(ValueError, match="runs on the host"):
        _cuda().mod_reduce(a, 8, a)


# ---- the public API and the pipelines on GPU arrays ----------------------------------------------


@pytest.mark.parametrize("bits", [16, 40])
def test_public_sum_and_lift_on_the_gpu_equal_the_cpu(bits):
    from dprec import secagg

    rng = np.random.default_rng(bits)
    xs = ref.random_values(rng, (1000, 4099), bits)
    total = secagg.modular_sum(_to_gpu(xs), bits)
    np.testing.assert_array_equal(_to_host(total), secagg.modular_sum(xs, bits))
    lifted = secagg.centered_lift(total, bits, scale=0.5, dtype=np.float64)
    np.testing.assert_array_equal(_to_host(lifted), secagg.centered_lift(secagg.modular_sum(xs, bits), bits,
                                                                         scale=0.5, dtype=np.float64))


@pytest.mark.parametrize("sketch", [None, (3, 1000)], ids=["no-sketch", "sketch"])
def test_pipeline_server_side_on_the_gpu(sketch):
    from dprec import secagg

    pipe = secagg.DDGPipeline(5000, clip=1.0, bits=20, num_clients=50, seed=9, noise_stddev=0.05, sketch=sketch)
    rng = np.random.default_rng(0)
    messages = np.stack([pipe.encode(rng.standard_normal(5000) * 0.01, rng=rng) for _ in range(50)])
    want = pipe.decode(pipe.aggregate(messages))
    got = pipe.decode(pipe.aggregate(_to_gpu(messages)))
    assert got.is_cuda
    np.testing.assert_array_equal(_to_host(got), want)
