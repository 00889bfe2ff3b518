"""Randomized rounding to integers, plain and conditional (Kairouz, Liu and Steinke 2021).

The client of the distributed discrete Gaussian pipeline scales its (clipped, rotated) vector
to the integer grid and rounds every coordinate at random, up with probability equal to its
fractional part, so that the rounding is unbiased. *Conditional* randomized rounding repeats
the rounding until the rounded vector's L2 norm is at most a bound (Chen et al.'s Algorithm 6
after Kairouz et al. 2021), which bounds the sensitivity that the privacy accounting uses;
:func:`rounding_norm_bound` gives the bound.

The rounding rule (bit for bit the same on every backend; :mod:`dprec.reference.rounding`)
------------------------------------------------------------------------------------------
One private 64-bit seed per call (:func:`dprec._runtime.validation.private_seed`: the OS entropy
source, or ``rng`` when given); attempt ``k`` uses the Philox stream ``(seed, substream=k,
group, domain=4)`` (see *Randomness contract and wire formats* in the docs), whose words ``2j`` and ``2j+1`` form the 64-bit uniform
``u = (w[2j] << 32) | w[2j+1]`` of element ``j``. With ``a = |x_j|``, ``m = floor(a)`` and
``f = a - m`` (exact in float64), ``|out_j| = m + (u < floor(f * 2**64))`` and ``out_j`` has
``x_j``'s sign. Hence ``P(|out_j| = m + 1) = floor(f * 2**64) / 2**64``, which is exactly ``f``
whenever ``f`` is a multiple of ``2**-64`` (always when ``|x_j| >= 2**-11``) and otherwise
less than ``2**-64`` below ``f``: ``E[out_j] = x_j`` exactly, up to that ``2**-64`` for tiny
values. Integral values are returned unchanged. The magnitude is rounded rather than ``x_j``
because ``x_j - floor(x_j)`` is not exact for small negative ``x_j``; for every ``x`` the
two rules have the same distribution.

Rounding runs on the host (it is the client's step; the pipeline moves GPU data to the host
before it): GPU arrays are refused with a ValueError rather than copied behind the caller's
back.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from .._runtime import arrays as _arrays
from .._runtime import dispatch as _dispatch
from .._runtime.validation import check_finite, check_int, check_integer, check_u32, private_seed

__all__ = ["conditional_round", "randomized_round", "rounding_norm_bound", "MAX_ROUND_ELEMENTS"]

#: Most elements one rounding may have: two Philox words each, 2**34 words per stream.
MAX_ROUND_ELEMENTS = 1 << 33
# |x| must stay below this (2**62) so that the rounded values fit int64 with room to spare.
_MAX_MAGNITUDE = float(2**62)
# Attempts are Philox sub-streams (32 bits).
_MAX_ATTEMPTS = 1 << 32
# Below 2**53 the float64 sum of squares of integers is exact (see _within_bound).
_EXACT_SUM = float(2**53)
# Relative margin of the norm test when the float64 sum may be rounded. The kernels add in a
# fixed order whose depth is at most 2**12 + 2**19 + 3 for 2**33 elements, so the computed sum
# is within 1.2e-10 of the true one relative to it; 1e-9 covers that and the rounding of
# norm_bound**2, so a rounding accepted by the test always has ||out|| <= norm_bound.
_MARGIN = 1e-9


def rounding_norm_bound(norm: Any, dim: Any, beta: Any) -> float:
    """The L2 norm bound after conditional randomized rounding, on the integer grid.

    Chen et al., Algorithm 6 / Theorem E.1 (after Kairouz et al. 2021): a vector of L2 norm at
    most ``norm`` (already scaled to the integer grid, i.e. ``c / gamma``) in ``dim``
    dimensions, rounded with :func:`conditional_round`, has norm at most::

        min{ norm + sqrt(dim),
             sqrt(norm**2 + dim/4 + sqrt(2 log(1/beta)) (norm + sqrt(dim)/2)) }

    The first term holds for any rounding; the second is the bound that plain randomized
    rounding meets with probability at least ``1 - beta``, so conditioning on it costs few
    attempts. ``beta = 0`` leaves the first term only. In the units before scaling it is
    :func:`dprec.accounting.discrete.rounded_l2_sensitivity`:
    ``rounded_l2_sensitivity(c, d, gamma, beta) == gamma * rounding_norm_bound(c / gamma, d, beta)``
    (the same formula with ``gamma = 1``; it is written here again because dprec.accounting
    needs SciPy and rounding must not).

    Parameters
    ----------
    norm : float
        The L2 norm bound of the scaled vector, finite and ``>= 0``.
    dim : int
        The dimension, ``>= 1``.
    beta : float
        In ``[0, 1)``.

    Returns
    -------
    float
    """
    c = check_finite(norm, "norm")
    if c < 0.0:
        raise ValueError(f"norm must be finite and >= 0, got {norm!r}")
    d = check_integer(dim, "dim")
    if d < 1:
        raise ValueError(f"dim must be at least 1, got {d}")
    b = check_finite(beta, "beta")
    if not 0.0 <= b < 1.0:
        raise ValueError(f"beta must be in [0, 1), got {beta!r}")
    deterministic = c + math.sqrt(d)  # as a norm, not squared: no overflow for huge inputs
    if b == 0.0:
        return deterministic
    conditional = c * c + d / 4.0 + math.sqrt(2.0 * math.log(1.0 / b)) * (c + 0.5 * math.sqrt(d))
    return min(math.sqrt(conditional), deterministic)


def randomized_round(
    x: Any, *, rng: np.random.Generator | None = None, group: int = 0, backend: str = "auto"
) -> np.ndarray:
    """Round ``x`` to integers at random, unbiased: ``E[out] = x`` (see the module notes).

    Parameters
    ----------
    x : array_like
        Host floating-point values (NumPy, a PyTorch CPU tensor, anything ``numpy.asarray``
        takes), any shape, ``1 .. 2**33`` elements; float16, bfloat16 and float32 are
        converted to float64 (exactly). Integer arrays are refused (TypeError), and so are
        NaN, infinity and ``|x| >= 2**62`` (ValueError naming ``x``) and GPU arrays (ValueError:
        rounding runs on the host).
    rng : numpy.random.Generator, optional
        Where the private seed comes from (tests, reproducible runs); by default the OS
        entropy source. The seed is never returned: the rounding must stay private.
    group : int
        Philox group id (< 2**32), e.g. the tensor number, when one seed serves several calls.
    backend : {"auto", "cpu", "reference"}

    Returns
    -------
    numpy.ndarray of int64, the shape of ``x``
    """
    out, _ = _round(x, None, rng, 1, group, backend)
    return out


def conditional_round(
    x: Any,
    norm_bound: Any,
    *,
    rng: np.random.Generator | None = None,
    max_attempts: int = 10_000,
    group: int = 0,
    backend: str = "auto",
) -> tuple[np.ndarray, int]:
    """Conditional randomized rounding: round ``x`` at random until ``||out||_2 <= norm_bound``.

    Kairouz et al. 2021 (Chen et al.'s Algorithm 6, step "round"): attempt ``k = 0, 1, ...``
    rounds ``x`` with the uniforms of sub-stream ``k`` of one private seed, and the first
    attempt whose L2 norm is within ``norm_bound`` is returned. Each attempt is unbiased;
    the accepted one is not exactly (that is the price of the norm guarantee, which the
    privacy accounting relies on).

    The test is ``sum(out**2) <= norm_bound**2``. The sum is computed in float64 in a fixed
    order; below ``2**53`` it is an exact integer and is compared exactly with
    ``norm_bound**2``; above, it must be at most ``norm_bound**2 * (1 - 1e-9)``, a margin that
    exceeds the float64 rounding of the sum for every allowed size, so that an accepted
    rounding always satisfies the bound.

    Parameters
    ----------
    x : array_like
        As for :func:`randomized_round` (host, floating point, finite, ``|x| < 2**62``).
    norm_bound : float or None
        The L2 bound, finite and ``>= 0`` (e.g. :func:`rounding_norm_bound`); None rounds once
        without condition (plain randomized rounding).
    rng : numpy.random.Generator, optional
        Source of the private seed (default: the OS entropy source).
    max_attempts : int
        At most this many attempts (``1 .. 2**32``); RuntimeError naming it when none meets the
        bound. When even rounding every magnitude down exceeds the bound, no attempt can meet
        it, and the RuntimeError comes after the first attempt.
    group : int
        Philox group id (< 2**32).
    backend : {"auto", "cpu", "reference"}

    Returns
    -------
    (numpy.ndarray of int64 with ``x``'s shape, int)
        The rounded vector and the number of attempts used (1 for ``norm_bound=None``).
    """
    if norm_bound is not None:
        norm_bound = check_finite(norm_bound, "norm_bound")
        if not 0.0 <= norm_bound < math.inf:
            raise ValueError(f"norm_bound must be finite and >= 0 (or None), got {norm_bound!r}")
    attempts = check_int(max_attempts, "max_attempts", 1, _MAX_ATTEMPTS)
    return _round(x, norm_bound, rng, attempts, group, backend)


# ---- internals -----------------------------------------------------------------------------


def _host_input(x: Any, backend: Any) -> tuple[Any, _arrays.Array]:
    """The kernels and the float64 host copy (or view) of ``x``, validated."""
    a = _arrays.read(x, "x")
    kernels = _dispatch.select_host(backend, a, "x", "randomized rounding")
    src = _arrays.float_input(a, "x", max_size=MAX_ROUND_ELEMENTS)
    if src.dtype != "float64":
        src = _arrays.convert(src, "float64")  # float32 -> float64 is exact
    (biggest,) = kernels.max_abs([src])
    if not biggest < _MAX_MAGNITUDE:
        raise ValueError(f"x has a value of magnitude {biggest:.6g}, too large to round to int64 (|x| must be < 2**62)")
    return kernels, src


def _within_bound(sum_sq: float, bound: float) -> bool:
    """``sum_sq <= bound**2``, with ``sum_sq`` the float64 sum of squares of integers."""
    if sum_sq < _EXACT_SUM:
        # Every square and partial sum is an integer below 2**53 (the sum is nondecreasing
        # and rounding is monotonic), so sum_sq is exact: compare it exactly.
        return Fraction(int(sum_sq)) <= Fraction(bound) ** 2
    return sum_sq <= bound * bound * (1.0 - _MARGIN)


def _round(
    x: Any, norm_bound: float | None, rng: np.random.Generator | None, max_attempts: int, group: Any, backend: Any
) -> tuple[np.ndarray, int]:
    group = check_u32(group, "group")
    kernels, src = _host_input(x, backend)
    seed = private_seed(rng)  # after validation: a refused call draws nothing from rng
    out = _arrays.empty(src, src.shape, "int64")
    for attempt in range(max_attempts):
        sum_sq = kernels.conditional_round(src, seed, attempt, group, out)
        if norm_bound is None or _within_bound(sum_sq, norm_bound):
            return out.result(), attempt + 1
        if attempt == 0:
            _check_reachable(src, norm_bound, max_attempts)
    raise RuntimeError(
        f"conditional rounding met norm_bound={norm_bound!r} in none of max_attempts={max_attempts} attempts "
        f"(||x|| = {math.sqrt(sum(kernels.norm_stats([src], 1.0)[0])):.6g}); raise norm_bound (e.g. with "
        "rounding_norm_bound) or max_attempts"
    )


def _check_reachable(src: _arrays.Array, norm_bound: float, max_attempts: int) -> None:
    """RuntimeError at once when no attempt can meet the bound: every rounding has
    ``|out_j| >= floor(|x_j|)``, so ``sum floor(|x_j|)**2 > norm_bound**2`` rules all out."""
    down = np.floor(np.abs(src.host.reshape(-1)))
    lower = float(np.dot(down, down))
    # Below 2**53 the sum of integer squares is exact in any order (as in _within_bound); above,
    # a margin of 1e-4 exceeds the float64 error of any summation order of at most 2**33 terms.
    if lower < _EXACT_SUM:
        unreachable = Fraction(int(lower)) > Fraction(norm_bound) ** 2
    else:
        unreachable = lower > norm_bound * norm_bound * (1.0 + 1e-4)
    if unreachable:
        raise RuntimeError(
            f"conditional rounding cannot meet norm_bound={norm_bound!r}: even rounding every |x_j| down gives a "
            f"norm of {math.sqrt(lower):.6g}, so none of max_attempts={max_attempts} attempts would; raise "
            "norm_bound (e.g. with rounding_norm_bound) or clip x"
        )
