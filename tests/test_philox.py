"""The randomness contract (docs/contract.md): Philox stream, uniforms and the normal transform."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import dprec
from dprec.reference import philox as ref

from .conftest import BACKENDS, requires_native
from .philox_independent import stream as independent_stream

KNOWN_ANSWERS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]

# (seed, substream, group, domain, offset, count): several keys and counters, the largest included.
STREAMS = [
    (0, 0, 0, 0, 0, 400_000),
    (0x0123456789ABCDEF, 5, 17, 0, 3, 300_001),
    (2**64 - 1, 2**32 - 1, 2**32 - 1, 15, 2**34 - 200_000, 200_000),
    (42, 127, 2**31, 3, 2**33 + 1, 150_000),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("counter,key,expected", KNOWN_ANSWERS)
def test_random123_known_answers(backend, counter, key, expected):
    out = dprec.philox.philox4x32(np.array(counter, np.uint32), np.array(key, np.uint32), backend=backend)
    assert tuple(int(v) for v in out) == expected


@pytest.mark.parametrize("backend", BACKENDS)
def test_key_and_counter_layout(backend):
    # Element j of (seed, s, g, domain) is word j & 3 of philox((j >> 2, s, g, domain), (seed lo, seed hi)).
    seed, s, g, dom = 0xA4093822_299F31D0, 7, 9, 2
    w = dprec.philox.words(seed, 12, substream=s, group=g, domain=dom, offset=8, backend=backend)
    counters = np.array([[n, s, g, dom] for n in (2, 3, 4)], np.uint32)
    blocks = dprec.philox.philox4x32(counters, np.array([seed & 0xFFFFFFFF, seed >> 32], np.uint32), backend=backend)
    assert np.array_equal(w, blocks.reshape(-1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_stream_equals_independent_philox(backend):
    total = 0
    for seed, s, g, dom, offset, count in STREAMS:
        got = dprec.philox.words(seed, count, substream=s, group=g, domain=dom, offset=offset, backend=backend)
        assert np.array_equal(got, independent_stream(seed, count, s, g, dom, offset))
        total += count
    assert total >= 1_000_000


@requires_native
def test_native_normals_bit_identical_to_reference(isa):
    total = 0
    for seed, s, g, dom, offset, count in STREAMS:
        native = dprec.philox.normals(seed, count, substream=s, group=g, domain=dom, offset=offset, backend="cpu")
        reference = dprec.philox.normals(seed, count, substream=s, group=g, domain=dom, offset=offset, backend="reference")
        assert native.dtype == reference.dtype == np.float32
        assert np.array_equal(native.view(np.uint32), reference.view(np.uint32))
        total += count
    assert total >= 1_000_000


@pytest.fixture(scope="module")
def every_transform_input():
    """All 2**24 radius inputs against all 2**24 angle inputs (reversed), with random low
    bytes (which the transform ignores), and the reference's normals for them."""
    rng = np.random.default_rng(1)
    top = np.arange(1 << 24, dtype=np.uint32) << np.uint32(8)
    radius_words = top | rng.integers(0, 256, top.size, dtype=np.uint32)
    angle_words = top[::-1] | rng.integers(0, 256, top.size, dtype=np.uint32)
    pairs = np.stack([radius_words, angle_words], axis=1).reshape(-1)
    expected = ref.words_to_normals(pairs).reshape(-1, 2)
    return radius_words, angle_words, expected


@requires_native
def test_native_transform_bit_identical_on_every_input(isa, every_transform_input):
    radius_words, angle_words, expected = every_transform_input
    cos_part = np.empty(radius_words.size, np.float32)
    sin_part = np.empty(radius_words.size, np.float32)
    dprec._runtime.native.native().normal_transform(radius_words, angle_words, cos_part, sin_part)
    assert np.array_equal(cos_part.view(np.uint32), expected[:, 0].view(np.uint32))
    assert np.array_equal(sin_part.view(np.uint32), expected[:, 1].view(np.uint32))


@requires_native
def test_native_words_every_isa(isa):
    for seed, s, g, dom, offset, count in STREAMS[:2]:
        native = dprec.philox.words(seed, count, substream=s, group=g, domain=dom, offset=offset, backend="cpu")
        assert np.array_equal(native, independent_stream(seed, count, s, g, dom, offset))


@requires_native
@pytest.mark.parametrize("offset,count", [(0, 1), (1, 1), (3, 2), (5, 7), (2, 61), (7, 1000), (0, 4 * 16 + 3)])
def test_unaligned_ranges_match_full_stream(isa, offset, count):
    full = dprec.philox.normals(99, offset + count, group=4, backend="cpu")
    part = dprec.philox.normals(99, count, group=4, offset=offset, backend="cpu")
    assert np.array_equal(part.view(np.uint32), full[offset:].view(np.uint32))


