"""The CUDA backend against the CPU (docs/contract.md-3): bit-identical candidates, logits within
float64 rounding, the index distribution, streams, bad input, and the codec on GPU
tensors. Every test here needs a GPU and skips with the reason when there is none;
tests/cuda/test_cuda_interop.py covers what can be checked without one.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import dprec
from dprec import philox, rec
from dprec.rec.codec import DPRECCodec
from tests.conftest import gpu_emulation, gpu_test_modules, requires_cuda, requires_emulation

torch, cupy = gpu_test_modules()  # skips this module without a usable GPU (with the reason)
pytestmark = requires_cuda


def _bits(x) -> np.ndarray:
    """The raw bits of a float32/float64 array (NumPy or torch, any device)."""
    a = x.cpu().numpy() if hasattr(x, "cpu") else np.asarray(x)
    return a.view(np.uint32 if a.dtype == np.float32 else np.uint64)


def _tolerance(phi: np.ndarray, sigma: float) -> float:
    """Two float64 accumulations in different orders (as in test_rec.py)."""
    return 1e-9 * np.sqrt(phi.size) * np.linalg.norm(phi.astype(np.float64)) / sigma


class DLPackOnly:
    """A producer that offers nothing but the DLPack protocol (like JAX)."""

    def __init__(self, t) -> None:
        self._t = t

    def __dlpack__(self, stream=None):
        return self._t.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self._t.__dlpack_device__()


class InterfaceOnly:
    """A producer that offers nothing but __cuda_array_interface__ (like Numba)."""

    def __init__(self, t) -> None:
        self._t = t
        self.__cuda_array_interface__ = t.__cuda_array_interface__


def _frameworks() -> list[str]:
    return ["torch", "dlpack", "cuda_array_interface"] + (["cupy"] if cupy is not None else [])


def _to(framework: str, t):
    """A CUDA torch tensor as the given framework's array (sharing memory)."""
    if framework == "torch":
        return t
    if framework == "dlpack":
        return DLPackOnly(t)
    if framework == "cuda_array_interface":
        return InterfaceOnly(t)
    return cupy.asarray(t)


# ---------------------------------------------------------------------------------------
# Candidates: bit for bit
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 7, 8, 63, 1000, 4099, 1 << 18])
def test_candidates_bit_identical_to_cpu(size):
    rng = np.random.default_rng(size)
    for _ in range(4):
        seed = int(rng.integers(0, 2**64, dtype=np.uint64))
        group = int(rng.integers(0, 2**32))
        index = int(rng.integers(0, 2**24))
        sigma = float(rng.uniform(0.01, 3.0))
        out = torch.empty(size, device="cuda")
        gpu = rec.candidate(seed, group, index, size, sigma=sigma, out=out)
        assert gpu is out
        cpu = rec.candidate(seed, group, index, size, sigma=sigma, backend="cpu")
        assert np.array_equal(_bits(gpu), _bits(cpu))


def test_stream_elements_bit_identical_including_the_largest_counters():
    rng = np.random.default_rng(7)
    top = 2**34
    offsets = [0, 1, 2, 3, 4, 5, 1023, 2**32 - 3, 2**33 + 1, top - 37, top - 8, top - 5, top - 1]
    for offset in offsets:
        count = min(37, top - offset)
        seed = int(rng.integers(0, 2**64, dtype=np.uint64))
        kw = dict(substream=int(rng.integers(0, 2**32)), group=int(rng.integers(0, 2**32)))
        for domain in (0, 4, 15):
            z = torch.empty(count, device="cuda")
            philox.normals(seed, count, domain=domain, offset=offset, out=z, **kw)
            ref = philox.normals(seed, count, domain=domain, offset=offset, backend="cpu", **kw)
            assert np.array_equal(_bits(z), _bits(ref)), (offset, domain)
            w = torch.empty(count, device="cuda", dtype=torch.uint32)
            philox.words(seed, count, domain=domain, offset=offset, out=w, **kw)
            assert np.array_equal(w.cpu().numpy(), philox.words(seed, count, domain=domain, offset=offset, backend="cpu", **kw))


def test_many_candidates_bit_identical():
    # 256 random (seed, group, k) triples, each over a random window of the stream.
    rng = np.random.default_rng(11)
    for _ in range(256):
        seed = int(rng.integers(0, 2**64, dtype=np.uint64))
        group, k = int(rng.integers(0, 2**32)), int(rng.integers(0, 2**16))
        offset, count = int(rng.integers(0, 2**34 - 64)), int(rng.integers(1, 64))
        z = torch.empty(count, device="cuda")
        philox.normals(seed, count, substream=k, group=group, offset=offset, out=z)
        ref = philox.normals(seed, count, substream=k, group=group, offset=offset, backend="cpu")
        assert np.array_equal(_bits(z), _bits(ref))


