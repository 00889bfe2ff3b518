"""Arithmetic modulo 2**bits (dprec.secagg.modular; docs/secagg.md): reduction, the server's sum of many
clients and the centered lift, against Python integers; wrap-around at the edges for bits 1 to 64;
native == reference bit for bit; the running accumulator; bad input."""

from __future__ import annotations

import numpy as np
import pytest

import dprec
from dprec.secagg import ModularAccumulator, centered_lift, modular_reduce, modular_sum, storage_dtype
from tests.conftest import BACKENDS, requires_native

EDGE_BITS = [1, 2, 31, 32, 33, 63, 64]
I64_MIN, I64_MAX = -(2**63), 2**63 - 1


def _edge_values(bits: int) -> list[int]:
    """0, M-1, M/2-1, M/2, -1, -M/2, M, and int64's extremes: those that fit int64."""
    m = 1 << bits
    vals = [0, 1, -1, m - 1, m // 2 - 1, m // 2, -(m // 2), -(m // 2) - 1, m, m + 1, -m, I64_MIN, I64_MAX, 12345678901]
    return [v for v in vals if I64_MIN <= v <= I64_MAX]


def _exact_sum(xs: np.ndarray, bits: int) -> np.ndarray:
    """sum of the rows mod 2**bits with exact integers: 32-bit halves summed in uint64 (no
    overflow for < 2**32 rows), then combined with Python ints per column."""
    wide = xs.astype(np.uint64)
    lo = (wide & np.uint64(0xFFFFFFFF)).sum(axis=0, dtype=np.uint64)
    hi = (wide >> np.uint64(32)).sum(axis=0, dtype=np.uint64)
    total = [((int(h) << 32) + int(lo_)) % (1 << bits) for h, lo_ in zip(hi.tolist(), lo.tolist())]
    return np.array(total, dtype=np.uint64)


def test_storage_dtype():
    assert storage_dtype(1) == np.uint32 and storage_dtype(32) == np.uint32
    assert storage_dtype(33) == np.uint64 and storage_dtype(64) == np.uint64
    for bad in (0, 65, -1):
        with pytest.raises(ValueError, match="bits"):
            storage_dtype(bad)
    for bad in (8.0, True, "8", None):
        with pytest.raises(TypeError, match="bits"):
            storage_dtype(bad)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bits", EDGE_BITS)
def test_reduce_wraps_at_the_edges(backend, bits):
    vals = _edge_values(bits)
    got = modular_reduce(np.array(vals, dtype=np.int64), bits, backend=backend)
    assert got.dtype == storage_dtype(bits)
    assert got.tolist() == [v % (1 << bits) for v in vals]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bits", EDGE_BITS)
def test_lift_is_centered_and_inverts_reduce(backend, bits):
    m = 1 << bits
    half = m // 2
    stored = np.array([0, half - 1, half, m - 1] + ([1, half + 1] if bits > 1 else []), dtype=np.uint64)
    want = [v - m if v >= half else v for v in stored.tolist()]
    assert centered_lift(stored.astype(storage_dtype(bits)), bits, backend=backend).tolist() == want
    # the round trip on [-M/2, M/2): the edges and random values
    rng = np.random.default_rng(bits)
    vals = np.array(
        [0, -1, half - 1, -half, 1 if bits > 1 else 0] + rng.integers(-min(half, 2**62), min(half, 2**62), 1000).tolist(),
        dtype=np.int64,
    )
    lifted = centered_lift(modular_reduce(vals, bits, backend=backend), bits, backend=backend)
    assert lifted.dtype == np.int64
    np.testing.assert_array_equal(lifted, vals)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bits_64_is_the_int64_reinterpretation(backend):
    vals = np.array([I64_MIN, I64_MIN + 1, -1, 0, 1, I64_MAX], dtype=np.int64)
    stored = modular_reduce(vals, 64, backend=backend)
    np.testing.assert_array_equal(stored, vals.view(np.uint64))
    np.testing.assert_array_equal(centered_lift(stored, 64, backend=backend), vals)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bits", [16, 32, 33, 64])
def test_sum_of_1000_clients_is_exact(backend, bits):
    rng = np.random.default_rng(bits)
    dt = storage_dtype(bits)
    xs = rng.integers(0, 1 << bits, size=(1000, 10_000), dtype=np.uint64).astype(dt)
    xs[0, :4] = (1 << bits) - 1  # the edge values too
    got = modular_sum(xs, bits, backend=backend)
    assert got.dtype == dt and got.shape == (10_000,)
    np.testing.assert_array_equal(got.astype(np.uint64), _exact_sum(xs, bits))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bits", EDGE_BITS)
def test_sum_wraps_for_every_width(backend, bits):
    rng = np.random.default_rng(100 + bits)
    dt = storage_dtype(bits)
    top = (1 << bits) - 1
    xs = rng.integers(0, top, size=(37, 4099), dtype=np.uint64, endpoint=True).astype(dt)
    xs[:, :3] = top  # 37 * (M - 1) mod M = M - 37 mod M
    want = _exact_sum(xs, bits)
    np.testing.assert_array_equal(modular_sum(xs, bits, backend=backend).astype(np.uint64), want)
    # a sequence of rows, an out array, and the accumulator give the same
    np.testing.assert_array_equal(modular_sum(list(xs), bits, backend=backend).astype(np.uint64), want)
    out = np.full(4099, 7, dtype=dt)
    assert modular_sum(xs, bits, out=out, backend=backend) is out  # overwritten, not added to
    np.testing.assert_array_equal(out.astype(np.uint64), want)
    acc = ModularAccumulator(4099, bits, backend=backend)
    acc.add(xs[:10])
    for row in xs[10:]:
        acc.add(row)
    assert acc.count == 37
    np.testing.assert_array_equal(acc.total.astype(np.uint64), want)
    # a non-contiguous view is copied
    np.testing.assert_array_equal(modular_sum(xs[:, ::2], bits, backend=backend).astype(np.uint64), want[::2])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bits", [8, 32, 40, 64])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_scaled_lift(backend, bits, dtype):
    rng = np.random.default_rng(bits)
    stored = rng.integers(0, 1 << bits, size=5000, dtype=np.uint64).astype(storage_dtype(bits))
    scale = 0.0123
    lifted = centered_lift(stored, bits, backend=backend)
    got = centered_lift(stored, bits, scale=scale, dtype=dtype, backend=backend)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, (scale * lifted.astype(np.float64)).astype(dtype))  # float64, then cast
    assert centered_lift(stored, bits, scale=2, backend=backend).dtype == np.float64
    np.testing.assert_array_equal(centered_lift(stored, bits, dtype="float64", backend=backend),
                                  lifted.astype(np.float64))
    np.testing.assert_array_equal(centered_lift(stored, bits, scale=1.0, dtype=np.int64, backend=backend), lifted)


