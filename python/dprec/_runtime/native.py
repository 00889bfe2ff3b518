"""The compiled modules: ``dprec._core`` (CPU kernels, always built) and ``dprec._cuda``
(CUDA kernels, optional), loaded once, with the reason when one cannot be used.

Only this module and the native backends (``dprec._runtime.backends.cpu``, ``dprec._runtime.backends.cuda``)
touch the compiled modules; the public API reaches them through ``dprec._runtime.dispatch``.
"""

from __future__ import annotations

import importlib.util
import warnings
from types import ModuleType

_native: ModuleType | None
try:  # the compiled module is optional at import time so that errors are reported clearly
    from .. import _core as _native

    _NATIVE_ERROR = ""
except ImportError as exc:  # pragma: no cover - only on a broken install
    _native = None
    _NATIVE_ERROR = str(exc)



def warn_num_threads_env(stacklevel: int = 2) -> None:
    """RuntimeWarning when DPREC_NUM_THREADS is set to something the native pool ignores.

    The rule lives in the native module (csrc/cpu/parallel.cpp): a decimal integer in
    [0, 4096], surrounding whitespace allowed; empty means unset. Anything else is ignored
    and the default (every core) is used.
    """
    if _native is None:  # pragma: no cover - only on a broken install
        return
    problem = str(_native.num_threads_env_problem())
    if problem:
        warnings.warn(f"{problem} ({int(_native.get_num_threads())} threads)", RuntimeWarning, stacklevel=stacklevel + 1)


warn_num_threads_env()

_cuda: ModuleType | None = None
_CUDA_IMPORT_ERROR = ""
# Built only where a CUDA compiler was found; loading it needs no GPU or driver.
_CUDA_BUILT = importlib.util.find_spec("dprec._cuda") is not None
if _CUDA_BUILT:
    try:
        from .. import _cuda  # type: ignore[attr-defined,no-redef]
    except ImportError as exc:  # e.g. a libstdc++ too old for the extension
        _CUDA_IMPORT_ERROR = str(exc)

_cuda_reason: str | None = None  # cached: why no device is usable ("" when one is)


def native() -> ModuleType:
    """The compiled CPU module, or RuntimeError saying why it is missing."""
    if _native is None:
        raise RuntimeError(f"the native CPU backend failed to import: {_NATIVE_ERROR}")
    return _native


def native_available() -> bool:
    return _native is not None


def cuda_built() -> bool:
    """True when the CUDA extension was built and imports (a GPU may still be missing)."""
    return _cuda is not None


def cuda_unavailable_reason() -> str:
    """Why the CUDA backend cannot run here; '' when it can. Asks the driver once."""
    global _cuda_reason
    if _cuda_reason is None:
        if not _CUDA_BUILT:
            _cuda_reason = "this build of dprec has no CUDA backend (no CUDA compiler was found when it was built)"
        elif _cuda is None:
            _cuda_reason = f"the CUDA extension failed to import: {_CUDA_IMPORT_ERROR}"
        else:
            _cuda_reason = str(_cuda.unavailable_reason())
    return _cuda_reason


def cuda_available() -> bool:
    return cuda_unavailable_reason() == ""


def device_count() -> int:
    """Usable CUDA devices; 0 without a CUDA build, a driver or a GPU (never raises)."""
    return int(_cuda.device_count()) if _cuda is not None else 0


def cuda_build_architectures() -> list[str]:
    """The CUDA architectures the kernels were built for; [] when the CUDA extension is absent."""
    if _cuda is None:
        return []
    return [a for a in str(_cuda.build_architectures()).split(",") if a]


def cuda_module() -> ModuleType:
    """The compiled CUDA module (ValueError with the reason when it cannot be used)."""
    if _cuda is None or not cuda_available():
        raise ValueError(f"the CUDA backend is unavailable: {cuda_unavailable_reason()}")
    return _cuda
