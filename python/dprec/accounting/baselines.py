"""Tight baselines: the (sampled) Gaussian mechanism with a threat model, by PLD or RDP.

DP-FedAvg adds ``N(0, (z C)^2)`` to the sum of the sampled clients' clipped updates; joint noise
(Heikkila et al.) has every client add a share of that noise and secure aggregation reveal only
the noisy sum. Both are accounted as ``steps`` compositions of the Poisson-sampled Gaussian
mechanism (Mironov, Talwar and Zhang 2019) at rate ``q`` and noise multiplier ``z``; the relation
``"zero"`` (one client's update replaced by zero: ``(1-q) N(S) + q N(S + phi)`` against ``N(S)``)
gives the same curve as ``"add_remove"``.

Threat models
-------------
* ``noise="server"`` (DP-FedAvg): ``"central"`` only. The clients send unnoised updates, so a
  message observer (``"messages"``) learns them, unless ``secure_aggregation=True`` hides the
  individual messages (then a message observer sees only masked messages, and the guarantee is
  the central one); the ``"server"`` adds the noise after aggregation and holds the unnoised sum,
  so it has no guarantee even with secure aggregation.
* ``noise="clients"`` (joint noise through secure aggregation): every observer sees only the noisy
  sum; finite for all three threat models under ``relation="zero"``. ``"add_remove"`` is ``inf``:
  removing a client also removes its share of the noise (the noise changes, not only its mean).
* With ``secure_aggregation=True`` a message observer still sees how many masked messages a round
  has: DP-FedAvg against ``"messages"`` is finite for ``"zero"`` only.

Conversion (``conversion=``)
----------------------------
``"pld"``: the privacy-loss-distribution accountant of Google's ``dp_accounting`` (optional
dependency; pessimistic discretisation at interval ``1e-4``, the tightest of the choices);
``"rdp-balle"``: the improved RDP conversion (Balle et al. 2020) over
:data:`dprec.accounting.DEFAULT_ORDERS`; ``"rdp-mironov"``: Mironov (2017), Proposition 3;
``"auto"``: ``"pld"`` when ``dp_accounting`` imports, else ``"rdp-balle"``. The result's
``conversion`` says which was used.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import numpy as np

from ._checks import check_count, check_delta, check_nonnegative, check_orders, check_probability
from .guarantee import (
    MASKED_COUNT_REASON,
    NOISE_SHARE_REASON,
    RELATIONS,
    PrivacyGuarantee,
    check_relation,
    check_threat_model,
)
from .rdp import DEFAULT_ORDERS, participation_rdp, rdp_to_epsilon, sampled_gaussian_rdp

__all__ = [
    "CONVERSIONS",
    "gaussian_guarantee",
    "pld_available",
    "sampled_gaussian_calibrate",
    "sampled_gaussian_epsilon",
]

#: ``conversion=`` choices of the baseline functions.
CONVERSIONS = ("auto", "pld", "rdp-balle", "rdp-mironov")
_PLD_DISCRETIZATION = 1e-4
#: Below this noise multiplier dp_accounting's PLD grid grows to gigabytes: calibration refuses it (use RDP).
_PLD_MIN_NOISE = 0.2


def pld_available() -> bool:
    """Whether ``dp_accounting`` (the PLD accountant) imports."""
    try:
        import dp_accounting  # noqa: F401,PLC0415
    except ImportError:
        return False
    return True


def _check_conversion(conversion: Any, *, pld_ok: bool = True) -> str:
    choices = CONVERSIONS if pld_ok else tuple(c for c in CONVERSIONS if c != "pld")
    if not isinstance(conversion, str) or conversion not in choices:
        raise ValueError(f"conversion must be one of {choices}, got {conversion!r}")
    if conversion == "auto":
        return "pld" if pld_ok and pld_available() else "rdp-balle"
    if conversion == "pld" and not pld_available():
        raise ValueError(
            "conversion='pld' needs dp_accounting (pip install dp-accounting); use conversion='rdp-balle' or 'auto'"
        )
    return conversion


def _pld_epsilon(
    noise_multiplier: float, sample_rate: float, steps: int, delta: float, discretization: float = _PLD_DISCRETIZATION
) -> float:
    """dp_accounting's pessimistic PLD epsilon of ``steps`` Poisson-sampled Gaussian steps (add/remove)."""
    import dp_accounting  # noqa: PLC0415
    from dp_accounting.pld import pld_privacy_accountant  # noqa: PLC0415

    if noise_multiplier == 0.0:
        return math.inf
    if math.isinf(noise_multiplier):
        return 0.0
    acc = pld_privacy_accountant.PLDAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
        value_discretization_interval=discretization,
    )
    event: Any = dp_accounting.GaussianDpEvent(noise_multiplier)
    if sample_rate < 1.0:
        event = dp_accounting.PoissonSampledDpEvent(sample_rate, event)
    acc.compose(event, steps)
    return float(acc.get_epsilon(delta))


