"""Every ```python block of the README runs as written and prints what it claims.

Each block runs in a fresh namespace (they are self-contained, as a reader copies them). A
block's ``# prints: TEXT`` comments state output that does not depend on private randomness;
the test checks that each such TEXT appears in what the block printed. Blocks that need an
optional dependency (PyTorch, Flower, SciPy) are skipped with the reason when it is missing.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import pathlib
import re
import sys

import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
_BLOCK = re.compile(r"```python\n(.*?)```", flags=re.S)
_CLAIM = re.compile(r"#\s*prints:\s*(.+?)\s*$", flags=re.M)
# Top-level modules a block may import that are optional for dprec.
_OPTIONAL = {"torch": "torch", "flwr": "flwr", "scipy": "scipy", "dprec.accounting": "scipy", "dprec.flower": "flwr", "dprec.secagg": "scipy"}


def _blocks() -> list[str]:
    if not README.exists():
        return []
    return _BLOCK.findall(README.read_text(encoding="utf-8"))


def _block_id(block: str) -> str:
    first = next((ln for ln in block.splitlines() if ln.strip() and not ln.startswith(("import", "from"))), "block")
    return re.sub(r"\W+", "_", first.strip())[:40]


BLOCKS = _blocks()


def test_readme_has_python_examples():
    if not README.exists():
        pytest.skip("README.md is not next to the tests (installed package)")
    # The README keeps three examples (NumPy, PyTorch, Flower); the rest live in docs/ (tests/test_docs.py).
    assert len(BLOCKS) >= 3, "the README's python examples are missing"
    for block in BLOCKS:
        assert "print(" in block, f"README block does not print anything:\n{block}"


@pytest.mark.parametrize("block", BLOCKS, ids=[_block_id(b) for b in BLOCKS])
def test_readme_block_runs_and_prints_its_claims(block):
    for pattern, module in _OPTIONAL.items():
        if re.search(rf"^\s*(import|from)\s+{re.escape(pattern)}\b", block, flags=re.M):
            if importlib.util.find_spec(module) is None:
                pytest.skip(f"needs {module}")
    if re.search(r"^\s*(import|from)\s+(flwr|dprec\.flower)\b", block, flags=re.M) and sys.version_info < (3, 11):
        pytest.skip("flwr needs Python >= 3.11")
    out = io.StringIO()
    namespace: dict = {"__name__": "__readme__"}
    with contextlib.redirect_stdout(out):
        exec(compile(block, str(README), "exec"), namespace)  # noqa: S102 - our own README
    printed = out.getvalue()
    assert printed.strip(), "the block printed nothing"
    for claim in _CLAIM.findall(block):
        assert claim in printed, f"the README claims {claim!r} is printed, but the block printed:\n{printed}"
