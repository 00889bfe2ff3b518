"""The QMGeo quantizer (dprec.qmgeo, docs/qmgeo.md): its pmf, native vs reference, bad input.

Statistical checks use fixed seeds, so they are deterministic; their tolerances are stated
where they are made (a correct sampler fails a chi-square test at p-value 1e-4 once in 10**4
seeds; a wrong pmf at these sample sizes gives p-values far below it).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dprec import qmgeo
from dprec.accounting.qmgeo import qmgeo_pmf
from dprec.reference import qmgeo as ref
from tests.conftest import NATIVE, requires_native

scipy_stats = pytest.importorskip("scipy.stats")

FAST = "cpu" if NATIVE else "reference"
N = 200_000  # samples per pmf check
P_VALUE = 1e-4  # chi-square rejection threshold


def _chi_square_p(counts: np.ndarray, pmf: np.ndarray) -> float:
    """Chi-square goodness-of-fit p-value, levels with expected count < 5 pooled (tails)."""
    expected = pmf * counts.sum()
    keep = expected >= 5.0
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    if exp[-1] < 5.0:  # too little pooled mass for its own cell: fold it into the largest cell
        big = int(np.argmax(exp[:-1]))
        obs[big] += obs[-1]
        exp[big] += exp[-1]
        obs, exp = obs[:-1], exp[:-1]
    if obs.size < 2:
        return 1.0
    return float(scipy_stats.chisquare(obs, exp * (obs.sum() / exp.sum())).pvalue)


# (w, R, p): r = 0 and r = R - 2 at both ends, interior r, theta = 0, 1/2 and 1, p = 1.
CASES = [
    (-1.0, 8, 0.5),  # r = 0, theta = 0: level 0 with probability 1
    (-0.9, 8, 0.3),  # r = 0, theta = 0.35
    (0.95, 8, 0.3),  # r = R - 2 = 6, theta = 0.825
    (1.0, 8, 0.5),  # r = R - 2, theta = 1: level R - 1 with probability 1
    (0.3, 8, 0.9),  # interior
    (0.0, 3, 0.6),  # R = 3, theta = 1/2 exactly
    (-1.0 + 2.0 / 15.0 * 4, 16, 0.2),  # on a level (theta = 0 up to rounding)
    (0.123, 16, 0.05),  # p small: close to uniform on each side
    (0.7, 2, 0.4),  # R = 2: both branches have one level
    (0.1, 5, 1.0),  # p = 1: plain stochastic rounding
    (-0.37, 256, 0.7),  # many levels
]


@pytest.mark.parametrize(("case", "w", "levels", "p"), [(i, *c) for i, c in enumerate(CASES)])
def test_empirical_pmf_matches_the_accounting(case, w, levels, p):
    rng = np.random.default_rng(1000 + case)
    out = qmgeo.quantize(np.full(N, w), 1.0, levels, p, rng=rng, backend=FAST)
    assert out.dtype == np.uint16 and out.shape == (N,)
    counts = np.bincount(out, minlength=levels)
    pmf = qmgeo_pmf(w, levels, p)
    assert counts.size == levels
    assert counts[pmf == 0.0].sum() == 0  # never a level of mass 0
    assert _chi_square_p(counts, pmf) > P_VALUE


def test_empirical_pmf_with_w_max_and_the_reference_backend():
    w, w_max, levels, p = -2.2, 3.0, 6, 0.45
    out = qmgeo.quantize(np.full(50_000, w), w_max, levels, p, rng=np.random.default_rng(5), backend="reference")
    counts = np.bincount(out, minlength=levels)
    assert _chi_square_p(counts, qmgeo_pmf(w, levels, p, w_max)) > P_VALUE


@pytest.mark.parametrize("w", [-0.77, 0.0, 0.31, 0.999])
def test_unbiased_at_p_equal_one(w):
    levels, w_max = 9, 1.0
    out = qmgeo.quantize(np.full(N, w), w_max, levels, 1.0, rng=np.random.default_rng(11), backend=FAST)
    values = qmgeo.dequantize(out, w_max, levels)
    step = 2.0 * w_max / (levels - 1)
    pmf = qmgeo_pmf(w, levels, 1.0)
    assert np.count_nonzero(pmf) <= 2  # neighbouring levels only
    theta = (w + w_max) / step % 1.0
    sd = step * math.sqrt(theta * (1.0 - theta) / N)
    assert abs(values.mean() - w) <= 5.0 * sd + 1e-12  # 5 standard deviations


def test_biased_towards_the_middle_below_p_one():
    # Documented: p < 1 spreads mass over all levels, so an extreme value is pulled inwards.
    w, levels, p = 0.9, 8, 0.5
    pmf = qmgeo_pmf(w, levels, p)
    values = qmgeo.dequantize(np.arange(levels), 1.0, levels)
    mean, sd = float(pmf @ values), math.sqrt(float(pmf @ values**2) - float(pmf @ values) ** 2)
    assert mean < w - 0.05  # the pmf's own bias
    out = qmgeo.quantize(np.full(N, w), 1.0, levels, p, rng=np.random.default_rng(2), backend=FAST)
    assert abs(qmgeo.dequantize(out, 1.0, levels).mean() - mean) <= 5.0 * sd / math.sqrt(N)  # 5 standard errors


@requires_native
@pytest.mark.parametrize(("levels", "p"), [(2, 0.5), (8, 0.9), (16, 1.0), (65536, 0.3), (5, 1e-9), (3, 1 - 2**-53),
                                           (100, 2**-512), (7, 0.999)])
def test_native_and_reference_are_bit_identical(levels, p):
    rng = np.random.default_rng(levels)
    n = 3 * ref.QMGEO_CHUNK + 1001  # several chunks and a ragged tail
    w = rng.uniform(-1.3, 1.3, n) * 2.5
    w[:50] = np.linspace(-2.5, 2.5, 50)  # exact levels and ends included
    w[50] = 2.5
    w[51] = -2.5
    cpu = qmgeo.quantize(w, 2.5, levels, p, rng=np.random.default_rng(99), group=12345, backend="cpu")
    npy = qmgeo.quantize(w, 2.5, levels, p, rng=np.random.default_rng(99), group=12345, backend="reference")
    assert np.array_equal(cpu, npy)
    assert cpu.max() < levels


def _hard_values(w_max: float, levels: int) -> np.ndarray:
    """Values where the rule's float64 steps are delicate: every level and a few ulp either
    side, theta just above 0 (its threshold floor(theta 2**64) has bits below 2**-32), the ends,
    beyond them, zeros of both signs and subnormals, then uniform values."""
    step = 2.0 * w_max / (levels - 1)
    grid = -w_max + np.arange(min(levels, 600), dtype=np.float64) * step
    near = [grid]
    for k in (1, 2, 7):
        near += [np.nextafter(grid, np.inf), np.nextafter(grid, -np.inf), grid + k * 2.0**-60, grid - k * step * 2**-40]
    special = np.array([0.0, -0.0, 5e-324, -5e-324, 2.0**-1022, w_max, -w_max, np.nextafter(w_max, 0.0),
                        np.nextafter(-w_max, 0.0), 3.0 * w_max, -1e300, 1e300])
    rng = np.random.default_rng(levels)
    return np.concatenate([*near, special, rng.uniform(-1.2 * w_max, 1.2 * w_max, 3 * ref.QMGEO_CHUNK + 77)])


@requires_native
@pytest.mark.parametrize(("levels", "p"), [(2, 1.0), (8, 1.0), (8, 0.9), (65536, 0.9), (300, 2**-512), (3, 1 - 2**-53)])
def test_every_isa_bit_identical_to_the_reference_on_hard_values(isa, levels, p):
    # The per-element loop is the kernel table's qmgeo_tile, compiled for each ISA.
    w = _hard_values(0.75, levels)
    want = qmgeo.quantize(w, 0.75, levels, p, rng=np.random.default_rng(5), group=7, backend="reference")
    got = qmgeo.quantize(w, 0.75, levels, p, rng=np.random.default_rng(5), group=7, backend="cpu")
    assert np.array_equal(got, want)


@requires_native
@pytest.mark.parametrize(("levels", "p"), [(8, 1.0), (16, 0.9), (65536, 0.3)])
def test_float32_input_is_read_as_its_float64_values(isa, levels, p):
    # The kernels take float32 directly and widen each value (exactly): the same indices as the
    # float64 copy, which the reference quantizes.
    v = _hard_values(0.5, levels)
    w = v[np.abs(v) < 1e30].astype(np.float32)  # +-1e300 would overflow float32
    got = qmgeo.quantize(w, 0.5, levels, p, rng=np.random.default_rng(2), backend="cpu")
    want = qmgeo.quantize(w.astype(np.float64), 0.5, levels, p, rng=np.random.default_rng(2), backend="reference")
    assert np.array_equal(got, want)


@requires_native
def test_result_does_not_depend_on_the_thread_count(threads):
    w = np.random.default_rng(3).normal(size=5 * ref.QMGEO_CHUNK + 17)
    results = []
    for count in (1, 2, 3, 8):
        threads(count)
        results.append(qmgeo.quantize(w, 2.0, 33, 0.6, rng=np.random.default_rng(4), backend="cpu"))
    assert all(np.array_equal(results[0], r) for r in results[1:])


def test_layout_element_j_reads_only_its_own_words():
    # The same seed and a prefix of the input give a prefix of the output (no cross-element state).
    w = np.random.default_rng(8).uniform(-1, 1, 5000)
    full = qmgeo.quantize(w, 1.0, 10, 0.7, rng=np.random.default_rng(1), backend=FAST)
    part = qmgeo.quantize(w[:1234], 1.0, 10, 0.7, rng=np.random.default_rng(1), backend=FAST)
    assert np.array_equal(full[:1234], part)
    other_group = qmgeo.quantize(w, 1.0, 10, 0.7, rng=np.random.default_rng(1), group=1, backend=FAST)
    assert not np.array_equal(full, other_group)


def test_values_outside_the_range_are_clipped():
    w = np.array([-7.0, -1.0, 1.0, 7.0, 0.25, 1e300])
    clipped = np.clip(w, -1.0, 1.0)
    a = qmgeo.quantize(w, 1.0, 6, 0.8, rng=np.random.default_rng(6), backend=FAST)
    b = qmgeo.quantize(clipped, 1.0, 6, 0.8, rng=np.random.default_rng(6), backend=FAST)
    assert np.array_equal(a, b)
    assert a[0] == 0 and a[3] == 5  # the ends are deterministic


def test_shape_dtypes_and_torch():
    w = np.linspace(-1, 1, 24, dtype=np.float32).reshape(2, 3, 4)
    out = qmgeo.quantize(w, 1.0, 4, 0.5, rng=np.random.default_rng(0))
    assert out.shape == (2, 3, 4) and out.dtype == np.uint16
    same = qmgeo.quantize(w.astype(np.float64), 1.0, 4, 0.5, rng=np.random.default_rng(0))
    assert np.array_equal(out, same)  # float32 -> float64 is exact
    torch = pytest.importorskip("torch")
    t = qmgeo.quantize(torch.from_numpy(w), 1.0, 4, 0.5, rng=np.random.default_rng(0))
    assert np.array_equal(out, t)


def test_dequantize():
    j = np.arange(5, dtype=np.uint16)
    np.testing.assert_allclose(qmgeo.dequantize(j, 2.0, 5), [-2.0, -1.0, 0.0, 1.0, 2.0], rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match="indices must be in"):
        qmgeo.dequantize(np.array([5]), 2.0, 5)
    with pytest.raises(ValueError, match="indices must be in"):
        qmgeo.dequantize(np.array([-1]), 2.0, 5)
    with pytest.raises(TypeError, match="indices must be an integer"):
        qmgeo.dequantize(np.array([1.0]), 2.0, 5)
    with pytest.raises(ValueError, match="w_max"):
        qmgeo.dequantize(j, 0.0, 5)
    with pytest.raises(ValueError, match="levels"):
        qmgeo.dequantize(j, 1.0, 1)


def test_literal_is_refused_with_the_reason():
    with pytest.raises(NotImplementedError, match="divides by zero"):
        qmgeo.quantize(np.zeros(3), 1.0, 4, 0.5, literal=True)


def test_expm1_small_is_accurate():
    for x in np.linspace(-0.25, 0.25, 1001):
        want = math.expm1(x)
        assert abs(ref.expm1_small(float(x)) - want) <= 4e-16 * abs(want)


GOOD = dict(w=np.zeros(4), w_max=1.0, levels=4, p=0.5)


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        (dict(w=np.array([1, 2])), TypeError, "w must be a floating-point"),
        (dict(w=np.array([0.0, np.nan])), ValueError, "w contains NaN"),
        (dict(w=np.array([0.0, np.inf])), ValueError, "w contains infinite"),
        (dict(w=np.zeros(0)), ValueError, "w must not be empty"),
        (dict(w_max=0.0), ValueError, "w_max must be finite and > 0"),
        (dict(w_max=np.inf), ValueError, "w_max must be finite and > 0"),
        (dict(w_max="1"), TypeError, "w_max must be a real number"),
        (dict(levels=1), ValueError, "levels must be in"),
        (dict(levels=65537), ValueError, "levels must be in"),
        (dict(levels=4.0), TypeError, "levels must be an integer"),
        (dict(levels=True), TypeError, "levels must be an integer"),
        (dict(p=0.0), ValueError, "p must be in"),
        (dict(p=1.5), ValueError, "p must be in"),
        (dict(p=float("nan")), ValueError, "p must be in"),
        (dict(p=None), TypeError, "p must be a real number"),
        (dict(group=-1), ValueError, "group must be in"),
        (dict(group=2**32), ValueError, "group must be in"),
        (dict(literal=1), TypeError, "literal must be a bool"),
        (dict(backend="gpu"), ValueError, "backend must be one of"),
        (dict(backend="cuda"), ValueError, "QMGeo quantization runs on the host"),
        (dict(rng=42), TypeError, "rng must be a numpy.random.Generator"),
    ],
)
def test_bad_input_names_the_argument(change, error, match):
    kwargs = {**GOOD, **change}
    with pytest.raises(error, match=match):
        qmgeo.quantize(kwargs.pop("w"), kwargs.pop("w_max"), kwargs.pop("levels"), kwargs.pop("p"), **kwargs)


@requires_native
def test_binding_validates_on_its_own():
    from dprec._runtime import native as _native

    core = _native.native()
    w = np.zeros(4)
    out = np.empty(4, np.uint16)
    with pytest.raises(ValueError, match="w must be finite"):
        core.qmgeo_quantize(np.array([0.0, np.nan, 0.0, 0.0]), 1, 0, 1.0, 4, 0.5, out)
    for dtype in (np.float32, np.float64):  # a bad value anywhere, any dtype, either sampler
        for p in (1.0, 0.5):
            x = np.zeros(3000, dtype)
            x[2047] = -np.inf
            with pytest.raises(ValueError, match="w must be finite"):
                core.qmgeo_quantize(x, 1, 0, 1.0, 4, p, np.empty(3000, np.uint16))
    with pytest.raises(TypeError, match="w must have dtype"):
        core.qmgeo_quantize(np.zeros(4, np.float16), 1, 0, 1.0, 4, 0.5, out)
    with pytest.raises(ValueError, match="levels"):
        core.qmgeo_quantize(w, 1, 0, 1.0, 1, 0.5, out)
    with pytest.raises(ValueError, match="p must be"):
        core.qmgeo_quantize(w, 1, 0, 1.0, 4, 0.0, out)
    with pytest.raises(ValueError, match="w_max"):
        core.qmgeo_quantize(w, 1, 0, float("nan"), 4, 0.5, out)
    with pytest.raises(ValueError, match="same size"):
        core.qmgeo_quantize(w, 1, 0, 1.0, 4, 0.5, np.empty(3, np.uint16))
    with pytest.raises(TypeError, match="out must have dtype"):
        core.qmgeo_quantize(w, 1, 0, 1.0, 4, 0.5, np.empty(4, np.uint32))