def _rdp_guarantee(
    mechanism: str,
    curve: Callable[[str], "np.ndarray | str"],
    orders: np.ndarray,
    delta: float,
    *,
    threat_model: str,
    relation: str,
    conversion: str,
    sampling: Optional[str],
    composition: str,
    details: Any = None,
) -> PrivacyGuarantee:
    """A PrivacyGuarantee from per-relation composed RDP curves (``curve(relation)`` -> array or reason)."""
    method = "balle" if conversion == "rdp-balle" else "mironov"
    epsilons: dict = {}
    reasons: dict = {}
    order: Optional[float] = None
    for rel in RELATIONS:
        out = curve(rel)
        if isinstance(out, str):
            epsilons[rel], reasons[rel] = math.inf, out
            continue
        eps, best = rdp_to_epsilon(orders, out, delta, method=method)
        epsilons[rel] = eps
        if rel == relation:
            order = best
    return PrivacyGuarantee(
        mechanism=mechanism, epsilon=epsilons[relation], delta=delta, threat_model=threat_model, relation=relation,
        epsilons=epsilons, reasons=reasons, sampling=sampling, composition=composition, conversion=conversion,
        order=order if math.isfinite(epsilons[relation]) else None, details=details,
    )


def _gaussian_reason(threat_model: str, noise: str, secure_aggregation: bool, relation: str) -> Optional[str]:
    if noise == "clients":
        return NOISE_SHARE_REASON if relation == "add_remove" else None
    if threat_model == "central":
        return None
    if threat_model == "messages":
        if not secure_aggregation:
            return "clients send unnoised updates (the server adds the noise); use secure_aggregation=True or 'central'"
        return MASKED_COUNT_REASON if relation == "add_remove" else None
    return (
        "the server adds the noise after aggregation and holds the unnoised sum (with or without secure "
        "aggregation); only joint noise (noise='clients') protects against the server"
    )


