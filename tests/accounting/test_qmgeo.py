"""QMGeo accounting: the paper's printed formulas (labelled) and the exact Renyi divergence."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from dprec.accounting.qmgeo import (
    qmgeo_paper_eq20,
    qmgeo_paper_eq23,
    qmgeo_paper_eq25,
    qmgeo_paper_eq26,
    qmgeo_paper_eq27,
    qmgeo_pmf,
    qmgeo_rdp,
    qmgeo_renyi_divergence,
)

D, KAPPA = 3562, 0.005333


# ---------------------------------------------------------------- the paper's numbers


@pytest.mark.parametrize("levels, want", [(8, 2.626), (16, 4.492)])
def test_eq27_absolute_value_reproduces_paper(levels, want):
    value = qmgeo_paper_eq27(2.0, levels, 0.9, D, KAPPA, absolute=True)
    assert abs(value - want) < 5e-4
    # as printed the formula is negative at alpha = 2 (docs/qmgeo.md)
    assert qmgeo_paper_eq27(2.0, levels, 0.9, D, KAPPA) == pytest.approx(-value)


def test_eq20_and_eq26_closed_forms():
    # eq. (21): eps = ln( (1/2) / ((1/2) p (1-p)^(R-2)) )
    assert qmgeo_paper_eq20(8, 0.9) == pytest.approx(math.log(1.0 / (0.9 * 0.1**6)), rel=1e-12)
    assert qmgeo_paper_eq20(3, 0.5) == pytest.approx(math.log(4.0), rel=1e-12)
    assert qmgeo_paper_eq26(8, 0.9, D, KAPPA) == pytest.approx(D * KAPPA * qmgeo_paper_eq20(8, 0.9), rel=1e-12)
    # "eps increases linearly with the number of quantization levels R"
    e = [qmgeo_paper_eq20(r, 0.7) for r in (4, 5, 6)]
    assert e[2] - e[1] == pytest.approx(e[1] - e[0])


def test_eq23_sum_as_printed_against_fractions():
    # eq. (23) evaluated independently in exact rational arithmetic (alpha = 3, p = 1/2, R = 5).
    p, r_levels, a = Fraction(1, 2), 5, 3
    q = 1 - p
    norm = 1 / (1 - q ** (r_levels - 1))
    total = sum(
        (p * q ** (i - 1) * norm) ** a / (q ** (r_levels + 1 - i) * p * norm) ** (a - 1) for i in range(1, r_levels + 1)
    )
    assert qmgeo_paper_eq23(3.0, r_levels, 0.5) == pytest.approx(math.log(total) / (a - 1), rel=1e-12)


# ---------------------------------------------------------------- the corrected pmf


def _brute_pmf(w: Fraction, levels: int, p: Fraction, w_max: Fraction) -> list[Fraction]:
    """The generative description of docs/qmgeo.md enumerated in exact arithmetic (independent code)."""
    q = 1 - p
    step = 2 * w_max / (levels - 1)
    r = min(math.floor((w + w_max) / step), levels - 2)
    theta = (w - (-w_max + r * step)) / step
    out = [Fraction(0)] * levels
    # downward branch, weight 1 - theta: level r - (X - 1), X truncated geometric on 1..r+1
    for x in range(1, r + 2):
        out[r - (x - 1)] += (1 - theta) * p * q ** (x - 1) / (1 - q ** (r + 1))
    # upward branch, weight theta: level r + X, X truncated geometric on 1..R-r-1
    for x in range(1, levels - r):
        out[r + x] += theta * p * q ** (x - 1) / (1 - q ** (levels - r - 1))
    return out


def _brute_renyi(alpha: int, pw: list[Fraction], pv: list[Fraction]) -> float:
    total = Fraction(0)
    for a, b in zip(pw, pv):
        if a == 0:
            continue
        if b == 0:
            return math.inf
        total += a**alpha / b ** (alpha - 1)
    return math.log(total) / (alpha - 1)


CASES = [
    (Fraction(3, 10), Fraction(-7, 10), 8, Fraction(1, 2)),
    (Fraction(1, 7), Fraction(2, 3), 8, Fraction(9, 10)),
    (Fraction(-9, 10), Fraction(9, 10), 16, Fraction(9, 10)),
    (Fraction(1, 3), Fraction(-1, 5), 4, Fraction(1, 5)),
    (Fraction(1, 100), Fraction(-1, 100), 3, Fraction(3, 4)),
]


@pytest.mark.parametrize("w, v, levels, p", CASES)
def test_pmf_matches_generative_description(w, v, levels, p):
    want = np.array([float(x) for x in _brute_pmf(w, levels, p, Fraction(1))])
    got = qmgeo_pmf(float(w), levels, float(p))
    # atol: a float input such as 1/7 sits on a level only up to round-off, leaving ~1e-16 of
    # mass on the other branch where the exact rational input has none.
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    assert got.sum() == pytest.approx(1.0, abs=1e-14)


@pytest.mark.parametrize("w, v, levels, p", CASES)
def test_exact_renyi_divergence_against_fractions(w, v, levels, p):
    orders = [2, 3, 5, 8]
    got = qmgeo_renyi_divergence(orders, float(w), float(v), levels, float(p))
    pw, pv = _brute_pmf(w, levels, p, Fraction(1)), _brute_pmf(v, levels, p, Fraction(1))
    want = [_brute_renyi(a, pw, pv) for a in orders]
    np.testing.assert_allclose(got, want, rtol=1e-10)


def test_pmf_statistically_matches_sampler():
    # Sample the two-branch truncated-geometric process (rejection from plain geometrics) and
    # compare frequencies with the closed-form pmf: chi-square with a fixed seed.
    rng = np.random.default_rng(1234)
    levels, p, w = 8, 0.4, 0.23
    step = 2.0 / (levels - 1)
    r = min(int(math.floor((w + 1.0) / step)), levels - 2)
    theta = (w - (-1.0 + r * step)) / step
    n = 200_000
    up = rng.random(n) < theta
    out = np.empty(n, dtype=np.int64)
    for mask, limit, sign, base in ((~up, r + 1, -1, r + 1), (up, levels - r - 1, 1, r)):
        count = int(mask.sum())
        draws = rng.geometric(p, size=4 * count + 100)
        draws = draws[draws <= limit][:count]
        assert draws.size == count
        out[mask] = base + sign * draws
    freq = np.bincount(out, minlength=levels)
    expected = n * qmgeo_pmf(w, levels, p)
    chi2 = float(np.sum((freq - expected) ** 2 / expected))
    assert chi2 < 30.0  # 7 degrees of freedom: P(chi2 > 30) < 1e-4


def test_p_equal_one_is_stochastic_rounding():
    levels, w = 5, 0.1  # Delta = 0.5, cell r = 2 (Bin = 0.0), theta = 0.2
    np.testing.assert_allclose(qmgeo_pmf(w, levels, 1.0), [0, 0, 0.8, 0.2, 0], atol=1e-15)
    # p -> 1: the divergence between two inputs in the same cell tends to the p = 1 value
    orders = [2.0, 4.0]
    limit = qmgeo_renyi_divergence(orders, 0.1, 0.4, levels, 1.0)
    near = qmgeo_renyi_divergence(orders, 0.1, 0.4, levels, 1.0 - 1e-9)
    np.testing.assert_allclose(near, limit, rtol=1e-6)
    # two-point distributions (0.8, 0.2) vs (0.2, 0.8): closed form
    want = [math.log(0.8**a * 0.2 ** (1 - a) + 0.2**a * 0.8 ** (1 - a)) / (a - 1) for a in orders]
    np.testing.assert_allclose(limit, want, rtol=1e-12)
    # inputs in different cells have different supports at p = 1
    assert np.all(np.isinf(qmgeo_renyi_divergence(orders, 0.1, -0.4, levels, 1.0)))


def test_divergence_properties():
    orders = np.array([1.5, 2.0, 3.0, 5.0, 10.0, 30.0])
    for w, v in [(0.3, -0.2), (-0.95, 0.95), (0.05, 0.06)]:
        d = qmgeo_renyi_divergence(orders, w, v, 8, 0.6)
        assert np.all(d >= 0.0)
        assert np.all(np.diff(d) >= -1e-12)  # Renyi divergence is non-decreasing in the order
    np.testing.assert_allclose(qmgeo_renyi_divergence(orders, 0.3, 0.3, 8, 0.6), 0.0, atol=1e-15)
    # more geometric spread (smaller p) -> more privacy, for a fixed pair of inputs
    d_lo = qmgeo_renyi_divergence([2.0], 0.3, -0.3, 8, 0.3)[0]
    d_hi = qmgeo_renyi_divergence([2.0], 0.3, -0.3, 8, 0.9)[0]
    assert d_lo < d_hi


def test_full_interval_worst_case_is_infinite():
    # +-w_max are quantized deterministically to the end levels: disjoint supports.
    np.testing.assert_array_equal(qmgeo_pmf(-1.0, 8, 0.5), [1, 0, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(qmgeo_pmf(1.0, 8, 0.5), [0, 0, 0, 0, 0, 0, 0, 1])
    assert np.all(np.isinf(qmgeo_renyi_divergence([2.0, 3.0], -1.0, 1.0, 8, 0.5)))
    assert np.all(np.isinf(qmgeo_rdp([2.0, 3.0], 8, 0.5)))


def test_rdp_over_a_finite_input_set_is_max_over_pairs_times_dim():
    orders = np.array([2.0, 3.0, 6.0])
    inputs = [-0.8, -0.1, 0.35, 0.9]
    pairs = [qmgeo_renyi_divergence(orders, a, b, 8, 0.5) for a in inputs for b in inputs if a != b]
    want = np.max(pairs, axis=0)
    np.testing.assert_allclose(qmgeo_rdp(orders, 8, 0.5, inputs=inputs), want, rtol=1e-14)
    np.testing.assert_allclose(qmgeo_rdp(orders, 8, 0.5, inputs=inputs, dim=100), 100 * want, rtol=1e-14)


def test_subsampling_amplifies_and_needs_integer_orders():
    orders = np.array([2.0, 3.0, 4.0, 2.5])
    inputs = -1.0 + (np.arange(7) + 0.5) * 2.0 / 7  # cell midpoints
    full = qmgeo_rdp(orders, 8, 0.5, inputs=inputs, dim=3)
    sub = qmgeo_rdp(orders, 8, 0.5, inputs=inputs, dim=3, sampling_rate=0.01)
    assert np.all(sub[:3] < full[:3]) and np.all(sub[:3] > 0)
    assert np.isinf(sub[3])  # Zhu-Wang's bound exists at integer orders only
    # decreasing sampling rate never hurts
    sub2 = qmgeo_rdp(orders[:3], 8, 0.5, inputs=inputs, dim=3, sampling_rate=0.001)
    assert np.all(sub2 < sub[:3])


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: qmgeo_paper_eq20(1, 0.5), "levels"),
        (lambda: qmgeo_paper_eq20(8, 0.0), "p"),
        (lambda: qmgeo_paper_eq20(8, 1.5), "p"),
        (lambda: qmgeo_paper_eq26(8, 0.5, 0, 0.1), "dim"),
        (lambda: qmgeo_paper_eq26(8, 0.5, 10, 0.0), "sampling_rate"),
        (lambda: qmgeo_paper_eq27(1.0, 8, 0.5, 10, 0.1), "alpha"),
        (lambda: qmgeo_paper_eq25(2.0, 8, 1.0), "p"),
        (lambda: qmgeo_pmf(1.5, 8, 0.5), "w"),
        (lambda: qmgeo_pmf(0.5, 8, 0.5, w_max=-1.0), "w_max"),
        (lambda: qmgeo_pmf(float("nan"), 8, 0.5), "w"),
        (lambda: qmgeo_renyi_divergence([1.0], 0.1, 0.2, 8, 0.5), "orders"),
        (lambda: qmgeo_renyi_divergence([2.0], 1.5, 0.2, 8, 0.5), "w must"),
        (lambda: qmgeo_renyi_divergence([2.0], 0.1, 1.5, 8, 0.5), "w_prime"),
        (lambda: qmgeo_renyi_divergence([2.0], 0.1, float("nan"), 8, 0.5), "w_prime"),
        (lambda: qmgeo_rdp([2.0], 8, 0.5, sampling_rate=1.2), "sampling_rate"),
        (lambda: qmgeo_rdp([2.0], 8, 0.5, inputs=[0.1]), "inputs"),
        (lambda: qmgeo_rdp([2.0], 8, 0.5, inputs=[0.1, 2.0]), "inputs"),
        (lambda: qmgeo_rdp([2.0], 8, 0.5, dim=0), "dim"),
    ],
)
def test_bad_input_names_the_parameter(call, name):
    with pytest.raises(ValueError, match=name):
        call()
