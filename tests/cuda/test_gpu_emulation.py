"""The CUDA kernels' per-thread bodies run on the host (``dprec._gpu_emulation``).

CI has no GPU, so these tests run the very code of csrc/cuda/kernel_bodies.h thread by
thread, with launch.cu's plans and reductions, and hold it to the CPU backend: bit for bit
where the CPU kernels promise it (streams, aggregation, conversions), within the float64
summation-order bound for the dot products, and bit for bit against itself across runs.
"""

from __future__ import annotations

import numpy as np
import pytest

from dprec import philox, rec
from dprec._runtime import native as _native
from tests.conftest import gpu_emulation, requires_native
from tests.rec.test_kernels import _tolerance

pytestmark = requires_native

MAX_STREAM = 1 << 34


@pytest.fixture(scope="module")
def core():
    return _native.native()


@pytest.fixture(scope="module")
def emu():
    return gpu_emulation()  # skips without the module (wheels)


def test_the_shipped_core_module_has_no_emulation(core):
    # The emulation is for the tests only: it lives in dprec._gpu_emulation, which the wheels
    # leave out, and must not ride along in the CPU module every user loads.
    assert not hasattr(core, "gpu_emulation")
    assert not [name for name in dir(core) if "emulation" in name.lower()]
    # Nor do the CUDA module's test hooks: the device guard is exercised through the emulation.
    cuda = _native._cuda
    if cuda is not None:
        assert not [name for name in dir(cuda) if "trace" in name or "emulation" in name.lower()]


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
        _native.native().rec_dot_products(phi, seed, group, dots)
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


ARGMAX_ITEMS = 256  # gpu::kArgmaxItemsPerThread


def _offsets(sizes) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def _argmax_threads(sizes) -> list[list[int]]:
    """Threads per group at each level of gpu::make_argmax_plan (until one per group)."""
    levels = []
    items = list(sizes)
    while True:
        threads = [_ceil_div(n, ARGMAX_ITEMS) for n in items]
        levels.append(threads)
        if all(t == 1 for t in threads):
            return levels
        items = threads


def _cpu_argmax(core, logits, gumbel, offsets) -> list[int]:
    """cpu::gumbel_argmax (the CPU backend's scan) group by group."""
    return [
        core.gumbel_argmax(np.ascontiguousarray(logits[a:b]), np.ascontiguousarray(gumbel[a:b]))
        for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())
    ]


# Group sizes around every edge of the plan: one element, one thread (up to 256), two
# threads (257), then three levels: 257 * 256 (257, 2 and 1 threads) and 2**20 + 3
# (4097, 17 and 1).
ARGMAX_SIZES = [1, 2, ARGMAX_ITEMS - 1, ARGMAX_ITEMS, ARGMAX_ITEMS + 1, 257 * ARGMAX_ITEMS, 2**20 + 3]


def test_gumbel_argmax_plan(emu):
    mixed = [128] * 300 + ARGMAX_SIZES + [3, 1]
    for sizes in ([1], [2**20 + 3], [2**24], [128] * 300, mixed):
        offsets = _offsets(sizes)
        rows = emu.gumbel_argmax_plan(offsets)
        expected = [offsets] + [_offsets(t) for t in _argmax_threads(sizes)]
        assert rows.shape == (len(expected), len(sizes) + 1) and np.array_equal(rows, np.array(expected)), sizes[:3]
    # Small groups take one level, one group of 2**24 three.
    assert len(_argmax_threads([128] * 300)) == 1
    assert _argmax_threads([2**24]) == [[2**16], [2**8], [1]]
    assert _argmax_threads([2**20 + 3]) == [[4097], [17], [1]]
    assert _argmax_threads([257 * ARGMAX_ITEMS]) == [[257], [2], [1]]


def test_gumbel_argmax_matches_cpu_for_every_plan_edge(emu, core):
    rng = np.random.default_rng(2024)
    for sizes in [[k] for k in ARGMAX_SIZES] + [ARGMAX_SIZES[::-1] + [128] * 40 + [3, 1, 300]]:
        offsets = _offsets(sizes)
        n = int(offsets[-1])
        logits = rng.standard_normal(n) * 3
        gumbel = rec.gumbel_noise(n, rng)
        got = emu.gumbel_argmax(logits, gumbel, offsets)
        assert got.tolist() == _cpu_argmax(core, logits, gumbel, offsets), sizes[:3]


def test_gumbel_argmax_many_random_groups(emu, core):
    rng = np.random.default_rng(11)
    for _ in range(5):
        sizes = rng.choice([1, 2, 3, 7, 128, 255, 256, 257, 600, 5000], size=200).tolist()
        offsets = _offsets(sizes)
        n = int(offsets[-1])
        # Few distinct values: ties everywhere, within threads and across them.
        logits = rng.integers(0, 4, size=n).astype(np.float64)
        gumbel = np.zeros(n)
        assert emu.gumbel_argmax(logits, gumbel, offsets).tolist() == _cpu_argmax(core, logits, gumbel, offsets)
        logits = rng.standard_normal(n)
        gumbel = rec.gumbel_noise(n, rng)
        assert emu.gumbel_argmax(logits, gumbel, offsets).tolist() == _cpu_argmax(core, logits, gumbel, offsets)


