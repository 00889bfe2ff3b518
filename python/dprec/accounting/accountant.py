"""An RDP accountant that composes heterogeneous privacy events, DP-REC steps included.

The interface follows dp_accounting's ``RdpAccountant`` (``compose(event, count)``,
``get_epsilon(delta)``, ``get_delta(epsilon)``) and Opacus' ``RDPAccountant``
(``step(noise_multiplier=..., sample_rate=...)``, ``get_epsilon(delta)``)::

    acc = Accountant()
    acc.compose(SampledGaussianEvent(sampling_rate=0.01, noise_multiplier=1.1), count=1000)
    acc.compose(DPRECEvent(clip_multiplier=0.5, sampling_rate=1 / 100, bits=None), count=10_000)
    eps = acc.get_epsilon(1e-5)

How composition works
---------------------
Every event gives, per occurrence, a curve ``r(a)`` over the accountant's orders and an amount of
delta it spends unconditionally (``overhead_delta``). Curves add over events (RDP composition,
Mironov 2017, Proposition 1; for DP-REC the moments-accountant composition of Theorem 1, which is
the same sum of log-moment bounds); overheads add too (a union bound over the failure events).
Then ``eps(delta) = conversion(orders, sum r, delta - sum overhead)`` and
``delta(eps) = conversion^-1(orders, sum r, eps) + sum overhead``.

DP-REC steps (final paper, Theorem 1 and Algorithm 7) enter with ``r(a) = D_a(mix || p) +
D_a(p || mix)`` (``k + m`` of Algorithm 7 at ``a = lambda + 1``; the reverse term exact or bounded
by the forward one) and ``overhead_delta = 12 exp(c^2) / 2^b`` per step. Two consequences:

* Theorem 1 is a moments-accountant tail bound, ``delta <= exp(lambda (sum r - eps))``, which is
  Mironov's conversion at order ``lambda + 1``; the tighter Balle et al. conversion rests on the
  hypothesis-testing meaning of a true RDP guarantee, which the DP-REC bound is not shown to be.
  An accountant holding DP-REC events therefore converts with ``method="mironov"`` (``"auto"``
  chooses it) and refuses ``"balle"``.
* Eq. (62) is a binomial expectation over integer orders; DP-REC events report ``inf`` at
  fractional orders, so those orders drop out of the minimum once a DP-REC event is composed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from ._checks import (
    check_bits,
    check_count,
    check_delta,
    check_epsilon,
    check_nonnegative,
    check_orders,
    check_positive,
    check_probability,
)
from .dprec_rec import REVERSE_METHODS, dprec_forward_rdp, dprec_overhead, dprec_reverse_rdp
from .rdp import CONVERSION_METHODS, DEFAULT_ORDERS, rdp_to_delta, rdp_to_epsilon, sampled_gaussian_rdp

__all__ = [
    "Accountant",
    "DDGEvent",
    "DPRECEvent",
    "GaussianEvent",
    "PrivacyEvent",
    "QMGeoEvent",
    "RdpEvent",
    "SampledGaussianEvent",
    "SkellamEvent",
]


class PrivacyEvent:
    """Base class: one occurrence of a mechanism, described by its RDP curve.

    Subclasses implement :meth:`rdp`. ``overhead_delta`` is delta spent whatever epsilon is
    (0 for pure RDP mechanisms); ``rdp_conversion_ok`` says whether the curve is a genuine RDP
    guarantee (so that the Balle et al. conversion applies).
    """

    overhead_delta: float = 0.0
    rdp_conversion_ok: bool = True

    def rdp(self, orders: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        """RDP of one occurrence at each order (float64 array, same length, values >= 0 or inf)."""
        raise NotImplementedError


@dataclass(frozen=True)
class GaussianEvent(PrivacyEvent):
    """The Gaussian mechanism with ``noise_multiplier`` = noise std / L2 sensitivity.

    RDP ``a / (2 s^2)`` (Mironov 2017, Proposition 7).
    """

    noise_multiplier: float

    def __post_init__(self) -> None:
        check_nonnegative(self.noise_multiplier, "noise_multiplier", allow_inf=True)

    def rdp(self, orders: np.ndarray) -> np.ndarray:
        s = float(self.noise_multiplier)
        if s == 0.0:
            return np.full(orders.shape, np.inf)
        return orders / (2.0 * s * s)


@dataclass(frozen=True)
class SampledGaussianEvent(PrivacyEvent):
    """The Poisson-sampled Gaussian mechanism (Mironov, Talwar and Zhang 2019, Sec. 3.3).

    Same as dp_accounting's ``PoissonSampledDpEvent(q, GaussianDpEvent(s))`` and one Opacus
    ``RDPAccountant.step``.
    """

    sampling_rate: float
    noise_multiplier: float

    def __post_init__(self) -> None:
        check_probability(self.sampling_rate, "sampling_rate")
        check_nonnegative(self.noise_multiplier, "noise_multiplier", allow_inf=True)

    def rdp(self, orders: np.ndarray) -> np.ndarray:
        return sampled_gaussian_rdp(self.sampling_rate, self.noise_multiplier, orders)


@dataclass(frozen=True)
class RdpEvent(PrivacyEvent):
    """Any mechanism given by a callable ``orders -> RDP values`` (one occurrence).

    Use it for mechanisms with their own RDP formulas, e.g. the discrete Gaussian, Skellam or
    QMGeo curves of :mod:`dprec.accounting`. The callable must return one value >= 0 (or inf)
    per order.
    """

    rdp_fn: Callable[[np.ndarray], Any]
    name: str = "rdp"

    def __post_init__(self) -> None:
        if not callable(self.rdp_fn):
            raise TypeError(f"rdp_fn must be callable, got {type(self.rdp_fn).__name__}")

    def rdp(self, orders: np.ndarray) -> np.ndarray:
        values = np.asarray(self.rdp_fn(orders), dtype=np.float64)
        if values.shape != orders.shape:
            values = np.broadcast_to(values, orders.shape).copy()
        if np.any(np.isnan(values)) or np.any(values < 0.0):
            raise ValueError(f"rdp_fn of event {self.name!r} returned NaN or negative RDP values")
        return values


@dataclass(frozen=True)
class DPRECEvent(PrivacyEvent):
    """One DP-REC step: one client message, sampled with probability ``sampling_rate`` (1/N).

    A round with B clients sampled with replacement is ``count=B`` of these (Algorithm 7 loops
    over ``T * B`` steps). The curve is ``D_a(mix || p) + D_a(p || mix)`` at integer orders (eq. (62)
    and the reverse term, exact or bounded by the forward), ``inf`` at fractional orders; the
    overhead is ``12 exp(c^2) / 2^b`` per step, or 0 when ``bits`` is None (the overhead omitted,
    as in the paper's reported numbers). ``sampling_rate=1`` gives the local guarantee.
    """

    clip_multiplier: float
    sampling_rate: float
    bits: Optional[int]
    reverse: str = "bound"
    rdp_conversion_ok: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        check_positive(self.clip_multiplier, "clip_multiplier")
        check_probability(self.sampling_rate, "sampling_rate")
        if self.bits is not None:
            check_bits(self.bits)
        if self.reverse not in REVERSE_METHODS:
            raise ValueError(f"reverse must be one of {REVERSE_METHODS}, got {self.reverse!r}")
        if self.reverse == "exact":
            # Checked now rather than at compose time (the exact reverse term has a limit on c).
            dprec_reverse_rdp(self.clip_multiplier, self.sampling_rate, [2.0], reverse="exact")

    @property
    def overhead_delta(self) -> float:  # type: ignore[override]
        if self.bits is None:
            return 0.0
        return dprec_overhead(1, self.clip_multiplier, self.bits)

    def rdp(self, orders: np.ndarray) -> np.ndarray:
        out = np.full(orders.shape, np.inf)
        integer = (orders == np.floor(orders)) & (orders >= 2.0)
        if np.any(integer):
            a = orders[integer]
            forward = dprec_forward_rdp(self.clip_multiplier, self.sampling_rate, a)
            if self.reverse == "bound":
                out[integer] = 2.0 * forward
            else:
                out[integer] = forward + dprec_reverse_rdp(self.clip_multiplier, self.sampling_rate, a, reverse="exact")
        return out


class Accountant:
    """Composes privacy events over rounds and reports eps(delta) and delta(eps).

    Parameters
    ----------
    orders : sequence of float, optional
        Renyi orders (> 1). Default: :data:`dprec.accounting.DEFAULT_ORDERS` (fractional orders
        near 1, every integer to 63, a sparse tail to 1024).

    Methods mirror dp_accounting (``compose``, ``get_epsilon``, ``get_delta``,
    ``get_epsilon_and_optimal_order``) and Opacus (``step``, ``get_epsilon``,
    ``get_privacy_spent``). See the module docstring for how DP-REC's overhead and reverse term
    are composed.
    """

    def __init__(self, orders: Any = None) -> None:
        self._orders = check_orders(DEFAULT_ORDERS if orders is None else orders).copy()
        self._orders.setflags(write=False)
        self._rdp = np.zeros(self._orders.shape)
        self._overhead = 0.0
        self._rdp_conversion_ok = True
        self._history: list[tuple[PrivacyEvent, int]] = []

    # -- composition ------------------------------------------------------------------------
    def compose(self, event: PrivacyEvent, count: int = 1) -> "Accountant":
        """Add ``count`` occurrences of ``event``; returns ``self`` so calls can be chained.

        ``event`` must be a concrete :class:`PrivacyEvent` (one that implements ``rdp``): the
        abstract base class itself raises TypeError naming ``event``.
        """
        if not isinstance(event, PrivacyEvent):
            raise TypeError(f"event must be a PrivacyEvent, got {type(event).__name__}")
        if type(event).rdp is PrivacyEvent.rdp or (
            isinstance(event, _KeywordRdpEvent) and type(event)._fn is _KeywordRdpEvent._fn
        ):
            raise TypeError(
                f"event must be a concrete privacy event (e.g. GaussianEvent, SampledGaussianEvent, DPRECEvent, "
                f"RdpEvent) that implements rdp(), got the abstract {type(event).__name__}"
            )
        count = check_count(count, "count", minimum=0)
        if count == 0:
            return self
        per_step = np.asarray(event.rdp(self._orders), dtype=np.float64)
        if per_step.shape != self._orders.shape or np.any(np.isnan(per_step)) or np.any(per_step < 0.0):
            raise ValueError(f"event {event!r} returned an invalid RDP curve")
        with np.errstate(invalid="ignore"):
            self._rdp = self._rdp + count * per_step
        self._overhead += count * float(event.overhead_delta)
        self._rdp_conversion_ok = self._rdp_conversion_ok and bool(event.rdp_conversion_ok)
        self._history.append((event, count))
        return self

    def step(self, *, noise_multiplier: float, sample_rate: float) -> "Accountant":
        """One step of the sampled Gaussian mechanism (Opacus' ``RDPAccountant.step``)."""
        return self.compose(SampledGaussianEvent(sampling_rate=sample_rate, noise_multiplier=noise_multiplier))

    # -- state ------------------------------------------------------------------------------
    @property
    def orders(self) -> np.ndarray:
        """The Renyi orders (read-only)."""
        return self._orders

    @property
    def rdp(self) -> np.ndarray:
        """The composed curve (for DP-REC events: k + m of Algorithm 7), a copy."""
        return self._rdp.copy()

    @property
    def overhead_delta(self) -> float:
        """Delta spent unconditionally (DP-REC's ``12 rho / 2^b`` summed over steps)."""
        return self._overhead

    @property
    def history(self) -> list[tuple[PrivacyEvent, int]]:
        """The composed ``(event, count)`` pairs, in order."""
        return list(self._history)

    def __repr__(self) -> str:
        return f"Accountant(orders={self._orders.size} orders, events={len(self._history)}, overhead_delta={self._overhead:.3g})"

    # -- conversion -------------------------------------------------------------------------
    def _method(self, method: str) -> str:
        if method == "auto":
            return "balle" if self._rdp_conversion_ok else "mironov"
        if method not in CONVERSION_METHODS:
            raise ValueError(f"method must be 'auto' or one of {CONVERSION_METHODS}, got {method!r}")
        if method == "balle" and not self._rdp_conversion_ok:
            raise ValueError(
                "method='balle' is not valid once DP-REC events are composed: Theorem 1 of the DP-REC "
                "paper is a moments-accountant bound (Mironov's conversion); use method='mironov' or 'auto'"
            )
        return method

    def get_epsilon_and_optimal_order(self, delta: float, *, method: str = "auto") -> tuple[float, float]:
        """``(eps, order)`` such that everything composed so far is (eps, delta)-DP.

        ``method``: ``"auto"`` (Balle et al. unless a DP-REC event is present, then Mironov),
        ``"mironov"`` or ``"balle"``. The DP-REC overhead is taken out of ``delta`` first; a
        ``ValueError`` says so when ``delta`` does not exceed it.
        """
        delta = check_delta(delta)
        method = self._method(method)
        if self._overhead >= delta:
            raise ValueError(
                f"delta={delta:.6g} must exceed the composed DP-REC overhead 12*rho/2^b = {self._overhead:.6g}"
            )
        if not self._history:
            return 0.0, float(self._orders[0])
        return rdp_to_epsilon(self._orders, self._rdp, delta - self._overhead, method=method)

    def get_epsilon(self, delta: float, *, method: str = "auto") -> float:
        """Epsilon at ``delta`` (see :meth:`get_epsilon_and_optimal_order`)."""
        return self.get_epsilon_and_optimal_order(delta, method=method)[0]

    def get_delta_and_optimal_order(self, epsilon: float, *, method: str = "auto") -> tuple[float, float]:
        """``(delta, order)``: the conversion's delta plus the DP-REC overhead, capped at 1."""
        epsilon = check_epsilon(epsilon)
        method = self._method(method)
        if not self._history:
            return 0.0, float(self._orders[0])
        delta, order = rdp_to_delta(self._orders, self._rdp, epsilon, method=method)
        return min(1.0, delta + self._overhead), order

    def get_delta(self, epsilon: float, *, method: str = "auto") -> float:
        """Delta at ``epsilon`` (see :meth:`get_delta_and_optimal_order`)."""
        return self.get_delta_and_optimal_order(epsilon, method=method)[0]

    def get_privacy_spent(self, *, delta: float, method: str = "auto") -> tuple[float, float]:
        """``(eps, order)`` at ``delta``, named as Opacus' ``RDPAccountant.get_privacy_spent``."""
        return self.get_epsilon_and_optimal_order(delta, method=method)


@dataclass(frozen=True, init=False)
class _KeywordRdpEvent(PrivacyEvent):
    """An event whose curve is ``fn(orders, **params)`` from another accounting module.

    Built from keyword arguments, ``DDGEvent(l2_sensitivity=1.0, noise_stddev=5.0, ...)`` (like
    dp_accounting's events), or from a dict of them, ``DDGEvent(params)``. The parameters are
    copied and validated at once.
    """

    params: dict

    def __init__(self, params: Optional[dict] = None, **kwargs: Any) -> None:
        if params is None:
            merged: dict = {}
        elif isinstance(params, dict):
            merged = dict(params)
        else:
            raise TypeError(f"params must be a dict of keyword arguments, got {type(params).__name__}")
        both = sorted(set(merged) & set(kwargs))
        if both:
            raise TypeError(f"params and keyword arguments both give {both}")
        merged.update(kwargs)
        object.__setattr__(self, "params", merged)
        # Validate now (the RDP function names any bad parameter), not at compose time.
        self._fn()(np.array([2.0]), **merged)

    def _fn(self) -> Callable[..., Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def rdp(self, orders: np.ndarray) -> np.ndarray:
        return np.asarray(self._fn()(orders, **self.params), dtype=np.float64)


class DDGEvent(_KeywordRdpEvent):
    """One round of the distributed discrete Gaussian: ``DDGEvent(l2_sensitivity=..., ...)``.

    The keyword arguments (or a dict of them) are those of :func:`dprec.accounting.discrete.ddg_rdp`
    (Kairouz et al. 2021, Theorem 1 / Chen et al., Theorem E.1).
    """

    def _fn(self) -> Callable[..., Any]:
        from .discrete import ddg_rdp

        return ddg_rdp


class SkellamEvent(_KeywordRdpEvent):
    """One round of the Skellam mechanism (Agarwal et al. 2021): ``SkellamEvent(l2_sensitivity=..., ...)``.

    The keyword arguments (or a dict of them) are those of :func:`dprec.accounting.discrete.skellam_rdp`.
    """

    def _fn(self) -> Callable[..., Any]:
        from .discrete import skellam_rdp

        return skellam_rdp


class QMGeoEvent(_KeywordRdpEvent):
    """One round of QMGeo (Wang and Gursoy; exact divergence of the corrected pmf).

    ``QMGeoEvent(levels=8, p=0.9, inputs=..., ...)``: the keyword arguments (or a dict of them)
    are those of :func:`dprec.accounting.qmgeo.qmgeo_rdp`.
    """

    def _fn(self) -> Callable[..., Any]:
        from .qmgeo import qmgeo_rdp

        return qmgeo_rdp
