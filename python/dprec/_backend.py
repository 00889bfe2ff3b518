"""Backend selection: "cpu" (native), "cuda" (native), "reference" (pure NumPy), "auto".

"auto" follows the data: GPU arrays run on "cuda", host arrays on "cpu" (or on the
reference when the native module is missing). Asking for a backend on data that lives
elsewhere is an error rather than a hidden copy.
"""

from __future__ import annotations

import importlib.util
import warnings
from types import ModuleType
from typing import Any

_native: ModuleType | None
try:  # the compiled module is optional at import time so that errors are reported clearly
    from . import _core as _native

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
_CUDA_BUILT = importlib.util.find_spec(f"{__package__}._cuda") is not None
if _CUDA_BUILT:
    try:
        from . import _cuda  # type: ignore[attr-defined,no-redef]
    except ImportError as exc:  # e.g. a libstdc++ too old for the extension
        _CUDA_IMPORT_ERROR = str(exc)

BACKENDS = ("auto", "cpu", "cuda", "reference")
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


def _check_name(backend: Any) -> None:
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")


def resolve(backend: Any, data: str | None = None, name: str = "the input", *, host_data: bool = True) -> str:
    """Map a user's backend argument to "cpu", "cuda" or "reference".

    ``data`` is where the call's arrays live: None for host memory, "cuda:N" for a GPU.
    ``host_data=False`` says the call has no array at all (e.g. a decode without ``out``),
    so that ``backend="cuda"`` may allocate on the GPU.
    """
    _check_name(backend)
    on_gpu = data is not None
    if backend == "auto":
        backend = "cuda" if on_gpu else ("cpu" if _native is not None else "reference")
    if backend == "cuda":
        if not cuda_available():
            raise ValueError(f"backend='cuda' is not available: {cuda_unavailable_reason()}")
        if not on_gpu and host_data:
            raise ValueError(
                f"{name} is on the host, but backend='cuda' needs GPU arrays; use backend='auto' or 'cpu', "
                "or move the data to a GPU"
            )
    elif on_gpu:
        raise ValueError(
            f"{name} is on {data}, but backend={backend!r} runs on the host; use backend='auto' or 'cuda', "
            "or copy the data to the host first"
        )
    elif backend == "cpu":
        native()
    return backend


def check_backend(backend: Any) -> None:
    """Validate a backend argument where no data is at hand (e.g. a codec's constructor)."""
    _check_name(backend)
    if backend == "cuda" and not cuda_available():
        raise ValueError(f"backend='cuda' is not available: {cuda_unavailable_reason()}")
    if backend == "cpu":
        native()


def available_backends() -> list[str]:
    """Backends usable on this machine, best first."""
    return (["cuda"] if cuda_available() else []) + (["cpu"] if _native is not None else []) + ["reference"]
