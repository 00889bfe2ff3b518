"""Independent numerics for tests/accounting/test_privacy_verification.py (issue 30, item 3).

Nothing here calls dprec's accounting: these are the "truths" the accountant's curves are checked
against, computed from the densities of the actual mechanisms.

* Gaussian mixtures (the uncompressed Gaussian variant of DP-REC, sigma = 1): exact Renyi
  divergences by trapezoidal quadrature in the plane spanned by the means (the orthogonal
  complement cancels), in log space, with a bound on the mass outside the box and an error
  estimate from a second, coarser grid.
* REC at d = 1: the exact density of the chosen candidate, marginalised over the K candidates and
  the Gumbel draw, by the Laplace trick 1/(w + S) = int_0^inf exp(-t (w + S)) dt, and the
  seed-visible joint divergence (candidates regenerated from the public seed, index seen).
* The exact (PLD) epsilon of the Gaussian counterexample, from the 1-D densities on fine cells,
  composed by dp_accounting's PLD machinery (optional import).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy.special import gammaln, log_ndtr, logsumexp

LOG_2PI = math.log(2.0 * math.pi)


# --------------------------------------------------------------------------------------------
# A. Renyi divergences between mixtures of unit-variance Gaussians, by quadrature.
# --------------------------------------------------------------------------------------------

Mixture = Sequence[tuple[float, tuple[float, float]]]  # (weight, 2-D mean)


def _clean(mix: Mixture) -> tuple[np.ndarray, np.ndarray]:
    """Weights (normalised, duplicates merged, zeros dropped) and (m, 2) means."""
    merged: dict[tuple[float, float], float] = {}
    for w, m in mix:
        if w > 0:
            key = (float(m[0]), float(m[1]))
            merged[key] = merged.get(key, 0.0) + float(w)
    means = np.array(list(merged.keys()), dtype=np.float64).reshape(-1, 2)
    weights = np.array(list(merged.values()), dtype=np.float64)
    return weights / weights.sum(), means


def _log_density(points: np.ndarray, weights: np.ndarray, means: np.ndarray, dim: int) -> np.ndarray:
    """log sum_j w_j N(x; mu_j, I_dim) at points (n, dim)."""
    terms = np.empty((len(weights), len(points)))
    for j in range(len(weights)):
        diff = points - means[j, :dim]
        terms[j] = math.log(weights[j]) - 0.5 * np.einsum("ij,ij->i", diff, diff)
    top = terms.max(axis=0)
    return top + np.log(np.exp(terms - top).sum(axis=0)) - 0.5 * dim * LOG_2PI


def _log_tail(dist: np.ndarray) -> np.ndarray:
    """log P(Z > dist), Z standard normal."""
    return log_ndtr(-dist)


@dataclass
class RenyiQuadrature:
    """Per-order Renyi divergences of a pair (P, Q) of Gaussian mixtures.

    forward[i] = D_{a_i}(P || Q), reverse[i] = D_{a_i}(Q || P); *_err: |fine - coarse| grid
    estimate plus the bound on the mass left outside the box (relative, times (1 + D))."""

    orders: np.ndarray
    forward: np.ndarray
    reverse: np.ndarray
    forward_err: np.ndarray
    reverse_err: np.ndarray
    dim: int
    points: int


def _grid(lo: np.ndarray, hi: np.ndarray, h: float, dim: int) -> tuple[np.ndarray, float]:
    axes = [np.arange(lo[k], hi[k] + h, h) for k in range(dim)]
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([m.reshape(-1) for m in mesh], axis=1), h**dim


def _log_integrals(lp: np.ndarray, lq: np.ndarray, cell: float, orders: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log int P^a Q^(1-a) and log int Q^a P^(1-a) for each order (Riemann sum = trapezoid here:
    the integrand is negligible on the box's edges)."""
    def lse(v: np.ndarray) -> float:
        top = float(v.max())
        return top + math.log(float(np.exp(v - top).sum()))

    diff = lp - lq
    fwd = np.array([lse(lq + a * diff) for a in orders]) + math.log(cell)
    rev = np.array([lse(lp - a * diff) for a in orders]) + math.log(cell)
    return fwd, rev