def gaussian_guarantee(
    noise_multiplier: float,
    delta: float,
    *,
    sample_rate: float = 1.0,
    steps: int = 1,
    threat_model: str = "central",
    relation: str = "add_remove",
    secure_aggregation: bool = False,
    noise: str = "server",
    conversion: str = "auto",
    orders: Any = None,
    mechanism: str = "gaussian",
) -> PrivacyGuarantee:
    """(epsilon, delta) of ``steps`` Poisson-sampled Gaussian steps under a threat model.

    Parameters
    ----------
    noise_multiplier : float
        ``z``: the noise standard deviation over the clipping norm ``C`` (for joint noise, that of
        the summed noise, :func:`dprec.accounting.sigma_total`).
    delta : float
        In (0, 1).
    sample_rate : float
        Poisson rate ``q`` in (0, 1] (1: no sampling). Amplification needs the sample hidden from the
        observer: DP-FedAvg's clients with ``secure_aggregation=True`` against ``"messages"`` (who
        counts the masked messages) get the participation mixture of the unsampled Gaussian instead;
        with ``noise="clients"`` the rate must be one the observer cannot see (records inside each
        client, as joint noise's), not a client-level rate against ``"messages"`` / ``"server"``.
    steps : int
        Compositions (rounds, or rounds x local steps).
    threat_model : {"central", "messages", "server"}
        Default ``"central"`` (DP-FedAvg's usual model).
    relation : {"add_remove", "zero"}
        Both give the same curve; both are reported.
    secure_aggregation : bool
        Whether the clients' messages are hidden by secure aggregation (see the module docstring).
    noise : {"server", "clients"}
        Who adds the noise: the server (DP-FedAvg) or the clients (joint noise).
    conversion : {"auto", "pld", "rdp-balle", "rdp-mironov"}
        See the module docstring.
    orders : sequence of float, optional
        Renyi orders for the RDP conversions; default :data:`dprec.accounting.DEFAULT_ORDERS`.

    Returns
    -------
    PrivacyGuarantee
        ``inf`` with the reason where the threat model has no guarantee.
    """
    z = check_nonnegative(noise_multiplier, "noise_multiplier", allow_inf=True)
    delta = check_delta(delta)
    q = check_probability(sample_rate, "sample_rate")
    t = check_count(steps, "steps")
    tm = check_threat_model(threat_model)
    rel = check_relation(relation)
    if not isinstance(secure_aggregation, (bool, np.bool_)):
        raise TypeError("secure_aggregation must be a bool")
    if noise not in ("server", "clients"):
        raise ValueError(f"noise must be one of ('server', 'clients'), got {noise!r}")
    conv = _check_conversion(conversion)
    alphas = check_orders(DEFAULT_ORDERS if orders is None else orders)
    reasons = {r: _gaussian_reason(tm, noise, bool(secure_aggregation), r) for r in RELATIONS}
    sampling = "poisson" if q < 1.0 else None
    composition = f"{t} compositions of the {'Poisson-sampled ' if q < 1.0 else ''}Gaussian mechanism"
    if q < 1.0 and noise == "server" and secure_aggregation and tm == "messages":
        # The observer counts the masked messages, so it sees whether the target took part: no amplification,
        # the participation mixture of the unsampled Gaussian (zero-out; add/remove has the reason above).
        with np.errstate(divide="ignore"):
            full = alphas / (2.0 * z * z) if z > 0.0 else np.full(alphas.shape, math.inf)
        seen = t * participation_rdp(q, full, alphas)
        conv = "rdp-balle" if conv == "pld" else conv  # the PLD accountant composes the hidden-sample mixture only
        return _rdp_guarantee(
            mechanism, lambda r: reasons[r] if reasons[r] is not None else seen, alphas, delta, threat_model=tm,
            relation=rel, conversion=conv,
            sampling="poisson, participation seen (the observer counts the masked messages: no amplification)",
            composition=f"{t} compositions of the Gaussian mechanism, each round's participation seen (RDP)",
        )
    if conv == "pld":
        finite = [r for r in RELATIONS if reasons[r] is None]
        eps = _pld_epsilon(z, q, t, delta) if finite else math.inf  # the same curve for both relations
        epsilons = {r: eps if reasons[r] is None else math.inf for r in RELATIONS}
        return PrivacyGuarantee(
            mechanism=mechanism, epsilon=epsilons[rel], delta=delta, threat_model=tm, relation=rel,
            epsilons=epsilons, reasons={r: why for r, why in reasons.items() if why is not None}, sampling=sampling,
            composition=composition + " (PLD composition)",
            conversion=f"pld (dp_accounting, pessimistic, discretization {_PLD_DISCRETIZATION:g})",
        )
    curve = t * sampled_gaussian_rdp(q, z, alphas) if any(why is None for why in reasons.values()) else None
    return _rdp_guarantee(
        mechanism, lambda r: reasons[r] if reasons[r] is not None else curve, alphas, delta, threat_model=tm,
        relation=rel, conversion=conv, sampling=sampling, composition=composition + " (RDP composition)",
    )


