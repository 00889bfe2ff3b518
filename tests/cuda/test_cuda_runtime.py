"""The CUDA backend's runtime layer where no GPU is needed: the device guard's decisions
(run on the host by the test-only ``dprec._gpu_emulation``, which needs no CUDA build), the
driver messages, where scratch memory comes from, which stream a CuPy array on another
device is worked on, and what a DLPack import waits for. The compiled ``dprec._cuda`` is
needed for some (it is built wherever nvcc was found); they skip without it.
"""

from __future__ import annotations

import re
import sys
import types

import numpy as np
import pytest

from dprec import rec
from dprec._runtime import arrays as _arrays
from dprec._runtime import frameworks as _frameworks
from dprec._runtime import native as _native
from tests import fake_cuda as fc
from tests.conftest import gpu_emulation, requires_native
from tests.fake_cuda import FakeGpuArray

cu = _native._cuda  # the real extension (None when not built), whatever a test installs later
fake_cuda = fc.fake_cuda  # the fixture, for pytest to find in this module
requires_cuda_build = pytest.mark.skipif(cu is None, reason="dprec was built without its CUDA extension")


# ---------------------------------------------------------------------------------------
# The device guard (issue 13, item 5)
# ---------------------------------------------------------------------------------------


def test_device_guard_does_nothing_on_the_current_device():
    assert gpu_emulation().device_guard_trace(current=1, has_context=True, target=1) == []
    assert gpu_emulation().device_guard_trace(current=0, has_context=False, target=0) == []


def test_device_guard_restores_the_previous_device_of_a_thread_with_a_context():
    assert gpu_emulation().device_guard_trace(current=0, has_context=True, target=1) == ["set_device(1)", "restore_device(0)"]
    assert gpu_emulation().device_guard_trace(current=2, has_context=True, target=0) == ["set_device(0)", "restore_device(2)"]


def test_device_guard_never_creates_a_context_on_gpu_0_for_a_fresh_thread():
    """A thread that never used CUDA reports device 0: restoring it would create GPU 0's
    context; the guard leaves the thread without a context instead."""
    calls = gpu_emulation().device_guard_trace(current=0, has_context=False, target=1)
    assert calls == ["set_device(1)", "clear_thread_context()"]
    assert not any(c.startswith("restore_device") for c in calls)


# ---------------------------------------------------------------------------------------
# Driver compatibility (item 10)
# ---------------------------------------------------------------------------------------


@requires_cuda_build
@pytest.mark.parametrize(
    "driver, runtime, needed",
    [(12040, 13000, "R580"), (11080, 12060, "R525"), (10020, 11080, "R450")],
)
def test_an_older_driver_major_version_names_the_driver_needed(driver, runtime, needed):
    message = cu.driver_mismatch_message(driver, runtime)
    assert needed in message
    assert f"built with CUDA {runtime // 1000}.{runtime % 1000 // 10}" in message
    assert f"supports CUDA {driver // 1000}.{driver % 1000 // 10}" in message
    assert f"rebuild dprec with a CUDA {driver // 1000}.x toolkit" in message


@requires_cuda_build
@pytest.mark.parametrize("driver, runtime", [(13000, 13000), (13020, 13000), (12020, 12080), (0, 13000)])
def test_a_compatible_driver_gives_no_message(driver, runtime):
    """Newer drivers run older toolkits, and within a major version CUDA's minor-version
    compatibility lets a newer toolkit run on an older driver (0: no driver, reported elsewhere)."""
    assert cu.driver_mismatch_message(driver, runtime) == ""


@requires_cuda_build
def test_this_build_reports_its_versions():
    assert cu.runtime_version() >= 11000
    reason = cu.unavailable_reason()
    assert isinstance(reason, str)
    if cu.driver_version() and cu.driver_version() // 1000 < cu.runtime_version() // 1000:
        assert "Update the driver" in reason


# ---------------------------------------------------------------------------------------
# Scratch memory (item 4)
# ---------------------------------------------------------------------------------------


def test_scratch_comes_from_the_callers_framework():
    torch_scratch = _frameworks.scratch_allocator("torch")
    cupy_scratch = _frameworks.scratch_allocator("cupy")
    assert torch_scratch is _frameworks.scratch_allocator("torch")  # one per framework
    assert type(torch_scratch).__name__ == "_TorchScratch" and type(cupy_scratch).__name__ == "_CupyScratch"
    assert _frameworks.scratch_allocator("dlpack") is None  # dprec's own pool
    assert _frameworks.scratch_allocator("cuda_array_interface") is None


