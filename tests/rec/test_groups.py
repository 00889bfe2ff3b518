"""The logits of all groups of an update in one kernel call (``dot_products_groups``), and the
codec's encode built on it: the same bits as the per-group path, for any thread count."""

from __future__ import annotations

import numpy as np
import pytest

import dprec
from dprec._runtime import arrays as _arrays
from dprec._runtime import backends as _backends
from dprec._runtime import native as _native
from dprec.rec import kernels as rec
from tests.conftest import BACKENDS, requires_native


def _groups(tensors: list[np.ndarray], spec: list[tuple[int, int, int, int, int]], factors: list[float]):
    """(rows (G, 4) uint64, offsets int64, factors float64) for groups ``(tensor, start, size,
    group id, bits)``."""
    rows = np.array([s[:4] for s in spec], dtype=np.uint64).reshape(-1, 4)
    offsets = np.zeros(len(spec) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([1 << s[4] for s in spec])
    return rows, offsets, np.array(factors, dtype=np.float64)


def _grouped(backend: str, tensors, seed, spec, factors) -> np.ndarray:
    rows, offsets, fac = _groups(tensors, spec, factors)
    out = np.full(int(offsets[-1]), np.nan)
    arrays = [_arrays.read(t, f"t{i}") for i, t in enumerate(tensors)]
    _backends.BY_NAME[backend].dot_products_groups(arrays, seed, rows, offsets, fac, _arrays.read(out, "out"))
    return out


def _per_group(backend: str, tensors, seed, spec, factors) -> np.ndarray:
    """What the codec computed before: one ``dot_products`` call per group."""
    kernels = _backends.BY_NAME[backend]
    parts = []
    for (t, start, size, group, bits), f in zip(spec, factors):
        out = np.empty(1 << bits)
        phi = _arrays.read(tensors[t], "phi").flat(start, size)
        kernels.dot_products(phi, seed, group, f, _arrays.read(out, "out"))
        parts.append(out)
    return np.concatenate(parts)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a.view(np.uint64), b.view(np.uint64))


def _mixed(rng):
    """Tensors of both dtypes and groups of mixed sizes, bits, chunks and group ids."""
    tensors = [
        rng.standard_normal(5000).astype(np.float32),
        rng.standard_normal(37),
        rng.standard_normal(1).astype(np.float32),
        rng.standard_normal(70_001).astype(np.float32),  # two reduction segments
    ]
    spec = [
        (0, 0, 2048, 0, 7),
        (0, 2048, 2952, 1, 3),
        (1, 0, 37, 2, 5),
        (2, 0, 1, 7, 1),
        (1, 3, 30, 2**32 - 1, 6),
        (3, 0, 70_001, 9, 4),
        (0, 4999, 1, 11, 9),
    ]
    factors = [1.0, 0.37, 1 / 3, -2.5, 1e-300, 7.0, 1.0]
    return tensors, spec, factors


@requires_native
def test_groups_are_the_per_group_bits_on_every_isa(isa, rng):
    tensors, spec, factors = _mixed(rng)
    got = _grouped("cpu", tensors, 0xDEADBEEF, spec, factors)
    assert _same_bits(got, _per_group("cpu", tensors, 0xDEADBEEF, spec, factors))


@pytest.mark.parametrize("backend", BACKENDS)
def test_groups_match_the_per_group_path_bit_for_bit(backend, rng):
    tensors, spec, factors = _mixed(rng)
    if backend == "reference":  # the reference is slow on the 70,001-element group
        spec = spec[:5]
        factors = factors[:5]
    assert _same_bits(_grouped(backend, tensors, 42, spec, factors), _per_group(backend, tensors, 42, spec, factors))


@requires_native
def test_native_groups_agree_with_the_reference(rng):
    tensors, spec, factors = _mixed(rng)
    spec, factors = spec[:5] + spec[6:], factors[:5] + factors[6:]
    native = _grouped("cpu", tensors, 5, spec, factors)
    reference = _grouped("reference", tensors, 5, spec, factors)
    # Two float64 accumulations in different orders (rec.logits' tolerance), per group.
    offsets = _groups(tensors, spec, factors)[1]
    for (t, start, size, _, _), f, a, b in zip(spec, factors, offsets[:-1], offsets[1:]):
        phi = tensors[t][start : start + size].astype(np.float64)
        tol = 1e-9 * np.sqrt(size) * np.linalg.norm(phi) * abs(f)
        assert np.max(np.abs(native[a:b] - reference[a:b])) <= tol


@requires_native
def test_many_tiny_groups(threads, rng):
    x = rng.standard_normal(3000).astype(np.float32)
    spec = [(0, i, 1 + i % 5, i, 1 + i % 4) for i in range(2000)]  # overlapping slices are fine
    factors = list(rng.standard_normal(2000))
    want = _per_group("cpu", [x], 3, spec, factors)
    for n in (1, 2, 3):
        threads(n)
        assert _same_bits(_grouped("cpu", [x], 3, spec, factors), want)


