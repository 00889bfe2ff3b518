"""The Python plumbing of the CUDA backend, run without a GPU.

tests/fake_cuda.py stands in for ``dprec._cuda``: device memory is registered host
memory, every pointer a kernel gets is checked against its allocation (so an offset or
size bug in the plumbing fails loudly), and the kernels compute with the host emulation of
the CUDA kernels (``dprec._gpu_emulation``), so every value here is what a real GPU
produces; the tests that use the fake skip without that test-only module (in a wheel).
What this covers: ``dprec._runtime.arrays`` and ``dprec._runtime.frameworks`` (``__cuda_array_interface__`` parsing, streams,
contiguity, dtypes), the GPU branches of ``rec``, ``philox`` and the codec, and
``dprec.cuda.DeviceArray``. What it cannot cover (the CUDA kernels themselves, PyTorch and
CuPy streams, DLPack) is in tests/cuda/test_cuda.py, which needs a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

import dprec
from dprec import philox, rec
from dprec._runtime import arrays as _arrays
from dprec._runtime import dispatch as _dispatch
from dprec._runtime import native as _native
from dprec.rec.codec import DPRECCodec
from tests import fake_cuda as fc
from tests.conftest import gpu_emulation, requires_native
from tests.fake_cuda import FakeCuda, FakeGpuArray
from tests.rec.test_kernels import _tolerance

pytestmark = requires_native

fake_cuda = fc.fake_cuda  # the fixture, for pytest to find in this module

TOP = 1 << 34


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _emu():
    return gpu_emulation()


def _host(x) -> np.ndarray:
    """A NumPy copy of a FakeGpuArray or a DeviceArray."""
    return x.host() if isinstance(x, FakeGpuArray) else x.get()


def _update(fake: FakeCuda, seed: int, dtype=np.float32, **kw) -> dict[str, FakeGpuArray]:
    """A state-dict-like update on the fake GPU (multi-dim shapes, not in sorted order)."""
    r = np.random.default_rng(seed)
    host = {
        "fc.weight": r.standard_normal((10, 37)) * 0.05,
        "conv.weight": r.standard_normal((4, 3, 3, 3)) * 0.1,
        "conv.bias": r.standard_normal(4) * 0.1,
    }
    return {k: FakeGpuArray(fake, v.astype(dtype), **kw) for k, v in host.items()}


def _to_host(update: dict[str, FakeGpuArray]) -> dict[str, np.ndarray]:
    return {k: v.host() for k, v in update.items()}


# ---------------------------------------------------------------------------------------
# The fake itself: it must be able to fail
# ---------------------------------------------------------------------------------------


def test_fake_is_installed_as_the_cuda_backend(fake_cuda):
    assert _native.cuda_module() is fake_cuda
    assert dprec.cuda.is_available() and dprec.cuda.unavailable_reason() == ""
    assert dprec.cuda.device_count() == 1
    assert "sm_" in dprec.cuda.device_name(0)
    assert _dispatch.available_backends()[0] == "cuda"
    assert _dispatch.resolve("auto", "cuda:0") == "cuda"


def test_fake_checks_every_pointer_and_its_extent(fake_cuda):
    buf = fake_cuda.DeviceBuffer(0, 0, 40)  # ten float32, legacy default stream
    host = np.zeros(8, np.float32)
    assert fake_cuda.pointer_device(buf.ptr) == 0 and fake_cuda.pointer_device(buf.ptr + 39) == 0
    assert fake_cuda.pointer_device(host.ctypes.data) == -1
    assert fake_cuda.pointer_device(0) == -1
    fake_cuda.stream_normals(0, 0, 1, 0, 0, 0, 0, 10, 1.0, buf.ptr)
    with pytest.raises(ValueError, match="not CUDA device memory"):
        fake_cuda.stream_normals(0, 0, 1, 0, 0, 0, 0, 8, 1.0, host.ctypes.data)
    with pytest.raises(ValueError, match="not CUDA device memory"):  # one element past the end
        fake_cuda.stream_normals(0, 0, 1, 0, 0, 0, 0, 10, 1.0, buf.ptr + 4)
    with pytest.raises(ValueError, match="not CUDA device memory"):  # float64 view of float32 room
        fake_cuda.rec_dot_products(0, 0, buf.ptr, "float64", 10, 1, 0, 4, 1.0, buf.ptr)
    with pytest.raises(ValueError, match="aligned"):
        fake_cuda.stream_normals(0, 0, 1, 0, 0, 0, 0, 4, 1.0, buf.ptr + 2)
    with pytest.raises(ValueError, match="null pointer"):
        fake_cuda.stream_normals(0, 0, 1, 0, 0, 0, 0, 4, 1.0, 0)
    with pytest.raises(ValueError, match="2\\*\\*34"):
        fake_cuda.stream_normals(0, 0, 1, 0, 0, 0, TOP - 2, 4, 1.0, buf.ptr)
    with pytest.raises(ValueError, match="device must be in"):
        fake_cuda.stream_normals(1, 0, 1, 0, 0, 0, 0, 4, 1.0, buf.ptr)
    with pytest.raises(TypeError, match="list"):
        fake_cuda.norm_stats(0, 0, buf.ptr, "float32", 10, 1.0)
    # Freed memory is no longer device memory.
    ptr = buf.ptr
    del buf
    assert fake_cuda.pointer_device(ptr) == -1


def test_fake_records_calls_and_copies(fake_cuda):
    a = dprec.cuda.DeviceArray((2, 3), "float64", stream=77)
    assert a.__cuda_array_interface__["stream"] == 77
    fake_cuda.copy_to_device(0, 77, np.arange(6.0).reshape(2, 3), a.ptr)
    assert np.array_equal(a.get(), np.arange(6.0).reshape(2, 3))
    fake_cuda.memset_zero(0, 77, a.ptr, a.nbytes)
    assert not a.get().any()
    assert [c.name for c in fake_cuda.calls if c.stream is not None] == [
        "copy_to_device",
        "copy_to_host",
        "memset_zero",
        "copy_to_host",
    ]
    assert fake_cuda.kernel_streams() == {77}
    # allocated (and freed) in stream order on the array's own stream
    assert [c.args for c in fake_cuda.calls if c.name == "DeviceBuffer"] == [(48, 77)]
    with pytest.raises(ValueError, match="not CUDA device memory"):
        fake_cuda.copy_to_host(0, 0, a.ptr, np.empty(7))  # one float64 more than allocated


# ---------------------------------------------------------------------------------------
# Candidates and streams: bit for bit
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 2, 5, 8, 1001])
def test_candidate_into_fake_gpu_array_bit_identical_to_cpu(fake_cuda, size):
    rng = np.random.default_rng(size)
    for _ in range(3):
        seed = int(rng.integers(0, 2**64, dtype=np.uint64))
        group, index = int(rng.integers(0, 2**32)), int(rng.integers(0, 2**24))
        sigma = float(rng.uniform(0.01, 3.0))
        out = FakeGpuArray(fake_cuda, np.zeros(size, np.float32))
        got = rec.candidate(seed, group, index, size, sigma=sigma, out=out)
        assert got is out
        cpu = rec.candidate(seed, group, index, size, sigma=sigma, backend="cpu")
        assert np.array_equal(_bits(out.host()), _bits(cpu))
    assert {c.name for c in fake_cuda.calls if c.stream is not None} == {"stream_normals"}


def test_candidate_into_a_multi_dim_out_fills_it_in_c_order(fake_cuda):
    out = FakeGpuArray(fake_cuda, np.zeros((3, 7), np.float32))
    rec.candidate(3, 1, 4, 21, sigma=0.5, out=out)
    assert np.array_equal(_bits(out.host().reshape(-1)), _bits(rec.candidate(3, 1, 4, 21, sigma=0.5, backend="cpu")))


def test_philox_into_fake_gpu_arrays_up_to_the_last_counter(fake_cuda):
    rng = np.random.default_rng(7)
    offsets = [0, 1, 3, 5, 1023, 2**32 - 3, 2**33 + 1, TOP - 37, TOP - 8, TOP - 5, TOP - 1]
    for offset in offsets:
        count = min(37, TOP - offset)
        seed = int(rng.integers(0, 2**64, dtype=np.uint64))
        kw = dict(substream=int(rng.integers(0, 2**32)), group=int(rng.integers(0, 2**32)), offset=offset)
        for domain in (0, 4, 15):
            z = FakeGpuArray(fake_cuda, np.zeros(count, np.float32))
            assert philox.normals(seed, count, domain=domain, out=z, **kw) is z
            ref = philox.normals(seed, count, domain=domain, backend="cpu", **kw)
            assert np.array_equal(_bits(z.host()), _bits(ref)), (offset, domain)
            w = FakeGpuArray(fake_cuda, np.zeros(count, np.uint32))
            assert philox.words(seed, count, domain=domain, out=w, **kw) is w
            assert np.array_equal(w.host(), philox.words(seed, count, domain=domain, backend="cpu", **kw))
    with pytest.raises(ValueError, match="2\\*\\*34"):
        philox.normals(1, 2, offset=TOP - 1, out=FakeGpuArray(fake_cuda, np.zeros(2, np.float32)))


def test_backend_cuda_without_out_returns_a_device_array(fake_cuda):
    a = rec.candidate(9, 0, 3, 777, sigma=2.0, backend="cuda")
    assert isinstance(a, dprec.cuda.DeviceArray)
    assert a.shape == (777,) and a.dtype == np.float32 and a.device == 0
    assert fake_cuda.pointer_device(a.ptr) == 0
    assert a.__cuda_array_interface__["stream"] == 1  # the legacy default stream, as the interface spells it
    assert np.array_equal(_bits(a.get()), _bits(rec.candidate(9, 0, 3, 777, sigma=2.0, backend="cpu")))
    z = philox.normals(5, 100, substream=2, group=9, offset=TOP - 100, backend="cuda")
    assert isinstance(z, dprec.cuda.DeviceArray)
    ref = philox.normals(5, 100, substream=2, group=9, offset=TOP - 100, backend="cpu")
    assert np.array_equal(_bits(z.get()), _bits(ref))
    w = philox.words(5, 33, domain=3, offset=11, backend="cuda")
    assert isinstance(w, dprec.cuda.DeviceArray) and w.dtype == np.uint32
    assert np.array_equal(w.get(), philox.words(5, 33, domain=3, offset=11, backend="cpu"))
    assert fake_cuda.kernel_streams() == {0}
    # A DeviceArray is itself a GPU array that dprec takes as input.
    again = rec.candidate(9, 0, 3, 777, sigma=2.0, out=dprec.cuda.DeviceArray(777))
    assert np.array_equal(_bits(again.get()), _bits(a.get()))


# ---------------------------------------------------------------------------------------
# Logits
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("d", [1, 7, 4099])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_logits_of_fake_gpu_phi(fake_cuda, d, dtype):
    phi_h = np.random.default_rng(d).standard_normal(d).astype(dtype)
    phi = FakeGpuArray(fake_cuda, phi_h)
    gpu = rec.logits(phi, 0xDEADBEEF, 3, 7, sigma=0.37, scale=0.5)
    assert isinstance(gpu, dprec.cuda.DeviceArray)
    assert _arrays.read(gpu, "logits").framework == "cuda_array_interface"
    lg = gpu.get()
    assert lg.shape == (128,) and lg.dtype == np.float64
    emu = np.empty(128)
    _emu().rec_dot_products(phi_h, 0xDEADBEEF, 3, 0.5 / 0.37, emu)
    assert np.array_equal(_bits(lg), _bits(emu))
    cpu = rec.logits(phi_h, 0xDEADBEEF, 3, 7, sigma=0.37, scale=0.5, backend="cpu")
    assert np.max(np.abs(lg - cpu)) <= _tolerance(phi_h * 0.5, 0.37)
    (call,) = fake_cuda.calls_named("rec_dot_products")
    assert call.args[:3] == (phi.ptr, np.dtype(dtype).name, d)


def test_logits_of_float16_phi_are_converted_on_the_device(fake_cuda):
    phi_h = np.random.default_rng(1).standard_normal(999).astype(np.float16)
    phi = FakeGpuArray(fake_cuda, phi_h)
    gpu = rec.logits(phi, 3, 0, 4, sigma=1.0)
    assert isinstance(gpu, dprec.cuda.DeviceArray)
    (conv,) = fake_cuda.calls_named("to_float32")
    assert conv.args[:3] == (phi.ptr, "float16", 999)
    (dots,) = fake_cuda.calls_named("rec_dot_products")
    assert dots.args[0] == conv.args[3] and dots.args[1] == "float32"  # the converted copy
    emu = np.empty(16)
    _emu().rec_dot_products(phi_h.astype(np.float32), 3, 0, 1.0, emu)
    assert np.array_equal(_bits(gpu.get()), _bits(emu))
    cpu = rec.logits(phi_h, 3, 0, 4, sigma=1.0, backend="cpu")
    assert np.max(np.abs(gpu.get() - cpu)) <= _tolerance(phi_h.astype(np.float32), 1.0)


def test_logits_reject_non_finite_phi(fake_cuda):
    phi_h = np.random.default_rng(2).standard_normal(100).astype(np.float32)
    phi_h[17] = np.nan
    with pytest.raises(ValueError, match="phi contains NaN"):
        rec.logits(FakeGpuArray(fake_cuda, phi_h), 1, 0, 3, sigma=1.0)
    phi_h[17] = -np.inf
    with pytest.raises(ValueError, match="phi contains infinite"):
        rec.logits(FakeGpuArray(fake_cuda, phi_h.astype(np.float64)), 1, 0, 3, sigma=1.0)
    assert not fake_cuda.calls_named("rec_dot_products")


def test_logits_on_the_wrong_backend_is_a_clear_error(fake_cuda):
    phi = FakeGpuArray(fake_cuda, np.ones(10, np.float32))
    for backend in ("cpu", "reference"):
        with pytest.raises(ValueError, match=r"phi is on cuda:0.*backend="):
            rec.logits(phi, 1, 0, 3, sigma=1.0, backend=backend)


# ---------------------------------------------------------------------------------------
# Sampling
# ---------------------------------------------------------------------------------------


def test_sample_indices_on_fake_gpu_logits_match_cpu(fake_cuda):
    lg_h = np.random.default_rng(4).standard_normal((50, 64)) * 3
    noise = rec.gumbel_noise(50 * 64, np.random.default_rng(1)).reshape(50, 64)
    gpu = rec.sample_indices(FakeGpuArray(fake_cuda, lg_h), gumbel=noise)
    cpu = rec.sample_indices(lg_h, gumbel=noise, backend="cpu")
    assert gpu.dtype == np.int64 and np.array_equal(gpu, cpu)
    (call,) = fake_cuda.calls_named("gumbel_argmax")
    assert np.array_equal(call.args[2], np.arange(0, 50 * 64 + 1, 64))
    # The same private draws from rng as on the CPU.
    assert np.array_equal(
        rec.sample_indices(FakeGpuArray(fake_cuda, lg_h), rng=np.random.default_rng(9)),
        rec.sample_indices(lg_h, rng=np.random.default_rng(9), backend="cpu"),
    )
    # Ties go to the first index.
    flat = FakeGpuArray(fake_cuda, np.zeros((3, 8)))
    assert rec.sample_indices(flat, gumbel=np.zeros((3, 8))).tolist() == [0, 0, 0]


def test_sample_index_of_gpu_logits_matches_cpu(fake_cuda):
    phi_h = np.random.default_rng(5).standard_normal(300).astype(np.float32)
    lg = rec.logits(FakeGpuArray(fake_cuda, phi_h), 8, 2, 6, sigma=0.1)
    for s in range(5):
        noise = rec.gumbel_noise(64, np.random.default_rng(s))
        assert rec.sample_index(lg, gumbel=noise) == rec.sample_index(lg.get(), gumbel=noise, backend="cpu")
        assert rec.sample_index(lg, rng=np.random.default_rng(s)) == rec.sample_index(
            lg.get(), rng=np.random.default_rng(s), backend="cpu"
        )
    k = rec.encode_group(FakeGpuArray(fake_cuda, phi_h), 8, 2, 6, sigma=0.1, rng=np.random.default_rng(3))
    assert k == rec.encode_group(phi_h, 8, 2, 6, sigma=0.1, rng=np.random.default_rng(3), backend="cpu")


def test_gumbel_noise_must_be_on_the_host(fake_cuda):
    lg = FakeGpuArray(fake_cuda, np.zeros(4))
    with pytest.raises(ValueError, match="gumbel.*host"):
        rec.sample_index(lg, gumbel=FakeGpuArray(fake_cuda, np.zeros(4)))
    with pytest.raises(ValueError, match="gumbel.*host"):
        rec.sample_indices(FakeGpuArray(fake_cuda, np.zeros((2, 4))), gumbel=FakeGpuArray(fake_cuda, np.zeros((2, 4))))
    with pytest.raises(ValueError, match="gumbel.*host"):
        rec.sample_index(np.zeros(4), gumbel=FakeGpuArray(fake_cuda, np.zeros(4)))


def test_non_finite_gpu_logits_are_rejected(fake_cuda):
    with pytest.raises(ValueError, match="logits contains NaN"):
        rec.sample_index(FakeGpuArray(fake_cuda, np.array([0.0, np.nan, 1.0])), gumbel=np.zeros(3))


# ---------------------------------------------------------------------------------------
# Aggregation
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_accumulate_into_fake_gpu_array_bit_identical_to_cpu(fake_cuda, dtype):
    rng = np.random.default_rng(3)
    seeds = rng.integers(0, 2**64, 17, dtype=np.uint64)
    idx = rng.integers(0, 128, 17).astype(np.uint32)
    w = rng.uniform(-1, 1, 17)
    start = rng.standard_normal((7, 143)).astype(dtype)  # any shape on the GPU; flat order
    gpu = FakeGpuArray(fake_cuda, start)
    assert rec.accumulate(gpu, 4, seeds, idx, sigma=0.3, weights=w) is gpu
    cpu = start.reshape(-1).copy()
    rec.accumulate(cpu, 4, seeds, idx, sigma=0.3, weights=w, backend="cpu")
    assert np.array_equal(_bits(gpu.host().reshape(-1)), _bits(cpu))
    (call,) = fake_cuda.calls_named("accumulate")
    assert call.args == (gpu.ptr, np.dtype(dtype).name, start.size, 4)


def test_accumulate_rejects_bad_gpu_outputs(fake_cuda):
    with pytest.raises(TypeError, match="float32 or float64"):
        rec.accumulate(FakeGpuArray(fake_cuda, np.zeros(4, np.float16)), 0, [1], [0], sigma=1.0)
    with pytest.raises(ValueError, match="read-only"):
        rec.accumulate(FakeGpuArray(fake_cuda, np.zeros(4, np.float32), readonly=True), 0, [1], [0], sigma=1.0)


# ---------------------------------------------------------------------------------------
# The codec on fake GPU tensors
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_group_size", [None, 50, 37])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_codec_encodes_on_gpu_like_the_cpu(fake_cuda, max_group_size, dtype):
    codec = DPRECCodec(
        sigma=0.02, clip_multiplier=2.0, bits={"fc.weight": 6, "conv.bias": 3}, max_group_size=max_group_size
    )
    upd = _update(fake_cuda, 1, dtype)
    host = _to_host(upd)
    layout = codec.layout(host)
    assert max_group_size is None or any(g.start % max_group_size == 0 and g.start for g in layout.groups)
    for seed in range(4):
        fake_cuda.calls.clear()
        m_gpu = codec.encode(upd, rng=np.random.default_rng(seed), seed=1000 + seed)
        m_cpu = codec.encode(host, rng=np.random.default_rng(seed), seed=1000 + seed)
        assert m_gpu.indices == m_cpu.indices
        assert m_gpu.layout_digest == m_cpu.layout_digest and m_gpu.seed == m_cpu.seed
        # One logits launch per group, at the group's offset into its tensor and into the logits.
        dots = fake_cuda.calls_named("rec_dot_products")
        assert len(dots) == layout.num_groups
        k_offset = 0
        first_out = dots[0].args[-1]
        for call, g in zip(dots, layout.groups):
            src = upd[g.name] if dtype != np.float16 else None
            ptr, dt, d, s, group, k, _, out = call.args
            if src is not None:
                assert ptr == src.ptr + g.start * src.dtype.itemsize
            assert (dt, d, s, group, k) == (
                np.dtype(dtype if dtype != np.float16 else np.float32).name,
                g.size,
                1000 + seed,
                g.group,
                1 << g.bits,
            )
            assert out == first_out + 8 * k_offset
            k_offset += 1 << g.bits
        assert len(fake_cuda.calls_named("gumbel_argmax")) == 1


def test_codec_encode_clips_and_matches_cpu_norm(fake_cuda):
    # No clipping (small update) and clipping; a zero update.
    for scale in (1e-4, 1.0):
        upd = {
            "a": FakeGpuArray(fake_cuda, np.full((3, 4), scale, np.float32)),
            "b": FakeGpuArray(fake_cuda, np.linspace(-scale, scale, 9)),
        }
        codec = DPRECCodec(sigma=0.01, bits=5)
        m_gpu = codec.encode(upd, rng=np.random.default_rng(2), seed=3)
        m_cpu = codec.encode(_to_host(upd), rng=np.random.default_rng(2), seed=3)
        assert m_gpu.indices == m_cpu.indices
    zero = {"w": FakeGpuArray(fake_cuda, np.zeros(10, np.float32))}
    codec = DPRECCodec(sigma=1.0, bits=4)
    assert (
        codec.encode(zero, rng=np.random.default_rng(0), seed=1).indices
        == codec.encode(_to_host(zero), rng=np.random.default_rng(0), seed=1).indices
    )


def test_codec_encode_single_array_and_sequence(fake_cuda):
    codec = DPRECCodec(sigma=0.05, bits=4, max_group_size=10)
    one = FakeGpuArray(fake_cuda, np.random.default_rng(3).standard_normal((5, 7)).astype(np.float32))
    assert (
        codec.encode(one, rng=np.random.default_rng(0), seed=7).indices
        == codec.encode(one.host(), rng=np.random.default_rng(0), seed=7).indices
    )
    seq = [one, FakeGpuArray(fake_cuda, np.ones(3))]
    assert (
        codec.encode(seq, rng=np.random.default_rng(1), seed=8).indices
        == codec.encode([a.host() for a in seq], rng=np.random.default_rng(1), seed=8).indices
    )


def test_codec_clips_extreme_float64_updates_through_the_prescale(fake_cuda):
    codec = DPRECCodec(sigma=1.0, bits=4, max_group_size=60)
    w = np.full(100, 1e300)
    w[::3] = -3e299
    upd = {"w": FakeGpuArray(fake_cuda, w)}
    m_gpu = codec.encode(upd, rng=np.random.default_rng(0), seed=5)
    m_cpu = codec.encode({"w": w}, rng=np.random.default_rng(0), seed=5)
    assert m_gpu.indices == m_cpu.indices
    (scale,) = fake_cuda.calls_named("scale_f64")
    assert scale.args[0] == upd["w"].ptr and scale.args[1] == 100
    # The logits read the scaled copy, at each group's offset, with the scale folded to 1.
    dots = fake_cuda.calls_named("rec_dot_products")
    assert [c.args[0] for c in dots] == [scale.args[3], scale.args[3] + 60 * 8]
    assert all(c.args[6] == 1.0 / codec.sigma for c in dots)
    assert len(fake_cuda.calls_named("norm_stats")) == 2  # the sum of squares overflowed: rescaled pass


def test_codec_refuses_overflowing_logits_on_the_gpu_as_on_the_host(fake_cuda):
    """An unclipped update near the float64 maximum (C = c * sigma is huge) can overflow the
    dot products: one validation path refuses it on both devices (the GPU used to sample from
    infinite logits); an ordinary update is not scanned a second time."""
    codec = DPRECCodec(sigma=1.0, clip_multiplier=1.7e308, bits=4)
    w = np.full(64, 1.5e308 / 8)
    for upd in ({"w": w}, {"w": FakeGpuArray(fake_cuda, w)}):
        with pytest.raises(ValueError, match="logits contains infinite values"):
            codec.encode(upd, rng=np.random.default_rng(0), seed=1)
    fake_cuda.calls.clear()
    DPRECCodec(sigma=1.0, bits=4).encode({"w": FakeGpuArray(fake_cuda, np.ones(64))}, seed=1)
    assert len(fake_cuda.calls_named("norm_stats")) == 1  # the norm; the logits are provably finite


def test_codec_prescales_a_float32_tensor_next_to_an_extreme_float64_one(fake_cuda):
    codec = DPRECCodec(sigma=1.0, bits=4)
    host = {"big": np.full(20, 1e300), "small": np.linspace(-1, 1, 30).astype(np.float32)}
    upd = {k: FakeGpuArray(fake_cuda, v) for k, v in host.items()}
    m_cpu = codec.encode(host, rng=np.random.default_rng(0), seed=5)
    m_gpu = codec.encode(upd, rng=np.random.default_rng(0), seed=5)
    assert m_gpu.indices == m_cpu.indices


def test_codec_norm_of_tiny_float64_values_next_to_a_zero_tensor(fake_cuda):
    # The sum of squares underflows: the norm is recomputed divided by max |x| (a second norm_stats).
    codec = DPRECCodec(sigma=1.0, bits=4)
    upd = {"a": FakeGpuArray(fake_cuda, np.zeros(5, np.float32)), "b": FakeGpuArray(fake_cuda, np.full(4, 1e-300))}
    m_gpu = codec.encode(upd, rng=np.random.default_rng(0), seed=1)
    assert [c.args[-1] for c in fake_cuda.calls_named("norm_stats")] == [1.0, 1e-300]
    # The CPU agrees (and with the zero tensor in float32, see the next test).
    host = {"a": np.zeros(5), "b": np.full(4, 1e-300)}
    assert m_gpu.indices == codec.encode(host, rng=np.random.default_rng(0), seed=1).indices


def test_cpu_encode_agrees_for_tiny_float64_values_next_to_a_zero_float32_tensor(fake_cuda):
    codec = DPRECCodec(sigma=1.0, bits=4)
    host = {"a": np.zeros(5, np.float32), "b": np.full(4, 1e-300)}
    m_gpu = codec.encode({k: FakeGpuArray(fake_cuda, v) for k, v in host.items()}, rng=np.random.default_rng(0), seed=1)
    assert m_gpu.indices == codec.encode(host, rng=np.random.default_rng(0), seed=1).indices


@pytest.mark.parametrize("max_group_size", [None, 50])
@pytest.mark.parametrize("template_dtype", [np.float32, np.float16, np.float64])
def test_codec_decodes_into_gpu_template_bit_identical_to_cpu(fake_cuda, max_group_size, template_dtype):
    codec = DPRECCodec(sigma=0.02, bits=5, max_group_size=max_group_size)
    template = _update(fake_cuda, 2, template_dtype)
    msg = codec.encode(_to_host(_update(fake_cuda, 3)), rng=np.random.default_rng(0))
    on_gpu = codec.decode(msg, template)
    on_cpu = codec.decode(msg.to_bytes(), _to_host(template))
    assert isinstance(on_gpu, dict) and list(on_gpu) == list(template)  # the template's key order
    for k in template:
        assert isinstance(on_gpu[k], dprec.cuda.DeviceArray)
        assert on_gpu[k].shape == template[k].shape and on_gpu[k].dtype == np.float32
        assert np.array_equal(_bits(on_gpu[k].get()), _bits(on_cpu[k]))
    # Exactly one candidate per group, written at the group's offset in its tensor's output.
    normals = fake_cuda.calls_named("stream_normals")
    layout = codec.layout(template)
    assert len(normals) == layout.num_groups
    for call, g in zip(normals, layout.groups):
        assert call.args[-1] == on_gpu[g.name].ptr + 4 * g.start and call.args[5] == g.size


def test_codec_decodes_a_single_array_and_a_tuple(fake_cuda):
    codec = DPRECCodec(sigma=0.3, bits=3, max_group_size=4)
    one = FakeGpuArray(fake_cuda, np.zeros((3, 5), np.float32))
    msg = codec.encode(np.ones((3, 5), np.float32), rng=np.random.default_rng(0))
    out = codec.decode(msg, one)
    assert isinstance(out, dprec.cuda.DeviceArray) and out.shape == (3, 5)
    assert np.array_equal(_bits(out.get()), _bits(codec.decode(msg, one.host())))
    pair = (one, FakeGpuArray(fake_cuda, np.zeros(2)))
    msg2 = codec.encode((np.ones((3, 5)), np.ones(2)), rng=np.random.default_rng(1))
    out2 = codec.decode(msg2, pair)
    assert isinstance(out2, tuple) and len(out2) == 2
    for a, b in zip(out2, codec.decode(msg2, tuple(p.host() for p in pair))):
        assert np.array_equal(_bits(a.get()), _bits(b))


@pytest.mark.parametrize("max_group_size", [None, 50])
def test_codec_aggregates_into_gpu_template_bit_identical_to_cpu(fake_cuda, max_group_size):
    codec = DPRECCodec(sigma=0.02, bits=7, max_group_size=max_group_size)
    template = _update(fake_cuda, 3)
    host_template = _to_host(template)
    msgs = [codec.encode(_to_host(_update(fake_cuda, 10 + i)), rng=np.random.default_rng(i)) for i in range(12)]
    w = np.linspace(0.5, 2.0, 12)
    for weights in (w, None):
        fake_cuda.calls.clear()
        gpu = codec.aggregate(msgs, template, weights=weights)
        cpu = codec.aggregate(msgs, host_template, weights=weights)
        for k in template:
            assert isinstance(gpu[k], dprec.cuda.DeviceArray) and gpu[k].shape == template[k].shape
            assert np.array_equal(_bits(gpu[k].get()), _bits(cpu[k]))
        layout = codec.layout(template)
        calls = fake_cuda.calls_named("aggregate_f32")
        assert len(calls) == layout.num_groups
        for call, g in zip(calls, layout.groups):
            assert call.args == (gpu[g.name].ptr + 4 * g.start, g.size, g.group)


def test_backend_cuda_needs_a_gpu_template(fake_cuda):
    codec = DPRECCodec(sigma=1.0, bits=3, backend="cuda")
    msg = codec.encode({"w": FakeGpuArray(fake_cuda, np.ones(3, np.float32))}, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="GPU"):
        codec.decode(msg, {"w": np.zeros(3, np.float32)})


def test_mixing_host_and_gpu_tensors_is_a_clear_error(fake_cuda):
    codec = DPRECCodec(sigma=1.0, bits=3)
    mixed = {"a": FakeGpuArray(fake_cuda, np.ones(3, np.float32)), "b": np.ones(3, np.float32)}
    with pytest.raises(ValueError, match=r"update\['b'\] is on cpu.*update\['a'\] is on cuda:0"):
        codec.encode(mixed)
    msg = codec.encode({"a": np.ones(3, np.float32), "b": np.ones(3, np.float32)})
    with pytest.raises(ValueError, match=r"template\['b'\] is on cpu.*template\['a'\] is on cuda:0"):
        codec.decode(msg, mixed)
    with pytest.raises(ValueError, match=r"template\['b'\] is on cpu.*template\['a'\] is on cuda:0"):
        codec.aggregate([msg], mixed)


def test_codec_rejects_non_finite_gpu_updates(fake_cuda):
    bad = np.ones(10, np.float32)
    bad[3] = np.inf
    with pytest.raises(ValueError, match=r"update\['w'\] contains infinite"):
        DPRECCodec(sigma=1.0).encode({"v": FakeGpuArray(fake_cuda, np.ones(4)), "w": FakeGpuArray(fake_cuda, bad)})


# ---------------------------------------------------------------------------------------
# Streams: the interface's "stream" entry is where the work goes
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "entry, expected",
    [(12345, 12345), (1, 0), (None, 0), (fc._ABSENT, 0), (2, 2)],
    ids=["stream-12345", "legacy-1", "none", "absent", "per-thread-2"],
)
def test_every_call_runs_on_the_interfaces_stream(fake_cuda, entry, expected):
    def arr(data):
        return FakeGpuArray(fake_cuda, data, stream=entry)

    def only(operation):
        fake_cuda.calls.clear()
        result = operation()
        streams = fake_cuda.kernel_streams()
        names = {c.name for c in fake_cuda.calls if c.stream is not None}
        assert streams == {expected}, (names, streams)
        return result

    rng = np.random.default_rng(0)
    only(lambda: rec.candidate(1, 2, 3, 40, out=arr(np.zeros(40, np.float32))))
    only(lambda: philox.words(1, 9, offset=TOP - 9, out=arr(np.zeros(9, np.uint32))))
    only(lambda: philox.normals(1, 9, out=arr(np.zeros(9, np.float32))))
    lg = only(lambda: rec.logits(arr(rng.standard_normal(50).astype(np.float16)), 1, 0, 4, sigma=1.0))
    assert lg.stream == expected  # the result carries the caller's stream on ...
    only(lambda: rec.sample_index(lg, rng=np.random.default_rng(1)))  # ... to the next call
    only(lambda: lg.get())
    only(lambda: rec.sample_indices(arr(np.zeros((2, 4))), gumbel=np.zeros((2, 4))))
    only(lambda: rec.accumulate(arr(np.zeros(30, np.float32)), 0, [5, 6], [1, 2], sigma=0.5))
    codec = DPRECCodec(sigma=1e-3, bits=3, max_group_size=20)
    upd = _update(fake_cuda, 4, stream=entry)
    msg = only(lambda: codec.encode(upd, rng=rng))
    extreme = {"w": arr(np.full(30, 1e300)), "h": arr(np.ones(8))}
    only(lambda: codec.encode(extreme, rng=rng))
    dec = only(lambda: codec.decode(msg, upd))
    assert all(v.stream == expected for v in dec.values())
    agg = only(lambda: codec.aggregate([msg, msg], upd))
    assert all(v.stream == expected for v in agg.values())


# ---------------------------------------------------------------------------------------
# Layout and dtypes of GPU arrays
# ---------------------------------------------------------------------------------------


def test_non_contiguous_gpu_arrays_are_rejected(fake_cuda):
    base = np.random.default_rng(0).standard_normal((10, 10)).astype(np.float32)
    transposed = FakeGpuArray(fake_cuda, base, strides=(4, 40))
    assert np.array_equal(transposed.host(), base.T)
    with pytest.raises(ValueError, match="contiguous"):
        rec.logits(transposed, 1, 0, 3, sigma=1.0)
    with pytest.raises(ValueError, match="contiguous"):
        DPRECCodec(sigma=1.0).encode({"w": transposed})
    with pytest.raises(ValueError, match="contiguous"):
        DPRECCodec(sigma=1.0).decode(b"", {"w": transposed})
    every_other = FakeGpuArray(fake_cuda, np.zeros(100, np.float32), shape=(50,), strides=(8,))
    with pytest.raises(ValueError, match="contiguous"):
        rec.candidate(1, 0, 0, 50, out=every_other)
    with pytest.raises(ValueError, match="contiguous"):
        rec.accumulate(every_other, 0, [1], [0], sigma=1.0)
    with pytest.raises(ValueError, match="contiguous"):
        rec.sample_index(FakeGpuArray(fake_cuda, np.zeros(8), shape=(4,), strides=(16,)))
    assert not [c for c in fake_cuda.calls if c.stream is not None]


def test_explicit_c_order_strides_are_accepted(fake_cuda):
    phi_h = np.random.default_rng(1).standard_normal((6, 1, 5)).astype(np.float32)
    # Compact row-major strides spelled out; the size-1 axis may have any stride.
    phi = FakeGpuArray(fake_cuda, phi_h, strides=(20, 999, 4))
    lg = rec.logits(phi, 1, 0, 3, sigma=1.0)
    emu = np.empty(8)
    _emu().rec_dot_products(phi_h.reshape(-1), 1, 0, 1.0, emu)
    assert np.array_equal(_bits(lg.get()), _bits(emu))


def test_unsupported_gpu_dtypes_are_rejected(fake_cuda):
    with pytest.raises(TypeError, match="integer"):
        rec.logits(FakeGpuArray(fake_cuda, np.ones(10, np.int32)), 1, 0, 3, sigma=1.0)
    with pytest.raises(TypeError, match=r"update\['w'\].*integer"):
        DPRECCodec(sigma=1.0).encode({"w": FakeGpuArray(fake_cuda, np.ones(10, np.int64))})
    with pytest.raises(TypeError, match=r"template\['w'\].*integer"):
        DPRECCodec(sigma=1.0).decode(b"", {"w": FakeGpuArray(fake_cuda, np.ones(10, np.uint8))})
    with pytest.raises(TypeError, match="float32"):
        rec.candidate(1, 0, 0, 10, out=FakeGpuArray(fake_cuda, np.zeros(10, np.float64)))
    with pytest.raises(TypeError, match="uint32"):
        philox.words(1, 10, out=FakeGpuArray(fake_cuda, np.zeros(10, np.int32)))
    with pytest.raises(TypeError, match="float64"):
        rec.sample_index(FakeGpuArray(fake_cuda, np.zeros(4, np.float32)))
    with pytest.raises(TypeError, match="floating-point"):
        rec.logits(FakeGpuArray(fake_cuda, np.ones(4, np.complex64)), 1, 0, 3, sigma=1.0)


def test_wrong_sizes_and_read_only_outputs_are_rejected(fake_cuda):
    with pytest.raises(ValueError, match="out must have 10 elements"):
        rec.candidate(1, 0, 0, 10, out=FakeGpuArray(fake_cuda, np.zeros(11, np.float32)))
    with pytest.raises(ValueError, match="out must have 10 elements"):
        philox.normals(1, 10, out=FakeGpuArray(fake_cuda, np.zeros(9, np.float32)))
    with pytest.raises(ValueError, match="read-only"):
        rec.candidate(1, 0, 0, 10, out=FakeGpuArray(fake_cuda, np.zeros(10, np.float32), readonly=True))
    with pytest.raises(ValueError, match="read-only"):
        philox.words(1, 10, out=FakeGpuArray(fake_cuda, np.zeros(10, np.uint32), readonly=True))
    with pytest.raises(ValueError, match="must not be empty"):
        rec.logits(FakeGpuArray(fake_cuda, np.zeros(0, np.float32)), 1, 0, 3, sigma=1.0)
    with pytest.raises(ValueError, match="masked"):

        class Masked(FakeGpuArray):
            @property
            def __cuda_array_interface__(self):
                return {**super().__cuda_array_interface__, "mask": object()}

        rec.logits(Masked(fake_cuda, np.ones(3, np.float32)), 1, 0, 3, sigma=1.0)


def test_a_host_pointer_behind_the_interface_is_rejected(fake_cuda):
    host = np.ones(10, np.float32)

    class HostBehindInterface:
        __cuda_array_interface__ = {"shape": (10,), "typestr": "<f4", "data": (host.ctypes.data, False), "version": 3}

    x = HostBehindInterface()
    assert _arrays.device_of(x) == "cuda:?"
    with pytest.raises(ValueError, match="not CUDA device memory"):
        rec.logits(x, 1, 0, 3, sigma=1.0)


def test_temporaries_are_freed(fake_cuda):
    phi = FakeGpuArray(fake_cuda, np.ones(64, np.float16))
    before = len(fake_cuda.registry)
    lg = rec.logits(phi, 1, 0, 3, sigma=1.0)
    assert len(fake_cuda.registry) == before + 1  # the logits; the float32 copy of phi is gone
    del lg
    assert len(fake_cuda.registry) == before


def test_without_the_fixture_there_is_no_fake():
    assert not isinstance(_native._cuda, FakeCuda)  # monkeypatch undid the fixture