def _pair_terms(wa: np.ndarray, ma: np.ndarray, wb: np.ndarray, mb: np.ndarray, a: float, dim: int):
    """For A = sum_i w_i N(m_i), B = sum_j v_j N(m_j) and order a > 1: the log masses
    a log w_i + (1-a) log v_j + a(a-1)|m_i - m_j|^2/2 of the terms w_i^a v_j^(1-a) N_i^a N_j^(1-a)
    (each exp(a(a-1)|m_i - m_j|^2/2) times a unit Gaussian centred at a m_i - (a-1) m_j), and the centres."""
    d2 = ((ma[:, None, :dim] - mb[None, :, :dim]) ** 2).sum(axis=-1)
    logm = a * np.log(wa)[:, None] + (1 - a) * np.log(wb)[None, :] + a * (a - 1) * d2 / 2
    centres = a * ma[:, None, :dim] - (a - 1) * mb[None, :, :dim]
    return logm, centres


def _closest_in_cell(
    mb: np.ndarray, j: int, point: np.ndarray, dim: int, extra: Sequence[tuple[np.ndarray, float]] = ()
) -> tuple[float, np.ndarray | None]:
    """Distance from ``point`` to the convex set {x in the Voronoi cell of mb[j], n.x <= r for (n, r)
    in ``extra``}, and its closest point (inf, None when the set is empty): the point itself when
    inside; else the nearest feasible projection on one of the boundary lines, or feasible vertex
    (intersection of two lines, in 2-D)."""
    lines = [(np.asarray(n, dtype=np.float64)[:dim], float(r)) for n, r in extra]
    for k in range(len(mb)):
        if k != j:
            n = mb[k, :dim] - mb[j, :dim]
            lines.append((n, (float((mb[k, :dim] ** 2).sum()) - float((mb[j, :dim] ** 2).sum())) / 2))

    def inside(x: np.ndarray) -> bool:
        return all(float(n @ x) <= r + 1e-9 * (1 + abs(r)) for n, r in lines)

    if inside(point):
        return 0.0, point
    cands = [point - (float(n @ point) - r) / float(n @ n) * n for n, r in lines]
    if dim == 2:
        for i1 in range(len(lines)):
            for i2 in range(i1 + 1, len(lines)):
                m = np.array([lines[i1][0], lines[i2][0]])
                if abs(np.linalg.det(m)) > 1e-12:
                    cands.append(np.linalg.solve(m, np.array([lines[i1][1], lines[i2][1]])))
    best, arg = math.inf, None
    for x in cands:
        if inside(x):
            dist = float(np.sqrt(((x - point) ** 2).sum()))
            if dist < best:
                best, arg = dist, x
    return best, arg


def _log_far(r: np.ndarray, dim: int) -> np.ndarray:
    """log P(|Z| >= r) for a standard normal Z in dim 1 or 2 (Rayleigh: exp(-r^2/2))."""
    r = np.maximum(np.asarray(r, dtype=np.float64), 0.0)
    if dim == 1:
        return math.log(2.0) + log_ndtr(-r)
    return -r * r / 2


def _box_faces(lo: np.ndarray, hi: np.ndarray, dim: int) -> list[tuple[np.ndarray, float]]:
    """The outer half-planes n.x <= r of the box's faces (x_k <= lo_k, x_k >= hi_k)."""
    faces = []
    for k in range(dim):
        e = np.zeros(dim)
        e[k] = 1.0
        faces.append((e, float(lo[k])))
        faces.append((-e, -float(hi[k])))
    return faces


def _outside_bound(
    wa: np.ndarray, ma: np.ndarray, wb: np.ndarray, mb: np.ndarray, a: float, lo: np.ndarray, hi: np.ndarray, dim: int
) -> float:
    """log of an upper bound on int_{outside box} A^a B^(1-a), a > 1.

    Pointwise A^a <= (n max_i w_i N_i)^a <= n^a sum_i (w_i N_i)^a, and on the Voronoi cell R_j of B's
    mean m_j, B^(1-a) <= (v_j N_j)^(1-a); so the integral outside the box is at most
    n^a sum_i sum_j sum_faces w_i^a v_j^(1-a) int_{R_j and beyond the face} N_i^a N_j^(1-a), each a unit
    Gaussian (times its mass exp(a(a-1)|m_i - m_j|^2/2)) centred at c = a m_i - (a-1) m_j, whose measure
    on that convex set is at most P(|Z| >= dist(c, set))."""
    logm, centres = _pair_terms(wa, ma, wb, mb, a, dim)
    faces = _box_faces(lo, hi, dim)
    terms = []
    for i in range(len(wa)):
        for j in range(len(wb)):
            for face in faces:
                dist, _ = _closest_in_cell(mb, j, centres[i, j], dim, [face])
                if dist < math.inf:
                    terms.append(logm[i, j] + float(_log_far(dist, dim)))
    return a * math.log(len(wa)) + float(logsumexp(terms)) if terms else -math.inf