def sampled_gaussian_epsilon(
    noise_multiplier: float,
    sample_rate: float,
    steps: int,
    delta: float,
    *,
    threat_model: str = "central",
    relation: str = "add_remove",
    secure_aggregation: bool = False,
    conversion: str = "auto",
    noise: str = "server",
    orders: Any = None,
) -> PrivacyGuarantee:
    """DP-FedAvg's guarantee: :func:`gaussian_guarantee` with the noise added by the server.

    ``steps`` Poisson-sampled Gaussian steps at rate ``sample_rate`` and noise multiplier
    ``noise_multiplier``; finite for ``threat_model="central"`` (and ``"messages"`` with
    ``secure_aggregation=True``), ``inf`` with the reason otherwise; ``conversion="auto"`` is PLD
    when ``dp_accounting`` imports, else the improved RDP conversion. Returns a
    :class:`~dprec.accounting.guarantee.PrivacyGuarantee`.
    """
    return gaussian_guarantee(
        noise_multiplier, delta, sample_rate=sample_rate, steps=steps, threat_model=threat_model, relation=relation,
        secure_aggregation=secure_aggregation, noise=noise, conversion=conversion, orders=orders,
        mechanism="dp-fedavg" if noise == "server" else "joint-noise",
    )


def sampled_gaussian_calibrate(
    target_epsilon: float,
    sample_rate: float,
    steps: int,
    delta: float,
    *,
    threat_model: str = "central",
    relation: str = "add_remove",
    secure_aggregation: bool = False,
    conversion: str = "auto",
    noise: str = "server",
    rtol: float = 1e-4,
) -> float:
    """The noise multiplier ``z`` at which :func:`sampled_gaussian_epsilon` reports ``target_epsilon``.

    Searches on the reported epsilon itself (same ``conversion``, so by PLD when ``"auto"`` finds
    ``dp_accounting``): the result's epsilon is at most ``target_epsilon`` and at least
    ``target_epsilon * (1 - rtol)``. The improved RDP conversion brackets the root first (cheap; its
    epsilon is never below the PLD's, so the PLD root lies below the RDP one).

    Raises
    ------
    ValueError
        Naming ``threat_model`` where the combination has no guarantee (with the reason), and
        ``target_epsilon`` when no ``z`` in ``[1e-3, 1e4]`` reaches it or, with the PLD, when it
        needs ``z < 0.2`` (where dp_accounting's grid needs gigabytes: use ``conversion="rdp-balle"``).
    """
    eps_target = float(target_epsilon)
    if not (eps_target > 0.0 and math.isfinite(eps_target)):
        raise ValueError(f"target_epsilon must be a finite number > 0, got {target_epsilon!r}")
    if not 0.0 < float(rtol) < 1.0:
        raise ValueError(f"rtol must be in (0, 1), got {rtol!r}")
    kw = dict(threat_model=threat_model, relation=relation, secure_aggregation=secure_aggregation, noise=noise)
    probe = sampled_gaussian_epsilon(1.0, sample_rate, steps, delta, conversion="rdp-balle", **kw)
    if not probe.finite:
        raise ValueError(
            f"threat_model={threat_model!r} with relation={relation!r}: no guarantee "
            f"({probe.reasons.get(check_relation(relation), 'no bound is proved')}), so there is no noise to calibrate"
        )

    def reported(z: float, how: str = conversion) -> float:
        return float(sampled_gaussian_epsilon(z, sample_rate, steps, delta, conversion=how, **kw).epsilon)

    resolved = _resolved_conversion(conversion)
    uses_pld = resolved == "pld"
    # Bracket with an RDP conversion: the requested one, or for PLD the improved one (never below the PLD).
    bracket = "rdp-balle" if uses_pld else resolved

    lo, hi = 1e-3, 1e4
    if reported(hi, bracket) > eps_target:
        raise ValueError(f"target_epsilon={eps_target:g} is too small to calibrate (z > 1e4)")
    if reported(lo, bracket) <= eps_target:
        raise ValueError(f"target_epsilon={eps_target:g} is too large to calibrate (z < 1e-3)")
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if reported(mid, bracket) <= eps_target:
            hi = mid
        else:
            lo = mid
        if hi / lo < 1.0 + 1e-6:
            break
    ok = hi
    if uses_pld and ok < _PLD_MIN_NOISE:
        raise ValueError(
            f"target_epsilon={eps_target:g} needs a noise multiplier below {_PLD_MIN_NOISE:g}, where dp_accounting's "
            "PLD grid needs gigabytes; use conversion='rdp-balle' (or a smaller target_epsilon)"
        )
    if uses_pld:
        # Search on a 10x coarser PLD grid (ten times faster; pessimistic, so never below the reported
        # epsilon), then confirm on the reported one, which is then at most the target.
        def search(z: float) -> float:
            return _pld_epsilon(z, sample_rate, steps, delta, 10.0 * _PLD_DISCRETIZATION)
    else:
        search = reported
    floor = _PLD_MIN_NOISE if uses_pld else 0.0  # the PLD is never evaluated below its floor
    if uses_pld and search(floor) <= eps_target:
        raise ValueError(
            f"target_epsilon={eps_target:g} needs a noise multiplier below {_PLD_MIN_NOISE:g}, where dp_accounting's "
            "PLD grid needs gigabytes; use conversion='rdp-balle' (or a smaller target_epsilon)"
        )
    ok = _shrink_to_target(search, eps_target, ok, rtol, floor)
    if uses_pld and reported(ok) < eps_target * (1.0 - rtol):
        ok = _shrink_to_target(reported, eps_target, ok, rtol, floor)
    for _ in range(10_000):  # never above the target (a guard: the searches above already ensure it)
        if reported(ok) <= eps_target:
            return ok
        ok *= 1.0 + rtol
    raise ValueError(f"target_epsilon={eps_target:g}: calibration did not converge")  # pragma: no cover