def _tie_positions(k: int) -> list[tuple[int, ...]]:
    """Index sets of equal maxima in a group of k: first and last, neighbours, and pairs
    whose smaller index is not the one met first along a thread's stride."""
    t0 = _ceil_div(k, ARGMAX_ITEMS)  # level-0 threads; thread j takes j, j + t0, ...
    cases = [(0, k - 1), (k - 2, k - 1), (k - 1,), (0,)]
    if t0 > 1:
        cases += [
            (t0 - 1, t0),  # last element of thread t0 - 1's first step, first of thread 0's second
            (1 + 2 * t0, 2),  # thread 1's third item against thread 2's first
            (k - 1, k - 1 - t0, k - 2),  # the end of the group, in two threads
        ]
    levels = _argmax_threads([k])
    if len(levels) > 2:
        t1 = levels[1][0]  # level-1 threads: level-1 thread p takes partials p, p + t1, ...
        # Partial 5 (level-0 thread 5) wins at 5 + 2 t0; partial 5 + t1 holds the smaller
        # 5 + t1: the same level-1 thread meets the larger index first.
        # And the smaller index in level-1 thread 0, the larger in level-1 thread t1 - 1.
        cases += [(5 + 2 * t0, 5 + t1), (t1, 3 * t0 + t1 - 1)]
    return [tuple(sorted(set(c))) for c in cases]


@pytest.mark.parametrize("k", [2, ARGMAX_ITEMS - 1, ARGMAX_ITEMS, ARGMAX_ITEMS + 1, 257 * ARGMAX_ITEMS, 2**20 + 3])
def test_gumbel_argmax_first_index_wins_ties_across_threads_and_levels(emu, core, k):
    rng = np.random.default_rng(k)
    base = rng.uniform(-1.0, 1.0, size=k)
    offsets = np.array([0, k], dtype=np.int64)
    for where in _tie_positions(k):
        logits = base.copy()
        logits[list(where)] = 5.0
        gumbel = np.zeros(k)
        assert emu.gumbel_argmax(logits, gumbel, offsets).tolist() == [where[0]], where
        assert core.gumbel_argmax(logits, gumbel) == where[0]
    assert emu.gumbel_argmax(np.zeros(k), np.zeros(k), offsets).tolist() == [0]
    flat = np.full(k, -np.inf)
    assert emu.gumbel_argmax(flat, np.zeros(k), offsets).tolist() == [0] == [core.gumbel_argmax(flat, np.zeros(k))]


