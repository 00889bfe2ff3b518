"""The CUDA kernels' per-thread bodies run on the host (``_core.gpu_emulation``).

CI has no GPU, so these tests run the very code of csrc/cuda/kernel_bodies.h thread by
thread, with launch.cu's plans and reductions, and hold it to the CPU backend: bit for bit
where the CPU kernels promise it (streams, aggregation, conversions), within the float64
summation-order bound for the dot products, and bit for bit against itself across runs.
"""

from __future__ import annotations

import numpy as np
import pytest

from dprec import _backend, philox, rec

from .conftest import requires_native
from .test_rec import _tolerance

pytestmark = requires_native

MAX_STREAM = 1 << 34


@pytest.fixture(scope="module")
def core():
    return _backend.native()


@pytest.fixture(scope="module")
def emu(core):
    return core.gpu_emulation


# ---------------------------------------------------------------------------------------
# Streams
# ---------------------------------------------------------------------------------------


def _stream_cases():
    """(seed, substream, group, domain, offset, count): random, unaligned, and the top of the counter."""
    rng = np.random.default_rng(7)
    cases = []
    for _ in range(120):
        seed = int(rng.integers(0, 1 << 64, dtype=np.uint64))
        substream, group = (int(v) for v in rng.integers(0, 1 << 32, size=2, dtype=np.uint64))
        domain = int(rng.integers(0, 16))
        offset = int(rng.choice([rng.integers(0, 16), rng.integers(0, 1 << 20), rng.integers(0, MAX_STREAM - 64)]))
        count = int(rng.choice([rng.integers(1, 10), rng.integers(10, 70), rng.integers(1000, 5000)]))
        cases.append((seed, substream, group, domain, offset, count))
    for offset in range(8):  # every phase of the first blocks, short and longer counts
        for count in (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 13):
            cases.append((0xDEADBEEF, 3, 1, 0, offset, count))
    for count in range(1, 9):  # the last elements of the stream: block counter 0xFFFFFFFF
        for offset in range(MAX_STREAM - 8, MAX_STREAM - count + 1):
            cases.append((0xFFFFFFFFFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 15, offset, count))
    return cases


def test_stream_normals_and_words_match_cpu(emu):
    for seed, substream, group, domain, offset, count in _stream_cases():
        where = f"seed={seed:#x} s={substream} g={group} domain={domain} offset={offset} count={count}"
        kw = dict(substream=substream, group=group, domain=domain, offset=offset, backend="cpu")
        z = np.full(count, np.nan, dtype=np.float32)
        emu.stream_normals(seed, substream, group, domain, offset, 1.0, z)
        assert np.array_equal(z.view(np.uint32), philox.normals(seed, count, **kw).view(np.uint32)), where
        w = np.full(count, 0xA5A5A5A5, dtype=np.uint32)
        emu.stream_words(seed, substream, group, domain, offset, w)
        assert np.array_equal(w, philox.words(seed, count, **kw)), where


def test_stream_writes_only_its_range(emu):
    # A view into a larger buffer: elements of the edge blocks outside [offset, offset+count) stay put.
    buf = np.full(16, -7.0, dtype=np.float32)
    emu.stream_normals(5, 1, 2, 0, 3, 1.0, buf[4:9])
    assert np.all(buf[:4] == -7.0) and np.all(buf[9:] == -7.0)
    assert np.array_equal(buf[4:9], philox.normals(5, 5, substream=1, group=2, offset=3, backend="cpu"))


@pytest.mark.parametrize("scale", [0.37, -2.5, 1e-3, 3.0e5])
def test_stream_normals_scale_matches_native(emu, core, scale):
    for offset, count in ((0, 1), (1, 7), (6, 1030), (MAX_STREAM - 9, 9)):
        expected = np.empty(count, dtype=np.float32)
        core.stream_normals(11, 4, 9, 0, offset, scale, expected)
        got = np.empty(count, dtype=np.float32)
        emu.stream_normals(11, 4, 9, 0, offset, scale, got)
        assert np.array_equal(got.view(np.uint32), expected.view(np.uint32)), (offset, count)


def test_stream_rejects_counter_overflow(emu):
    with pytest.raises(ValueError, match="2\\*\\*34"):
        emu.stream_words(1, 0, 0, 0, MAX_STREAM - 3, np.empty(4, dtype=np.uint32))
    with pytest.raises(TypeError, match="out"):
        emu.stream_normals(1, 0, 0, 0, 0, 1.0, np.empty(4, dtype=np.float64))


# ---------------------------------------------------------------------------------------
# Log-likelihood ratios: llr_thread + the multi-level reduce_columns
# ---------------------------------------------------------------------------------------


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _llr_plan(d: int, k: int) -> tuple[int, int]:
    """(seg_blocks, n_segments) of gpu::make_llr_plan."""
    n_blocks = _ceil_div(d, 4)
    seg_blocks = max(_ceil_div(n_blocks * k, 1 << 20), 16)
    return seg_blocks, _ceil_div(n_blocks, seg_blocks)