def _shrink_to_target(f: Callable[[float], float], target: float, ok: float, rtol: float, floor: float = 0.0) -> float:
    """Bisect below ``ok`` (where ``f(ok) <= target``, ``f`` decreasing) for ``target (1 - rtol) <= f <= target``,
    never evaluating ``f`` below ``floor`` (where ``f(floor) > target``)."""
    while f(ok) > target:  # widen upwards if the starting point is on the wrong side
        ok *= 2.0
        if ok > 1e6:
            raise ValueError(f"no noise multiplier up to 1e6 reaches target_epsilon={target:g}")
    bad = max(0.5 * ok, floor)
    while bad < ok and f(bad) <= target:
        ok, bad = bad, max(0.5 * bad, floor)
        if bad < 1e-3:
            return ok
    if bad >= ok:
        return ok
    return _bisect_to_target(f, target, ok, bad, rtol)


def _bisect_to_target(f: Callable[[float], float], target: float, ok: float, bad: float, rtol: float) -> float:
    """Geometric bisection between ``ok`` (``f(ok) <= target``) and ``bad`` (``f(bad) > target``), ``f`` monotone:
    a point with ``target (1 - rtol) <= f <= target``, or the last safe one after 200 halvings (never above)."""
    for _ in range(200):
        mid = math.sqrt(ok * bad)
        e = f(mid)
        if e <= target:
            ok = mid
            if e >= target * (1.0 - rtol):
                break
        else:
            bad = mid
    return ok


def _resolved_conversion(conversion: str) -> str:
    """The conversion ``conversion`` resolves to: ``"auto"`` is ``"pld"`` where ``dp_accounting`` imports."""
    how = _check_conversion(conversion)
    if how == "auto":
        return "pld" if pld_available() else "rdp-balle"
    return how