def _dominant_points(wa: np.ndarray, ma: np.ndarray, wb: np.ndarray, mb: np.ndarray, a: float, dim: int):
    """Where the bounding terms' mass is: for each pair whose mass on R_j is within e^60 of the
    largest, the point of R_j closest to its centre. The box must hold these."""
    logm, centres = _pair_terms(wa, ma, wb, mb, a, dim)
    eff, pts = [], []
    for i in range(len(wa)):
        for j in range(len(wb)):
            dist, x = _closest_in_cell(mb, j, centres[i, j], dim)
            eff.append(logm[i, j] + float(_log_far(dist, dim)))
            pts.append(x)
    eff = np.array(eff)
    return np.array([p for p, e in zip(pts, eff) if e >= eff.max() - 60.0])


def renyi_mixtures(
    p_mix: Mixture,
    q_mix: Mixture,
    orders: Sequence[float],
    *,
    h: float | None = None,
    target_log_outside: float = -30.0,
) -> RenyiQuadrature:
    """D_a(P || Q) and D_a(Q || P) for mixtures of N(mean, I) in the plane (1-D when every mean
    has a zero second coordinate), by quadrature at step ``h`` (default 0.1 in 1-D, 0.15 in 2-D)
    and 4h/3 on a box holding every mean and each order's dominant centres, widened until the
    bound on the integrand's mass outside it is below exp(target_log_outside) times the integral.
    """
    orders = np.asarray(orders, dtype=np.float64)
    wp, mp = _clean(p_mix)
    wq, mq = _clean(q_mix)
    dim = 1 if (np.all(mp[:, 1] == 0) and np.all(mq[:, 1] == 0)) else 2
    if h is None:
        h = 0.1 if dim == 1 else 0.15
    pts_list = [mp[:, :dim], mq[:, :dim]]
    for a in orders:
        pts_list.append(_dominant_points(wp, mp, wq, mq, a, dim))
        pts_list.append(_dominant_points(wq, mq, wp, mp, a, dim))
    allc = np.concatenate(pts_list)

    def integrals(lo: np.ndarray, hi: np.ndarray, step: float) -> tuple[np.ndarray, np.ndarray, int]:
        pts, cell = _grid(lo, hi, step, dim)
        lp = _log_density(pts, wp, mp, dim)
        lq = _log_density(pts, wq, mq, dim)
        return (*_log_integrals(lp, lq, cell, orders), len(pts))

    margin = 14.0
    while True:
        lo = allc.min(axis=0) - margin
        hi = allc.max(axis=0) + margin
        f2, r2, _ = integrals(lo, hi, 4 * h / 3)
        out_f = np.array([_outside_bound(wp, mp, wq, mq, a, lo, hi, dim) for a in orders]) - f2
        out_r = np.array([_outside_bound(wq, mq, wp, mp, a, lo, hi, dim) for a in orders]) - r2
        if max(out_f.max(), out_r.max()) <= target_log_outside:
            break
        margin += 4.0
    f1, r1, npts = integrals(lo, hi, h)
    fwd = f1 / (orders - 1)
    rev = r1 / (orders - 1)
    # |log I_h - log I_4h/3| bounds the fine grid's error many times over (the trapezoidal rule
    # converges geometrically for these analytic integrands); the mass outside the box adds at
    # most a relative exp(out) to I, i.e. at most exp(out) to log I; 1e-12 for rounding in the sums.
    fwd_err = (np.abs(f1 - f2) + np.exp(out_f) + 1e-12) / (orders - 1)
    rev_err = (np.abs(r1 - r2) + np.exp(out_r) + 1e-12) / (orders - 1)
    return RenyiQuadrature(orders, fwd, rev, fwd_err, rev_err, dim, npts)


