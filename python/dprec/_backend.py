"""Backend selection: "cpu" (native), "reference" (pure NumPy), "cuda", "auto"."""

from __future__ import annotations

from types import ModuleType
from typing import Any

_native: ModuleType | None
try:  # the compiled module is optional at import time so that errors are reported clearly
    from . import _core as _native
    _NATIVE_ERROR = ""
except ImportError as exc:  # pragma: no cover - only on a broken install
    _native = None
    _NATIVE_ERROR = str(exc)

BACKENDS = ("auto", "cpu", "cuda", "reference")
CUDA_UNAVAILABLE_REASON = "the CUDA backend is not built in this version of dprec"


def native() -> ModuleType:
    """The compiled CPU module, or RuntimeError saying why it is missing."""
    if _native is None:
        raise RuntimeError(f"the native CPU backend failed to import: {_NATIVE_ERROR}")
    return _native


def native_available() -> bool:
    return _native is not None


def resolve(backend: Any) -> str:
    """Map a user's backend argument to "cpu" or "reference"."""
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "cuda":
        raise ValueError(f"backend='cuda' is not available: {CUDA_UNAVAILABLE_REASON}")
    if backend == "auto":
        return "cpu" if _native is not None else "reference"
    if backend == "cpu":
        native()
    return backend


def available_backends() -> list[str]:
    """Backends usable on this machine, best first."""
    return (["cpu"] if _native is not None else []) + ["reference"]
