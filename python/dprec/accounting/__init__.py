"""Privacy accounting for dprec (pure Python: NumPy and SciPy).

This namespace is filled in as the accounting modules land; see the module docstrings.
"""

from __future__ import annotations

from .rdp import CONVERSION_METHODS, DEFAULT_ORDERS, rdp_to_delta, rdp_to_epsilon, sampled_gaussian_rdp

__all__ = [
    "CONVERSION_METHODS",
    "DEFAULT_ORDERS",
    "rdp_to_delta",
    "rdp_to_epsilon",
    "sampled_gaussian_rdp",
]
