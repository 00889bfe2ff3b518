"""Kernel dispatch: one choice of backend per call, from the data's device and ``backend=``.

Three backends offer the same operations with the same signatures (the protocol
:class:`Kernels`, documented in :mod:`dprec._runtime.backends`): ``"cpu"`` (the native module
``dprec._core``), ``"cuda"`` (``dprec._cuda``) and ``"reference"`` (pure NumPy, the
cross-check of the other two). A public function reads: validate its arguments
(:mod:`dprec._runtime.arrays`), :func:`select` the backend, call the operation, return the result.

``"auto"`` follows the data: GPU arrays run on ``"cuda"``, host arrays on ``"cpu"`` (or on
the reference when the native module is missing). Asking for a backend on data that lives
elsewhere is a ValueError rather than a hidden copy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import native as _native

if TYPE_CHECKING:
    from .array_view import Array
    from .backends import Kernels

BACKENDS = ("auto", "cpu", "cuda", "reference")


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
        backend = "cuda" if on_gpu else ("cpu" if _native.native_available() else "reference")
    if backend == "cuda":
        if not _native.cuda_available():
            raise ValueError(f"backend='cuda' is not available: {_native.cuda_unavailable_reason()}")
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
        _native.native()
    return backend


def check_backend(backend: Any) -> None:
    """Validate a backend argument where no data is at hand (e.g. a codec's constructor)."""
    _check_name(backend)
    if backend == "cuda" and not _native.cuda_available():
        raise ValueError(f"backend='cuda' is not available: {_native.cuda_unavailable_reason()}")
    if backend == "cpu":
        _native.native()


def available_backends() -> list[str]:
    """Backends usable on this machine, best first."""
    return (["cuda"] if _native.cuda_available() else []) + (["cpu"] if _native.native_available() else []) + [
        "reference"
    ]


_TABLE: dict[str, Kernels] = {}


def kernels(name: str) -> Kernels:
    """The operations of the resolved backend ``name`` ("cpu", "cuda" or "reference")."""
    if not _TABLE:  # filled on first use: the backends import this module's siblings
        from . import backends as _backends  # noqa: PLC0415

        _TABLE.update(_backends.BY_NAME)
    return _TABLE[name]


def select(backend: Any, data: Array | None, name: str = "the input", *, host_data: bool = True) -> Kernels:
    """The kernels for a call whose arrays live where ``data`` lives (None: no array).

    See :func:`resolve` for the rules; ``name`` is the argument named in errors.
    """
    where = data.label if data is not None and data.on_gpu else None
    return kernels(resolve(backend, where, name, host_data=host_data))


def select_host(backend: Any, data: Array | None, name: str, what: str) -> Kernels:
    """The kernels for a host-only operation (a SecAgg client's step: ``what`` names it).

    GPU data or ``backend="cuda"`` gets a ValueError saying that ``what`` runs on the host;
    otherwise as :func:`select`.
    """
    on_gpu = data is not None and data.on_gpu
    if on_gpu or (isinstance(backend, str) and backend == "cuda"):
        where = f"{name} is on {data.label}" if on_gpu and data is not None else "backend='cuda' was asked for"
        raise ValueError(
            f"{where}, but {what} runs on the host (it is the client's step): pass host arrays (copy GPU data to "
            "the host first) and backend='auto', 'cpu' or 'reference'"
        )
    return select(backend, data, name)


def owner(a: Array) -> Kernels:
    """The kernels that work on ``a``'s memory where it lies (conversions, scans)."""
    if a.device >= 0:
        return kernels("cuda")
    return kernels("cpu" if _native._native is not None else "reference")
