"""Every ```python block of the README runs as written and prints what it claims.

Each block runs in a fresh namespace (they are self-contained, as a reader copies them). A
block's ``# prints: TEXT`` comments state output that does not depend on private randomness;
the test checks that each such TEXT appears in what the block printed. Blocks that need an
optional dependency (PyTorch, Flower, SciPy) are skipped with the reason when it is missing.
"""

from __future__ import annotations

import pathlib
import re

import pytest

from .doc_blocks import check_claims, run_in_process, skip_without_optional

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
_BLOCK = re.compile(r"```python\n(.*?)```", flags=re.S)


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
    skip_without_optional(block)
    check_claims(block, run_in_process(block, str(README), "__readme__"), "the README")