def others_configuration(name: str, c: float) -> list[tuple[float, tuple[float, float]]]:
    """The other clients' (empirical) distribution of clipped updates, phi = (c, 0), ||.|| <= c."""
    m, p, z = (-c, 0.0), (c, 0.0), (0.0, 0.0)
    orth = (0.0, c)
    ang = (c * math.cos(2 * math.pi / 3), c * math.sin(2 * math.pi / 3))
    table = {
        "minus": [(1.0, m)],
        "plus": [(1.0, p)],
        "zero": [(1.0, z)],
        "minus+orth": [(0.5, m), (0.5, orth)],
        "minus+plus": [(0.5, m), (0.5, p)],
        "minus+zero": [(0.5, m), (0.5, z)],
        "minus+120deg": [(0.9, m), (0.1, ang)],
    }
    return table[name]


CONFIGURATIONS = ("minus", "plus", "zero", "minus+orth", "minus+plus", "minus+zero", "minus+120deg")


def slot_pair(q: float, c: float, others: str, relation: str) -> tuple[Mixture, Mixture]:
    """One slot's message: P = (1-q) M + q N(phi) against the neighbour's P'
    (add_remove: M; zero: (1-q) M + q N(0)), M the others' mixture."""
    mix = others_configuration(others, c)
    p = [((1 - q) * w, m) for w, m in mix] + [(q, (c, 0.0))]
    if relation == "add_remove":
        p2 = list(mix)
    elif relation == "zero":
        p2 = [((1 - q) * w, m) for w, m in mix] + [(q, (0.0, 0.0))]
    else:
        raise ValueError(relation)
    return p, p2


def attributed_closed_form(q: float, c: float, orders: Sequence[float]) -> np.ndarray:
    """D_a((1-q) atom + q N(c) || (1-q) atom + q N(0)) = log(1 - q + q exp(a(a-1)c^2/2)) / (a-1)
    (the atom is 'no message from this client'; symmetric)."""
    a = np.asarray(orders, dtype=np.float64)
    return np.logaddexp(math.log1p(-q), math.log(q) + a * (a - 1) * c * c / 2) / (a - 1)


def attributed_quadrature(q: float, c: float, orders: Sequence[float], h: float = 0.05) -> np.ndarray:
    """The same divergence with the Gaussian part integrated numerically:
    exp((a-1) D) = (1-q) + q int N(c)^a N(0)^(1-a) (the atom carries mass 1-q on both sides)."""
    a = np.asarray(orders, dtype=np.float64)
    out = []
    for ai in a:
        x = np.arange(-15.0, ai * c + 15.0, h)
        log_int = logsumexp(ai * (-0.5 * (x - c) ** 2) + (1 - ai) * (-0.5 * x**2) - 0.5 * LOG_2PI) + math.log(h)
        out.append(np.logaddexp(math.log1p(-q), math.log(q) + log_int) / (ai - 1))
    return np.array(out)


# --------------------------------------------------------------------------------------------
# B. REC at d = 1, sigma = 1: p = N(0,1), q = N(c,1), w(x) = q(x)/p(x) = exp(c x - c^2/2).
# --------------------------------------------------------------------------------------------

_Z_LO, _Z_HI = -40.0, 40.0


def log_g(u: np.ndarray, c: float, hz: float = 0.05) -> np.ndarray:
    """log G(u), G(u) = E_Z[exp(-exp(u + c Z))], Z ~ N(0, 1) (trapezoid in z, log space).

    L(t) = E_p[exp(-t w)] = G(log t - c^2/2) and E_p[w^a exp(-t w)] = exp(a(a-1)c^2/2) G(log t + (a-1/2)c^2)
    (w^a p is exp(a(a-1)c^2/2) times N(ac, 1))."""
    z = np.arange(_Z_LO, _Z_HI + hz / 2, hz)
    lphi = -0.5 * z * z - 0.5 * LOG_2PI + math.log(hz)
    u = np.asarray(u, dtype=np.float64)
    out = np.empty_like(u)
    for i0 in range(0, u.size, 256):
        uu = u[i0 : i0 + 256]
        e = np.minimum(uu[:, None] + c * z[None, :], 700.0)
        out[i0 : i0 + 256] = logsumexp(lphi[None, :] - np.exp(e), axis=1)
    return out