def _reduce_levels(rows: int) -> int:
    levels = 1
    while rows > 32:
        rows = _ceil_div(rows, 32)
        levels += 1
    return levels


def _check_logits(emu, phi, k, seed=0xDEADBEEF, group=3, sigma=0.37, scale=0.5):
    if k >= 2:
        expected = rec.logits(phi, seed, group, k.bit_length() - 1, sigma=sigma, scale=scale, backend="cpu")
    else:  # bits >= 1 in the public API; K = 1 straight from the CPU kernel, as rec.logits scales it
        dots = np.empty(k)
        _backend.native().rec_dot_products(phi, seed, group, dots)
        expected = dots * (scale / sigma)
    got = np.full(k, np.nan)
    emu.rec_dot_products(phi, seed, group, scale / sigma, got)
    err = np.max(np.abs(got - expected))
    assert err <= _tolerance(phi * scale, sigma), (phi.size, k, phi.dtype, err)
    return got


# Sizes around every edge: partial last block (d % 4), one segment, exactly 32 segments
# (d = 2048: one reduce level), 33 (two), 1024 (two), 1025 (three), 4097 (three).
LLR_SIZES = [1, 2, 3, 5, 63, 64, 65, 1000, 2048, 2049, 4099, 65536, 65537, 70_001, 2**18 + 3]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", LLR_SIZES)
def test_rec_dot_products_match_cpu(emu, rng, d, dtype):
    phi = rng.standard_normal(d).astype(dtype)
    for k in (1, 2, 8, 128) if d < 100_000 else (1, 2, 8):
        _check_logits(emu, phi, k)


def test_rec_dot_products_reduce_levels_are_exercised():
    # The sizes above really run one, two and three reduce levels (and odd tails).
    levels = {_reduce_levels(_llr_plan(d, 8)[1]) for d in LLR_SIZES}
    assert levels == {1, 2, 3}
    assert _llr_plan(2048, 8) == (16, 32) and _llr_plan(2049, 8) == (16, 33)
    assert _llr_plan(65537, 8) == (16, 1025)


def test_rec_dot_products_long_segments(emu, rng):
    # n_blocks * K > 16 * 2**20: the plan lengthens its segments (17 blocks, not the minimum
    # 16) and leaves 15421 segments, reduced in three levels.
    d, k = 2**20 + 5, 64
    seg_blocks, n_segments = _llr_plan(d, k)
    assert seg_blocks == 17 and n_segments == 15421 and _reduce_levels(n_segments) == 3
    _check_logits(emu, rng.standard_normal(d).astype(np.float32), k, seed=0x0123456789ABCDEF, group=0xFFFFFFFF)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rec_dot_products_deterministic(emu, rng, dtype):
    phi = rng.standard_normal(70_001).astype(dtype)
    first = _check_logits(emu, phi, 16)
    again = np.empty(16)
    emu.rec_dot_products(phi, 0xDEADBEEF, 3, 0.5 / 0.37, again)
    assert np.array_equal(first.view(np.uint64), again.view(np.uint64))


def test_rec_dot_products_factor_is_applied_once(emu, rng):
    phi = rng.standard_normal(5000)
    one = np.empty(4)
    emu.rec_dot_products(phi, 9, 0, 1.0, one)
    two = np.empty(4)
    emu.rec_dot_products(phi, 9, 0, 2.0, two)
    assert np.array_equal(two, 2.0 * one)  # exact: a power-of-two factor at the last level


def test_rec_dot_products_rejects_bad_sizes(emu):
    with pytest.raises(ValueError, match="phi"):
        emu.rec_dot_products(np.empty(0, dtype=np.float32), 1, 0, 1.0, np.empty(4))
    with pytest.raises(ValueError, match="out"):
        emu.rec_dot_products(np.ones(8, dtype=np.float32), 1, 0, 1.0, np.empty(0))
    with pytest.raises(TypeError, match="phi"):
        emu.rec_dot_products(np.ones(8, dtype=np.int32), 1, 0, 1.0, np.empty(4))


# ---------------------------------------------------------------------------------------
# Gumbel-max over many groups at once
# ---------------------------------------------------------------------------------------


def test_gumbel_argmax_matches_cpu_per_group(emu, core, rng):
    sizes = [1, 2, 5, 128, 3, 64, 1, 7]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(offsets[-1])
    for trial in range(20):
        logits = rng.standard_normal(n) * 3
        gumbel = rec.gumbel_noise(n, np.random.default_rng(trial))
        got = emu.gumbel_argmax(logits, gumbel, offsets)
        assert got.dtype == np.int64 and got.shape == (len(sizes),)
        for g, (a, b) in enumerate(zip(offsets[:-1], offsets[1:])):
            assert got[g] == core.gumbel_argmax(logits[a:b], gumbel[a:b]) == np.argmax(logits[a:b] + gumbel[a:b])


