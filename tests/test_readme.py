"""The README's usage example runs as written."""

from __future__ import annotations

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_readme_usage_example_runs():
    pytest.importorskip("torch")
    if not README.exists():
        pytest.skip("README.md is not next to the tests (installed package)")
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    assert blocks, "the README has no python example"
    namespace: dict = {}
    exec(compile(blocks[0], str(README), "exec"), namespace)  # noqa: S102 - our own README
    assert len(namespace["blob"]) == namespace["msg"].nbytes
    assert set(namespace["mean"]) == set(namespace["w_server"])