@dataclass
class RecDensity:
    """The chosen candidate's density on an x-grid: log_ratio = log(q_tilde / p)."""

    x: np.ndarray
    hx: float
    log_ratio: np.ndarray
    c: float
    k: int

    @property
    def log_density(self) -> np.ndarray:
        return self.log_ratio - 0.5 * self.x**2 - 0.5 * LOG_2PI

    def mass(self) -> float:
        return float(np.exp(logsumexp(self.log_density) + math.log(self.hx)))

    def mean(self) -> float:
        d = np.exp(self.log_density)
        return float((self.x * d).sum() * self.hx)

    def renyi(self, orders: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
        """D_a(q_tilde || p) and D_a(p || q_tilde) (the neighbour with a zero update outputs p
        exactly: its index is uniform over i.i.d. prior candidates)."""
        lp = -0.5 * self.x**2 - 0.5 * LOG_2PI + math.log(self.hx)
        fwd = np.array([logsumexp(lp + a * self.log_ratio) / (a - 1) for a in orders])
        rev = np.array([logsumexp(lp + (1 - a) * self.log_ratio) / (a - 1) for a in orders])
        return fwd, rev


def rec_density(c: float, k: int, *, amax: float = 16.0, hx: float = 0.1, hs: float = 0.1) -> RecDensity:
    """q_tilde(x) = K p(x) w(x) int_0^inf exp(-t w(x)) L(t)^(K-1) dt, with t = e^s:
    log(q_tilde/p)(x) = log K + log w(x) + log int exp(s - e^(s + log w(x)) + (K-1) log L(e^s)) ds.

    The x-grid reaches the reverse divergence's mass near -(amax-1) c and the forward's near amax c."""
    x = np.arange(-(amax - 1) * c - 14.0, amax * c + 14.0 + hx / 2, hx)
    lw = c * x - c * c / 2
    # s below -max(lw) - 40: the integrand is <= e^s there, and J(x) >= 1/(w + K - 1) (Jensen).
    s = np.arange(-lw.max() - 40.0 - math.log(k), -lw.min() + 6.0, hs)
    log_l = log_g(s - c * c / 2, c)
    base = s + (k - 1) * log_l
    log_j = np.empty_like(x)
    for i0 in range(0, x.size, 128):
        e = np.minimum(s[None, :] + lw[i0 : i0 + 128, None], 700.0)
        log_j[i0 : i0 + 128] = logsumexp(base[None, :] - np.exp(e), axis=1) + math.log(hs)
    return RecDensity(x, hx, math.log(k) + lw + log_j, c, k)


def rec_joint_forward(c: float, ks: Sequence[int], orders: Sequence[int], *, hs: float = 0.1) -> dict[int, np.ndarray]:
    """Seed-visible joint divergence D_a(REC(phi) || REC(0)) (all K candidates and the index seen),
    for each K in ``ks``: log(K^a E[w_1^a / (w_1 + S)^a]) / (a-1), with
    E[w_1^a (w_1+S)^-a] = (1/Gamma(a)) int t^(a-1) E_p[w^a e^{-t w}] L(t)^(K-1) dt (t = e^s)."""
    amax = max(orders)
    s = np.arange(-(amax + 0.5) * c * c - 15.0 * c - 40.0, c * c + 45.0 * c + 10.0, hs)
    log_l = log_g(s - c * c / 2, c, hz=0.1)
    out = {k: [] for k in ks}
    for a in orders:
        base = a * s + a * (a - 1) * c * c / 2 + log_g(s + (a - 0.5) * c * c, c, hz=0.1)
        for k in ks:
            log_e = logsumexp(base + (k - 1) * log_l) + math.log(hs) - gammaln(a)
            out[k].append((a * math.log(k) + log_e) / (a - 1))
    return {k: np.array(v) for k, v in out.items()}


def rec_joint_reverse(c: float, k: int, orders: Sequence[int]) -> np.ndarray:
    """D_a(REC(0) || REC(phi)) seed-visible, closed form for integer a:
    exp((a-1) D) = K^(1-a) E[(1 + S/w_1)^(a-1)] = K^(1-a) sum_j C(a-1, j) E[S^j] E[w^-j],
    E[w^m] = exp(m(m-1)c^2/2) for every real m, E[S^j] by convolving the moments of K-1 copies."""
    jmax = int(max(orders))

    def lm(m: float) -> float:
        return m * (m - 1) * c * c / 2

    one = np.array([lm(j) for j in range(jmax + 1)])  # log E[w^j]
    log_binom = lambda n, r: gammaln(n + 1) - gammaln(r + 1) - gammaln(n - r + 1)  # noqa: E731
    s_mom = np.full(jmax + 1, -np.inf)
    s_mom[0] = 0.0  # the empty sum (K = 1): S = 0
    for _ in range(k - 1):
        new = np.empty_like(s_mom)
        for j in range(jmax + 1):
            i = np.arange(j + 1)
            new[j] = logsumexp(log_binom(j, i) + s_mom[i] + one[j - i])
        s_mom = new
    out = []
    for a in orders:
        j = np.arange(a)
        total = logsumexp(log_binom(a - 1, j) + s_mom[j] + np.array([lm(-float(x)) for x in j]))
        out.append(((1 - a) * math.log(k) + total) / (a - 1))
    return np.array(out)


# --------------------------------------------------------------------------------------------
# C. PLD of 1-D pairs from fine cells (both directions), composed with dp_accounting.
# --------------------------------------------------------------------------------------------


def _norm_cdf_cells(edges: np.ndarray, mean: float) -> np.ndarray:
    from scipy.special import ndtr

    return np.diff(ndtr(edges - mean))


def cell_masses(mix: Sequence[tuple[float, float]], edges: np.ndarray) -> np.ndarray:
    """Exact masses of a 1-D mixture sum_j w_j N(m_j, 1) on the cells between ``edges``
    (the two unbounded end cells included)."""
    e = np.concatenate([[-np.inf], edges, [np.inf]])
    return sum(w * _norm_cdf_cells(e, m) for w, m in mix)


def _connect_dots_pmf(pu: np.ndarray, pl: np.ndarray, discretization: float):
    """dp_accounting's pessimistic connect-the-dots PMF of the discrete pair (upper pu, lower pl):
    the hockey-stick divergences delta(eps) = sum (pu - e^eps pl)_+ on the grid of multiples of
    ``discretization`` covering the losses, from sorted cumulative sums."""
    from dp_accounting.pld import pld_pmf

    keep = pu > 0
    pu, pl = pu[keep], pl[keep]
    with np.errstate(divide="ignore"):
        loss = np.log(pu) - np.log(pl)  # +inf where pl == 0
    order = np.argsort(loss)
    loss, pu, pl = loss[order], pu[order], pl[order]
    su = np.concatenate([np.cumsum(pu[::-1])[::-1], [0.0]])
    sl = np.concatenate([np.cumsum(pl[::-1])[::-1], [0.0]])
    finite = loss[np.isfinite(loss)]
    k = np.arange(math.floor(finite.min() / discretization) - 1, math.ceil(finite.max() / discretization) + 2)
    eps = k * discretization
    idx = np.searchsorted(loss, eps, side="right")
    deltas = np.clip(su[idx] - np.exp(eps) * sl[idx], 0.0, 1.0)
    return pld_pmf.create_pmf_pessimistic_connect_dots(discretization, k, deltas)


def pld_from_mixtures(
    upper: Sequence[tuple[float, float]],
    lower: Sequence[tuple[float, float]],
    *,
    cell: float = 1e-3,
    half_width: float = 16.0,
    discretization: float = 1e-3,
):
    """dp_accounting PrivacyLossDistribution of the 1-D pair (upper = P, lower = P') of mixtures of
    N(m, 1), both directions (remove: (P, P'); add: (P', P)): the output space cut into cells of
    width ``cell`` with their exact masses (a post-processing: the cells' mechanism, a hair below
    the continuous one), then connect-the-dots at ``discretization``."""
    from dp_accounting.pld import privacy_loss_distribution as pldlib

    edges = np.arange(-half_width, half_width + cell / 2, cell)
    pu = cell_masses(upper, edges)
    pl = cell_masses(lower, edges)
    return pldlib.PrivacyLossDistribution(
        _connect_dots_pmf(pu, pl, discretization), _connect_dots_pmf(pl, pu, discretization)
    )


def pld_epsilon(pld, compositions: int, delta: float) -> float:
    return float(pld.self_compose(compositions).get_epsilon_for_delta(delta))


def dp_accounting_sampled_gaussian_epsilon(
    shift: float, q: float, compositions: int, delta: float, discretization: float = 1e-3
) -> float:
    """dp_accounting's own PLD of the Poisson-subsampled Gaussian (sigma 1, sensitivity ``shift``,
    add and remove), composed ``compositions`` times."""
    from dp_accounting.pld import privacy_loss_distribution as pldlib

    pld = pldlib.from_gaussian_mechanism(
        standard_deviation=1.0, sensitivity=shift, sampling_prob=q, value_discretization_interval=discretization
    )
    return float(pld.self_compose(compositions).get_epsilon_for_delta(delta))
