"""What tests/test_readme.py and tests/test_docs.py share: running a ```python block of the
documentation and checking its ``# prints: TEXT`` claims."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import sys

import pytest

CLAIM = re.compile(r"#\s*prints:\s*(.+?)\s*$", flags=re.M)
#: Modules a block may import that are optional for dprec, and the import that provides each.
OPTIONAL = {"torch": "torch", "flwr": "flwr", "scipy": "scipy", "dprec.accounting": "scipy", "dprec.flower": "flwr",
            "dprec.secagg": "scipy", "dprec.compare": "sklearn", "dprec.audit": "scipy"}


def skip_without_optional(code: str) -> None:
    """pytest.skip with the reason when the block imports an optional dependency that is missing."""
    for pattern, module in OPTIONAL.items():
        if re.search(rf"^\s*(import|from)\s+{re.escape(pattern)}\b", code, flags=re.M):
            if importlib.util.find_spec(module) is None:
                pytest.skip(f"needs {module}")
    if re.search(r"^\s*(import|from)\s+(flwr|dprec\.flower)\b", code, flags=re.M) and sys.version_info < (3, 11):
        pytest.skip("flwr needs Python >= 3.11")


def run_in_process(code: str, filename: str, name: str) -> str:
    """Run ``code`` in a fresh namespace (``__name__`` = ``name``); what it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, filename, "exec"), {"__name__": name})  # noqa: S102 - our own documentation
    return out.getvalue()


def check_claims(code: str, printed: str, where: str) -> None:
    """The block printed something, and every ``# prints:`` text of it."""
    assert printed.strip(), f"{where}: the block printed nothing"
    for claim in CLAIM.findall(code):
        assert claim in printed, f"{where} claims {claim!r} is printed, but the block printed:\n{printed}"