@requires_native
def test_one_huge_group_split_across_threads(threads, rng):
    # 2**18 elements x 2**7 candidates: enough work for the kernel to use every thread, and
    # four reduction segments.
    x = rng.standard_normal(1 << 18).astype(np.float32)
    spec = [(0, 0, x.size, 3, 7)]
    results = []
    for n in (1, 2, 3, 4):
        threads(n)
        results.append(_grouped("cpu", [x], 11, spec, [0.5]))
    results.append(_per_group("cpu", [x], 11, spec, [0.5]))
    for r in results[1:]:
        assert _same_bits(r, results[0])


@requires_native
def test_groups_identical_for_any_thread_count(threads, rng):
    tensors, spec, factors = _mixed(rng)
    results = []
    for n in (1, 2, 5):
        threads(n)
        results.append(_grouped("cpu", tensors, 77, spec, factors))
    for r in results[1:]:
        assert _same_bits(r, results[0])


@requires_native
def test_native_groups_reject_bad_tables():
    core = _native.native()
    x = np.ones(10, dtype=np.float32)
    out = np.empty(4)
    ok = (np.array([0, 0, 10, 0], dtype=np.uint64), np.array([0, 4], dtype=np.int64), np.ones(1))
    core.rec_dot_products_groups([x], 1, *ok, out)
    bad = {
        "tensor index": ([0 + 1, 0, 10, 0], [0, 4]),
        "select 1 or more": ([0, 5, 6, 0], [0, 4]),
        "group id": ([0, 0, 10, 2**32], [0, 4]),
        "candidates": ([0, 0, 10, 0], [0, 0]),
    }
    for message, (row, offsets) in bad.items():
        with pytest.raises(ValueError, match=message):
            core.rec_dot_products_groups(
                [x], 1, np.array(row, dtype=np.uint64), np.array(offsets, dtype=np.int64), np.ones(1),
                np.empty(offsets[-1]),
            )
    with pytest.raises(TypeError, match=r"tensors\[0\]"):
        core.rec_dot_products_groups([np.ones(10, dtype=np.int32)], 1, *ok, out)
    with pytest.raises(ValueError, match="offsets"):
        core.rec_dot_products_groups([x], 1, ok[0], np.array([0, 4], dtype=np.int64), np.ones(1), np.empty(5))
    with pytest.raises(ValueError, match="rows of 4"):
        core.rec_dot_products_groups([x], 1, ok[0][:3], ok[1], ok[2], out)


@requires_native
def test_native_batched_gumbel_argmax_is_the_per_segment_scan(rng):
    core = _native.native()
    sizes = [1, 2, 128, 3, 512, 1]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    lg = rng.standard_normal(int(offsets[-1])) * 3
    lg[5:9] = 1e3  # ties: the first index wins
    noise = rec.gumbel_noise(lg.size, np.random.default_rng(1))
    noise[5:9] = 0.0
    out = np.empty(len(sizes), dtype=np.int64)
    core.gumbel_argmax_groups(lg, noise, offsets, out)
    want = [int(np.argmax(lg[a:b] + noise[a:b])) for a, b in zip(offsets[:-1], offsets[1:])]
    assert out.tolist() == want
    with pytest.raises(ValueError, match="increasing"):
        core.gumbel_argmax_groups(lg, noise, np.array([0, 0, lg.size], dtype=np.int64), np.empty(2, dtype=np.int64))


def test_one_noise_draw_is_the_per_group_draws():
    # encode draws the noise of all groups at once; the bytes stay those of G draws.
    sizes = [128, 2, 512, 1, 128]
    gen = np.random.default_rng(9)
    per_group = np.concatenate([rec.gumbel_noise(k, gen) for k in sizes])
    at_once = rec.gumbel_noise(sum(sizes), np.random.default_rng(9))
    assert _same_bits(per_group, at_once)


# -- codec.encode: the same message bytes as before the batched kernels ---------------------------


