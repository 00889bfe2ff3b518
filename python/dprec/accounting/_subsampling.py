"""Privacy amplification by Poisson subsampling for an arbitrary RDP curve (integer orders).

Paper and equation
------------------
Zhu and Wang, "Poisson Subsampled Renyi Differential Privacy", ICML 2019, the general upper
bound (their Theorem 5 in the ICML version): if a mechanism M is (l, eps(l))-RDP at every
integer order l >= 2 under add/remove-one adjacency, then running M on a Poisson subsample
(each record kept independently with probability q) is (a, eps_q(a))-RDP for integer a >= 2 with

    eps_q(a) = 1/(a-1) log[ (1-q)^(a-1) (a q - q + 1)
                            + C(a, 2) q^2 (1-q)^(a-2) exp(eps(2))
                            + 3 sum_{l=3}^{a} C(a, l) q^l (1-q)^(a-l) exp((l-1) eps(l)) ].

No condition on M beyond its RDP curve is needed (the tight variant, their Theorem 6, needs
extra structure and is not used here). Because subsampling never hurts, the result is also
capped by the unsampled ``eps(a)``.

The theorem number was checked against a secondary source only (the docstrings of Google's
``distributed_dp/accounting_utils.py``, which calls this bound "Theorem 5"); the formula itself
is checked in the tests against the exact subsampled Gaussian RDP, which it must upper-bound.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
from scipy.special import gammaln, logsumexp


def poisson_subsampled_rdp(
    orders: np.ndarray,
    q: float,
    base_rdp: Callable[[np.ndarray], np.ndarray],
) -> np.ndarray:
    """Zhu-Wang (2019) general Poisson-subsampling bound, evaluated at each order.

    Parameters
    ----------
    orders : numpy.ndarray
        Validated Renyi orders (> 1). Non-integer orders get ``inf``: the bound only exists at
        integer orders, and ``inf`` lets an accountant that mixes order grids simply skip them.
    q : float
        Validated sampling rate in (0, 1]. ``q = 1`` returns ``base_rdp(orders)`` unchanged.
    base_rdp : callable
        Maps an array of orders to the unsampled RDP at those orders (>= 0, ``inf`` allowed).

    Returns
    -------
    numpy.ndarray
        The subsampled RDP, ``min(Zhu-Wang bound, base_rdp(order))`` at integer orders.
    """
    if q == 1.0:
        return np.asarray(base_rdp(orders), dtype=np.float64)
    out = np.full(orders.shape, np.inf)
    is_int = orders == np.floor(orders)
    if not np.any(is_int):
        return out
    max_order = int(orders[is_int].max())
    ls = np.arange(2, max_order + 1, dtype=np.float64)
    eps_l = np.asarray(base_rdp(ls), dtype=np.float64)  # eps(2), ..., eps(max_order)
    log_q, log_1mq = math.log(q), math.log1p(-q)
    for n, alpha in enumerate(orders.tolist()):
        if not alpha.is_integer():
            continue
        a = int(alpha)
        l_vals = np.arange(2, a + 1, dtype=np.float64)
        log_binom = gammaln(a + 1.0) - gammaln(l_vals + 1.0) - gammaln(a - l_vals + 1.0)
        # l = 2 term uses exp(eps(2)) (not exp((2-1) eps(2)) times 3); l >= 3 terms carry the factor 3.
        log_terms = log_binom + l_vals * log_q + (a - l_vals) * log_1mq
        with np.errstate(invalid="ignore"):
            log_terms = log_terms + (l_vals - 1.0) * eps_l[: a - 1]
        weights = np.full(l_vals.shape, 3.0)
        weights[0] = 1.0
        head = (a - 1.0) * log_1mq + math.log1p((a - 1.0) * q)  # (1-q)^(a-1) (a q - q + 1)
        if np.any(np.isinf(log_terms)):
            bound = math.inf
        else:
            bound = float(logsumexp(np.concatenate([[head], log_terms]), b=np.concatenate([[1.0], weights])))
            bound /= a - 1.0
        unsampled = float(eps_l[a - 2])
        out[n] = max(0.0, min(bound, unsampled))
    return out
