"""Privacy guarantees that say whom they hold against: threat models, relations, the result object.

Threat models (:data:`THREAT_MODELS`)
-------------------------------------
``"central"``
    A trusted aggregator decodes and releases only aggregates; the observer sees the sequence of
    global models.
``"messages"``
    The observer sees every client message but not who sent it (a shuffler, or the DP-REC paper's
    server-to-client history broadcast, Alg. 5/6).
``"server"``
    The observer knows which client sent each message (an honest-but-curious server; Flower's
    default deployment).

The server sees more than a message observer, which sees more than a central one, so a bound that
holds for ``"server"`` holds for ``"messages"`` and ``"central"`` (post-processing), and one for
``"messages"`` holds for ``"central"``.

Neighbouring relations (:data:`RELATIONS`)
------------------------------------------
``"add_remove"``
    One client's participation added or removed (``N`` against ``N - 1`` clients).
``"zero"``
    One client's data replaced by data that gives a zero update (the same ``N``).

Every result reports both relations where a bound is proved (``epsilons``), ``inf`` with a reason
(``reasons``) where none is, and ``epsilon`` is the one for the requested ``relation``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

__all__ = [
    "RELATIONS",
    "THREAT_MODELS",
    "LocalGuarantee",
    "PrivacyGuarantee",
    "check_relation",
    "check_threat_model",
]

#: Who observes what (see the module docstring), weakest observer first.
THREAT_MODELS = ("central", "messages", "server")
#: Neighbouring relations (see the module docstring).
RELATIONS = ("add_remove", "zero")


def check_threat_model(value: Any, name: str = "threat_model") -> str:
    """``value`` if it is one of :data:`THREAT_MODELS`; ValueError naming ``name`` and the choices otherwise."""
    if not isinstance(value, str) or value not in THREAT_MODELS:
        raise ValueError(f"{name} must be one of {THREAT_MODELS}, got {value!r}")
    return value


def check_relation(value: Any, name: str = "relation") -> str:
    """``value`` if it is one of :data:`RELATIONS`; ValueError naming ``name`` and the choices otherwise."""
    if not isinstance(value, str) or value not in RELATIONS:
        raise ValueError(f"{name} must be one of {RELATIONS}, got {value!r}")
    return value


@dataclass(frozen=True)
class LocalGuarantee:
    """What one client's own messages reveal about that client (the local guarantee).

    Attributes
    ----------
    per_message : float
        Epsilon of a single message (no sampling amplification), at the result's delta.
    expected_participations : int
        The expected number of rounds (messages) the client takes part in, rounded up
        (``T B / N`` with replacement, ``T q`` otherwise). Informational.
    epsilon_expected : float
        Epsilon over ``expected_participations`` messages, at the result's delta.
    max_participations : int
        ``k_max``: the smallest ``k`` with ``P(Bin(steps, q) > k) <= tail_probability``.
    epsilon_max : float
        Epsilon over ``k_max`` messages, at the result's delta.
    delta_max : float
        The delta of ``epsilon_max``: the result's delta plus ``tail_probability`` (participation
        is data-independent, so the event "more than ``k_max`` participations" is paid in delta).
    tail_probability : float
        The tail of the participation count allowed for (default ``delta / 10``).
    """

    per_message: float
    expected_participations: int
    epsilon_expected: float
    max_participations: int
    epsilon_max: float
    delta_max: float
    tail_probability: float

    def summary(self) -> str:
        """One line."""
        return (
            f"local: eps {self.per_message:.4g} per message, {self.epsilon_expected:.4g} over the expected "
            f"{self.expected_participations} participations, {self.epsilon_max:.4g} (delta {self.delta_max:.3g}) "
            f"over at most {self.max_participations} (exceeded with probability <= {self.tail_probability:.3g})"
        )


@dataclass(frozen=True)
class PrivacyGuarantee:
    """An (epsilon, delta) guarantee together with what it protects against.

    Attributes
    ----------
    mechanism : str
        E.g. ``"dprec"``, ``"gaussian"``, ``"joint_noise"``, ``"ddg"``, ``"skellam"``, ``"qmgeo"``,
        ``"composition"``.
    epsilon, delta : float
        ``epsilon`` for ``relation`` (``inf`` when no bound is proved; see ``reasons``).
    threat_model : str or None
        One of :data:`THREAT_MODELS`; None for the DP-REC paper's analysis (``method="paper"``),
        which is not a guarantee under a threat model.
    relation : str or None
        One of :data:`RELATIONS`; None with ``method="paper"``.
    epsilons : dict
        Relation -> epsilon, for both relations (``inf`` where none is proved).
    reasons : dict
        Relation -> why there is no bound, for the infinite entries only.
    sampling : str or None
        How clients (records) are sampled.
    composition : str
        How steps are composed (text).
    conversion : str
        How the composed curve becomes (epsilon, delta) (text: ``"pld"``, ``"rdp-balle"``, ...).
    method : str or None
        The accounting method (``"sound"``/``"paper"`` for DP-REC).
    local : LocalGuarantee or None
        The local guarantee beside the central one (DP-REC).
    order : float or None
        The Renyi order that gave ``epsilon`` (None for PLD or when infinite).
    caveat : str or None
        What the number does not mean (e.g. the paper's Algorithm 7).
    details : object or None
        The mechanism-specific result (e.g. :class:`dprec.accounting.DPRECAccounting`).
    """

    mechanism: str
    epsilon: float
    delta: float
    threat_model: Optional[str]
    relation: Optional[str]
    epsilons: dict = field(default_factory=dict)
    reasons: dict = field(default_factory=dict)
    sampling: Optional[str] = None
    composition: str = ""
    conversion: str = ""
    method: Optional[str] = None
    local: Optional[LocalGuarantee] = None
    order: Optional[float] = None
    caveat: Optional[str] = None
    details: Any = None

    @property
    def finite(self) -> bool:
        """Whether a bound is proved (``epsilon`` is finite)."""
        return math.isfinite(self.epsilon)

    def summary(self) -> str:
        """A few human-readable lines naming the threat model, relation, sampling, composition,
        conversion and the local guarantee."""
        if self.threat_model is None:
            head = f"{self.mechanism}: epsilon {self.epsilon:.4g} at delta {self.delta:.3g} (no threat model)"
        elif self.finite:
            head = (
                f"{self.mechanism}: ({self.epsilon:.4g}, {self.delta:.3g})-DP against the {self.threat_model!r} "
                f"observer, relation {self.relation!r}"
            )
        else:
            head = (
                f"{self.mechanism}: NO guarantee against the {self.threat_model!r} observer under relation "
                f"{self.relation!r}: {self.reasons.get(self.relation, 'no bound is proved')}"
            )
        lines = [head]
        others = [
            f"{rel}: {'inf' if not math.isfinite(eps) else f'{eps:.4g}'}"
            for rel, eps in self.epsilons.items()
            if rel != self.relation
        ]
        if others:
            lines.append("other relations: " + ", ".join(others))
        parts = []
        if self.sampling:
            parts.append(f"sampling {self.sampling}")
        if self.composition:
            parts.append(f"composition: {self.composition}")
        if self.conversion:
            parts.append(f"conversion: {self.conversion}")
        if self.method:
            parts.append(f"method {self.method}")
        if parts:
            lines.append("; ".join(parts))
        if self.local is not None:
            lines.append(self.local.summary())
        if self.caveat:
            lines.append(f"caveat: {self.caveat}")
        return "\n".join(lines)


#: Why distributed noise (every client adds a share; secure aggregation reveals the sum) has no
#: add/remove guarantee here: its curves are for one client's update changing while every client
#: still adds its share.
NOISE_SHARE_REASON = (
    "removing a client also removes its share of the noise, so the total noise changes, not only its mean, "
    "which the curve does not cover; relation='zero' (the client stays, sending a zero update) is covered"
)

#: Why secure aggregation alone does not give DP-FedAvg an add/remove guarantee against a message observer.
MASKED_COUNT_REASON = (
    "with secure aggregation a message observer still sees how many masked messages a round has, which "
    "reveals whether the client took part and which the sampled-Gaussian curve does not cover; "
    "relation='zero' is covered by the participation mixture (no amplification)"
)