def test_gumbel_argmax_first_index_wins_ties(emu, core):
    groups = [
        ([0.0, 1.0, 3.0, 3.0, 2.0], 2),
        ([5.0, 5.0, 5.0], 0),
        ([-np.inf, 1.0, 0.5, 1.0], 1),
        ([2.0], 0),
        ([1.0, 4.0, -1.0, 4.0, 4.0, 0.0], 1),
    ]
    values = np.concatenate([np.array(v) for v, _ in groups])
    offsets = np.concatenate([[0], np.cumsum([len(v) for v, _ in groups])]).astype(np.int64)
    # The noise makes the sums tie: logits = values - noise, noise added back exactly.
    noise = np.arange(values.size, dtype=np.float64) * 0.25
    logits = values - noise
    got = emu.gumbel_argmax(logits, noise, offsets)
    assert got.tolist() == [best for _, best in groups]
    for g, (a, b) in enumerate(zip(offsets[:-1], offsets[1:])):
        assert got[g] == core.gumbel_argmax(logits[a:b], noise[a:b])


def test_gumbel_argmax_rejects_bad_offsets(emu):
    x = np.zeros(6)
    for bad in ([1, 3, 6], [0, 3, 3, 6], [0, 4, 3, 6], [0, 3, 5], [0, 3, 7], [0]):
        with pytest.raises(ValueError, match="offsets"):
            emu.gumbel_argmax(x, x, np.array(bad, dtype=np.int64))
    with pytest.raises(ValueError, match="gumbel"):
        emu.gumbel_argmax(x, np.zeros(5), np.array([0, 6], dtype=np.int64))


# ---------------------------------------------------------------------------------------
# Server aggregation
# ---------------------------------------------------------------------------------------


def _clients(rng, n):
    seeds = rng.integers(0, 1 << 64, size=n, dtype=np.uint64)
    indices = rng.integers(0, 1 << 7, size=n).astype(np.uint32)
    sigma = rng.uniform(0.1, 2.0, size=n)
    weights = rng.uniform(-1.0, 1.0, size=n)
    return seeds, indices, sigma, weights, np.ascontiguousarray(weights * sigma)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [1, 2, 3, 5, 7, 4097, 10_001])
def test_accumulate_matches_cpu(emu, rng, d, dtype):
    seeds, indices, sigma, weights, coefs = _clients(rng, 6)
    start = rng.standard_normal(d).astype(dtype)
    expected = rec.accumulate(start.copy(), 5, seeds, indices, sigma=sigma, weights=weights, backend="cpu")
    got = start.copy()
    emu.accumulate(got, 5, seeds, indices, coefs)
    uint = np.uint32 if dtype == np.float32 else np.uint64
    assert np.array_equal(got.view(uint), expected.view(uint))


@pytest.mark.parametrize("d", [1, 3, 6, 4097, 10_001])
def test_aggregate_f32_is_rounded_float64_sum(emu, rng, d):
    seeds, indices, sigma, weights, coefs = _clients(rng, 9)
    wide = rec.accumulate(np.zeros(d), 0xFFFFFFFF, seeds, indices, sigma=sigma, weights=weights, backend="cpu")
    got = np.full(d, np.nan, dtype=np.float32)
    emu.aggregate_f32(got, 0xFFFFFFFF, seeds, indices, coefs)
    assert np.array_equal(got.view(np.uint32), wide.astype(np.float32).view(np.uint32))


def test_accumulate_writes_only_out(emu, rng):
    seeds, indices, _, _, coefs = _clients(rng, 3)
    buf = np.zeros(12, dtype=np.float32)
    emu.accumulate(buf[2:9], 1, seeds, indices, coefs)  # d = 7: the last block is partial
    assert np.all(buf[:2] == 0) and np.all(buf[9:] == 0) and np.all(buf[2:9] != 0)


def test_accumulate_rejects_mismatched_clients(emu):
    out = np.zeros(8)
    seeds = np.zeros(2, dtype=np.uint64)
    with pytest.raises(ValueError, match="indices"):
        emu.accumulate(out, 0, seeds, np.zeros(3, dtype=np.uint32), np.ones(2))
    with pytest.raises(ValueError, match="coefs"):
        emu.aggregate_f32(out.astype(np.float32), 0, seeds, np.zeros(2, dtype=np.uint32), np.ones(1))
    with pytest.raises(ValueError, match="out"):
        emu.accumulate(np.zeros(0), 0, seeds, np.zeros(2, dtype=np.uint32), np.ones(2))


