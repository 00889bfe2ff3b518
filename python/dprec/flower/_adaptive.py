"""Adaptive clipping (Andrew et al. 2021) for the DP-REC strategies: the clip norm follows a private quantile
of the clients' update norms."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["AdaptiveClipping", "bit_lattice", "noisy_bit"]

#: How many noise standard deviations beyond [0, 1] the server keeps of a client's noisy bit: an honest bit
#: lies outside with probability below 1e-23; a larger claim would steer the clip norm more.
BIT_CLAMP_STDS = 10.0
#: The lattice of the noisy bit: ``M = 2^16`` steps per unit (fewer for ``s > 256``, so that the discrete
#: Gaussian's scale ``s M`` stays within the exact sampler's ``2^24``).
BIT_LATTICE = 2**16
#: The largest ``quantile_noise`` (the sampler's limit at ``M = 1``).
MAX_QUANTILE_NOISE = float(2**24)


def bit_lattice(noise: float) -> int:
    """``M``: the lattice steps per unit of the noisy bit at noise ``s``, the largest power of two up to
    :data:`BIT_LATTICE` with ``s M <= 2^24``."""
    if not 0.0 < noise <= MAX_QUANTILE_NOISE:
        raise ValueError(f"quantile_noise must be in (0, 2**24], got {noise!r}")
    m = BIT_LATTICE
    while m > 1 and noise * m > MAX_QUANTILE_NOISE:
        m //= 2
    return m


def noisy_bit(unclipped: bool, noise: float) -> int:
    """A client's noisy quantile bit: the integer ``b M + Z``, ``Z`` the exact discrete Gaussian of scale ``s M``.

    An integer, not the float ``b + N(0, s^2)``: a floating-point sum of 1 and a Gaussian lies on the coarser
    grid of the Gaussian's binade, which tells the bit apart from 0 (Mironov 2012; about 20% of the bits at
    ``s = 2``). The discrete Gaussian (Canonne, Kamath and Steinke 2020, exact in integer arithmetic, its seed
    from the OS entropy source) diverges between the shifts ``0`` and ``M`` by at most the continuous Gaussian's
    ``a / (2 s^2)`` at order ``a``, which the accounting takes.
    """
    from ..secagg.noise import sample_discrete_gaussian  # noqa: PLC0415 - the secagg package loads lazily

    m = bit_lattice(noise)
    return int(unclipped) * m + int(sample_discrete_gaussian(1, noise * m)[0])


def _positive(value: Any, name: str, *, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"AdaptiveClipping: {name} must be a float, got {type(value).__name__}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"AdaptiveClipping: {name} must be finite and > 0, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class AdaptiveClipping:
    """The clip norm of :class:`~dprec.flower.DPRECStrategy` set each round from the clients' update norms.

    Andrew, Thakkar, McMahan and Ramaswamy (2021), *Differentially private learning with adaptive clipping*,
    as in Flower's and TensorFlow Federated's adaptive-clipping wrappers, with the noise added by each client:
    with every DP-REC message, a client sends ``1[||update|| <= C_t]`` plus discrete Gaussian noise of scale
    ``s``, as an integer on a lattice of ``M`` steps per unit (:func:`noisy_bit`; the noise from its OS entropy
    source); the server averages the bits of the messages it aggregates (each divided by ``M`` and clamped to
    ``[-10 s, 1 + 10 s]``), clamps the average to ``b`` in ``[0, 1]`` and sets
    ``C_{t+1} = C_t exp(-learning_rate (b - target_quantile))``: one round moves the clip norm by at most a
    factor ``exp(learning_rate max(gamma, 1 - gamma))``, whatever the clients claim.
    The codec's clip multiplier ``c = C / sigma`` stays fixed, so ``sigma_t = C_t / c`` follows the clip norm
    and REC's own privacy cost per message is unchanged; the bits cost more (accounted: the strategy's
    accountant gets ``quantile_noise=s``; see the privacy page, section 4.10).

    Parameters
    ----------
    initial_clip_norm : float, optional
        ``C_1``; default: the codec's clip norm (``clip_multiplier * sigma``).
    target_quantile : float
        ``gamma`` in (0, 1): the fraction of clients whose updates should not be clipped (0.5: the median).
    learning_rate : float
        ``eta > 0``: the clip norm moves by at most a factor ``exp(eta max(gamma, 1 - gamma))`` per round
        without noise (0.2, the paper's default: about 10% a round at the median).
    quantile_noise : float, optional
        ``s > 0``, the standard deviation of each client's noise on its bit; default ``2 / c``, which adds a
        quarter of the Gaussian's ``c^2`` to each message's divergence (``c_eff^2 = c^2 + 1/s^2``). The noisy
        fraction has standard deviation about ``s / sqrt(m)`` over ``m`` messages: few clients per round need
        a smaller learning rate, or a smaller ``s`` (more privacy spent).
    """

    initial_clip_norm: float | None = None
    target_quantile: float = 0.5
    learning_rate: float = 0.2
    quantile_noise: float | None = None

    def __post_init__(self) -> None:
        _positive(self.initial_clip_norm, "initial_clip_norm", allow_none=True)
        _positive(self.learning_rate, "learning_rate")
        _positive(self.quantile_noise, "quantile_noise", allow_none=True)
        if self.quantile_noise is not None and self.quantile_noise > MAX_QUANTILE_NOISE:
            raise ValueError(f"AdaptiveClipping: quantile_noise must be <= 2**24, got {self.quantile_noise!r}")
        q = self.target_quantile
        if isinstance(q, bool) or not isinstance(q, (int, float)):
            raise TypeError(f"AdaptiveClipping: target_quantile must be a float, got {type(q).__name__}")
        if not 0.0 < q < 1.0:
            raise ValueError(f"AdaptiveClipping: target_quantile must be in (0, 1), got {q!r}")

    def noise_for(self, clip_multiplier: float) -> float:
        """``s``: ``quantile_noise``, or ``2 / clip_multiplier`` by default."""
        return float(self.quantile_noise) if self.quantile_noise is not None else 2.0 / float(clip_multiplier)

    def next_clip_norm(self, clip_norm: float, unclipped_fraction: float) -> float:
        """``C exp(-learning_rate (b - target_quantile))``, ``b`` the fraction clamped to ``[0, 1]``."""
        b = min(max(unclipped_fraction, 0.0), 1.0)
        return clip_norm * math.exp(-self.learning_rate * (b - self.target_quantile))

    @staticmethod
    def bit_value(value: int, noise: float) -> float:
        """A client's noisy bit ``Y`` in bit units, ``Y / M``, clamped to ``[-10 s, 1 + 10 s]``."""
        return min(max(value / bit_lattice(noise), -BIT_CLAMP_STDS * noise), 1.0 + BIT_CLAMP_STDS * noise)
