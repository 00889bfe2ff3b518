"""The SecAgg pipelines' server side on a GPU array, run without a GPU.

With tests/fake_cuda.py standing in for ``dprec._cuda`` (device memory is registered host
memory; the kernels compute with the host emulation, so the values are a GPU's), the modular
sum, the lift, the inverse rotation and the unsketch of :meth:`DistributedPipeline.decode` all
run on the CUDA backend and must give the CPU's result. Real-GPU runs: tests/cuda/test_cuda_modular.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from dprec import secagg
from tests import fake_cuda as fc
from tests.fake_cuda import FakeGpuArray

fake_cuda = fc.fake_cuda  # the fixture, for pytest to find in this module


def _host(x):
    return x.host() if isinstance(x, FakeGpuArray) else np.asarray(x.get() if hasattr(x, "get") else x)


@pytest.mark.parametrize("cls", [secagg.DDGPipeline, secagg.SkellamPipeline], ids=["ddg", "skellam"])
@pytest.mark.parametrize("sketch", [None, (3, 40)], ids=["no-sketch", "sketch"])
@pytest.mark.parametrize("bits", [16, 40])
def test_server_side_on_the_gpu_equals_the_cpu(fake_cuda, cls, sketch, bits):
    pipe = cls(300, clip=1.0, bits=bits, num_clients=8, seed=3, noise_stddev=0.2, sketch=sketch)
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((8, 300)) * 0.05
    messages = np.stack([pipe.encode(x, rng=rng) for x in xs])
    total_cpu = pipe.aggregate(messages)
    mean_cpu = pipe.decode(total_cpu)
    fake_cuda.calls.clear()
    total_gpu = pipe.aggregate(FakeGpuArray(fake_cuda, messages, stream=77))
    mean_gpu = pipe.decode(total_gpu)
    np.testing.assert_array_equal(_host(total_gpu), total_cpu)
    np.testing.assert_array_equal(_host(mean_gpu), mean_cpu)
    names = {c.name for c in fake_cuda.calls}
    assert {"mod_sum", "mod_lift"} <= names
    assert fake_cuda.kernel_streams() == {77}


def test_device_array_reshape_is_a_view(fake_cuda):
    from dprec.cuda import DeviceArray

    a = DeviceArray((6,), "float64")
    b = a.reshape(2, 3)
    c = a.reshape((3, 2))
    assert b.shape == (2, 3) and c.shape == (3, 2) and b.ptr == a.ptr == c.ptr and a.shape == (6,)
    with pytest.raises(ValueError, match="cannot reshape"):
        a.reshape(4)