def _kat_cases():
    rng = np.random.default_rng(2024)
    mlp = {
        "fc1.weight": rng.standard_normal((32, 64)).astype(np.float32) * 0.01,
        "fc1.bias": rng.standard_normal(32).astype(np.float32) * 0.01,
        "fc2.weight": rng.standard_normal((10, 32)).astype(np.float32) * 0.01,
        "fc2.bias": rng.standard_normal(10).astype(np.float32) * 0.01,
    }
    mixed = [rng.standard_normal(1000), rng.standard_normal(7).astype(np.float32), rng.standard_normal((3, 300))]
    big = {"w": rng.standard_normal(70000).astype(np.float32), "b": rng.standard_normal(5)}
    return {
        "mlp7": (dprec.DPRECCodec(sigma=0.01, bits=7), mlp),
        "mlp_bits": (dprec.DPRECCodec(sigma=0.05, clip_multiplier=2.0, bits={"fc1.weight": 9, "fc2.bias": 2}), mlp),
        "mixed_chunks": (dprec.DPRECCodec(sigma=0.3, bits=5, max_group_size=256), mixed),
        "big": (dprec.DPRECCodec(sigma=0.02, bits=6, max_group_size=40000), big),
        "unclipped": (dprec.DPRECCodec(sigma=1.0, clip_multiplier=1e3, bits=8), mlp),
    }


# Message bytes of the per-group encoder (one dot_products call per group, one noise draw per
# group), recorded before the batched kernels replaced it: (case, seed) -> hex.
_KNOWN_MESSAGES = {
    ("mlp7", 1): "44505243010101000100000000000000d27e0d6462e40e690400000007018e8201a963d53b",
    ("mlp7", 0xFEEDFACECAFEBEEF): "4450524301010100efbefecacefaedfed27e0d6462e40e690400000007d8ca0a00bc5ba370",
    ("mlp_bits", 1): "4450524301010000010000000000000061d1b20fbd069df40400000007090207812986005c6b0061",
    ("mlp_bits", 0xFEEDFACECAFEBEEF): (
        "4450524301010000efbefecacefaedfe61d1b20fbd069df40400000007090207d855d5002f2fd43c"
    ),
    ("mixed_chunks", 1): "44505243010101000100000000000000d811b3f2c1bc8b5a090000000541d1c533780a960d877f",
    ("mixed_chunks", 0xFEEDFACECAFEBEEF): (
        "4450524301010100efbefecacefaedfed811b3f2c1bc8b5a0900000005fd615f37d509ffbec6fb"
    ),
    ("big", 1): "445052430101010001000000000000001e4be089e53fdf8d0300000006eac301d326c906",
    ("big", 0xFEEDFACECAFEBEEF): "4450524301010100efbefecacefaedfe1e4be089e53fdf8d03000000061d560151e0b63d",
    ("unclipped", 1): "4450524301010100010000000000000089d992a4bce467e804000000089c0aa557b8de07ec",
    ("unclipped", 0xFEEDFACECAFEBEEF): "4450524301010100efbefecacefaedfe89d992a4bce467e80400000008582b81b50320af70",
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted({c for c, _ in _KNOWN_MESSAGES}))
def test_encode_bytes_are_unchanged(backend, case, threads):
    if backend == "reference" and case == "big":
        pytest.skip("the reference takes seconds on 70,000 x 64 candidate-elements")
    codec, update = _kat_cases()[case]
    codec = dprec.DPRECCodec(sigma=codec.sigma, clip_multiplier=codec.clip_multiplier, bits=codec.bits,
                             max_group_size=codec.max_group_size, backend=backend)
    for n in (1, 2) if backend == "cpu" else (None,):
        if n is not None:
            threads(n)
        for seed in (1, 0xFEEDFACECAFEBEEF):
            msg = codec.encode(update, rng=np.random.default_rng(seed + 7), seed=seed)
            assert msg.to_bytes().hex() == _KNOWN_MESSAGES[(case, seed)], (case, seed, n)


# -- the fused draw (sample_groups), its noise words and the clip norm's sum of squares ----------


@pytest.mark.parametrize("backend", BACKENDS)
def test_sample_groups_is_dot_products_then_gumbel_argmax(backend, rng, threads):
    tensors, spec, factors = _mixed(rng)
    if backend == "reference":
        spec, factors = spec[:5], factors[:5]
    rows, offsets, fac = _groups(tensors, spec, factors)
    arrays = [_arrays.read(t, f"t{i}") for i, t in enumerate(tensors)]
    kernels = _backends.BY_NAME[backend]
    for n in (1, 2):
        threads(n)
        for trial in range(5):
            words = rec._gumbel_words(int(offsets[-1]), np.random.default_rng(trial))
            logits = np.full(int(offsets[-1]), np.nan)
            got = kernels.sample_groups(arrays, 99, rows, offsets, fac, words, _arrays.read(logits, "logits"))
            assert _same_bits(logits, _grouped(backend, tensors, 99, spec, factors))
            noise = rec.gumbel_noise(int(offsets[-1]), np.random.default_rng(trial))
            bounds = offsets.tolist()
            want = [int(np.argmax(logits[a:b] + noise[a:b])) for a, b in zip(bounds[:-1], bounds[1:])]
            assert got.tolist() == want


@pytest.mark.parametrize("bit_generator", [np.random.PCG64, np.random.PCG64DXSM, np.random.Philox, np.random.SFC64,
                                           np.random.MT19937])
