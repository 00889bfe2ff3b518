"""Privacy accounting for dprec (pure Python: NumPy and SciPy).

This namespace is filled in as the accounting modules land; see the module docstrings.
"""

from __future__ import annotations

__all__: list[str] = []