def _normals_1e7() -> np.ndarray:
    backend = "cpu" if "cpu" in BACKENDS else "reference"
    return dprec.philox.normals(0x5EED, 10_000_000, group=1, backend=backend).astype(np.float64)


def test_normals_ks_and_moments():
    z = _normals_1e7()
    n = z.size
    assert stats.kstest(z, "norm").pvalue > 1e-3
    # Moments against their sampling standard errors (deterministic: fixed seed).
    assert abs(z.mean()) < 5 / np.sqrt(n)
    assert abs(z.var() - 1) < 5 * np.sqrt(2 / n)
    assert abs(stats.skew(z)) < 5 * np.sqrt(6 / n)
    assert abs(stats.kurtosis(z)) < 5 * np.sqrt(24 / n)
    # Tails: P(|z| > 4) = 6.334e-5.
    tail = np.count_nonzero(np.abs(z) > 4)
    expected = 2 * stats.norm.sf(4) * n
    assert abs(tail - expected) < 5 * np.sqrt(expected)
    # Consecutive elements (the cos/sin pair of one Box-Muller draw) are uncorrelated.
    assert abs(np.corrcoef(z[0::2], z[1::2])[0, 1]) < 5 / np.sqrt(n / 2)


def test_normals_finite_and_bounded_exhaustively():
    # The radius depends only on the first word's top 24 bits and the angle only on the
    # second's, so all 2**24 values of each cover every possible output.
    top = np.arange(1 << 24, dtype=np.uint32) << np.uint32(8)
    t = ref._neg2_log_uniform(top)
    assert np.isfinite(t).all() and (t > 0).all()
    assert np.sqrt(t).max() <= np.float32(5.8872)  # sqrt(50 ln 2): u >= 2**-25
    c, s = ref._cos_sin_turn(top)
    assert np.isfinite(c).all() and np.isfinite(s).all()
    assert np.abs(c).max() <= 1 and np.abs(s).max() <= 1


@requires_native
def test_native_normals_finite():
    z = dprec.philox.normals(7, 10_000_000, backend="cpu")
    assert np.isfinite(z).all()
    assert np.abs(z).max() <= np.float32(5.8872)


def test_transform_accuracy_against_float64_box_muller():
    # Documented in dprec.philox.normals: radius relative error <= 1.2e-7, cos/sin
    # absolute error <= 1e-7, so |z - z64| <= 1e-6 everywhere.
    a = np.arange(1 << 24, dtype=np.uint32)
    u = (a.astype(np.float64) + 0.5) * 2.0**-24
    words = a << np.uint32(8)
    radius64 = np.sqrt(-2 * np.log(u))
    radius = np.sqrt(ref._neg2_log_uniform(words)).astype(np.float64)
    assert np.max(np.abs(radius - radius64) / radius64) <= 1.2e-7
    c, s = ref._cos_sin_turn(words)
    assert np.max(np.abs(c - np.cos(2 * np.pi * u))) <= 1e-7
    assert np.max(np.abs(s - np.sin(2 * np.pi * u))) <= 1e-7
    # End to end on a stream.
    w = dprec.philox.words(3, 2_000_000)
    u1 = ref.words_to_uniform(w[0::2], np.float64)
    u2 = ref.words_to_uniform(w[1::2], np.float64)
    z64 = np.empty(w.size)
    z64[0::2] = np.sqrt(-2 * np.log(u1)) * np.cos(2 * np.pi * u2)
    z64[1::2] = np.sqrt(-2 * np.log(u1)) * np.sin(2 * np.pi * u2)
    assert np.max(np.abs(dprec.philox.normals(3, 2_000_000).astype(np.float64) - z64)) <= 1e-6


@pytest.mark.parametrize("backend", BACKENDS)
def test_uniforms_open_interval(backend):
    extremes = np.array([0, 0xFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFF00, 0xFFFFFFFF], np.uint32)
    u32 = ref.words_to_uniform(extremes, np.float32)
    u64 = ref.words_to_uniform(extremes, np.float64)
    assert (u32 > 0).all() and (u32 < 1).all() and (u64 > 0).all() and (u64 < 1).all()
    assert u64[0] == 2.0**-25 and u64[-1] == 1 - 2.0**-25
    # float32: exact below 1/2, rounded toward zero above.
    assert u32[0] == np.float32(2.0**-25) and u32[2] == np.float32(u64[2])
    assert np.all(u32.astype(np.float64) <= u64) and np.all(u64 - u32 < 2.0**-24)
    u = dprec.philox.uniforms(11, 1_000_000, domain=4, backend=backend)
    assert u.dtype == np.float32 and (u > 0).all() and (u < 1).all()
    assert stats.kstest(u, "uniform").pvalue > 1e-3


def test_normal_transform_version_is_exposed():
    assert dprec.NORMAL_TRANSFORM_VERSION == 1
    if "cpu" in BACKENDS:
        assert dprec._runtime.native.native().NORMAL_TRANSFORM_VERSION == dprec.NORMAL_TRANSFORM_VERSION
