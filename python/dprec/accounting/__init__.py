"""Privacy accounting for dprec (pure Python: NumPy and SciPy).

Every result names the threat model it holds against (``"server"``, ``"messages"``,
``"central"``) and the neighbouring relation (``"zero"``, ``"add_remove"``).

Modules
-------
dprec.accounting.dprec_rec
    DP-REC: central and local epsilon, delta, calibration of ``c = C / sigma`` for clients
    sampled with replacement (the paper's model), by Poisson sampling or without replacement
    (:data:`SAMPLING_SCHEMES`); :class:`DPRECRoundAccountant` for a server loop (with
    ``quantile_noise``, adaptive clipping's noisy quantile bits too: :func:`quantile_bits_rdp`).
dprec.accounting.rdp
    Sampled Gaussian RDP (with and without replacement) and RDP -> (eps, delta) conversions.
dprec.accounting.baselines
    The (sampled) Gaussian mechanism (DP-FedAvg, joint noise) under a threat model, by PLD
    (``dp_accounting``, optional) or the improved RDP conversion.
dprec.accounting.guarantee
    Threat models, neighbouring relations and the result objects :class:`PrivacyGuarantee` and
    :class:`LocalGuarantee`.
dprec.accounting.accountant
    :class:`Accountant`, composing heterogeneous events (DP-REC steps, Gaussian, sampled
    Gaussian, DDG, Skellam, QMGeo, any RDP curve) like dp_accounting's ``RdpAccountant`` and
    Opacus' ``RDPAccountant``.
dprec.accounting.joint_noise
    Joint noise scaling through secure aggregation (Heikkila et al.).
dprec.accounting.qmgeo
    QMGeo (Wang and Gursoy): the paper's formulas, labelled as the paper's, and the exact Renyi
    divergence of the implemented quantizer.
dprec.accounting.discrete
    Distributed discrete Gaussian and Skellam: RDP, epsilon and noise calibration.

Every function validates its parameters and raises ``ValueError`` (``TypeError`` for a wrong
type) naming the offending parameter. SciPy is required (``pip install dprec[accounting]``).
See the *Privacy accounting* and *Which guarantee do I have?* pages of the documentation.
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
    SecAggRoundEvent,
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
    "SecAggRoundEvent",
    "baselines",
    "discrete",
    "guarantee",
    "joint_noise",
    "qmgeo",
]
__all__ += baselines.__all__ + dprec_rec.__all__ + guarantee.__all__ + discrete.__all__ + joint_noise.__all__ + qmgeo.__all__
