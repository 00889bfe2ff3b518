"""The layering of README "Architecture", checked on the source: who may import whom, and that
the three backends offer the same operations with the same signatures."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import dprec
from dprec._runtime import backends as _backends

PACKAGE = Path(dprec.__file__).resolve().parent
NATIVE = {"dprec._runtime.native", "dprec._core", "dprec._cuda", "dprec._runtime.backends.cpu", "dprec._runtime.backends.cuda"}
KERNEL_LAYERS = NATIVE | {"dprec._runtime.arrays", "dprec._runtime.frameworks", "dprec._runtime.dispatch", "dprec._runtime.backends"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every dprec module ``path`` imports, at any depth of the file (lazy imports included)."""
    here = _module_name(path)
    package = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return {m for m in found if m == "dprec" or m.startswith("dprec.")}


def _files(*relative: str) -> list[Path]:
    out: list[Path] = []
    for r in relative:
        p = PACKAGE / r
        out.extend(sorted(p.rglob("*.py")) if p.is_dir() else [p])
    return out


@pytest.mark.parametrize("path", _files("reference"), ids=lambda p: p.name)
def test_reference_imports_nothing_but_constants(path):
    allowed = {"dprec.constants", "dprec.reference"}
    bad = {m for m in _imports(path) if not any(m == a or m.startswith(a + ".") for a in allowed)}
    assert not bad, f"{path.name} imports {sorted(bad)}"


@pytest.mark.parametrize("path", _files("accounting"), ids=lambda p: p.name)
def test_accounting_never_imports_the_kernels(path):
    bad = {m for m in _imports(path) if any(m == k or m.startswith(k + ".") for k in KERNEL_LAYERS)}
    assert not bad, f"{path.name} imports {sorted(bad)}"


def test_reference_backend_never_imports_a_compiled_module():
    bad = _imports(PACKAGE / "_backends" / "reference.py") & NATIVE
    assert not bad, sorted(bad)


@pytest.mark.parametrize(
    "name",
    ["rec", "philox", "hadamard", "sketch", "codec", "message", "qmgeo", "qmgeo_codec",
     "secagg/__init__", "secagg/noise", "secagg/rounding", "secagg/modular", "secagg/pipeline"],
)
def test_public_modules_reach_kernels_only_through_dispatch(name):
    bad = _imports(PACKAGE / f"{name}.py") & (NATIVE | {"dprec._runtime.backends"})
    assert not bad, f"dprec.{name} imports {sorted(bad)}"


def test_message_needs_no_kernels():
    bad = {m for m in _imports(PACKAGE / "message.py") if any(m.startswith(k) for k in KERNEL_LAYERS)}
    assert not bad, sorted(bad)


def _operations() -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(fn)
        for name, fn in vars(_backends.Kernels).items()
        if callable(fn) and not name.startswith("_")
    }


def test_protocol_lists_the_operations():
    assert {"stream_normals", "dot_products", "gumbel_argmax", "fwht", "count_sketch_encode"} <= set(_operations())


@pytest.mark.parametrize("backend", sorted(_backends.BY_NAME))
def test_every_backend_offers_every_operation_with_its_signature(backend):
    kernels = _backends.BY_NAME[backend]
    assert kernels.name == backend
    for name, want in _operations().items():
        got = inspect.signature(getattr(kernels, name))  # bound or static: no ``self``
        want_params = [p for p in want.parameters.values() if p.name != "self"]
        assert [p.name for p in got.parameters.values()] == [p.name for p in want_params], (backend, name)
