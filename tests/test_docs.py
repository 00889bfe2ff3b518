"""Every ```python block of the documentation site (docs/*.md) runs and prints what it claims.

The same convention as tests/test_readme.py: each block runs in a fresh namespace, and a
``# prints: TEXT`` comment states output the test checks for. A block that cannot run as-is says
so right above its fence with an HTML comment (invisible on the site), which the test obeys:

- ``<!-- test: skip (REASON) -->``: skipped, with REASON as the skip message (a reason is required);
- ``<!-- test: script -->``: run as a script file (``python block.py``, ``__name__ == "__main__"``)
  in a subprocess, for blocks that patch module state or spawn worker processes.

Blocks that import an optional dependency (PyTorch, Flower, SciPy) are skipped with the reason
when it is missing. Every block runs in a temporary working directory (some write plots).
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

from .doc_blocks import check_claims, run_in_process, skip_without_optional

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"
_BLOCK = re.compile(r"(?:<!--\s*test:\s*(?P<mode>[a-z]+)\s*(?:\((?P<reason>[^)]*)\))?\s*-->\s*\n)?```python\n(?P<code>.*?)```", flags=re.S)
_MODES = {"skip", "script"}


def _blocks() -> list[tuple[str, int, str, str, str]]:
    """(page, line, mode, reason, code) of every python block under docs/."""
    found = []
    if not DOCS.is_dir():
        return found
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        for m in _BLOCK.finditer(text):
            line = text.count("\n", 0, m.start("code"))
            found.append((page.relative_to(DOCS).as_posix(), line, m.group("mode") or "run",
                          (m.group("reason") or "").strip(), m.group("code")))
    return found


BLOCKS = _blocks()


def test_docs_have_python_examples():
    if not DOCS.is_dir():
        pytest.skip("docs/ is not next to the tests (installed package)")
    assert len(BLOCKS) >= 10, "the docs' python examples are missing"
    for page, line, mode, reason, code in BLOCKS:
        assert mode in _MODES | {"run"}, f"{page}:{line}: unknown test marker {mode!r} (known: {sorted(_MODES)})"
        assert mode != "skip" or reason, f"{page}:{line}: a skipped block must give its reason: <!-- test: skip (REASON) -->"
        assert "print(" in code, f"{page}:{line}: the block prints nothing"


@pytest.mark.parametrize(("page", "line", "mode", "reason", "code"), BLOCKS, ids=[f"{b[0]}:{b[1]}" for b in BLOCKS])
def test_docs_block_runs_and_prints_its_claims(page, line, mode, reason, code, tmp_path, monkeypatch):
    if mode == "skip":
        pytest.skip(f"{page}:{line}: {reason}")
    skip_without_optional(code)
    monkeypatch.chdir(tmp_path)
    if mode == "script":
        script = tmp_path / "block.py"
        script.write_text(code, encoding="utf-8")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
        assert proc.returncode == 0, f"{page}:{line} failed:\n{proc.stdout}\n{proc.stderr}"
        printed = proc.stdout
    else:
        printed = run_in_process(code, f"{DOCS / page}:{line}", "__docs__")
    check_claims(code, printed, f"{page}:{line}")