@requires_native
@pytest.mark.parametrize("bits", EDGE_BITS + [20, 48])
def test_native_equals_reference(bits):
    rng = np.random.default_rng(7 * bits)
    dt = storage_dtype(bits)
    x = rng.integers(I64_MIN, I64_MAX, size=3001, dtype=np.int64, endpoint=True)
    a = modular_reduce(x, bits, backend="cpu")
    np.testing.assert_array_equal(a, modular_reduce(x, bits, backend="reference"))
    xs = rng.integers(0, 1 << bits, size=(13, 5003), dtype=np.uint64).astype(dt)
    np.testing.assert_array_equal(modular_sum(xs, bits, backend="cpu"), modular_sum(xs, bits, backend="reference"))
    for kw in ({}, {"scale": 3.7e-5}, {"scale": -1.5, "dtype": np.float32}):
        np.testing.assert_array_equal(centered_lift(a, bits, backend="cpu", **kw),
                                      centered_lift(a, bits, backend="reference", **kw))


@requires_native
def test_thread_count_does_not_change_the_sum(threads):
    xs = np.random.default_rng(1).integers(0, 2**20, size=(33, 70_001), dtype=np.uint32)
    results = []
    for n in (1, 2, 5):
        threads(n)
        results.append(modular_sum(xs, 20, backend="cpu"))
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_inputs_of_other_dtypes_and_frameworks(backend):
    for dt in (np.int8, np.int16, np.int32, np.uint8, np.uint16, np.uint32):
        x = np.array([0, 1, 100, np.iinfo(dt).max], dtype=dt)
        assert modular_reduce(x, 7, backend=backend).tolist() == [int(v) % 128 for v in x.tolist()]
    assert modular_reduce([[-1, 2], [3, -4]], 3, backend=backend).tolist() == [[7, 2], [3, 4]]
    torch = pytest.importorskip("torch")
    assert modular_reduce(torch.tensor([-1, 5]), 4, backend=backend).tolist() == [15, 5]
    xs = torch.tensor([[1, 2, 3], [2**20 - 1, 4, 5]], dtype=torch.int64).numpy().astype(np.uint32)
    want = modular_sum(xs, 20, backend=backend)
    np.testing.assert_array_equal(modular_sum(torch.from_numpy(xs), 20, backend=backend), want)
    np.testing.assert_array_equal(centered_lift(torch.from_numpy(want), 20, backend=backend),
                                  centered_lift(want, 20, backend=backend))
    got = centered_lift(want, 20, scale=0.25, dtype=torch.float32, backend=backend)
    np.testing.assert_array_equal(got, centered_lift(want, 20, scale=0.25, dtype=np.float32, backend=backend))


