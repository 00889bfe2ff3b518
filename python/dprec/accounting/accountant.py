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

DP-REC steps (:class:`DPRECEvent`) enter according to their ``method``:

* ``method="sound"`` (the default), in ``Accountant(threat_model=...)``: the per-step forward and
  reverse curves of ``dprec_step_rdp``, converted like any RDP curve (Balle et al. allowed), both
  tails at half the delta left. No unconditional overhead, except that a ``"central"`` accountant
  pays REC's total-variation cost per step (``rec_total_variation_per_step``) as
  ``(1 + e^eps) eta`` of delta and refuses (ValueError naming ``bits``) when ``2 eta >= delta``.
* ``method="paper"``, only in ``Accountant(threat_model=None)`` (``inf`` with the caveat under a
  threat model): Theorem 1 and Algorithm 7 as printed, ``r(a) = D_a(mix || p) + D_a(p || mix)``
  with ``overhead_delta = 12 exp(c^2) / 2^b`` per step. Theorem 1 is a moments-accountant tail
  bound (Mironov's conversion at order ``lambda + 1``), so these events force ``"mironov"``
  (``"auto"`` chooses it) and refuse ``"balle"``.

In both cases DP-REC curves are ``inf`` at fractional orders (eq. (62) is a binomial expectation
over integer orders), so those orders drop out of the minimum once a DP-REC event is composed.
"""

from __future__ import annotations

import math
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
from .dprec_rec import (
    DPREC_METHODS,
    PAPER_CAVEAT,
    REVERSE_METHODS,
    SAMPLING_SCHEMES,
    _central_rec_epsilon,
    _rec_candidates,
    _rec_tv_cost,
    _sound_curves,
    dprec_forward_rdp,
    dprec_overhead,
    dprec_reverse_rdp,
    rec_total_variation,
)
from .guarantee import (
    NOISE_SHARE_REASON,
    RELATIONS,
    THREAT_MODELS,
    PrivacyGuarantee,
    check_relation,
    check_threat_model,
)
from .rdp import CONVERSION_METHODS, DEFAULT_ORDERS, rdp_to_delta, rdp_to_epsilon, sampled_gaussian_rdp

__all__ = [
    "NOISE_PLACEMENTS",
    "Accountant",
    "DDGEvent",
    "DPRECEvent",
    "GaussianEvent",
    "PrivacyEvent",
    "QMGeoEvent",
    "RdpEvent",
    "SampledGaussianEvent",
    "SkellamEvent",
    "SecAggRoundEvent",
]


class PrivacyEvent:
    """Base class: one occurrence of a mechanism, described by its RDP curve.

    Subclasses implement :meth:`rdp`. ``overhead_delta`` is delta spent whatever epsilon is
    (0 for pure RDP mechanisms); ``rdp_conversion_ok`` says whether the curve is a genuine RDP
    guarantee (so that the Balle et al. conversion applies).
    """

    overhead_delta: float = 0.0
    rdp_conversion_ok: bool = True
    #: Whether the accountant converts with both tails at ``(delta - overhead) / 2`` once this event
    #: is composed (DP-REC's sound accounting, eq. (20) fixed).
    two_tailed: bool = False

    def rdp(self, orders: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        """RDP of one occurrence at each order (float64 array, same length, values >= 0 or inf)."""
        raise NotImplementedError

    def holds_for(self) -> tuple:
        """The threat models under which :meth:`rdp` is a guarantee (default: all three)."""
        return THREAT_MODELS

    def no_guarantee_reason(self, threat_model: str, relation: str) -> str:
        """Why there is no guarantee for this event under ``threat_model`` / ``relation``."""
        return f"{type(self).__name__} has no RDP guarantee against the {threat_model!r} observer"

    def curves(self, orders: np.ndarray, threat_model: str, relation: str) -> "tuple[np.ndarray, np.ndarray] | str":
        """Per-occurrence ``(forward, reverse)`` curves under ``threat_model`` / ``relation``, or the
        reason no bound is proved. Default: :meth:`rdp` in both directions where :meth:`holds_for`
        lists the threat model (the same curve for both relations)."""
        if threat_model not in self.holds_for():
            return self.no_guarantee_reason(threat_model, relation)
        curve = np.asarray(self.rdp(orders), dtype=np.float64)
        return curve, curve


#: Who adds the Gaussian noise of :class:`GaussianEvent` / :class:`SampledGaussianEvent`.
NOISE_PLACEMENTS = ("server", "clients")

_SERVER_NOISE_REASON = (
    "the noise is added by the server after aggregation (DP-FedAvg): clients send unnoised updates, and even "
    "with secure aggregation the server holds the unnoised sum; only the 'central' observer of the released "
    "models is protected (noise='clients' is joint noise through secure aggregation)"
)


def _check_noise(noise: Any) -> str:
    if not isinstance(noise, str) or noise not in NOISE_PLACEMENTS:
        raise ValueError(f"noise must be one of {NOISE_PLACEMENTS}, got {noise!r}")
    return noise


class _GaussianThreats:
    """Threat models of a Gaussian event: ``noise="server"`` (DP-FedAvg) -> "central" only;
    ``noise="clients"`` (each client adds a share, secure aggregation reveals only the noisy sum;
    ``noise_multiplier`` is that of the summed noise) -> all three."""

    noise: str

    def holds_for(self) -> tuple:
        return ("central",) if self.noise == "server" else THREAT_MODELS

    def no_guarantee_reason(self, threat_model: str, relation: str) -> str:
        return _SERVER_NOISE_REASON

    def curves(self, orders: np.ndarray, threat_model: str, relation: str) -> "tuple[np.ndarray, np.ndarray] | str":
        if self.noise == "clients" and relation == "add_remove":
            return NOISE_SHARE_REASON
        return PrivacyEvent.curves(self, orders, threat_model, relation)  # type: ignore[arg-type]


@dataclass(frozen=True)
class GaussianEvent(_GaussianThreats, PrivacyEvent):
    """The Gaussian mechanism with ``noise_multiplier`` = noise std / L2 sensitivity.

    RDP ``a / (2 s^2)`` (Mironov 2017, Proposition 7), for both relations (one client's clipped
    update added/removed or replaced by zero moves the sum by at most the sensitivity).
    ``noise="server"`` (default; the server adds the noise to the sum): a guarantee for the
    ``"central"`` threat model only. ``noise="clients"``: the noise is the sum of the clients'
    shares and only the noisy sum is seen (secure aggregation): all three threat models.
    """

    noise_multiplier: float
    noise: str = "server"

    def __post_init__(self) -> None:
        check_nonnegative(self.noise_multiplier, "noise_multiplier", allow_inf=True)
        _check_noise(self.noise)

    def rdp(self, orders: np.ndarray) -> np.ndarray:
        s = float(self.noise_multiplier)
        if s == 0.0:
            return np.full(orders.shape, np.inf)
        return orders / (2.0 * s * s)


@dataclass(frozen=True)
class SampledGaussianEvent(_GaussianThreats, PrivacyEvent):
    """The Poisson-sampled Gaussian mechanism (Mironov, Talwar and Zhang 2019, Sec. 3.3).

    Same as dp_accounting's ``PoissonSampledDpEvent(q, GaussianDpEvent(s))`` and one Opacus
    ``RDPAccountant.step``. Both relations give the same curve (zero-out: ``(1-q) N(S) +
    q N(S + phi)`` against ``N(S)``). ``noise`` as in :class:`GaussianEvent`: ``"server"``
    (default, DP-FedAvg) holds for ``"central"`` only, ``"clients"`` (joint noise through secure
    aggregation) for all three threat models.
    """

    sampling_rate: float
    noise_multiplier: float
    noise: str = "server"

    def __post_init__(self) -> None:
        check_probability(self.sampling_rate, "sampling_rate")
        check_nonnegative(self.noise_multiplier, "noise_multiplier", allow_inf=True)
        _check_noise(self.noise)

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
    #: The threat models for which the caller declares the curve a guarantee (default: only the
    #: ``"central"`` observer of the released output); one curve for both relations.
    threat_models: tuple = ("central",)

    def __post_init__(self) -> None:
        if not callable(self.rdp_fn):
            raise TypeError(f"rdp_fn must be callable, got {type(self.rdp_fn).__name__}")
        if isinstance(self.threat_models, str) or not isinstance(self.threat_models, (tuple, list, frozenset, set)):
            raise TypeError(f"threat_models must be a tuple of threat models from {THREAT_MODELS}")
        for tm in self.threat_models:
            check_threat_model(tm, "threat_models")
        object.__setattr__(self, "threat_models", tuple(self.threat_models))

    def holds_for(self) -> tuple:
        return self.threat_models

    def no_guarantee_reason(self, threat_model: str, relation: str) -> str:
        return f"RdpEvent {self.name!r} is declared for threat_models={self.threat_models}, not {threat_model!r}"

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

    With ``method="sound"`` (composed into an ``Accountant(threat_model=...)``) the curves are
    :func:`dprec.accounting.dprec_step_rdp`'s: ``bits=None`` the Gaussian variant; with ``bits``
    (the TOTAL bits of one message, ``groups`` times the smallest group's bits; ``groups=None``
    takes the worst split, every bit its own group) the server and message observers' curves bound
    REC's messages as sent, and a central observer pays REC's
    total-variation cost (:meth:`rec_total_variation_per_step`).
    """

    clip_multiplier: float
    sampling_rate: float
    bits: Optional[int]
    reverse: str = "bound"
    method: str = "sound"
    sampling: str = "with_replacement"
    num_clients: Optional[int] = None
    groups: Optional[int] = None
    rdp_conversion_ok: bool = field(default=False, init=False)
    two_tailed: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        check_positive(self.clip_multiplier, "clip_multiplier")
        check_probability(self.sampling_rate, "sampling_rate")
        if self.bits is not None:
            check_bits(self.bits)
        if self.groups is not None:
            g = check_count(self.groups, "groups")
            if self.bits is not None and g > self.bits:
                raise ValueError(f"groups must be <= bits (every group has at least 1 bit), got {g} > {self.bits}")
        if self.reverse not in REVERSE_METHODS:
            raise ValueError(f"reverse must be one of {REVERSE_METHODS}, got {self.reverse!r}")
        if not isinstance(self.method, str) or self.method not in DPREC_METHODS:
            raise ValueError(f"method must be one of {DPREC_METHODS}, got {self.method!r}")
        if not isinstance(self.sampling, str) or self.sampling not in SAMPLING_SCHEMES:
            raise ValueError(f"sampling must be one of {SAMPLING_SCHEMES}, got {self.sampling!r}")
        if self.method == "paper" and self.sampling != "with_replacement":
            raise ValueError(
                f"method='paper' is Algorithm 7, defined for sampling='with_replacement' only, got "
                f"sampling={self.sampling!r}; use method='sound'"
            )
        if self.num_clients is not None:
            n = check_count(self.num_clients, "num_clients")
            if self.sampling == "with_replacement" and abs(self.sampling_rate * n - 1.0) > 1e-9:
                raise ValueError(
                    f"num_clients={n} must be 1/sampling_rate for sampling='with_replacement' (one slot "
                    f"picks one of num_clients), got sampling_rate={self.sampling_rate!r}"
                )
        object.__setattr__(self, "rdp_conversion_ok", self.method == "sound")
        object.__setattr__(self, "two_tailed", self.method == "sound")
        if self.reverse == "exact":
            # Checked now rather than at compose time (the exact reverse term has a limit on c).
            dprec_reverse_rdp(self.clip_multiplier, self.sampling_rate, [2.0], reverse="exact")

    def holds_for(self) -> tuple:
        return () if self.method == "paper" else THREAT_MODELS

    def rec_total_variation_per_step(self) -> float:
        """REC's total-variation cost of one step for a central observer (sound method): every
        message of the step (one slot with replacement; ``ceil(q N)`` per round otherwise) within
        ``12 exp(c^2) / 2^bits`` of the Gaussian it simulates (see
        :func:`dprec.accounting.dprec_rec.rec_total_variation`); 0 with ``bits=None``."""
        if self.bits is None:
            return 0.0
        if self.sampling == "with_replacement":
            messages = 1
        elif self.num_clients is None:
            raise ValueError(
                f"num_clients is needed for REC's central cost of a DPRECEvent with sampling={self.sampling!r} "
                "(every message of a round counts); give num_clients, or bits=None for the Gaussian variant"
            )
        else:
            messages = max(1, math.ceil(self.sampling_rate * int(self.num_clients) - 1e-9))
        return rec_total_variation(messages, self.clip_multiplier, self.bits, self.groups)

    def no_guarantee_reason(self, threat_model: str, relation: str) -> str:
        return f"a DPRECEvent with method='paper' is {PAPER_CAVEAT}; use method='sound'"

    def curves(self, orders: np.ndarray, threat_model: str, relation: str) -> "tuple[np.ndarray, np.ndarray] | str":
        """The sound per-step curves (:func:`dprec.accounting.dprec_step_rdp`); ``inf`` at fractional orders."""
        if self.method == "paper":
            return self.no_guarantee_reason(threat_model, relation)
        forward = np.full(orders.shape, np.inf)
        rev = np.full(orders.shape, np.inf)
        integer = (orders == np.floor(orders)) & (orders >= 2.0)
        if np.any(integer):
            # Without num_clients the with-replacement "zero" curve drops the size-1
            # without-replacement bound (n = 1 makes it the unsampled, never smaller, curve).
            n = 1 if self.num_clients is None else int(self.num_clients)
            out = _sound_curves(
                float(self.clip_multiplier), float(self.sampling_rate), orders[integer], threat_model=threat_model,
                relation=relation, sampling=self.sampling, n=n, rec=_rec_candidates(self.bits, self.groups),
            )
            if isinstance(out, str):
                return out
            forward[integer], rev[integer] = out
        return forward, rev

    @property
    def overhead_delta(self) -> float:  # type: ignore[override]
        if self.bits is None:
            return 0.0
        return dprec_overhead(1, self.clip_multiplier, self.bits)

    def rdp(self, orders: np.ndarray) -> np.ndarray:
        """The paper's ``k + m`` curve (Algorithm 7), for ``method="paper"`` only (an accountant
        with ``threat_model=None`` uses it); a sound event raises ValueError (see :meth:`curves`)."""
        out = np.full(orders.shape, np.inf)
        integer = (orders == np.floor(orders)) & (orders >= 2.0)
        if self.method == "sound":
            raise ValueError(
                "a DPRECEvent with method='sound' has curves per threat model: compose it into an "
                "Accountant(threat_model=...), or use method='paper' with Accountant(threat_model=None)"
            )
        if np.any(integer):
            a = orders[integer]
            forward = dprec_forward_rdp(self.clip_multiplier, self.sampling_rate, a)
            if self.reverse == "bound":
                out[integer] = 2.0 * forward
            else:
                out[integer] = forward + dprec_reverse_rdp(self.clip_multiplier, self.sampling_rate, a, reverse="exact")
        return out


class Accountant:
    """Composes privacy events over rounds and reports eps(delta) and delta(eps) under a threat model.

    Parameters
    ----------
    threat_model : {"central", "messages", "server"} or None
        The observer the guarantee is against (default ``"central"``, DP-FedAvg's usual model).
        Every event declares where its curve holds (see each event class); an event without a
        guarantee under this threat model makes :meth:`get_epsilon` ``inf`` and
        :meth:`guarantee` carry the reason. ``None``: no threat model, every event's own
        :meth:`PrivacyEvent.rdp` curve is composed as given (the behaviour before threat models;
        the only way to compose ``DPRECEvent(method="paper")``, the paper's Algorithm 7).
    relation : {"zero", "add_remove"} or None
        The neighbouring relation of :meth:`get_epsilon` (default ``"zero"``: one client's update
        replaced by a zero update, the relation every mechanism here has a bound for; the Gaussian
        of DP-FedAvg gives the same number for both); both are tracked and :meth:`guarantee`
        reports both. ``None`` together with ``threat_model=None``.
    orders : sequence of float, optional
        Renyi orders (> 1). Default: :data:`dprec.accounting.DEFAULT_ORDERS` (fractional orders
        near 1, every integer to 63, a sparse tail to 1024).

    Notes
    -----
    Composition: forward and reverse curves add over events (adaptive RDP composition), per
    relation; overheads add (a union bound). Conversion: the improved RDP conversion (Balle et al.
    2020) of each direction, ``epsilon`` the larger; once a sound DP-REC event is composed, both
    tails are paid out of delta, at ``(delta - overhead) / 2`` each (the DP-REC proof's eq. (20),
    fixed), as :func:`dprec.accounting.dprec_epsilon` does.

    Methods mirror dp_accounting (``compose``, ``get_epsilon``, ``get_delta``,
    ``get_epsilon_and_optimal_order``) and Opacus (``step``, ``get_epsilon``,
    ``get_privacy_spent``).
    """

    def __init__(
        self, threat_model: Optional[str] = "central", relation: Optional[str] = "zero", orders: Any = None
    ) -> None:
        if threat_model is None:
            if relation not in (None, "zero"):
                raise ValueError(
                    f"relation must be None when threat_model is None (no threat model), got {relation!r}; "
                    f"valid threat_model values are {THREAT_MODELS} and None"
                )
            self._threat_model: Optional[str] = None
            self._relation: Optional[str] = None
        else:
            self._threat_model = check_threat_model(threat_model)
            self._relation = check_relation(relation)
        self._orders = check_orders(DEFAULT_ORDERS if orders is None else orders).copy()
        self._orders.setflags(write=False)
        self._rdp = np.zeros(self._orders.shape)
        self._pairs: dict = {rel: (np.zeros(self._orders.shape), np.zeros(self._orders.shape)) for rel in RELATIONS}
        self._two_tailed = False
        self._overhead = 0.0
        self._tv = 0.0  # REC's total-variation cost for a central observer (sound DPRECEvents)
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
        if self._threat_model is None:
            per_step = np.asarray(event.rdp(self._orders), dtype=np.float64)
            if per_step.shape != self._orders.shape or np.any(np.isnan(per_step)) or np.any(per_step < 0.0):
                raise ValueError(f"event {event!r} returned an invalid RDP curve")
            with np.errstate(invalid="ignore"):
                self._rdp = self._rdp + count * per_step
            self._rdp_conversion_ok = self._rdp_conversion_ok and bool(event.rdp_conversion_ok)
        else:
            pairs = dict(self._pairs)
            for rel in RELATIONS:
                if isinstance(pairs[rel], str):
                    continue
                out = event.curves(self._orders, self._threat_model, rel)
                if isinstance(out, str):
                    pairs[rel] = out
                    continue
                fwd, rev = (np.asarray(x, dtype=np.float64) for x in out)
                for curve in (fwd, rev):
                    if curve.shape != self._orders.shape or np.any(np.isnan(curve)) or np.any(curve < 0.0):
                        raise ValueError(f"event {event!r} returned an invalid RDP curve")
                with np.errstate(invalid="ignore"):
                    pairs[rel] = (pairs[rel][0] + count * fwd, pairs[rel][1] + count * rev)
            self._pairs = pairs
            self._two_tailed = self._two_tailed or bool(event.two_tailed)
        if self._threat_model is not None and isinstance(event, DPRECEvent) and event.method == "sound":
            # The server and message observers' curves bound REC's messages themselves; a central
            # observer pays REC's total-variation distance to the Gaussian mechanism, (1 + e^eps) eta.
            if self._threat_model == "central":
                self._tv += count * event.rec_total_variation_per_step()
        else:
            self._overhead += count * float(event.overhead_delta)
        self._history.append((event, count))
        return self

    def step(self, *, noise_multiplier: float, sample_rate: float) -> "Accountant":
        """One step of the sampled Gaussian mechanism (Opacus' ``RDPAccountant.step``)."""
        return self.compose(SampledGaussianEvent(sampling_rate=sample_rate, noise_multiplier=noise_multiplier))

    # -- state ------------------------------------------------------------------------------
    @property
    def threat_model(self) -> Optional[str]:
        """The threat model (None: no threat model)."""
        return self._threat_model

    @property
    def relation(self) -> Optional[str]:
        """The neighbouring relation of :meth:`get_epsilon`."""
        return self._relation

    @property
    def orders(self) -> np.ndarray:
        """The Renyi orders (read-only)."""
        return self._orders

    @property
    def rdp(self) -> np.ndarray:
        """The composed curve, a copy: with a threat model, the larger of the forward and reverse
        curves of :attr:`relation` (``inf`` where no bound is proved); without one, the sum of the
        events' curves (for paper DP-REC events: ``k + m`` of Algorithm 7)."""
        if self._threat_model is None:
            return self._rdp.copy()
        entry = self._pairs[self._relation]
        if isinstance(entry, str):
            return np.full(self._orders.shape, np.inf)
        return np.maximum(entry[0], entry[1])

    @property
    def curves(self) -> dict:
        """Relation -> composed ``(forward, reverse)`` curves, or the reason there is no bound (copies)."""
        return {k: v if isinstance(v, str) else (v[0].copy(), v[1].copy()) for k, v in self._pairs.items()}

    @property
    def overhead_delta(self) -> float:
        """Delta spent unconditionally (DP-REC's ``12 rho / 2^b`` summed over steps)."""
        return self._overhead

    @property
    def rec_total_variation(self) -> float:
        """REC's total-variation cost ``eta`` summed over the composed sound DP-REC events with ``bits``
        (central observer only; 0 otherwise, and for ``bits=None``). It is not in
        :attr:`overhead_delta`: it is paid as ``(1 + e^eps) eta`` of delta, see
        :func:`dprec.accounting.dprec_rec.rec_total_variation`."""
        return self._tv

    @property
    def history(self) -> list[tuple[PrivacyEvent, int]]:
        """The composed ``(event, count)`` pairs, in order."""
        return list(self._history)

    def __repr__(self) -> str:
        return (
            f"Accountant(threat_model={self._threat_model!r}, relation={self._relation!r}, orders={self._orders.size} "
            f"orders, events={len(self._history)}, overhead_delta={self._overhead:.3g})"
        )

    # -- conversion -------------------------------------------------------------------------
    def _method(self, method: str) -> str:
        if method == "auto":
            return "balle" if self._rdp_conversion_ok else "mironov"
        if method not in CONVERSION_METHODS:
            raise ValueError(f"method must be 'auto' or one of {CONVERSION_METHODS}, got {method!r}")
        if method == "balle" and not self._rdp_conversion_ok:
            raise ValueError(
                "method='balle' is not valid once paper DP-REC events are composed: Theorem 1 of the DP-REC "
                "paper is a moments-accountant bound (Mironov's conversion); use method='mironov' or 'auto'"
            )
        return method

    def _available(self, delta: float) -> float:
        if self._overhead >= delta:
            raise ValueError(
                f"delta={delta:.6g} must exceed the composed DP-REC overhead 12*rho/2^b = {self._overhead:.6g}"
            )
        left = delta - self._overhead
        return left / 2.0 if self._two_tailed else left

    def _epsilon_for(self, relation: str, delta: float, method: str) -> tuple[float, float]:
        entry = self._pairs[relation]
        if isinstance(entry, str):
            return math.inf, math.nan
        if self._tv > 0.0:
            if 2.0 * self._tv + self._overhead >= delta:
                raise ValueError(
                    f"delta={delta:.6g} must exceed twice REC's total-variation cost eta = {self._tv:.6g} of the "
                    "composed DP-REC events (a central observer pays (1 + e^eps) eta): use more bits"
                )
            eps, idx = _central_rec_epsilon(entry[0], entry[1], self._orders, delta - self._overhead, self._tv)
            return eps, float(self._orders[idx])
        target = self._available(delta)
        ef = rdp_to_epsilon(self._orders, entry[0], target, method=method)
        er = rdp_to_epsilon(self._orders, entry[1], target, method=method)
        return ef if ef[0] >= er[0] else er

    def get_epsilon_and_optimal_order(self, delta: float, *, method: str = "auto") -> tuple[float, float]:
        """``(eps, order)`` such that everything composed so far is (eps, delta)-DP.

        ``method``: ``"auto"`` (Balle et al. unless a paper DP-REC event is present, then Mironov),
        ``"mironov"`` or ``"balle"``. The DP-REC overhead is taken out of ``delta`` first; a
        ``ValueError`` says so when ``delta`` does not exceed it. With a threat model, ``eps`` is
        ``inf`` (order ``nan``) when an event has no guarantee under it (see :meth:`guarantee`).
        """
        delta = check_delta(delta)
        method = self._method(method)
        if self._threat_model is None:
            if self._overhead >= delta:
                self._available(delta)
            if not self._history:
                return 0.0, float(self._orders[0])
            return rdp_to_epsilon(self._orders, self._rdp, delta - self._overhead, method=method)
        if not self._history:
            return 0.0, float(self._orders[0])
        return self._epsilon_for(self._relation, delta, method)  # type: ignore[arg-type]

    def get_epsilon(self, delta: float, *, method: str = "auto") -> float:
        """Epsilon at ``delta`` (see :meth:`get_epsilon_and_optimal_order`)."""
        return self.get_epsilon_and_optimal_order(delta, method=method)[0]

    def get_delta_and_optimal_order(self, epsilon: float, *, method: str = "auto") -> tuple[float, float]:
        """``(delta, order)``: the conversion's delta (doubled once a sound DP-REC event is present:
        both tails) plus the DP-REC overhead, capped at 1; ``(1.0, nan)`` where no bound is proved."""
        epsilon = check_epsilon(epsilon)
        method = self._method(method)
        if not self._history:
            return 0.0, float(self._orders[0])
        if self._threat_model is None:
            delta, order = rdp_to_delta(self._orders, self._rdp, epsilon, method=method)
            return min(1.0, delta + self._overhead), order
        entry = self._pairs[self._relation]
        if isinstance(entry, str):
            return 1.0, math.nan
        df = rdp_to_delta(self._orders, entry[0], epsilon, method=method)
        dr = rdp_to_delta(self._orders, entry[1], epsilon, method=method)
        delta, order = df if df[0] >= dr[0] else dr
        if self._two_tailed:
            delta *= 2.0
        delta += _rec_tv_cost(epsilon, self._tv)
        return min(1.0, delta + self._overhead), order

    def get_delta(self, epsilon: float, *, method: str = "auto") -> float:
        """Delta at ``epsilon`` (see :meth:`get_delta_and_optimal_order`)."""
        return self.get_delta_and_optimal_order(epsilon, method=method)[0]

    def get_privacy_spent(self, *, delta: float, method: str = "auto") -> tuple[float, float]:
        """``(eps, order)`` at ``delta``, named as Opacus' ``RDPAccountant.get_privacy_spent``."""
        return self.get_epsilon_and_optimal_order(delta, method=method)

    def guarantee(self, delta: float, *, conversion: str = "auto") -> PrivacyGuarantee:
        """The :class:`~dprec.accounting.guarantee.PrivacyGuarantee` at ``delta``: the threat model,
        both relations (``inf`` with the reason where an event has no bound), composition and conversion.

        ``conversion``: ``"auto"``, ``"balle"``/``"rdp-balle"`` or ``"mironov"``/``"rdp-mironov"``
        (RDP conversions; the accountant composes RDP curves, so PLD is not offered here: see
        :func:`dprec.accounting.sampled_gaussian_epsilon` for the PLD baseline).
        """
        names = {"auto": "auto", "balle": "balle", "rdp-balle": "balle", "mironov": "mironov", "rdp-mironov": "mironov"}
        if not isinstance(conversion, str) or conversion not in names:
            raise ValueError(f"conversion must be one of {tuple(names)}, got {conversion!r}")
        delta = check_delta(delta)
        method = self._method(names[conversion])
        events = ", ".join(f"{count} x {type(event).__name__}" for event, count in self._history) or "nothing"
        composition = f"adaptive RDP composition of {events}"
        conv = f"rdp-{method}"
        if self._two_tailed:
            conv += ", both tails: max over directions at delta' = (delta - overhead) / 2"
        if self._threat_model is None:
            eps, order = self.get_epsilon_and_optimal_order(delta, method=method)
            paper = any(isinstance(e, DPRECEvent) and e.method == "paper" for e, _ in self._history)
            return PrivacyGuarantee(
                mechanism="composition", epsilon=eps, delta=delta, threat_model=None, relation=None,
                composition=composition, conversion=conv, order=order,
                caveat=PAPER_CAVEAT if paper else "no threat model: the events' curves composed as given",
                details=self,
            )
        epsilons: dict = {}
        reasons: dict = {}
        order_of: dict = {}
        for rel in RELATIONS:
            entry = self._pairs[rel]
            if isinstance(entry, str):
                epsilons[rel], reasons[rel] = math.inf, entry
            elif not self._history:
                epsilons[rel], order_of[rel] = 0.0, None
            else:
                epsilons[rel], order_of[rel] = self._epsilon_for(rel, delta, method)
        return PrivacyGuarantee(
            mechanism="composition", epsilon=epsilons[self._relation], delta=delta, threat_model=self._threat_model,
            relation=self._relation, epsilons=epsilons, reasons=reasons, composition=composition, conversion=conv,
            order=order_of.get(self._relation), details=self,
        )


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


class _SharedNoiseEvent(_KeywordRdpEvent):
    """Distributed noise under secure aggregation: every observer (``"central"``, ``"messages"``,
    ``"server"``) sees only the modular sum, so a curve holds for all three threat models under
    ``relation="zero"``; ``"add_remove"`` has no bound (removing a client removes its noise share).
    With ``sampling_rate < 1`` only ``"central"`` is amplified: the server sees who sent a masked
    message, so ``"messages"`` and ``"server"`` get the participation mixture of the unsampled round."""

    def curves(self, orders: np.ndarray, threat_model: str, relation: str) -> "tuple[np.ndarray, np.ndarray] | str":
        if relation == "add_remove":
            return NOISE_SHARE_REASON
        from .discrete import _observed_rdp  # noqa: PLC0415

        # The client sample is hidden only from the central observer (see discrete._observed_rdp).
        curve = np.asarray(_observed_rdp(self._fn(), np.asarray(orders, dtype=np.float64), threat_model,
                                         dict(self.params)), dtype=np.float64)
        return curve, curve


class DDGEvent(_SharedNoiseEvent):
    """One round of the distributed discrete Gaussian: ``DDGEvent(l2_sensitivity=..., ...)``.

    Under secure aggregation every observer (``"central"``, ``"messages"``, ``"server"``) sees
    only the modular sum, relation ``"zero"`` only; with ``sampling_rate < 1`` only ``"central"``
    is amplified (see :class:`_SharedNoiseEvent`). Without a threat model the Accountant composes
    :meth:`rdp`, the amplified (central) curve.

    The keyword arguments (or a dict of them) are those of :func:`dprec.accounting.discrete.ddg_rdp`
    (Kairouz et al. 2021, Theorem 1 / Chen et al., Theorem E.1).
    """

    def _fn(self) -> Callable[..., Any]:
        from .discrete import ddg_rdp

        return ddg_rdp


class SkellamEvent(_SharedNoiseEvent):
    """One round of the Skellam mechanism (Agarwal et al. 2021): ``SkellamEvent(l2_sensitivity=..., ...)``.

    Secure aggregation, relation ``"zero"`` only; amplified only for ``"central"`` (as DDG).

    The keyword arguments (or a dict of them) are those of :func:`dprec.accounting.discrete.skellam_rdp`.
    """

    def _fn(self) -> Callable[..., Any]:
        from .discrete import skellam_rdp

        return skellam_rdp


class SecAggRoundEvent(PrivacyEvent):
    """One round of several distributed-noise sums under secure aggregation whose participants the observer sees.

    ``SecAggRoundEvent([DDGEvent(...), DDGEvent(...)], participation_rate=q)``: the components (unsampled
    :class:`DDGEvent` / :class:`SkellamEvent`, ``sampling_rate=1``) are released together in one round (e.g. the
    update's sum and a clipping count), and the target client takes part with probability ``q``, independently of
    the data, which the observer sees (the server knows who sent a masked message). The curve is the
    participation mixture of the components' summed curves, ``log(1 - q + q exp((a - 1) sum_k rdp_k(a))) / (a - 1)``
    (:func:`dprec.accounting.rdp.participation_rdp`): the mixture of the sum, not the sum of mixtures, which
    would be smaller than the truth, since the components share the participation.

    One curve for every threat model (each observer sees at most the server's view: the modular sums and who took
    part), relation ``"zero"`` only (removing a client removes its noise shares).
    """

    def __init__(self, components: Any, participation_rate: float = 1.0) -> None:
        from ._checks import check_probability  # noqa: PLC0415

        parts = tuple(components)
        if not parts or not all(isinstance(c, _SharedNoiseEvent) for c in parts):
            raise TypeError("components must be a non-empty sequence of DDGEvent / SkellamEvent")
        for c in parts:
            if c.params.get("sampling_rate", 1.0) != 1.0:
                raise ValueError("components must be unsampled (sampling_rate=1): the participation is the event's")
        self.components = parts
        self.participation_rate = check_probability(participation_rate, "participation_rate")

    def __repr__(self) -> str:
        return f"SecAggRoundEvent({list(self.components)!r}, participation_rate={self.participation_rate!r})"

    def rdp(self, orders: np.ndarray) -> np.ndarray:
        from .rdp import participation_rdp  # noqa: PLC0415

        alphas = np.asarray(orders, dtype=np.float64)
        total = np.zeros(alphas.shape)
        for c in self.components:
            total = total + c.rdp(alphas)
        return participation_rdp(self.participation_rate, total, alphas)

    def curves(self, orders: np.ndarray, threat_model: str, relation: str) -> "tuple[np.ndarray, np.ndarray] | str":
        if relation == "add_remove":
            return NOISE_SHARE_REASON
        curve = self.rdp(np.asarray(orders, dtype=np.float64))
        return curve, curve


class QMGeoEvent(_KeywordRdpEvent):
    """One round of QMGeo (Wang and Gursoy; exact divergence of the corrected pmf).

    ``QMGeoEvent(levels=8, p=0.9, inputs=..., ...)``: the keyword arguments (or a dict of them)
    are those of :func:`dprec.accounting.qmgeo.qmgeo_rdp`. QMGeo is a local randomizer: its curve
    bounds one client's message under a change of its input, so it holds against every observer
    (``"server"`` included) for ``relation="zero"``; ``"add_remove"`` has no bound (an added
    client adds a message, which an observer of the messages sees).
    """

    def curves(self, orders: np.ndarray, threat_model: str, relation: str) -> "tuple[np.ndarray, np.ndarray] | str":
        if relation == "add_remove":
            return (
                "QMGeo is a local randomizer whose curve is for replacing a client's input (relation='zero'); "
                "an added or removed client adds or removes a message"
            )
        return super().curves(orders, threat_model, relation)

    def _fn(self) -> Callable[..., Any]:
        from .qmgeo import qmgeo_rdp

        return qmgeo_rdp