def test_gumbel_words_are_integers_below_2_53(bit_generator):
    a, b = np.random.Generator(bit_generator(11)), np.random.Generator(bit_generator(11))
    for n in (1, 7, 512, 10_000):
        assert np.array_equal(rec._gumbel_words(n, a), b.integers(0, 1 << 53, size=n, dtype=np.uint64))
    # Both generators end in the same state: the next draws agree.
    assert np.array_equal(a.integers(0, 2**63, size=4), b.integers(0, 2**63, size=4))


@requires_native
def test_sample_groups_rejects_words_of_more_than_53_bits(rng):
    core = _native.native()
    x = rng.standard_normal(10).astype(np.float32)
    rows = np.array([0, 0, 10, 0], dtype=np.uint64)
    offsets = np.array([0, 4], dtype=np.int64)
    words = np.array([1, 2, 1 << 53, 3], dtype=np.uint64)
    with pytest.raises(ValueError, match="words must be < 2\\*\\*53"):
        core.rec_sample_groups([x], 1, rows, offsets, np.ones(1), words, np.empty(4), np.empty(1, np.int64))
    with pytest.raises(ValueError, match="words must have the size of logits"):
        core.rec_sample_groups([x], 1, rows, offsets, np.ones(1), words[:3], np.empty(4), np.empty(1, np.int64))
    with pytest.raises(ValueError, match="indices must have one element per group"):
        core.rec_sample_groups([x], 1, rows, offsets, np.ones(1), np.arange(4, dtype=np.uint64),
                               np.empty(4), np.empty(2, np.int64))


@requires_native
def test_sample_groups_reports_non_finite_logits(rng):
    core = _native.native()
    x = np.array([1e308, -1e308, 1e308], dtype=np.float64)
    rows = np.array([0, 0, 3, 0], dtype=np.uint64)
    offsets = np.array([0, 8], dtype=np.int64)
    words = np.arange(8, dtype=np.uint64)
    out = np.empty(1, np.int64)
    assert core.rec_sample_groups([x], 1, rows, offsets, np.array([1e10]), words, np.empty(8), out) == 1
    assert core.rec_sample_groups([x * 0 + np.nan], 1, rows, offsets, np.ones(1), words, np.empty(8), out) == 2
    assert core.rec_sample_groups([x * 1e-300], 1, rows, offsets, np.ones(1), words, np.empty(8), out) == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("divisor", [1.0, 3.7, 1e-300])
def test_sum_of_squares_native_is_the_reference_bit_for_bit(dtype, divisor, rng, threads):
    """The clip norm's sum: the CPU kernel and the NumPy reference add in one documented order
    (chunks of 2**16, 8 lanes), so both host backends clip by the same norm whatever the
    thread count."""
    sizes = [1, 7, 8, 9, 63, 2410, (1 << 16) - 1, 1 << 16, (1 << 16) + 1, 9 * (1 << 16) + 5]
    xs = [(rng.standard_normal(n) * rng.uniform(1e-3, 1e3)).astype(dtype) for n in sizes]
    if divisor == 1e-300 and dtype == np.float64:
        xs = [x * 1e-290 for x in xs]
    want = [dprec.reference.rec.sum_of_squares(x, divisor) for x in xs]
    ref, _ = _backends.BY_NAME["reference"].norm_stats([_arrays.read(x, "x") for x in xs], divisor)
    assert ref == want
    if _native.native() is None:
        return
    for n in (1, 2):
        threads(n)
        got, _ = _backends.BY_NAME["cpu"].norm_stats([_arrays.read(x, "x") for x in xs], divisor)
        assert np.array_equal(np.array(got).view(np.uint64), np.array(want).view(np.uint64)), n


def test_sum_of_squares_order_is_the_documented_one(rng):
    """The reference's NumPy expression really sums each lane in element order (checked against
    plain Python on values whose sum depends on the order)."""
    x = np.concatenate([rng.standard_normal(3000) * 10.0 ** rng.integers(-8, 8, 3000), [1e8, 1e-8, 3.0]])
    lanes = [0.0] * 8
    for j, v in enumerate(x.tolist()):
        lanes[j % 8] += v * v
    want = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]))
    assert dprec.reference.rec.sum_of_squares(x) == want


def test_sum_of_squares_is_accurate_and_non_finite_when_it_must_be(rng):
    x = rng.standard_normal(300_000)
    exact = float(np.sum(np.square(x.astype(np.longdouble))))
    assert abs(dprec.reference.rec.sum_of_squares(x) - exact) <= 1e-12 * exact
    assert np.isnan(dprec.reference.rec.sum_of_squares(np.array([1.0, np.nan])))
    assert dprec.reference.rec.sum_of_squares(np.array([1e200, 1.0])) == np.inf