@requires_native
def test_every_scratch_using_kernel_is_given_the_scratch_source(fake_cuda):
    x = FakeGpuArray(fake_cuda, np.linspace(-1, 1, 1000).astype(np.float32))
    rec.logits(x, 1, 2, 3, sigma=1.0)
    rec.sample_index(FakeGpuArray(fake_cuda, np.zeros(8)), gumbel=np.arange(8.0))
    used = {name for name, _ in fake_cuda.scratch_sources}
    assert {"norm_stats", "rec_dot_products", "gumbel_argmax"} <= used
    # A __cuda_array_interface__ producer has no allocator of its own: dprec's pool (None).
    assert all(source is None for _, source in fake_cuda.scratch_sources)


def test_torch_scratch_turns_out_of_memory_into_memory_error(monkeypatch):
    torch = pytest.importorskip("torch")

    def fail(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")

    monkeypatch.setattr(torch.cuda, "caching_allocator_alloc", fail)
    with pytest.raises(MemoryError, match="8 bytes of scratch on cuda:0 .*PyTorch"):
        _frameworks.scratch_allocator("torch").allocate(0, 0, 8)


# ---------------------------------------------------------------------------------------
# CuPy arrays on another device than the current one (item 6)
# ---------------------------------------------------------------------------------------


class _FakeCupyCuda:
    """Just enough of cupy.cuda: a current device, and a current stream per device."""

    def __init__(self, streams: dict[int, int], current: int) -> None:
        self.streams, self.current = streams, current
        outer = self

        class Device:
            def __init__(self, device: int) -> None:
                self.device, self.saved = device, None

            def __enter__(self):
                self.saved, outer.current = outer.current, self.device

            def __exit__(self, *exc):
                outer.current = self.saved

        self.Device = Device

    def get_current_stream(self):
        return types.SimpleNamespace(ptr=self.streams[self.current])


@requires_native
def test_a_cupy_array_runs_on_the_current_stream_of_its_own_device(fake_cuda, monkeypatch):
    """CuPy's __cuda_array_interface__ names the current stream of the *current* device;
    for an array on another device dprec takes CuPy's current stream of the array's device."""
    cuda = _FakeCupyCuda(streams={0: 0xA0, 1: 0xB1}, current=1)  # the array is on cuda:0
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=cuda))
    host = np.ones(16, np.float32)
    base = FakeGpuArray(fake_cuda, host)
    CupyLike = type("ndarray", (), {"__module__": "cupy._core.core"})
    x = CupyLike()
    interface = dict(base.__cuda_array_interface__, stream=0xB1)  # what CuPy exports: cuda:1's stream
    CupyLike.__cuda_array_interface__ = property(lambda self: interface)
    g = _arrays.read(x, "x")
    assert g.framework == "cupy" and g.device == 0
    assert g.stream == 0xA0
    assert cuda.current == 1  # the caller's current device is left alone


# ---------------------------------------------------------------------------------------
# DLPack imports (item 8)
# ---------------------------------------------------------------------------------------


@requires_cuda_build
def test_a_host_dlpack_import_is_not_treated_as_gpu_memory():
    t = cu.dlpack_import(np.arange(4.0).__dlpack__())
    assert not t.on_gpu
    assert t.stream == 0
    t.stream = 5  # the stream a GPU import would wait for before it is released
    assert t.stream == 5
    del t  # a host import releases at once, without touching a device


# ---------------------------------------------------------------------------------------
# What the kernels were compiled for (issue 14): reported without a GPU
# ---------------------------------------------------------------------------------------

_CMAKE_CUDA_ARCH = r"^(\d{2,3}[af]?(-real|-virtual)?|native|all|all-major)$"


@requires_cuda_build
def test_build_architectures_names_cmake_cuda_targets():
    import dprec.cuda

    archs = dprec.cuda.build_architectures()
    assert archs, "a CUDA build must say which GPUs its kernels are for"
    for arch in archs:
        assert re.match(_CMAKE_CUDA_ARCH, arch), arch


@requires_cuda_build
def test_dprec_info_prints_the_cuda_targets(capsys):
    from dprec.__main__ import main

    main(["info"])
    out = capsys.readouterr().out
    assert "CUDA kernels built for: " + ", ".join(_native.cuda_build_architectures()) in out


def test_build_architectures_is_empty_without_the_cuda_extension(monkeypatch):
    import dprec.cuda

    monkeypatch.setattr(_native, "_cuda", None)
    assert dprec.cuda.build_architectures() == []