def test_accumulator_basics():
    acc = ModularAccumulator(3, 4)
    assert acc.count == 0 and acc.total.tolist() == [0, 0, 0] and acc.total.dtype == np.uint32
    acc.add(np.array([15, 1, 2], dtype=np.uint32))
    acc.add(np.array([[1, 15, 0], [1, 1, 1]], dtype=np.uint32))
    assert acc.total.tolist() == [1, 1, 3] and acc.count == 3
    assert "count=3" in repr(acc) and "device=cpu" in repr(acc)
    with pytest.raises(ValueError, match=r"xs has values >= 2\*\*bits"):
        acc.add(np.array([[1, 1, 1], [1, 16, 1]], dtype=np.uint32))
    assert acc.total.tolist() == [1, 1, 3] and acc.count == 3  # a refused add changes nothing
    with pytest.raises(ValueError, match="xs must have 3 elements"):
        acc.add(np.zeros(4, dtype=np.uint32))
    with pytest.raises(TypeError, match="xs must have dtype uint32"):
        acc.add(np.zeros(3, dtype=np.uint64))
    with pytest.raises(TypeError, match="not a sequence"):
        acc.add([np.zeros(3, dtype=np.uint32)])
    for bad_m, err in ((0, ValueError), (2.0, TypeError)):
        with pytest.raises(err, match="m"):
            ModularAccumulator(bad_m, 8)
    with pytest.raises(ValueError, match="bits"):
        ModularAccumulator(3, 65)
    with pytest.raises(ValueError, match="backend"):
        ModularAccumulator(3, 8, backend="tpu")


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_input(backend):
    u32 = np.zeros((2, 3), dtype=np.uint32)
    # modular_reduce: integers only, on the host
    for bad in (np.array([1.0]), np.array([True]), np.array([1], dtype=np.uint64), np.array([2**70], dtype=object)):
        with pytest.raises(TypeError, match="x must be int64"):
            modular_reduce(bad, 8, backend=backend)
    with pytest.raises(TypeError, match="round floats first"):
        modular_reduce(np.array([0.5]), 8, backend=backend)
    with pytest.raises(ValueError, match="x must not be empty"):
        modular_reduce(np.zeros(0, dtype=np.int64), 8, backend=backend)
    with pytest.raises(ValueError, match="runs on the host"):
        modular_reduce(np.zeros(2, dtype=np.int64), 8, backend="cuda")
    for bits in (0, 65):
        with pytest.raises(ValueError, match="bits"):
            modular_reduce(np.zeros(2, dtype=np.int64), bits, backend=backend)
    # modular_sum
    with pytest.raises(TypeError, match="xs must have dtype uint32"):
        modular_sum(u32.astype(np.int64), 8, backend=backend)
    with pytest.raises(TypeError, match="xs must have dtype uint64"):
        modular_sum(u32, 40, backend=backend)
    with pytest.raises(ValueError, match=r"xs has values >= 2\*\*bits"):
        modular_sum(np.array([[1, 2], [3, 256]], dtype=np.uint32), 8, backend=backend)
    with pytest.raises(ValueError, match="xs must be 2-D"):
        modular_sum(np.zeros(3, dtype=np.uint32), 8, backend=backend)
    with pytest.raises(ValueError, match="xs must not be empty"):
        modular_sum(np.zeros((0, 3), dtype=np.uint32), 8, backend=backend)
    with pytest.raises(ValueError, match="xs must not be empty"):
        modular_sum(np.zeros((3, 0), dtype=np.uint32), 8, backend=backend)
    with pytest.raises(ValueError, match="xs must not be empty"):
        modular_sum([], 8, backend=backend)
    with pytest.raises(ValueError, match=r"xs\[1\] has 4 elements"):
        modular_sum([np.zeros(3, dtype=np.uint32), np.zeros(4, dtype=np.uint32)], 8, backend=backend)
    with pytest.raises(ValueError, match=r"xs\[0\] must be 1-D"):
        modular_sum([u32], 8, backend=backend)
    with pytest.raises(TypeError, match=r"xs\[1\] must have dtype uint32"):
        modular_sum([np.zeros(3, dtype=np.uint32), np.zeros(3, dtype=np.int64)], 8, backend=backend)
    with pytest.raises(TypeError, match="out must have dtype uint32"):
        modular_sum(u32, 8, out=np.zeros(3, dtype=np.uint64), backend=backend)
    with pytest.raises(ValueError, match="out must have shape"):
        modular_sum(u32, 8, out=np.zeros(4, dtype=np.uint32), backend=backend)
    with pytest.raises(ValueError, match="out must be writeable"):
        ro = np.zeros(3, dtype=np.uint32)
        ro.flags.writeable = False
        modular_sum(u32, 8, out=ro, backend=backend)
    # centered_lift
    with pytest.raises(TypeError, match="x must have dtype uint32"):
        centered_lift(np.zeros(3, dtype=np.int64), 8, backend=backend)
    with pytest.raises(ValueError, match=r"x has values >= 2\*\*bits"):
        centered_lift(np.array([1, 300], dtype=np.uint32), 8, backend=backend)
    with pytest.raises(ValueError, match="x must not be empty"):
        centered_lift(np.zeros(0, dtype=np.uint32), 8, backend=backend)
    for scale in (np.nan, np.inf):
        with pytest.raises(ValueError, match="scale"):
            centered_lift(np.zeros(3, dtype=np.uint32), 8, scale=scale, backend=backend)
    with pytest.raises(TypeError, match="scale"):
        centered_lift(np.zeros(3, dtype=np.uint32), 8, scale="2", backend=backend)
    with pytest.raises(TypeError, match="dtype"):
        centered_lift(np.zeros(3, dtype=np.uint32), 8, dtype=np.int32, backend=backend)
    with pytest.raises(ValueError, match="scale must be None or 1"):
        centered_lift(np.zeros(3, dtype=np.uint32), 8, scale=2.0, dtype=np.int64, backend=backend)