@pytest.mark.parametrize("framework", _frameworks())
def test_candidate_into_any_framework(framework):
    t = torch.empty(1001, device="cuda")
    out = rec.candidate(5, 1, 2, 1001, sigma=0.5, out=_to(framework, t))
    torch.cuda.synchronize()
    assert np.array_equal(_bits(t), _bits(rec.candidate(5, 1, 2, 1001, sigma=0.5, backend="cpu")))
    assert out is not None


def test_backend_cuda_without_out_returns_a_device_array():
    a = rec.candidate(9, 0, 3, 777, sigma=2.0, backend="cuda")
    assert isinstance(a, dprec.cuda.DeviceArray)
    assert np.array_equal(_bits(a.get()), _bits(rec.candidate(9, 0, 3, 777, sigma=2.0, backend="cpu")))
    t = torch.as_tensor(a, device="cuda")  # zero-copy through __cuda_array_interface__
    assert t.data_ptr() == a.ptr and t.shape == (777,)


# ---------------------------------------------------------------------------------------
# Logits
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("d", [1, 2, 3, 5, 64, 65, 1000, 4099, 70_001, (1 << 20) + 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_logits_agree_with_cpu(d, dtype):
    bits = 7 if d < 100_000 else 4
    g = torch.Generator(device="cuda").manual_seed(d)
    phi = torch.randn(d, device="cuda", generator=g, dtype=dtype)
    gpu = rec.logits(phi, 0xDEADBEEF, 3, bits, sigma=0.37, scale=0.5)
    assert gpu.is_cuda and gpu.dtype == torch.float64 and gpu.shape == (1 << bits,)
    phi_h = phi.cpu().numpy()
    cpu = rec.logits(phi_h, 0xDEADBEEF, 3, bits, sigma=0.37, scale=0.5, backend="cpu")
    assert np.max(np.abs(gpu.cpu().numpy() - cpu)) <= _tolerance(phi_h * 0.5, 0.37)
    # Deterministic: the same bits on every run.
    again = rec.logits(phi, 0xDEADBEEF, 3, bits, sigma=0.37, scale=0.5)
    assert np.array_equal(_bits(gpu), _bits(again))


@requires_emulation
@pytest.mark.parametrize("d, bits", [(3, 16), (1000, 12), (70_001, 7), ((1 << 18) + 1, 5)])
def test_logits_bit_identical_to_the_host_emulation_of_the_kernels(d, bits):
    # The host runs the kernels' per-thread code in the same order (tests/cuda/test_gpu_emulation.py).
    g = torch.Generator(device="cuda").manual_seed(bits)
    phi = torch.randn(d, device="cuda", generator=g)
    gpu = rec.logits(phi, 77, 5, bits, sigma=1.0)
    emu = np.empty(1 << bits)
    gpu_emulation().rec_dot_products(phi.cpu().numpy(), 77, 5, 1.0, emu)
    assert np.array_equal(_bits(gpu), _bits(emu))


def test_logits_k_65536_and_d_2_28():
    phi = torch.randn(5, device="cuda")
    gpu = rec.logits(phi, 1, 0, 16, sigma=1.0)
    cpu = rec.logits(phi.cpu().numpy(), 1, 0, 16, sigma=1.0, backend="cpu")
    assert np.max(np.abs(gpu.cpu().numpy() - cpu)) <= _tolerance(phi.cpu().numpy(), 1.0)
    d = 1 << 28
    big = torch.randn(d, device="cuda", generator=torch.Generator(device="cuda").manual_seed(3))
    lg = rec.logits(big, 2, 1, 1, sigma=1.0)
    big_h = big.cpu().numpy()
    del big
    ref = rec.logits(big_h, 2, 1, 1, sigma=1.0, backend="cpu")
    assert np.max(np.abs(lg.cpu().numpy() - ref)) <= _tolerance(big_h, 1.0)


@pytest.mark.parametrize("framework", _frameworks())
def test_logits_come_back_in_the_callers_framework(framework):
    phi = torch.randn(300, device="cuda")
    out = rec.logits(_to(framework, phi), 4, 0, 3, sigma=1.0)
    expected_type = {
        "torch": torch.Tensor,
        "cupy": getattr(cupy, "ndarray", None),
        "dlpack": dprec.cuda.DeviceArray,
        "cuda_array_interface": dprec.cuda.DeviceArray,
    }[framework]
    assert isinstance(out, expected_type)
    host = torch.as_tensor(out, device="cuda").cpu().numpy()
    cpu = rec.logits(phi.cpu().numpy(), 4, 0, 3, sigma=1.0, backend="cpu")
    assert np.max(np.abs(host - cpu)) <= _tolerance(phi.cpu().numpy(), 1.0)


def test_half_precision_inputs_are_converted_on_the_device():
    phi = torch.randn(999, device="cuda")
    for dt in (torch.float16, torch.bfloat16):
        low = phi.to(dt)
        gpu = rec.logits(low, 3, 0, 4, sigma=1.0)
        cpu = rec.logits(low.float().cpu().numpy(), 3, 0, 4, sigma=1.0, backend="cpu")
        assert np.max(np.abs(gpu.cpu().numpy() - cpu)) <= _tolerance(low.float().cpu().numpy(), 1.0)


# ---------------------------------------------------------------------------------------
# Sampling
# ---------------------------------------------------------------------------------------


def test_batched_sampling_matches_cpu_with_the_same_noise():
    lg = torch.randn(50, 128, device="cuda", dtype=torch.float64)
    noise = rec.gumbel_noise(50 * 128, np.random.default_rng(1)).reshape(50, 128)
    gpu = rec.sample_indices(lg, gumbel=noise)
    cpu = rec.sample_indices(lg.cpu().numpy(), gumbel=noise, backend="cpu")
    assert gpu.dtype == np.int64 and np.array_equal(gpu, cpu)
    # Ties go to the first index, as on the CPU.
    flat = torch.zeros(3, 8, device="cuda", dtype=torch.float64)
    assert rec.sample_indices(flat, gumbel=np.zeros((3, 8))).tolist() == [0, 0, 0]


def test_sampling_k_2_24_matches_cpu():
    # One group of 2**24 candidates: three levels on the device (2**16, 2**8 and 1 threads).
    k = 1 << 24
    lg = torch.randn(k, device="cuda", dtype=torch.float64, generator=torch.Generator(device="cuda").manual_seed(24))
    noise = rec.gumbel_noise(k, np.random.default_rng(24))
    assert rec.sample_index(lg, gumbel=noise) == rec.sample_index(lg.cpu().numpy(), gumbel=noise, backend="cpu")
    # Ties go to the first index, wherever the threads and levels meet them.
    zeros = np.zeros(k)
    lg.zero_()
    assert rec.sample_index(lg, gumbel=zeros) == 0
    lg[k - 1] = 1.0
    assert rec.sample_index(lg, gumbel=zeros) == k - 1
    lg[(1 << 16) + 7] = 1.0  # level-0 thread 7, second item; ties with the last element
    lg[7 + 5 * (1 << 16)] = 1.0  # the same thread, later
    assert rec.sample_index(lg, gumbel=zeros) == (1 << 16) + 7


# The CPU comparison runs everywhere; the emulation's needs the test-only module.
@pytest.mark.parametrize("reference", ["cpu", pytest.param("emulation", marks=requires_emulation)])
def test_gumbel_argmax_bit_identical_to_the_cpu_and_the_host_emulation(reference):
    # Many groups of mixed sizes (one, two and three levels), ties, NaN and -inf, through
    # the binding itself (the public API refuses non-finite logits).
    cuda = dprec._runtime.native.cuda_module()
    sizes = [1, 2, 255, 256, 257, 257 * 256, (1 << 20) + 3] + [128] * 300 + [3, 1]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(offsets[-1])
    rng = np.random.default_rng(13)
    for trial in range(3):
        if trial == 0:
            logits, noise = rng.standard_normal(n), rec.gumbel_noise(n, rng)
        else:
            logits, noise = rng.integers(0, 3, size=n).astype(np.float64), np.zeros(n)
            logits[rng.integers(0, n, size=500)] = np.nan if trial == 1 else -np.inf
            logits[offsets[1:-1:3]] = np.nan  # some groups start with NaN: the CPU answers 0
        lg = torch.tensor(logits, device="cuda")
        got = cuda.gumbel_argmax(lg.device.index, 0, lg.data_ptr(), noise, offsets)
        if reference == "emulation":
            assert np.array_equal(got, gpu_emulation().gumbel_argmax(logits, noise, offsets)), trial
        else:
            native = dprec._runtime.native.native()
            cpu = [native.gumbel_argmax(logits[a:b], noise[a:b]) for a, b in zip(offsets, offsets[1:])]
            assert got.tolist() == cpu, trial


def test_index_distribution_chi_square():
    logits = np.array([0.0, 1.0, -0.5, 2.0, 0.3, -2.0, 1.5, 0.0])
    p = np.exp(logits - logits.max())
    p /= p.sum()
    n = 40_000
    batch = torch.tensor(logits, device="cuda").repeat(n, 1)
    idx = rec.sample_indices(batch, rng=np.random.default_rng(2026))
    counts = np.bincount(idx, minlength=8)
    assert stats.chisquare(counts, n * p).pvalue > 1e-3
    one = rec.sample_index(torch.tensor(logits, device="cuda"), rng=np.random.default_rng(3))
    assert 0 <= one < 8


def test_encode_group_on_gpu_samples_the_likelihood_ratio():
    # A 1-element group with sigma=1: l_k = z_k * phi, so k* concentrates where z_k phi is large.
    phi = torch.tensor([3.0], device="cuda")
    z = np.array([philox.normals(21, 1, substream=k)[0] for k in range(16)], dtype=np.float64)
    p = np.exp(3.0 * z - (3.0 * z).max())
    p /= p.sum()
    gen = np.random.default_rng(5)
    draws = [rec.encode_group(phi, 21, 0, 4, sigma=1.0, rng=gen) for _ in range(3000)]
    counts = np.bincount(draws, minlength=16)
    keep = p * 3000 >= 5
    expected = np.append(p[keep] * 3000, p[~keep].sum() * 3000)
    observed = np.append(counts[keep], counts[~keep].sum())
    assert stats.chisquare(observed, expected).pvalue > 1e-3


# ---------------------------------------------------------------------------------------
# Aggregation
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_accumulate_bit_identical_to_cpu(dtype):
    d = 100_003
    rng = np.random.default_rng(3)
    seeds = rng.integers(0, 2**64, 17, dtype=np.uint64)
    idx = rng.integers(0, 128, 17).astype(np.uint32)
    w = rng.uniform(-1, 1, 17)
    start = rng.standard_normal(d)
    gpu = torch.tensor(start, dtype=dtype, device="cuda")
    rec.accumulate(gpu, 4, seeds, idx, sigma=0.3, weights=w)
    cpu = start.astype(np.float32 if dtype == torch.float32 else np.float64)
    rec.accumulate(cpu, 4, seeds, idx, sigma=0.3, weights=w, backend="cpu")
    assert np.array_equal(_bits(gpu), _bits(cpu))


# ---------------------------------------------------------------------------------------
# Streams
# ---------------------------------------------------------------------------------------


def test_work_runs_on_the_callers_current_stream():
    d = 1 << 20
    s = torch.cuda.Stream()
    out = torch.empty(d, device="cuda")
    expected = rec.candidate(8, 2, 6, d, sigma=1.0, backend="cpu")
    # Load every kernel used below first: under lazy module loading a kernel's first launch
    # (PyTorch's fill as well as dprec's) may wait for the device, which is not what this
    # test is about (test_first_call_loads_the_kernels_once is).
    out.fill_(1.0)
    rec.candidate(8, 2, 6, d, sigma=1.0, out=out)
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        torch.cuda._sleep(50_000_000)  # keep the stream busy for a while
        out.fill_(0.0)  # queued behind the sleep on s
        rec.candidate(8, 2, 6, d, sigma=1.0, out=out)  # must queue behind the fill, on s
        assert not s.query()  # nothing above waited for the stream
    s.synchronize()
    # Had dprec used another stream, it would have written before the fill of zeros.
    assert np.array_equal(_bits(out), _bits(expected))


def test_codec_on_a_side_stream():
    s = torch.cuda.Stream()
    codec = DPRECCodec(sigma=0.05, bits=6)
    with torch.cuda.stream(s):
        update = {"w": torch.randn(4000, device="cuda"), "b": torch.randn(17, device="cuda")}
        msg = codec.encode(update, rng=np.random.default_rng(0), seed=99)
        dec = codec.decode(msg, update)
    s.synchronize()
    cpu = codec.decode(msg, {k: v.cpu().numpy() for k, v in update.items()})
    for k in update:
        assert np.array_equal(_bits(dec[k]), _bits(cpu[k]))


# ---------------------------------------------------------------------------------------
# The codec on GPU tensors
# ---------------------------------------------------------------------------------------


def _update(seed: int, dtype=torch.float32) -> dict:
    g = torch.Generator(device="cuda").manual_seed(seed)
    return {
        "conv.weight": torch.randn(16, 3, 3, 3, device="cuda", generator=g, dtype=dtype) * 0.1,
        "conv.bias": torch.randn(16, device="cuda", generator=g, dtype=dtype) * 0.1,
        "fc.weight": torch.randn(10, 400, device="cuda", generator=g, dtype=dtype) * 0.05,
    }


@pytest.mark.parametrize("max_group_size", [None, 1000])
def test_codec_encodes_on_gpu_like_the_cpu(max_group_size):
    codec = DPRECCodec(sigma=0.02, clip_multiplier=2.0, bits=7, max_group_size=max_group_size)
    upd = _update(1)
    host = {k: v.cpu().numpy() for k, v in upd.items()}
    for seed in range(5):
        m_gpu = codec.encode(upd, rng=np.random.default_rng(seed), seed=1000 + seed)
        m_cpu = codec.encode(host, rng=np.random.default_rng(seed), seed=1000 + seed)
        # Same seed and noise; the logits differ only in float64 rounding.
        assert m_gpu.indices == m_cpu.indices
        assert m_gpu.layout_digest == m_cpu.layout_digest


def test_codec_decodes_on_gpu_or_cpu_to_the_same_values():
    codec = DPRECCodec(sigma=0.02, bits=5, max_group_size=333)
    upd = _update(2)
    msg = codec.encode(upd)
    on_gpu = codec.decode(msg, upd)
    on_cpu = codec.decode(msg.to_bytes(), {k: v.cpu() for k, v in upd.items()})
    for k in upd:
        assert on_gpu[k].is_cuda and on_gpu[k].dtype == torch.float32 and on_gpu[k].shape == upd[k].shape
        assert np.array_equal(_bits(on_gpu[k]), _bits(on_cpu[k]))


def test_codec_aggregates_on_gpu_bit_identical_to_cpu():
    codec = DPRECCodec(sigma=0.02, bits=7)
    upd = _update(3)
    msgs = [codec.encode(_update(10 + i)) for i in range(12)]
    w = np.linspace(0.5, 2.0, 12)
    gpu = codec.aggregate(msgs, upd, weights=w)
    cpu = codec.aggregate(msgs, {k: v.cpu().numpy() for k, v in upd.items()}, weights=w)
    for k in upd:
        assert gpu[k].is_cuda and np.array_equal(_bits(gpu[k]), _bits(cpu[k]))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_codec_accepts_every_float_dtype_on_gpu(dtype):
    codec = DPRECCodec(sigma=0.05, bits=4)
    upd = _update(4, dtype)
    m_gpu = codec.encode(upd, rng=np.random.default_rng(0), seed=5)
    m_cpu = codec.encode({k: v.cpu() for k, v in upd.items()}, rng=np.random.default_rng(0), seed=5)
    assert m_gpu.indices == m_cpu.indices


def test_codec_clips_extreme_float64_updates_on_gpu():
    codec = DPRECCodec(sigma=1.0, bits=4)
    upd = {"w": torch.full((100,), 1e300, dtype=torch.float64, device="cuda")}
    m_gpu = codec.encode(upd, rng=np.random.default_rng(0), seed=5)
    m_cpu = codec.encode({"w": upd["w"].cpu().numpy()}, rng=np.random.default_rng(0), seed=5)
    assert m_gpu.indices == m_cpu.indices


# ---------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------


@requires_emulation
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_norm_stats_bit_identical_to_the_host_emulation(dtype):
    # The finiteness check of every GPU entry point: one launch for the per-thread pairs,
    # then (sum, max) levels; the host runs the same bodies in the same order.
    cuda = dprec._runtime.native.cuda_module()
    emu = gpu_emulation()
    name = "float32" if dtype == torch.float32 else "float64"
    g = torch.Generator(device="cuda").manual_seed(8)
    xs = [torch.randn(n, device="cuda", dtype=dtype, generator=g) * 3 for n in (1, 257, 70_001, (1 << 24) + 3)]
    xs[2][123] = float("inf")
    xs.append(xs[3].clone())
    xs[4][(1 << 24) - 5] = float("nan")
    for divisor in (1.0, 0.3):
        ptrs = [x.data_ptr() for x in xs]
        got = cuda.norm_stats(xs[0].device.index, 0, ptrs, [name] * len(xs), [x.numel() for x in xs], divisor)
        expected = np.array([emu.norm_stats(x.cpu().numpy(), divisor) for x in xs])
        assert np.array_equal(_bits(got), _bits(expected)), divisor
    assert got[2, 1] == np.inf and np.isnan(got[4, 1])


def test_wrong_backend_for_gpu_data_is_a_clear_error():
    phi = torch.randn(10, device="cuda")
    for backend in ("cpu", "reference"):
        with pytest.raises(ValueError, match=r"phi is on cuda:0.*backend="):
            rec.logits(phi, 1, 0, 3, sigma=1.0, backend=backend)
    with pytest.raises(ValueError, match="GPU"):
        DPRECCodec(sigma=1.0, backend="cuda").decode(b"", {"w": np.zeros(3, np.float32)})


def test_mixing_devices_is_a_clear_error():
    codec = DPRECCodec(sigma=1.0, bits=3)
    with pytest.raises(ValueError, match=r"update\['b'\] is on cpu.*update\['a'\] is on cuda:0"):
        codec.encode({"a": torch.ones(3, device="cuda"), "b": torch.ones(3)})
    with pytest.raises(ValueError, match="host"):
        rec.sample_index(torch.zeros(4, device="cuda", dtype=torch.float64), gumbel=torch.zeros(4, device="cuda"))
    if torch.cuda.device_count() > 1:
        with pytest.raises(ValueError, match="cuda:1"):
            codec.encode({"a": torch.ones(3, device="cuda:0"), "b": torch.ones(3, device="cuda:1")})


def test_non_contiguous_gpu_arrays_are_rejected():
    phi = torch.randn(10, 10, device="cuda").t()
    with pytest.raises(ValueError, match="contiguous"):
        rec.logits(phi, 1, 0, 3, sigma=1.0)
    with pytest.raises(ValueError, match="contiguous"):
        DPRECCodec(sigma=1.0).encode({"w": phi})
    with pytest.raises(ValueError, match="contiguous"):
        rec.candidate(1, 0, 0, 50, out=torch.empty(100, device="cuda")[::2])


def test_unsupported_dtypes_are_rejected():
    with pytest.raises(TypeError, match="integer"):
        rec.logits(torch.ones(10, dtype=torch.int32, device="cuda"), 1, 0, 3, sigma=1.0)
    with pytest.raises(TypeError, match=r"update\['w'\].*integer"):
        DPRECCodec(sigma=1.0).encode({"w": torch.ones(10, dtype=torch.int64, device="cuda")})
    with pytest.raises(TypeError, match="float32"):
        rec.candidate(1, 0, 0, 10, out=torch.empty(10, dtype=torch.float64, device="cuda"))
    with pytest.raises(TypeError, match="float64"):
        rec.sample_index(torch.zeros(4, device="cuda", dtype=torch.float32))


def test_non_finite_gpu_input_is_rejected():
    phi = torch.randn(100, device="cuda")
    phi[17] = float("nan")
    with pytest.raises(ValueError, match="phi contains NaN"):
        rec.logits(phi, 1, 0, 3, sigma=1.0)
    phi[17] = float("inf")
    with pytest.raises(ValueError, match=r"update\['w'\] contains infinite"):
        DPRECCodec(sigma=1.0).encode({"w": phi})


def test_wrong_sizes_are_rejected():
    with pytest.raises(ValueError, match="out must have 10 elements"):
        rec.candidate(1, 0, 0, 10, out=torch.empty(11, device="cuda"))
    with pytest.raises(ValueError, match="out"):
        philox.normals(1, 10, out=torch.empty(9, device="cuda"))


def test_binding_layer_checks_pointers():
    cuda = dprec._runtime.native.cuda_module()
    host = np.zeros(8, np.float32)
    with pytest.raises(ValueError, match="not CUDA device memory"):
        cuda.stream_normals(0, 0, 1, 0, 0, 0, 0, 8, 1.0, host.ctypes.data)
    t = torch.empty(9, device="cuda")
    with pytest.raises(ValueError, match="aligned"):
        cuda.stream_normals(0, 0, 1, 0, 0, 0, 0, 4, 1.0, t.data_ptr() + 2)
    with pytest.raises(ValueError, match="2\\*\\*34"):
        cuda.stream_normals(0, 0, 1, 0, 0, 0, 2**34 - 2, 4, 1.0, t.data_ptr())
    with pytest.raises(ValueError, match="device must be in"):
        cuda.stream_normals(99, 0, 1, 0, 0, 0, 0, 4, 1.0, t.data_ptr())
