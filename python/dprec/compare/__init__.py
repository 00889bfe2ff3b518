"""``dprec compare``: every mechanism trains a model end to end, calibrated per threat model.

At one target epsilon and delta, each mechanism is calibrated by dprec's own accountant against
each observer it has a guarantee for, trained ``runs`` times on the same federated split (NumPy
models: no PyTorch needed), and reported with its accuracy (mean +- sd), its epsilon against every
observer (``inf`` with the reason where nothing is proved), its local epsilon, its bytes and its
time. The mechanisms (:data:`MECHANISMS`): FedAvg, DP-FedAvg, DP-REC (Poisson and with-replacement
sampling; the paper's Algorithm 7 as a labelled reproduction), the uncompressed local Gaussian,
DDG and Skellam under secure aggregation (with and without the count-sketch), QMGeo and
joint-noise DP-SGD. The federations: scikit-learn's digits (100 clients) and a synthetic
10,000-client softmax regression. See ``docs/compare.md``.

>>> from dprec.compare import compare                        # doctest: +SKIP
>>> result = compare(federations=("digits",), runs=3)        # doctest: +SKIP
>>> print(format_table(result))                              # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from .mechanisms import MECHANISMS, THREAT_MODELS
from .report import format_table, headline, write_plots
from .runner import FEDERATION_DEFAULTS, CompareConfig, CompareResult, run_compare

__all__ = [
    "FEDERATION_DEFAULTS",
    "MECHANISMS",
    "THREAT_MODELS",
    "CompareConfig",
    "CompareResult",
    "compare",
    "format_table",
    "headline",
    "run_compare",
    "write_plots",
]


def compare(**settings: Any) -> CompareResult:
    """Run a comparison: ``run_compare(CompareConfig(**settings))``.

    Keywords are :class:`CompareConfig`'s fields (``federations``, ``mechanisms``,
    ``threat_models``, ``epsilon``, ``delta``, ``runs``, ``rounds``, ...); an unknown keyword is a
    TypeError naming it.
    """
    import dataclasses  # noqa: PLC0415

    known = {f.name for f in dataclasses.fields(CompareConfig)}
    for key in settings:
        if key not in known:
            raise TypeError(f"compare() got an unknown setting {key!r}; valid: {sorted(known)}")
    for key in ("federations", "mechanisms", "threat_models"):
        if isinstance(settings.get(key), str):
            settings[key] = (settings[key],)
        elif key in settings:
            settings[key] = tuple(settings[key])
    return run_compare(CompareConfig(**settings))
