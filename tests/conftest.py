"""Shared fixtures: tests follow the hardware, parametrized over what this machine has."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

import numpy as np
import pytest

import dprec
from dprec._runtime import dispatch as _dispatch
from dprec._runtime import native as _native

# Backends that take host (NumPy) arrays; the CUDA backend has its own tests (test_cuda.py).
BACKENDS = [b for b in _dispatch.available_backends() if b != "cuda"]
CUDA = _native.cuda_available()
requires_cuda = pytest.mark.skipif(not CUDA, reason=f"no CUDA backend here: {_native.cuda_unavailable_reason()}")
NATIVE = _native.native_available()
ISAS = dprec.runtime.available_isas() if NATIVE else []

requires_native = pytest.mark.skipif(not NATIVE, reason="the native CPU module is not built")

# The host emulation of the CUDA kernels is a test-only module: source builds have it, the
# wheels (and builds with -DDPREC_GPU_EMULATION=OFF) leave it out, so its tests skip there.
EMULATION = importlib.util.find_spec("dprec._gpu_emulation") is not None
EMULATION_MISSING = (
    "dprec._gpu_emulation (the CUDA kernels run on the host, test-only) is not built: "
    "wheels and builds with -DDPREC_GPU_EMULATION=OFF leave it out"
)
requires_emulation = pytest.mark.skipif(not EMULATION, reason=EMULATION_MISSING)


def gpu_emulation() -> ModuleType:
    """``dprec._gpu_emulation``; skips the calling test (or fixture) with the reason when it is
    not built. A module that is there but fails to import is an error, not a skip."""
    if not EMULATION:
        pytest.skip(EMULATION_MISSING)
    return importlib.import_module("dprec._gpu_emulation")


def gpu_test_modules():
    """For a module of GPU tests: skip it (at collection, with the reason) unless dprec's CUDA
    backend and PyTorch's CUDA both work here; return ``(torch, cupy)``, cupy None when absent."""
    if not CUDA:
        pytest.skip(f"no usable CUDA backend: {dprec.cuda.unavailable_reason()}", allow_module_level=True)
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():  # pragma: no cover - dprec sees a GPU that torch does not
        pytest.skip("PyTorch has no CUDA support here", allow_module_level=True)
    try:
        import cupy
    except ImportError:  # pragma: no cover - CuPy is optional
        cupy = None
    return torch, cupy


@pytest.fixture(params=ISAS or [None], ids=lambda isa: isa or "no-native")
def isa(request):
    """Each SIMD instruction set this CPU supports, restored to 'auto' afterwards."""
    if request.param is None:
        pytest.skip("the native CPU module is not built")
    dprec.runtime.set_isa(request.param)
    yield request.param
    dprec.runtime.set_isa("auto")


@pytest.fixture
def threads():
    """Restores the default thread count after a test that changes it."""
    yield dprec.runtime.set_num_threads
    dprec.runtime.set_num_threads(0)


@pytest.fixture
def rng():
    return np.random.default_rng(20261121)
