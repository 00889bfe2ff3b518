#!/usr/bin/env python
"""The SecAgg distributed-DP pipeline on the CPU: samplers, client, server, end-to-end MSE (docs/secagg.md).

Usage::

    python bench/bench_secagg.py                  # samplers, client and server tables (~1 min on 2 cores)
    python bench/bench_secagg.py --quick          # n = 2^16, client d = 2^16, server d = 2^12, 3 repeats (~15 s)
    python bench/bench_secagg.py --mse            # the tables above plus the end-to-end MSE table (+ ~1.5 min)
    python bench/bench_secagg.py --only mse       # only the MSE table (1000 clients x d = 10,000)

Four sections, every anchor measured in the same run as what it anchors:

**Samplers** (samples per second, ``n = 2**20`` by default), the discrete Gaussian
``N_Z(0, sigma^2)`` for sigma in {0.5, 2, 30, 1e3, 1e4} and the symmetric Skellam of variance
``mu = sigma^2``:

* **dprec**: ``secagg.sample_discrete_gaussian`` / ``secagg.sample_skellam`` (native), with every
  core and with one thread (``dprec.runtime.set_num_threads(1)``).
* **NumPy exact**: the same exact algorithms written here with NumPy, vectorised over the
  samples still pending: Canonne-Kamath-Steinke (2020) for the discrete Gaussian (a discrete
  Laplace proposal of scale ``t = floor(sigma) + 1``, accepted with probability
  ``exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2))``; every ``Bernoulli(exp(-gamma))`` by the CKS
  Bernoulli-factory loops, every coin from ``Generator.integers``, exact rational arithmetic
  with ``sigma^2`` taken exactly as the rational value of the float), and for the Skellam two
  Poisson(mu/2) by Hoermann's PTRS (lam >= 10) or Knuth's product of uniforms (lam < 10) on
  ``Generator`` uniforms. These are the anchors, not part of the package.
* **NumPy inexact**: what one might write instead, ``np.rint(rng.normal(0, sigma, n))`` (not a
  discrete Gaussian; wrong for small sigma) and ``rng.poisson(mu/2, n) - rng.poisson(mu/2, n)``
  (NumPy's own compiled Poisson sampler).
* **reference**: dprec's pure-Python backend (``backend="reference"``, a scalar loop) on
  ``--ref-n`` samples, reported per sample.

The ``check`` column tests the output of every timed method (the anchors included) against
theory: the mean against 0 and the sample variance against the exact variance (the discrete
Gaussian's by summing its pmf; ``mu`` for Skellam), as z-scores with the standard error from
the sample's fourth moment; ``ok`` when every ``|z| < 5`` (a false alarm about once in 10**6
checks).

**Client** (``DDGPipeline.encode`` and ``SkellamPipeline.encode``; d in {2**16, 2**20}; 1000
clients, 20 bits, eps 2 at delta 1e-5; without and with a count-sketch of ``5 x d/8``), in
elements per second ``d / time``, then one row per stage timed on its own: ``prepare`` (clip,
sketch, rotate, scale), ``conditional_round``, the noise sampler, ``modular_reduce``.

**Server** (1000 clients x d, d in {2**14, 2**16}): ``aggregate`` (the modular sum of a
``(1000, padded_dim)`` message array) then ``decode``, in client-elements per second
(``clients * d / time``), against NumPy: ``xs.sum(axis=0, dtype=np.uint64) % M``, the centered
lift, and the inverse rotation as a NumPy butterfly FWHT times the Hadamard signs (signs
computed outside the timed region). Agreement: the sums must be equal, the decodes within 1e-12
relative L2.

**MSE** (``--mse``): one round of mean estimation over 1000 clients' vectors of d = 10,000
(norm <= 1), DDG and Skellam, without a sketch and with a 4 x 2048 sketch, for target epsilons
{1, 2, 4} (delta 1e-5) and 16 and 20 bits, wrap probability 1e-10 per coordinate: the measured
squared error of the decoded mean against its closed form (noise + rounding, plus the sketch's
own error on the noiseless sum), and Theorem 5.2's constant ``MSE n^2 eps^2 / (c^2 d)`` with
``eps`` the round's concentrated epsilon.

Method: each cell is the median of ``--repeat`` measurements, each at least ``--min-time``
long (back-to-back calls); methods round-robin within a row. Rates are in millions per second.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from fractions import Fraction
from typing import Any, Callable, Optional, Sequence

import numpy as np
from scipy.special import gammaln

from _timing import markdown_table, mrate, progress, round_robin  # bench/_timing.py
from dprec import runtime, secagg
from dprec.bench import cpu_model, package_version
from dprec.transforms.hadamard import RandomizedHadamard

SEED = 0x5EED_5EC0_0000_0016
Z_LIMIT = 5.0  # |z| above which a statistical check fails
DECODE_TOL = 1e-12  # relative L2 between dprec's decode and NumPy's

# --------------------------------------------------------------------------- NumPy anchors: CKS discrete Gaussian


def _bernoulli_exp_fraction(rng: np.random.Generator, num: np.ndarray, den: Any) -> np.ndarray:
    """``Bernoulli(exp(-num/den))`` per element, ``0 <= num <= den`` integers (CKS 2020, Algorithm 1).

    The factory draws ``A_K ~ Bernoulli(gamma / K)`` for K = 1, 2, ... until one is 0 and
    returns 1 when that K is odd. K is the loop count, the same for every element still going,
    so one NumPy draw per K serves them all. ``Bernoulli(gamma / K)`` is drawn as the product
    of ``Bernoulli(num / den)`` and ``Bernoulli(1 / K)``: no ``den * K`` that could overflow.
    """
    out = np.zeros(num.size, dtype=bool)
    pend = np.arange(num.size)
    per_element = np.ndim(den) > 0
    k = 1
    while pend.size:
        high = den[pend] if per_element else den
        a = rng.integers(0, high, size=pend.size) < num[pend]
        if k > 1:
            a &= rng.integers(0, k, size=pend.size) == 0
        out[pend[~a]] = k % 2 == 1
        pend = pend[a]
        k += 1
    return out


def _bernoulli_exp_minus_one(rng: np.random.Generator, m: int) -> np.ndarray:
    """``m`` draws of ``Bernoulli(exp(-1))`` (the factory with gamma = 1)."""
    return _bernoulli_exp_fraction(rng, np.ones(m, dtype=np.int64), 1)


def _bernoulli_exp_scalar(rng: np.random.Generator, num: int, den: int) -> bool:
    """``Bernoulli(exp(-num/den))`` for one element with Python integers (any size; CKS Algorithm 1)."""
    whole, rest = divmod(num, den)
    for _ in range(whole):
        if not _bernoulli_exp_minus_one(rng, 1)[0]:
            return False
    k = 1
    while True:
        # Bernoulli(rest / (den k)) as a uniform integer below den * k (Python integers: no overflow).
        if int(rng.integers(0, den)) >= rest or (k > 1 and int(rng.integers(0, k)) != 0):
            return k % 2 == 1
        k += 1


def _bernoulli_exp_square(rng: np.random.Generator, a: np.ndarray, den: int) -> np.ndarray:
    """``Bernoulli(exp(-a^2 / den))`` per element, ``a >= 0`` int64, ``0 < den < 2**63`` (CKS Algorithm 1).

    ``gamma = a^2/den`` splits into ``floor(gamma)`` draws of ``Bernoulli(exp(-1))`` (all must be
    1) and the factory on the fraction. ``a^2`` is exact in uint64 for ``a < 2**32``; the rest
    (``|Y| >~ 40 t`` for the CKS proposal: never seen in practice) go through Python integers.
    """
    out = np.ones(a.size, dtype=bool)
    small = a < (1 << 32)
    big = np.flatnonzero(~small)
    for i in big:
        out[i] = _bernoulli_exp_scalar(rng, int(a[i]) ** 2, den)
    idx = np.flatnonzero(small)
    sq = a[idx].astype(np.uint64) ** np.uint64(2)
    whole = sq // np.uint64(den)
    rest = (sq - whole * np.uint64(den)).astype(np.int64)
    # The floor(gamma) coins: an element leaves at its first 0 (out = False) or when its count is done.
    going = np.flatnonzero(whole > 0)
    left = whole[going]
    while going.size:
        ok = _bernoulli_exp_minus_one(rng, going.size)
        out[idx[going[~ok]]] = False
        left = left[ok] - np.uint64(1)
        going = going[ok]
        more = left > 0
        going, left = going[more], left[more]
    frac = np.flatnonzero(out[idx])
    out[idx[frac]] = _bernoulli_exp_fraction(rng, rest[frac], den)
    return out


def _discrete_laplace(rng: np.random.Generator, t: int, m: int) -> np.ndarray:
    """Up to ``m`` draws of the discrete Laplace ``P(y) ∝ exp(-|y|/t)`` (CKS Algorithm 2, s = 1): each of
    the ``m`` attempts either yields a sample or is rejected (the accepted ones are returned)."""
    u = rng.integers(0, t, size=m)
    u = u[_bernoulli_exp_fraction(rng, u, t)]
    # V ~ Geometric(1 - exp(-1)): the count of Bernoulli(exp(-1)) successes before the first failure.
    v = np.zeros(u.size, dtype=np.int64)
    going = np.arange(u.size)
    while going.size:
        ok = _bernoulli_exp_minus_one(rng, going.size)
        going = going[ok]
        v[going] += 1
    x = u + t * v
    neg = rng.integers(0, 2, size=x.size).astype(bool)
    keep = ~(neg & (x == 0))  # -0 is rejected so that 0 is not counted twice
    return np.where(neg, -x, x)[keep]


def numpy_discrete_gaussian(n: int, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """``n`` exact draws of ``N_Z(0, sigma^2)`` by Canonne-Kamath-Steinke (2020), Algorithm 3, in NumPy.

    ``sigma^2`` is the exact rational ``p/q`` of the float ``sigma`` squared; the acceptance
    ``exp(-(|y| - sigma^2/t)^2 / (2 sigma^2)) = exp(-a^2 / (2 p q t^2))`` with the integer
    ``a = | |y| q t - p |``. Rejection runs in rounds over the samples still missing.
    """
    s2 = Fraction(sigma) ** 2
    p, q = s2.numerator, s2.denominator
    t = math.floor(sigma) + 1
    den = 2 * p * q * t * t
    if den >= 1 << 63:
        raise ValueError(f"the NumPy CKS anchor needs 2 p q t^2 < 2**63 for sigma^2 = p/q; sigma={sigma!r} is not")
    out = np.empty(n, dtype=np.int64)
    filled = 0
    while filled < n:
        y = _discrete_laplace(rng, t, n - filled)
        a = np.abs(np.abs(y) * (q * t) - p)
        y = y[_bernoulli_exp_square(rng, a, den)]
        out[filled : filled + y.size] = y
        filled += y.size
    return out


# --------------------------------------------------------------------------- NumPy anchors: Skellam


def _open_uniform(rng: np.random.Generator, m: int) -> np.ndarray:
    """Uniforms in the open interval (0, 1): ``(k + 1/2) 2^-52``, exact in float64."""
    return (rng.integers(0, 1 << 52, size=m) + 0.5) * 2.0**-52


def numpy_poisson(n: int, lam: float, rng: np.random.Generator) -> np.ndarray:
    """``n`` Poisson(lam) draws: Hoermann's PTRS (1993) for ``lam >= 10``, Knuth's product of uniforms below."""
    out = np.zeros(n, dtype=np.int64)
    pend = np.arange(n)
    if lam < 10.0:
        # Knuth: the number of uniforms whose running product stays above exp(-lam).
        limit = math.exp(-lam)
        prod = np.ones(n)
        while pend.size:
            prod[pend] *= _open_uniform(rng, pend.size)
            pend = pend[prod[pend] > limit]
            out[pend] += 1
        return out
    # PTRS: transformed rejection with a squeeze; the constants are Hoermann's.
    slam, loglam = math.sqrt(lam), math.log(lam)
    b = 0.931 + 2.53 * slam
    a = -0.059 + 0.02483 * b
    log_inv_alpha = math.log(1.1239 + 1.1328 / (b - 3.4))
    v_r = 0.9277 - 3.6224 / (b - 2.0)
    while pend.size:
        m = pend.size
        u = _open_uniform(rng, m) - 0.5
        v = _open_uniform(rng, m)
        us = 0.5 - np.abs(u)
        k = np.floor((2.0 * a / us + b) * u + lam + 0.43)
        accept = (us >= 0.07) & (v <= v_r)
        test = np.flatnonzero(~accept & (k >= 0) & ~((us < 0.013) & (v > us)))
        kt, ust = k[test], us[test]
        accept[test] = np.log(v[test]) + log_inv_alpha - np.log(a / (ust * ust) + b) <= -lam + kt * loglam - gammaln(
            kt + 1.0
        )
        out[pend[accept]] = k[accept].astype(np.int64)
        pend = pend[~accept]
    return out


def numpy_skellam(n: int, mu: float, rng: np.random.Generator) -> np.ndarray:
    """``n`` symmetric Skellam draws of variance ``mu``: two Poisson(mu/2) by :func:`numpy_poisson`, subtracted."""
    return numpy_poisson(n, mu / 2.0, rng) - numpy_poisson(n, mu / 2.0, rng)


# --------------------------------------------------------------------------- statistics


def discrete_gaussian_variance(sigma: float) -> float:
    """The exact variance of ``N_Z(0, sigma^2)`` by summing its pmf (below sigma^2 for small sigma)."""
    r = int(40 * sigma) + 40
    y = np.arange(-r, r + 1, dtype=np.float64)
    w = np.exp(-y * y / (2.0 * sigma * sigma))
    return float(np.sum(w * y * y) / np.sum(w))


def moment_check(x: np.ndarray, variance: float) -> tuple[float, float]:
    """z-scores of the sample mean against 0 and of the sample variance against ``variance``."""
    xf = np.asarray(x, dtype=np.float64)
    n = xf.size
    mean = float(xf.mean())
    c = xf - mean
    c2 = c * c
    s2 = float(c2.mean())
    m4 = float((c2 * c2).mean())
    z_mean = mean / math.sqrt(variance / n)
    z_var = (s2 - variance) / math.sqrt(max(m4 - s2 * s2, 1e-300) / n)
    return z_mean, z_var


# --------------------------------------------------------------------------- NumPy server anchor


def numpy_fwht(v: np.ndarray) -> np.ndarray:
    """Unnormalised Walsh-Hadamard transform in natural (Sylvester) order: ``log2(n)`` butterfly passes."""
    n = v.size
    y = v
    h = 1
    while h < n:
        y = y.reshape(-1, 2, h)
        y = np.stack((y[:, 0] + y[:, 1], y[:, 0] - y[:, 1]), axis=1)
        h *= 2
    return y.reshape(n)


def numpy_server(messages: np.ndarray, bits: int, scale: float, signs: np.ndarray, dim: int) -> tuple[np.ndarray, Any]:
    """NumPy's aggregate and decode: the modular sum, the lift to [-M/2, M/2) times ``scale``, ``D H y / sqrt(p)``."""
    m = 1 << bits
    total = messages.sum(axis=0, dtype=np.uint64) % np.uint64(m)
    lifted = total.astype(np.int64)
    lifted[lifted >= m // 2] -= m
    y = lifted * scale
    x = numpy_fwht(y) * signs / math.sqrt(y.size)
    return total, x[:dim]


# --------------------------------------------------------------------------- timing and tables


# --------------------------------------------------------------------------- sections


def bench_samplers(args: argparse.Namespace, threads: int, t_start: float) -> bool:
    """The sampler table; returns whether every statistical check passed."""
    n = 1 << args.log2_n
    ref_n = args.ref_n
    rows: list[list[str]] = []
    details: list[list[str]] = []
    all_ok = True
    for kind in ("discrete Gaussian", "Skellam"):
        for sigma in args.sigmas:
            mu = sigma * sigma
            rng = np.random.default_rng([SEED, int(sigma * 1000), kind == "Skellam"])
            if kind == "Skellam":
                variance = mu

                def native(mu: float = mu) -> np.ndarray:
                    return secagg.sample_skellam(n, mu, rng=rng, backend="cpu")

                def exact(mu: float = mu) -> np.ndarray:
                    return numpy_skellam(n, mu, rng)

                def inexact(mu: float = mu) -> np.ndarray:
                    return rng.poisson(mu / 2.0, n) - rng.poisson(mu / 2.0, n)

                def reference(mu: float = mu) -> np.ndarray:
                    return secagg.sample_skellam(ref_n, mu, rng=rng, backend="reference")

            else:
                variance = discrete_gaussian_variance(sigma)

                def native(sigma: float = sigma) -> np.ndarray:
                    return secagg.sample_discrete_gaussian(n, sigma, rng=rng, backend="cpu")

                def exact(sigma: float = sigma) -> np.ndarray:
                    return numpy_discrete_gaussian(n, sigma, rng)

                def inexact(sigma: float = sigma) -> np.ndarray:
                    return np.rint(rng.normal(0.0, sigma, n)).astype(np.int64)

                def reference(sigma: float = sigma) -> np.ndarray:
                    return secagg.sample_discrete_gaussian(ref_n, sigma, rng=rng, backend="reference")

            def native_one_thread(native: Callable[[], np.ndarray] = native) -> np.ndarray:
                runtime.set_num_threads(1)
                try:
                    return native()
                finally:
                    runtime.set_num_threads(threads)

            methods = [("dprec", native), ("dprec 1t", native_one_thread), ("exact", exact), ("inexact", inexact)]
            med, last = round_robin(methods, args.repeat, args.min_time)
            # The reference backend is a scalar Python loop: one timed call, on its own.
            ref_med, ref_last = round_robin([("reference", reference)], 1, 0.0)
            med.update(ref_med)
            last.update(ref_last)

            checks = {}
            for name in ("dprec", "dprec 1t", "exact", "inexact", "reference"):
                z_mean, z_var = moment_check(last[name], variance)
                checks[name] = (z_mean, z_var)
            exact_ok = all(
                abs(z) < Z_LIMIT for name in ("dprec", "dprec 1t", "exact", "reference") for z in checks[name]
            )
            # NumPy inexact is allowed to fail: rint(normal) is not a discrete Gaussian (its variance is
            # sigma^2 + 1/12 for large sigma); its z-scores are shown for that reason.
            all_ok &= exact_ok
            rate = {name: n / med[name] for name in ("dprec", "dprec 1t", "exact", "inexact")}
            rate["reference"] = ref_n / med["reference"]
            label = f"{sigma:g}"
            rows.append(
                [
                    "DG" if kind == "discrete Gaussian" else "Skellam",
                    label,
                    f"{rate['dprec'] / 1e6:,.2f}",
                    f"{rate['dprec 1t'] / 1e6:,.2f}",
                    f"{rate['exact'] / 1e6:,.2f}",
                    f"{rate['inexact'] / 1e6:,.2f}",
                    f"{rate['reference'] / 1e6:,.4f}",
                    f"{rate['dprec'] / rate['exact']:,.1f}x",
                    f"{rate['dprec 1t'] / rate['exact']:,.1f}x",
                    f"{rate['dprec'] / rate['inexact']:,.2f}x",
                    f"{rate['dprec'] / rate['reference']:,.0f}x",
                    "ok" if exact_ok else "FAIL",
                ]
            )
            details.append(
                ["DG" if kind == "discrete Gaussian" else "Skellam", label, f"{variance:.6g}"]
                + [
                    f"{checks[name][0]:+.2f} / {checks[name][1]:+.2f}"
                    for name in ("dprec", "dprec 1t", "exact", "inexact", "reference")
                ]
            )
            progress(f"sampler {kind} {label}", t_start)

    print(f"### Samplers: M samples/s, n = 2^{args.log2_n} per call (reference: n = {ref_n}, one call)")
    print()
    print(
        markdown_table(
            [
                "noise",
                "sigma",
                f"dprec {threads}t",
                "dprec 1t",
                "NumPy exact",
                "NumPy inexact",
                "reference",
                "/exact",
                "1t /exact",
                "/inexact",
                "/reference",
                "check",
            ],
            rows,
        )
    )
    print()
    print(
        "Skellam rows: mu = sigma^2, the variance. Ratios: dprec (all threads unless 1t) rate over the "
        "anchor's. check: every exact method (dprec, NumPy exact, reference) has |z| < "
        f"{Z_LIMIT:g} for its mean and variance."
    )
    print()
    print(
        "Statistical check, z-scores `mean / variance` against theory (NumPy inexact is not exact: shown, not checked)"
    )
    print()
    print(
        markdown_table(
            ["noise", "sigma", "variance", "dprec", "dprec 1t", "NumPy exact", "NumPy inexact", "reference"], details
        )
    )
    print()
    return all_ok


def bench_client(args: argparse.Namespace, t_start: float) -> None:
    """The client table: encode and its stages."""
    rows: list[list[str]] = []
    for lg in args.log2_d:
        d = 1 << lg
        x = np.random.default_rng(lg).standard_normal(d)
        x *= 0.8 / np.linalg.norm(x)
        for cls in (secagg.DDGPipeline, secagg.SkellamPipeline):
            for sketch in (None, (5, d // 8)):
                pipe = cls(
                    d, clip=1.0, bits=20, num_clients=1000, seed=SEED, target_epsilon=2.0, delta=1e-5, sketch=sketch
                )
                rng = np.random.default_rng(SEED + lg)
                y = pipe.prepare(x)
                bound = pipe.rounding_norm_bound
                ints, _ = secagg.conditional_round(y, bound, rng=rng)
                p = pipe.padded_dim
                if cls is secagg.DDGPipeline:

                    def sample_noise(p: int = p, s: float = pipe.integer_noise_stddev) -> np.ndarray:
                        return secagg.sample_discrete_gaussian(p, s, rng=rng)

                else:

                    def sample_noise(p: int = p, s: float = pipe.integer_noise_stddev) -> np.ndarray:
                        return secagg.sample_skellam(p, s * s, rng=rng)

                methods: list[tuple[str, Callable[[], Any]]] = [
                    ("encode", lambda pipe=pipe: pipe.encode(x, rng=rng)),
                    ("prepare", lambda pipe=pipe: pipe.prepare(x)),
                    ("conditional_round", lambda y=y, bound=bound: secagg.conditional_round(y, bound, rng=rng)),
                    ("noise", sample_noise),
                    ("modular_reduce", lambda ints=ints: secagg.modular_reduce(ints, 20)),
                ]
                med, _ = round_robin(methods, args.repeat, args.min_time)
                enc = med["encode"]
                stages = sum(med[name] for name, _ in methods[1:])
                mech = "DDG" if cls is secagg.DDGPipeline else "Skellam"
                sk = "-" if sketch is None else f"{sketch[0]}x{sketch[1]}"
                lead = [f"2^{lg}", mech, sk, str(p), f"{pipe.integer_noise_stddev:.3g}"]
                rows.append(lead + ["encode", mrate(d, enc), f"{enc * 1e3:.3f}", "100%"])
                for name, _ in methods[1:]:
                    rows.append(
                        [""] * len(lead)
                        + [name, mrate(d, med[name]), f"{med[name] * 1e3:.3f}", f"{100 * med[name] / enc:.0f}%"]
                    )
                rows.append(
                    [""] * len(lead)
                    + ["(sum of stages)", mrate(d, stages), f"{stages * 1e3:.3f}", f"{100 * stages / enc:.0f}%"]
                )
                progress(f"client d=2^{lg} {mech} sketch={sk}", t_start)
    print("### Client: encode and its stages, M elements/s = d / time (1000 clients, 20 bits, eps 2 at delta 1e-5)")
    print()
    print(
        markdown_table(
            ["d", "mechanism", "sketch", "padded", "sigma/gamma", "stage", "M elem/s", "ms", "of encode"], rows
        )
    )
    print()
    print(
        "prepare = clip + sketch (and re-clip) + rotation + scale; noise = the sampler on padded_dim elements; "
        "encode also adds the noise to the rounded vector and chains the stages on fresh arrays (a stage timed alone "
        "reuses warm memory): the gap to the sum of stages."
    )
    print()


def bench_server(args: argparse.Namespace, t_start: float) -> bool:
    """The server table; returns whether dprec and NumPy agree."""
    rows: list[list[str]] = []
    ok = True
    n, bits = args.clients, 20
    for lg in args.server_log2_d:
        d = 1 << lg
        pipe = secagg.DDGPipeline(d, clip=1.0, bits=bits, num_clients=n, seed=SEED, noise_stddev=0.01)
        p = pipe.padded_dim
        messages = np.random.default_rng(SEED + lg).integers(0, 1 << bits, size=(n, p), dtype=pipe.message_dtype)
        signs = RandomizedHadamard(d, SEED).signs()  # the pipeline's rotation: same seed, group 0
        scale = pipe.granularity / n

        def dprec_both() -> Any:
            total = pipe.aggregate(messages)
            return total, pipe.decode(total)

        def numpy_both() -> Any:
            return numpy_server(messages, bits, scale, signs, d)

        total0 = pipe.aggregate(messages)
        methods: list[tuple[str, Callable[[], Any]]] = [
            ("dprec", dprec_both),
            ("numpy", numpy_both),
            ("aggregate", lambda: pipe.aggregate(messages)),
            ("decode", lambda: pipe.decode(total0)),
            ("numpy sum", lambda: messages.sum(axis=0, dtype=np.uint64) % np.uint64(1 << bits)),
        ]
        med, last = round_robin(methods, args.repeat, args.min_time)
        same_sum = np.array_equal(np.asarray(last["dprec"][0]).astype(np.uint64), last["numpy"][0])
        a, b = np.asarray(last["dprec"][1]), last["numpy"][1]
        rel = float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))
        agree = same_sum and rel <= DECODE_TOL
        ok &= agree
        cells = n * d
        rows.append(
            [
                f"2^{lg}",
                str(n),
                mrate(cells, med["dprec"]),
                mrate(cells, med["numpy"]),
                f"{med['numpy'] / med['dprec']:.1f}x",
                mrate(cells, med["aggregate"]),
                mrate(cells, med["numpy sum"]),
                f"{med['numpy sum'] / med['aggregate']:.1f}x",
                f"{med['decode'] * 1e3:.3f}",
                f"{'equal' if same_sum else 'DIFFER'}, {rel:.1e}",
            ]
        )
        progress(f"server d=2^{lg}", t_start)
    print(f"### Server: aggregate + decode, M client-elements/s = clients * d / time ({bits} bits)")
    print()
    print(
        markdown_table(
            [
                "d",
                "clients",
                "dprec",
                "NumPy",
                "speed-up",
                "aggregate",
                "NumPy sum",
                "speed-up",
                "decode ms",
                "agreement (sum, decode rel L2)",
            ],
            rows,
        )
    )
    print()
    print(
        "dprec = pipe.aggregate + pipe.decode; NumPy = sum(axis=0, dtype=uint64) % M, centered lift, butterfly FWHT "
        "times the Hadamard signs (precomputed, untimed) / sqrt(padded_dim)."
    )
    print()
    return ok


# --------------------------------------------------------------------------- end-to-end MSE


def mse_clients(n: int, dim: int, clip: float, seed: int) -> np.ndarray:
    """``n`` update vectors of norm <= ``clip``: a common direction (norm clip/2) plus client parts (<= 0.4 clip)."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal(dim)
    base *= 0.5 * clip / np.linalg.norm(base)
    parts = rng.standard_normal((n, dim))
    parts *= (0.4 * clip * rng.uniform(0.5, 1.0, size=(n, 1))) / np.linalg.norm(parts, axis=1, keepdims=True)
    return base + parts


def mean_estimation(pipe: secagg.DistributedPipeline, xs: np.ndarray, rng: np.random.Generator) -> tuple[float, float]:
    """One round over the clients ``xs``: (measured squared error of the decoded mean, its closed form).

    The closed form is ``noise_mse() + rounding_mse(sum of f (1 - f))`` over the clients' own
    fractional parts ``f`` of the scaled rotated vectors, plus, with a sketch, the sketch's
    error on the noiseless sum of the (re-clipped) sketches.
    """
    n = xs.shape[0]
    mu = xs.mean(axis=0)
    messages = np.empty((n, pipe.padded_dim), dtype=pipe.message_dtype)
    rounding_variance = 0.0
    for i, x in enumerate(xs):
        y = pipe.prepare(x)
        f = y - np.floor(y)
        rounding_variance += float(np.sum(f * (1.0 - f)))
        messages[i] = pipe.encode(x, rng=rng)
    est = np.asarray(pipe.decode(pipe.aggregate(messages)))
    measured = float(np.sum((est - mu) ** 2))
    closed = pipe.noise_mse() + pipe.rounding_mse(rounding_variance)
    sk = pipe.sketch
    if sk is not None:
        total = sum(pipe.clip_and_sketch(x) for x in xs).reshape(sk.shape)
        closed += float(np.sum((np.asarray(sk.decode(total)) / n - mu) ** 2))
    return measured, closed


def bench_mse(args: argparse.Namespace, t_start: float) -> None:
    """The end-to-end MSE table."""
    n, dim, clip, delta = args.mse_clients, args.mse_dim, 1.0, 1e-5
    xs = mse_clients(n, dim, clip, seed=7)
    rows: list[list[str]] = []
    for cls in (secagg.DDGPipeline, secagg.SkellamPipeline):
        mech = "DDG" if cls is secagg.DDGPipeline else "Skellam"
        for sketch in (None, tuple(args.mse_sketch)):
            sk = "-" if sketch is None else f"{sketch[0]}x{sketch[1]}"
            for eps in args.epsilons:
                for bits in args.mse_bits:
                    pipe = cls(
                        dim,
                        clip=clip,
                        bits=bits,
                        num_clients=n,
                        seed=1241,
                        target_epsilon=eps,
                        delta=delta,
                        sketch=sketch,
                        wrap_probability=1e-10,
                    )
                    measured, closed = mean_estimation(pipe, xs, np.random.default_rng([7, bits, int(eps * 100)]))
                    ceps = pipe.concentrated_epsilon()
                    constant = measured * n * n * ceps * ceps / (clip * clip * dim)
                    rows.append(
                        [
                            mech,
                            sk,
                            f"{eps:g}",
                            str(bits),
                            f"{pipe.granularity:.3e}",
                            f"{pipe.integer_noise_stddev:.3g}",
                            f"{pipe.any_wrap_probability:.1e}",
                            f"{measured:.4e}",
                            f"{closed:.4e}",
                            f"{measured / closed:.3f}",
                            f"{constant:.2f}",
                            f"{pipe.bits_per_client:,}",
                        ]
                    )
                    progress(f"mse {mech} sketch={sk} eps={eps:g} bits={bits}", t_start)
    print(f"### End-to-end MSE: {n} clients x d = {dim:,}, clip {clip:g}, delta {delta:g}, wrap probability 1e-10")
    print()
    print(
        markdown_table(
            [
                "mechanism",
                "sketch",
                "eps target",
                "bits",
                "gamma",
                "sigma/gamma",
                "wrap prob (any)",
                "measured MSE",
                "closed-form MSE",
                "measured/closed",
                "MSE n^2 eps^2/(c^2 d)",
                "bits/client",
            ],
            rows,
        )
    )
    print()
    print(
        "MSE = ||estimate - true mean||^2 of one round; closed form = noise + rounding (+ the sketch's own error on "
        "the noiseless sum); the Theorem 5.2 constant uses eps = concentrated_epsilon() (zCDP eps of the round)."
    )
    print()


# --------------------------------------------------------------------------- main


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes and 3 repeats (a smoke run, < 1 min)")
    parser.add_argument("--only", nargs="+", choices=["samplers", "client", "server", "mse"], help="sections to run")
    parser.add_argument("--mse", action="store_true", help="also the end-to-end MSE table")
    parser.add_argument("--threads", type=int, default=0, help="dprec threads (0: every core)")
    parser.add_argument(
        "--repeat", type=int, default=None, help="measurements per cell, median reported (5; 3 --quick)"
    )
    parser.add_argument("--min-time", type=float, default=0.05, help="seconds per measurement (at least one call)")
    parser.add_argument("--log2-n", type=int, default=None, help="sampler calls of 2^N samples (20; 16 --quick)")
    parser.add_argument("--ref-n", type=int, default=None, help="samples of the reference backend (4096; 512 --quick)")
    parser.add_argument("--sigmas", type=float, nargs="+", default=[0.5, 2.0, 30.0, 1e3, 1e4])
    parser.add_argument("--log2-d", type=int, nargs="+", default=None, help="client d = 2^D (16 20; 16 --quick)")
    parser.add_argument("--server-log2-d", type=int, nargs="+", default=None, help="server d (14 16; 12 --quick)")
    parser.add_argument("--clients", type=int, default=1000, help="clients of the server table")
    parser.add_argument("--mse-clients", type=int, default=1000)
    parser.add_argument("--mse-dim", type=int, default=10_000)
    parser.add_argument("--mse-sketch", type=int, nargs=2, default=[4, 2048], metavar=("ROWS", "COLS"))
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 2.0, 4.0])
    parser.add_argument("--mse-bits", type=int, nargs="+", default=[16, 20])
    args = parser.parse_args(argv)
    args.repeat = args.repeat or (3 if args.quick else 5)
    args.log2_n = args.log2_n or (16 if args.quick else 20)
    args.ref_n = args.ref_n or (512 if args.quick else 4096)
    args.log2_d = args.log2_d or ([16] if args.quick else [16, 20])
    args.server_log2_d = args.server_log2_d or ([12] if args.quick else [14, 16])
    sections = args.only or ["samplers", "client", "server"] + (["mse"] if args.mse else [])

    before = runtime.get_num_threads()
    runtime.set_num_threads(args.threads)
    threads = runtime.get_num_threads()
    t_start = time.perf_counter()
    print(f"dprec {package_version()} SecAgg benchmark (CPU)")
    print()
    # The load average says whether something else ran on the machine meanwhile (ratios within a row still
    # compare like with like: methods are interleaved).
    load = f"{os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else "n/a"
    print(
        f"CPU: {cpu_model()} | ISA: {runtime.get_isa()} | cores: {os.cpu_count()} | dprec threads: {threads} | "
        f"load average (1 min) at start: {load} | "
        f"numpy {np.__version__} | median of {args.repeat} measurements of >= {args.min_time * 1e3:g} ms, "
        "methods round-robin"
    )
    print()
    ok = True
    try:
        if "samplers" in sections:
            samplers_ok = bench_samplers(args, threads, t_start)
            print(f"sampler statistics: {'OK' if samplers_ok else 'FAIL'}")
            print()
            ok &= samplers_ok
        if "client" in sections:
            bench_client(args, t_start)
        if "server" in sections:
            server_ok = bench_server(args, t_start)
            print(f"server agreement (sums equal, decodes within {DECODE_TOL:g}): {'OK' if server_ok else 'FAIL'}")
            print()
            ok &= server_ok
        if "mse" in sections:
            bench_mse(args, t_start)
    finally:
        runtime.set_num_threads(before)
    load = f", load average (1 min) at end: {os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else ""
    print(f"total time {time.perf_counter() - t_start:.1f}s{load}")
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())
