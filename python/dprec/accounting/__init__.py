"""Privacy accounting for dprec (pure Python: NumPy and SciPy).

Modules
-------
dprec.accounting.rdp
    Sampled Gaussian RDP (Mironov, Talwar and Zhang 2019), the Gaussian on a sample drawn without
    replacement (Wang, Balle and Kasiviswanathan 2019) and RDP -> (eps, delta) conversions
    (Mironov 2017; Balle et al. 2020 / Canonne, Kamath and Steinke 2020).
dprec.accounting.dprec_rec
    The DP-REC accountant (Triastcyn, Reisser and Louizos, final version, Algorithm 7 and
    Appendix B.2.2): central and local epsilon, delta, calibration of ``c = C / sigma``, for
    clients sampled with replacement (the paper's model: each draw a mixture of the target's
    message with the prior ``p``), by Poisson sampling or without replacement
    (:data:`SAMPLING_SCHEMES`); :class:`DPRECRoundAccountant` for a server loop; the bit-width
    rule (:class:`DPRECPrivacyWarning`, :func:`dprec_min_bits`). Under Poisson sampling an
    unsampled client sends nothing, so with messages attributed to clients and the target's
    update against a zero update, a round costs exactly
    ``log(1 - q + q exp(a (a-1) c^2 / 2)) / (a-1)`` in either direction, against any observer
    including the server: unlike DP-FedAvg (server-side noise), DP-REC gets no sampled-Gaussian
    amplification from Poisson sampling.
dprec.accounting.baselines
    Tight baselines: the (sampled) Gaussian mechanism (DP-FedAvg, joint noise) under a threat
    model, by PLD (``dp_accounting``, optional) or the improved RDP conversion.
dprec.accounting.guarantee
    Threat models (``"central"``, ``"messages"``, ``"server"``), neighbouring relations
    (``"add_remove"``, ``"zero"``) and the result object :class:`PrivacyGuarantee` (with
    :class:`LocalGuarantee`) that states whom a guarantee holds against.
dprec.accounting.accountant
    :class:`Accountant`, composing heterogeneous events (DP-REC steps, Gaussian, sampled
    Gaussian, DDG, Skellam, QMGeo, any RDP curve) like dp_accounting's ``RdpAccountant`` and
    Opacus' ``RDPAccountant``.
dprec.accounting.joint_noise
    Joint noise scaling through secure aggregation (Heikkila et al.): ``sigma_total`` and the
    sampled-Gaussian accounting of S local steps per round over T rounds.
dprec.accounting.qmgeo
    QMGeo (Wang and Gursoy): the paper's eqs. (20), (23), (25)-(27), labelled as the paper's,
    and the exact Renyi divergence of the corrected pmf of SPEC §5.
dprec.accounting.discrete
    Distributed discrete Gaussian (Kairouz, Liu and Steinke 2021; Chen et al. Theorem E.1) and
    Skellam (Agarwal, Kairouz and Liu 2021): RDP, epsilon and noise calibration.

Every function validates its parameters and raises ``ValueError`` (``TypeError`` for a wrong
type) naming the offending parameter. SciPy is required (``pip install dprec[accounting]``).
"""

from __future__ import annotations

try:
    import scipy  # noqa: F401
except ImportError as exc:  # pragma: no cover - scipy is installed wherever the tests run
    raise ImportError(
        "dprec.accounting needs SciPy (special functions, root finding); install it with "
        "`pip install dprec[accounting]` or `pip install scipy`"
    ) from exc

from . import baselines, discrete, dprec_rec, guarantee, joint_noise, qmgeo
from .accountant import (
    NOISE_PLACEMENTS,
    Accountant,
    DDGEvent,
    DPRECEvent,
    GaussianEvent,
    PrivacyEvent,
    QMGeoEvent,
    RdpEvent,
    SampledGaussianEvent,
    SkellamEvent,
)
from .baselines import *  # noqa: F401,F403
from .discrete import *  # noqa: F401,F403 - re-exported, listed in __all__ below
from .dprec_rec import *  # noqa: F401,F403 - re-exported, listed in __all__ below
from .guarantee import *  # noqa: F401,F403
from .joint_noise import *  # noqa: F401,F403
from .qmgeo import *  # noqa: F401,F403
from .rdp import (
    CONVERSION_METHODS,
    DEFAULT_ORDERS,
    epsilon_per_order,
    rdp_to_delta,
    rdp_to_epsilon,
    sampled_gaussian_rdp,
    sampled_gaussian_rdp_without_replacement,
)

__all__ = [
    "NOISE_PLACEMENTS",
    "Accountant",
    "CONVERSION_METHODS",
    "DEFAULT_ORDERS",
    "DPRECEvent",
    "GaussianEvent",
    "PrivacyEvent",
    "RdpEvent",
    "SampledGaussianEvent",
    "epsilon_per_order",
    "rdp_to_delta",
    "rdp_to_epsilon",
    "sampled_gaussian_rdp",
    "sampled_gaussian_rdp_without_replacement",
    "DDGEvent",
    "QMGeoEvent",
    "SkellamEvent",
    "baselines",
    "discrete",
    "guarantee",
    "joint_noise",
    "qmgeo",
]
__all__ += baselines.__all__ + dprec_rec.__all__ + guarantee.__all__ + discrete.__all__ + joint_noise.__all__ + qmgeo.__all__