# ---------------------------------------------------------------------------------------
# Norm statistics
# ---------------------------------------------------------------------------------------


NORM_CASES = [(n, t) for n in (1, 2, 255, 256, 257, 8193, 100_003) for t in (np.float32, np.float64)]


# 2**24 + 3 elements: 2**16 threads (the cap), more than 256 elements each, four reduce levels.
@pytest.mark.parametrize("n, dtype", NORM_CASES + [(2**24 + 3, np.float32)])
def test_norm_stats(emu, rng, n, dtype):
    x = rng.standard_normal(n, dtype=dtype) * 3
    for divisor in (1.0, 0.3, 8.0):
        sumsq, maxabs = emu.norm_stats(x, divisor)
        expected = np.sum((x.astype(np.float64) / divisor) ** 2)
        assert abs(sumsq - expected) <= 1e-12 * expected, divisor
        assert maxabs == np.max(np.abs(x.astype(np.float64)))


@pytest.mark.parametrize(
    "values",
    [[5e-324, 0.0, -2.5e-323], [1e300, -3e300, 2e300], [1e-310, 0.0, 3e-320, -2e-308]],
    ids=["subnormal", "huge", "tiny"],
)
def test_norm_stats_rescaled_by_max(emu, values):
    # The codec's second pass for extreme updates: divide by max |x| (1/m would overflow
    # for subnormal m, and m * x overflows for huge ones).
    x = np.array(values * 100)
    _, m = emu.norm_stats(x, 1.0)
    assert m == np.max(np.abs(x))
    sumsq, _ = emu.norm_stats(x, m)
    expected = np.sum((x / m) ** 2)
    assert np.isfinite(sumsq) and abs(sumsq - expected) <= 1e-12 * expected


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_norm_stats_nan_and_inf(emu, rng, dtype):
    n = 70_000
    for pos in (0, 1, 255, 256, n // 2, n - 1):
        x = rng.standard_normal(n).astype(dtype)
        x[pos] = np.nan
        sumsq, maxabs = emu.norm_stats(x, 1.0)
        assert np.isnan(maxabs) and np.isnan(sumsq), pos
        x[(pos + 7) % n] = np.inf  # NaN still wins, wherever the inf is
        assert np.isnan(emu.norm_stats(x, 1.0)[1]), pos
        x[pos] = -np.inf
        sumsq, maxabs = emu.norm_stats(x, 1.0)
        assert maxabs == np.inf and sumsq == np.inf, pos
    zeros = np.array([-0.0, 0.0, -0.0], dtype=dtype)
    assert emu.norm_stats(zeros, 1.0) == (0.0, 0.0)
    with pytest.raises(ValueError, match="x"):
        emu.norm_stats(np.zeros(0, dtype=dtype), 1.0)
    for divisor in (0.0, -1.0, np.inf, np.nan):
        with pytest.raises(ValueError, match="divisor"):
            emu.norm_stats(zeros, divisor)


# ---------------------------------------------------------------------------------------
# Conversions
# ---------------------------------------------------------------------------------------


def test_float16_to_float32_exhaustive(emu):
    bits = np.arange(1 << 16, dtype=np.uint16)
    halves = bits.view(np.float16)
    expected = halves.astype(np.float32)
    nan = np.isnan(expected)
    for src in (halves, bits):
        got = np.empty(bits.size, dtype=np.float32)
        emu.to_float32(src, "float16", got)
        assert np.array_equal(np.isnan(got), nan)
        assert np.array_equal(got[~nan].view(np.uint32), expected[~nan].view(np.uint32))
        # NaNs keep their sign and payload (bit manipulation only: signalling NaNs stay so).
        b = bits[nan].astype(np.uint32)
        assert np.array_equal(got[nan].view(np.uint32), (b & 0x8000) << 16 | 0x7F800000 | (b & 0x3FF) << 13)


def test_bfloat16_to_float32_exhaustive(emu):
    bits = np.arange(1 << 16, dtype=np.uint16)
    got = np.empty(bits.size, dtype=np.float32)
    emu.to_float32(bits, "bfloat16", got)
    assert np.array_equal(got.view(np.uint32), bits.astype(np.uint32) << 16)


def test_to_float32_rejects_bad_input(emu):
    out = np.empty(4, dtype=np.float32)
    with pytest.raises(ValueError, match="kind"):
        emu.to_float32(np.zeros(4, dtype=np.uint16), "float32", out)
    with pytest.raises(TypeError, match="src"):
        emu.to_float32(np.zeros(4, dtype=np.float16), "bfloat16", out)
    with pytest.raises(ValueError, match="out"):
        emu.to_float32(np.zeros(5, dtype=np.uint16), "float16", out)