@requires_native
def test_native_bindings_check_what_python_cannot_see():
    core = dprec._runtime.native.native()
    out = np.zeros(3, dtype=np.uint32)
    with pytest.raises(ValueError, match="bits"):
        core.mod_sum(np.zeros(6, dtype=np.uint32), 2, 3, 0, False, out)
    with pytest.raises(ValueError, match="rows \\* cols"):
        core.mod_sum(np.zeros(6, dtype=np.uint32), 3, 3, 8, False, out)
    with pytest.raises(ValueError, match="rows \\* cols"):
        core.mod_sum(np.zeros(6, dtype=np.uint32), 2**62, 2**3, 8, False, out)  # the product overflows
    with pytest.raises(TypeError, match="dtype uint64"):
        core.mod_sum(np.zeros(6, dtype=np.uint32), 2, 3, 40, False, out)
    with pytest.raises(ValueError, match="scale must be 1"):
        core.mod_lift(out, 8, 2.0, np.zeros(3, dtype=np.int64))
    with pytest.raises(ValueError, match="same size"):
        core.mod_reduce(np.zeros(2, dtype=np.int64), 8, out)


# ---- GPU arrays, without a GPU ---------------------------------------------------------------
# The CUDA kernels of mod_sum / mod_lift are tested on their own (tests/*cuda*modular*); here
# stand-ins computing with the reference on the fake device memory of tests/fake_cuda.py check
# this module's plumbing: GPU arrays go to the CUDA kernels (no host shortcut), results are
# allocated on the device, the accumulate flags and shapes are right, host-only steps refuse.


