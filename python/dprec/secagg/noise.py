"""Integer noise for distributed DP under secure aggregation: exact discrete
Gaussian and Skellam samplers.

Each client adds integer noise to its rounded, scaled vector before the modular reduction;
the sum over clients then carries the noise of the whole cohort (Kairouz, Liu and Steinke
2021; Chen, Choquette-Choo, Kairouz and Suresh 2022; Agarwal, Kairouz and Liu 2021). The
samples come from the client's private randomness: a 64-bit Philox seed drawn from the OS
entropy source, or from ``rng`` when one is given (tests, reproducible runs), never a seed
the server knows.

Randomness layout
-----------------
Element ``i`` of a call reads its own Philox4x32-10 stream: key = the private seed, counter
``(block, i mod 2**32, i >> 32, 5)`` (domain 5), blocks 0, 1, 2, ... in order, word 0 first.
The samplers read it as a sequence of bits (each word most significant bit first), each
primitive taking only the bits it needs (the exact rule is in *Randomness contract and wire
formats* in the docs), so element ``i`` depends only on ``(seed, i)``: the result is the same
for any thread count, and the native kernels and the pure-Python reference
(:mod:`dprec.reference.noise`) give the same samples bit for bit.

Both samplers run on the host: ``backend="auto"`` and ``"cpu"`` use the native module,
``"reference"`` the pure-Python reference (slow: about 0.1 ms per sample); ``"cuda"`` is
refused.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._runtime import arrays as _arrays
from .._runtime import dispatch as _dispatch
from .._runtime.validation import check_int, check_real, private_seed
from ..constants import MAX_DISCRETE_GAUSSIAN_SIGMA, MAX_NOISE_SAMPLES, MAX_SKELLAM_VARIANCE

__all__ = [
    "sample_discrete_gaussian",
    "sample_skellam",
    "MAX_DISCRETE_GAUSSIAN_SIGMA",
    "MAX_SKELLAM_VARIANCE",
    "MAX_NOISE_SAMPLES",
]


def _check_scale(value: Any, name: str, limit: float, limit_text: str) -> float:
    """A real number in (0, limit] as float; TypeError for bool and non-reals, ValueError else."""
    v = check_real(value, name)
    if not (math.isfinite(v) and 0.0 < v <= limit):
        raise ValueError(f"{name} must be finite, > 0 and <= {limit_text}, got {value!r}")
    return v


def _sample(op: str, n: Any, scale: float, rng: np.random.Generator | None, backend: Any) -> np.ndarray:
    count = check_int(n, "n", 0, MAX_NOISE_SAMPLES)
    kernels = _dispatch.select_host(backend, None, "out", "the discrete-noise sampler")
    seed = private_seed(rng)  # also rejects an rng that is not a numpy Generator
    out = _arrays.empty(None, (count,), "int64")
    getattr(kernels, op)(out, seed, scale)
    return out.host


def sample_discrete_gaussian(
    n: int, sigma: float, *, rng: np.random.Generator | None = None, backend: str = "auto"
) -> np.ndarray:
    """``n`` independent samples of the discrete Gaussian ``N_Z(0, sigma**2)``, exactly.

    ``P(X = x) = exp(-x**2 / (2 sigma**2)) / sum_y exp(-y**2 / (2 sigma**2))`` for integers
    ``x``. The sampler is Canonne, Kamath and Steinke's (2020, Algorithms 1-3): Bernoulli(exp(-
    gamma)) by alternating series, a discrete Laplace of scale ``t = floor(sigma) + 1``
    proposal, and rejection with probability ``exp(-(|Y| - sigma**2/t)**2 / (2 sigma**2))``,
    all in exact integer arithmetic (128 bits natively, Python ints in the reference); no
    floating point touches the randomness.

    Parameters
    ----------
    n : int
        Number of samples, ``0 <= n <= 2**40`` (0 gives an empty array).
    sigma : float
        Scale, ``0 < sigma <= MAX_DISCRETE_GAUSSIAN_SIGMA`` (``2**24``).
    rng : numpy.random.Generator, optional
        Source of the private 64-bit seed; by default the OS entropy source.
    backend : {"auto", "cpu", "reference"}
        "auto" and "cpu": the native multi-threaded kernel; "reference": pure Python (slow).
        "cuda" is refused (ValueError): the sampler runs on the host.

    Returns
    -------
    numpy.ndarray of int64, shape (n,)

    Notes
    -----
    Exactness. ``sigma**2`` (the exact square of the float64 ``sigma``) is represented
    exactly as ``N / 2**k`` with 40 significant bits on a grid of ``2**-56`` (``k = min(56,
    max(0, 40 - floor(log2 sigma**2)))``, ``N = ceil(sigma**2 2**k)``), rounded up so the
    noise is never smaller than asked: the sampled variance parameter exceeds ``sigma**2``
    by less than ``2**-40`` relatively (by at most ``2**-56`` for ``sigma < 2**-8``).
    Beyond that, two rules keep every integer within 128 bits: a proposal ``Y`` with
    ``|Y| t 2**k >= 2**63`` (hence ``|Y| >= 128`` and ``|Y| >= 2**14 sigma``) is rejected
    outright, and so is one whose exponent ``(|Y| - sigma**2/t)**2 / (2 sigma**2)`` is
    ``>= 2**64``. The output is then the exact
    discrete Gaussian conditioned on an event of probability above ``1 - exp(-2**27)``: its
    total-variation distance to the exact law is below ``exp(-2**27)``.

    Randomness: element ``i`` reads Philox stream ``(seed, i mod 2**32, i >> 32, domain 5)``
    (see *Randomness contract and wire formats* in the docs); results do not depend on the
    thread count.

    References
    ----------
    C. Canonne, G. Kamath, T. Steinke, "The Discrete Gaussian for Differential Privacy",
    NeurIPS 2020. P. Kairouz, Z. Liu, T. Steinke, "The Distributed Discrete Gaussian Mechanism
    for Federated Learning with Secure Aggregation", ICML 2021.
    """
    s = _check_scale(sigma, "sigma", MAX_DISCRETE_GAUSSIAN_SIGMA, "2**24")
    return _sample("discrete_gaussian", n, s, rng, backend)


def sample_skellam(
    n: int, mu: float, *, rng: np.random.Generator | None = None, backend: str = "auto"
) -> np.ndarray:
    """``n`` independent samples of the symmetric Skellam law of variance ``mu``.

    ``X = P1 - P2`` with ``P1, P2`` independent Poisson(``mu / 2``): the ``mu`` of
    :func:`dprec.accounting.skellam_rdp` (total variance in the integer domain). Element
    ``i`` draws ``P1`` then ``P2`` from its own stream. Poisson(``lam``): Knuth's
    multiplication method for ``lam < 10`` (multiply uniforms until the product is at most
    ``exp(-lam)``), Hoermann's PTRS (transformed rejection with squeeze, 1993; the method
    NumPy uses) for ``lam >= 10``.

    Parameters
    ----------
    n : int
        Number of samples, ``0 <= n <= 2**40``.
    mu : float
        Variance, ``0 < mu <= MAX_SKELLAM_VARIANCE`` (``2**48``).
    rng : numpy.random.Generator, optional
        Source of the private 64-bit seed; by default the OS entropy source.
    backend : {"auto", "cpu", "reference"}
        As for :func:`sample_discrete_gaussian`; "cuda" is refused.

    Returns
    -------
    numpy.ndarray of int64, shape (n,)

    Notes
    -----
    Exactness. PTRS is an exact rejection method, and Knuth's method is exact for exact
    uniforms; here the uniforms are ``((w0 >> 6) 2**26 + (w1 >> 6) + 1/2) 2**-52`` from two
    Philox words (52 bits, never 0 or 1) and the acceptance test is evaluated in float64
    with the project's own ``log`` (no libm, so the native kernels and the reference agree
    bit for bit), so the law is exact up to float64 rounding of that test. The test's right
    side ``-lam + k log lam - log k!`` is computed without cancellation (absolute error
    below ``1e-8`` up to ``lam = 2**47``, where the textbook form is off by about 1);
    proposals ``k >= 2**53`` (probability below ``exp(-2**52)``) are rejected.

    References
    ----------
    W. Hoermann, "The transformed rejection method for generating Poisson random variables",
    Insurance: Mathematics and Economics 12 (1993). N. Agarwal, P. Kairouz, Z. Liu, "The
    Skellam Mechanism for Differentially Private Federated Learning", NeurIPS 2021.
    D. Knuth, TAOCP vol. 2, 3.4.1.
    """
    m = _check_scale(mu, "mu", MAX_SKELLAM_VARIANCE, "2**48")
    return _sample("skellam", n, m, rng, backend)