@pytest.mark.parametrize("k", [1, 2, ARGMAX_ITEMS - 1, ARGMAX_ITEMS + 1, 257 * ARGMAX_ITEMS, 2**20 + 3])
def test_gumbel_argmax_nan_and_inf_as_on_the_cpu(emu, core, k):
    # The CPU scan starts at the group's first element and moves on strictly greater sums:
    # a NaN first element is the answer, any other NaN is never chosen; -inf is a value.
    rng = np.random.default_rng(k + 1)
    offsets = np.array([0, k], dtype=np.int64)
    t0 = _ceil_div(k, ARGMAX_ITEMS)
    starts = [j for j in (1, t0 - 1, t0, t0 + 1, 2 * t0) if j < k]  # first items of threads, and after
    spots = sorted({0, k // 2, k - 1, *starts})
    base = rng.standard_normal(k)
    gumbel = np.zeros(k)

    def check(logits):
        expected = core.gumbel_argmax(logits, gumbel)
        assert emu.gumbel_argmax(logits, gumbel, offsets).tolist() == [expected]
        return expected

    for pos in spots:
        for bad in (np.nan, -np.inf, np.inf):
            logits = base.copy()
            logits[pos] = bad
            expected = check(logits)
            if bad == np.inf or (np.isnan(bad) and pos == 0):
                assert expected == pos
            elif k > 1:
                assert expected == int(np.argmax(np.where(np.isnan(logits), -np.inf, logits)))
        # Everything NaN or -inf but one finite element; NaN at every thread's first item.
        logits = np.where(np.arange(k) % 2 == 0, np.nan, -np.inf)
        logits[pos] = 1.0
        check(logits)
        logits = np.full(k, -np.inf)
        logits[list(starts)] = np.nan
        check(logits)
        logits[pos] = np.nan
        check(logits)
    for fill in (np.nan, -np.inf):
        logits = np.full(k, fill)
        assert check(logits) == 0
    logits = np.full(k, np.nan)
    logits[k - 1] = -np.inf
    assert check(logits) == 0  # the first element is NaN


def test_gumbel_argmax_nan_first_elements_in_many_groups(emu, core):
    sizes = [1, 3, 257, 600, 2, 70_000, 128]
    offsets = _offsets(sizes)
    n = int(offsets[-1])
    rng = np.random.default_rng(5)
    logits = rng.standard_normal(n)
    gumbel = rec.gumbel_noise(n, rng)
    logits[rng.integers(0, n, size=50)] = np.nan
    logits[offsets[:-1]] = 0.0
    logits[offsets[1:-1:2]] = np.nan  # the first element of groups 1, 3 and 5
    got = emu.gumbel_argmax(logits, gumbel, offsets).tolist()
    assert got == _cpu_argmax(core, logits, gumbel, offsets)
    assert got[1::2] == [0, 0, 0]


def test_gumbel_argmax_matches_sample_indices_and_sample_index(emu):
    rng = np.random.default_rng(77)
    lg = rng.standard_normal((60, 128)) * 4
    noise = rec.gumbel_noise(lg.size, rng).reshape(lg.shape)
    offsets = np.arange(0, lg.size + 1, 128, dtype=np.int64)
    got = emu.gumbel_argmax(lg.reshape(-1), noise.reshape(-1), offsets)
    assert np.array_equal(got, rec.sample_indices(lg, gumbel=noise, backend="cpu"))
    k = 2**20 + 3
    one = rng.standard_normal(k)
    g = rec.gumbel_noise(k, rng)
    expected = rec.sample_index(one, gumbel=g, backend="cpu")
    assert emu.gumbel_argmax(one, g, np.array([0, k], dtype=np.int64)).tolist() == [expected]


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


def _norm_threads(n: int) -> int:
    """gpu::norm_threads: 256 elements or more per thread, at most 2**16 threads."""
    return min(_ceil_div(n, 256), 1 << 16)


def _norm_sumsq_in_kernel_order(x: np.ndarray, divisor: float) -> float:
    """The sum of squares added in the kernels' order: thread t sums elements t, t + T, ...;
    then 32 partial sums per thread and level, each from 0.0, until one is left."""
    w = x.astype(np.float64) / divisor
    n, threads = w.size, _norm_threads(w.size)
    sums = np.zeros(threads)
    for j in range(0, n, threads):
        step = w[j : j + threads]
        sums[: step.size] += step * step
    while True:
        rows = sums.size
        padded = np.zeros(_ceil_div(rows, 32) * 32)  # + 0.0 leaves a sum of squares unchanged
        padded[:rows] = sums
        blocks = padded.reshape(-1, 32)
        sums = np.zeros(blocks.shape[0])
        for c in range(32):
            sums = sums + blocks[:, c]
        if rows <= 32:
            return float(sums[0])


@pytest.mark.parametrize("n", [1, 257, 8192, 8193, 2**20, 2**20 + 3])
def test_norm_stats_sum_order_and_levels(emu, rng, n):
    # 2**20 elements: 4096 threads, reduced in three levels (128, 4, 1 pairs).
    x = rng.standard_normal(n) * 3
    for divisor in (1.0, 0.3):
        sumsq, maxabs = emu.norm_stats(x, divisor)
        assert sumsq == _norm_sumsq_in_kernel_order(x, divisor)
        assert maxabs == np.max(np.abs(x))


def test_norm_stats_nan_in_any_thread_and_level(emu, rng):
    n = 2**20 + 3
    threads = _norm_threads(n)
    assert threads == 4097 and _reduce_levels(threads) == 3  # 129, 5 and 1 pairs
    x = rng.standard_normal(n)
    # Threads at the ends of level-1 rows (31, 32), level-2 rows (1023, 1024), the last
    # thread, and the last element; each as the thread's first and as a later element.
    thread_ends = (0, 31, 32, 1023, 1024, 4095, threads - 1)
    for pos in sorted({n - 1, *thread_ends, *(t + 7 * threads for t in thread_ends)}):
        y = x.copy()
        y[pos] = np.nan
        sumsq, maxabs = emu.norm_stats(y, 1.0)
        assert np.isnan(maxabs) and np.isnan(sumsq), pos
        y[(pos + threads // 2) % n] = np.inf  # NaN wins wherever the inf is
        assert np.isnan(emu.norm_stats(y, 1.0)[1]), pos
    for pos in (0, 4096, n // 2, n - 1):
        y = x.copy()
        y[pos] = -np.inf
        assert emu.norm_stats(y, 1.0) == (np.inf, np.inf), pos
        y[pos] = -1e6
        assert emu.norm_stats(y, 1.0)[1] == 1e6, pos


def test_norm_stats_reports_the_first_threads_nan(emu):
    # NaN bits are deterministic: the lowest thread that met a NaN wins, and within a
    # thread its last NaN (the per-thread scan keeps replacing NaN with NaN).
    n = 2**20
    threads = _norm_threads(n)
    payload = [np.array([0x7FF8000000000000 + k], dtype=np.uint64).view(np.float64)[0] for k in range(1, 4)]
    x = np.ones(n)
    x[3000] = payload[0]  # thread 3000
    x[40 + 5 * threads] = payload[1]  # thread 40, later in memory
    x[40 + 9 * threads] = payload[2]  # thread 40, later still
    maxabs = emu.norm_stats(x, 1.0)[1]
    assert np.array([maxabs]).view(np.uint64)[0] == 0x7FF8000000000003


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