@pytest.fixture
def gpu_modular(monkeypatch):
    from dprec._runtime.backends import cuda as cuda_backend
    from dprec.reference import modular as ref
    from tests import fake_cuda as fc

    fake = fc.install(monkeypatch)  # the stand-ins below compute; the emulation is not needed
    calls = []

    def mod_sum(xs, bits, out, accumulate):
        assert xs.on_gpu and out.on_gpu
        calls.append(("mod_sum", xs.shape, bool(accumulate)))
        n, m = xs.shape
        dt = ref.storage_dtype(bits)
        o = fake.memory(out.ptr, dt, m)
        o[...] = ref.mod_sum(fake.memory(xs.ptr, dt, n * m).reshape(n, m), bits, o.copy() if accumulate else None)

    def mod_lift(x, bits, scale, out):
        assert x.on_gpu and out.on_gpu
        calls.append(("mod_lift", x.shape, out.dtype))
        dt = np.dtype(out.dtype)
        lifted = ref.mod_lift(fake.memory(x.ptr, ref.storage_dtype(bits), x.size), bits,
                              None if dt == np.int64 else scale, dt)
        fake.memory(out.ptr, dt, out.size)[...] = lifted

    monkeypatch.setattr(cuda_backend.CudaKernels, "mod_sum", staticmethod(mod_sum))
    monkeypatch.setattr(cuda_backend.CudaKernels, "mod_lift", staticmethod(mod_lift))
    return fake, calls


@requires_native
def test_gpu_sum_lift_and_accumulator_run_on_the_device(gpu_modular):
    from tests.fake_cuda import FakeGpuArray

    fake, calls = gpu_modular
    xs = np.random.default_rng(3).integers(0, 2**20, size=(5, 7), dtype=np.uint32)
    want = modular_sum(xs, 20, backend="reference")
    got = modular_sum(FakeGpuArray(fake, xs), 20)
    assert isinstance(got, dprec.cuda.DeviceArray) and got.shape == (7,) and got.dtype == np.uint32
    np.testing.assert_array_equal(got.get(), want)
    assert calls == [("mod_sum", (5, 7), False)]
    calls.clear()
    rows = [FakeGpuArray(fake, r) for r in xs]
    np.testing.assert_array_equal(modular_sum(rows, 20).get(), want)
    assert calls == [("mod_sum", (1, 7), i > 0) for i in range(5)]
    out = dprec.cuda.DeviceArray((7,), "uint32")
    assert modular_sum(FakeGpuArray(fake, xs), 20, out=out) is out
    np.testing.assert_array_equal(out.get(), want)
    lifted = centered_lift(got, 20, scale=0.5, dtype=np.float32)
    assert isinstance(lifted, dprec.cuda.DeviceArray) and lifted.dtype == np.float32
    np.testing.assert_array_equal(lifted.get(), centered_lift(want, 20, scale=0.5, dtype=np.float32))
    acc = ModularAccumulator(7, 20)
    acc.add(FakeGpuArray(fake, xs[:2]))
    acc.add(FakeGpuArray(fake, xs[2]))
    acc.add(FakeGpuArray(fake, xs[3:]))
    assert isinstance(acc.total, dprec.cuda.DeviceArray) and acc.count == 5 and "cuda:0" in repr(acc)
    np.testing.assert_array_equal(acc.total.get(), want)
    with pytest.raises(ValueError, match="xs is on cpu but the accumulator's total is on cuda:0"):
        acc.add(xs[0])
    with pytest.raises(ValueError, match="out is on cuda:0 but xs is on cpu"):
        modular_sum(xs, 20, out=out)
    with pytest.raises(ValueError, match=r"xs\[1\] is on cuda:0 but xs\[0\] is on cpu"):
        modular_sum([xs[0], FakeGpuArray(fake, xs[1])], 20)
    with pytest.raises(TypeError, match="xs must have dtype uint64"):
        modular_sum(FakeGpuArray(fake, xs), 40)


@requires_native
def test_client_steps_refuse_gpu_arrays(gpu_modular):
    from dprec.secagg import conditional_round
    from tests.fake_cuda import FakeGpuArray

    fake, calls = gpu_modular
    with pytest.raises(ValueError, match="x is on cuda:0, but modular_reduce runs on the host"):
        modular_reduce(FakeGpuArray(fake, np.zeros(3, np.int64)), 8)
    with pytest.raises(ValueError, match="x is on cuda:0, but randomized rounding runs on the host"):
        conditional_round(FakeGpuArray(fake, np.zeros(3)), 1.0)
    with pytest.raises(ValueError, match="backend='cpu'"):
        modular_sum(FakeGpuArray(fake, np.zeros((2, 3), np.uint32)), 8, backend="cpu")
    assert calls == []
