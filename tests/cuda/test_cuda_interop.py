"""The CUDA backend's Python and binding layers, checked without a GPU (docs/gpu.md, docs/bad-input.md).

What can be checked on any machine where ``dprec._cuda`` is built: the reason the backend
is unavailable and that every CUDA request reports it; the DLPack consumer on CPU
producers (NumPy, PyTorch, and hand-made capsules); how GPU arrays are recognised; the
device checks of the bindings; and the host paths that the GPU paths mirror
(``sample_indices``, ``out=`` arguments). Tests whose expectation holds only without a
usable GPU skip where there is one; the rest pass on both.
"""

from __future__ import annotations

import ctypes
import gc
import importlib.util
import weakref

import numpy as np
import pytest

import dprec
import dprec.cuda
from dprec import philox, rec
from dprec._runtime import arrays as _arrays
from dprec._runtime import dispatch as _dispatch
from dprec._runtime import frameworks as _frameworks
from dprec._runtime import native as _native
from dprec.rec.codec import DPRECCodec
from tests.conftest import BACKENDS, CUDA

BUILT = _native.cuda_built()
requires_built = pytest.mark.skipif(not BUILT, reason="dprec._cuda is not built here")
without_gpu = pytest.mark.skipif(CUDA, reason="a usable GPU is present")
KDL_CPU, KDL_CUDA, KDL_CUDA_MANAGED = 1, 2, 13


@pytest.fixture
def cu():
    """The compiled CUDA module, usable for its checks even without a device."""
    if not BUILT:
        pytest.skip("dprec._cuda is not built here")
    return _native._cuda


# ---------------------------------------------------------------------------------------
# Availability: one reason, reported by every CUDA request
# ---------------------------------------------------------------------------------------


@without_gpu
def test_unavailable_reason_is_reported():
    reason = dprec.cuda.unavailable_reason()
    assert isinstance(reason, str) and reason.strip()
    assert not dprec.cuda.is_available()
    assert _native.cuda_unavailable_reason() == reason
    assert "cuda" not in dprec.available_backends()
    assert dprec.available_backends()[-1] == "reference"
    if BUILT:
        assert _native._cuda.device_count() == 0
        assert _native._cuda.unavailable_reason() == reason


def test_available_backends_follow_the_hardware():
    assert ("cuda" in dprec.available_backends()) == dprec.cuda.is_available()
    assert (dprec.cuda.unavailable_reason() == "") == dprec.cuda.is_available()


def test_device_count_is_zero_without_a_gpu():
    if dprec.cuda.is_available():
        assert dprec.cuda.device_count() >= 1
    else:
        assert dprec.cuda.device_count() == 0


def _fake_seeds():
    return np.array([1], np.uint64), np.array([0], np.uint32)


UNAVAILABLE_CALLS = {
    "rec.logits": lambda: rec.logits(np.ones(4), 1, 0, 2, sigma=1.0, backend="cuda"),
    "rec.candidate": lambda: rec.candidate(1, 0, 0, 4, sigma=1.0, backend="cuda"),
    "rec.sample_index": lambda: rec.sample_index(np.zeros(4), backend="cuda"),
    "rec.sample_indices": lambda: rec.sample_indices(np.zeros((2, 4)), backend="cuda"),
    "rec.accumulate": lambda: rec.accumulate(np.zeros(4, np.float32), 0, *_fake_seeds(), sigma=1.0, backend="cuda"),
    "philox.words": lambda: philox.words(1, 4, backend="cuda"),
    "philox.normals": lambda: philox.normals(1, 4, backend="cuda"),
    "DPRECCodec": lambda: DPRECCodec(sigma=1.0, backend="cuda"),
    "DeviceArray": lambda: dprec.cuda.DeviceArray(4),
    "device_name": lambda: dprec.cuda.device_name(0),
}


@without_gpu
@pytest.mark.parametrize("name", sorted(UNAVAILABLE_CALLS))
def test_cuda_requests_raise_with_the_reason(name):
    with pytest.raises(ValueError) as info:
        UNAVAILABLE_CALLS[name]()
    assert dprec.cuda.unavailable_reason() in str(info.value)


def test_device_array_checks_its_dtype_first():
    with pytest.raises(TypeError, match="dtype"):
        dprec.cuda.DeviceArray(4, "int8")


# ---------------------------------------------------------------------------------------
# DLPack consumer on CPU producers
# ---------------------------------------------------------------------------------------


def _elements(strides, shape):
    """DLPack strides, None meaning compact row-major, as explicit element strides."""
    if strides is not None:
        return tuple(strides)
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int64", "int32", "uint8", "bool", "complex128"])
def test_dlpack_import_numpy(cu, dtype):
    a = np.arange(12).astype(dtype).reshape(3, 4)
    t = cu.dlpack_import(a.__dlpack__())
    assert t.ptr == a.ctypes.data
    assert t.shape == (3, 4)
    assert t.strides in (None, (4, 1))
    assert t.dtype == np.dtype(dtype).name
    assert t.itemsize == a.itemsize
    assert (t.device_type, t.device_id) == (KDL_CPU, 0)


def test_dlpack_import_numpy_views(cu):
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    v = a[1:, 2:]
    t = cu.dlpack_import(v.__dlpack__())
    assert t.ptr == v.ctypes.data == a.ctypes.data + (1 * 6 + 2) * 4
    assert t.shape == (3, 4) and t.strides == (6, 1)
    t = cu.dlpack_import(a.T.__dlpack__())
    assert t.ptr == a.ctypes.data and t.shape == (6, 4) and t.strides == (1, 6)
    t = cu.dlpack_import(a[:, ::3].__dlpack__())
    assert t.shape == (4, 2) and t.strides == (6, 3)
    t = cu.dlpack_import(np.array(2.5).__dlpack__())
    assert t.shape == () and t.strides in (None, ())


TORCH_DTYPES = ["float32", "float16", "bfloat16", "float64", "int64", "int32", "int8", "uint8", "bool", "complex64"]


@pytest.mark.parametrize("name", TORCH_DTYPES)
def test_dlpack_import_torch_cpu(cu, name):
    torch = pytest.importorskip("torch")
    x = torch.zeros(3, 5, dtype=getattr(torch, name))
    for capsule in (x.__dlpack__(), torch.utils.dlpack.to_dlpack(x)):
        t = cu.dlpack_import(capsule)
        assert t.ptr == x.data_ptr()
        assert t.shape == (3, 5)
        assert t.strides in (None, (5, 1))
        assert t.dtype == name
        assert t.itemsize == x.element_size()
        assert (t.device_type, t.device_id) == (KDL_CPU, 0)


def test_dlpack_import_torch_views_and_contiguity(cu):
    torch = pytest.importorskip("torch")
    x = torch.arange(30, dtype=torch.float32).reshape(5, 6)
    v = x[2:, 1:]
    t = cu.dlpack_import(v.__dlpack__())
    assert t.ptr == v.data_ptr() == x.data_ptr() + (2 * 6 + 1) * 4
    assert t.shape == (3, 5) and _elements(t.strides, t.shape) == (6, 1)
    t = cu.dlpack_import(x.t().__dlpack__())
    assert t.ptr == x.data_ptr() and t.shape == (6, 5) and t.strides == (1, 6)
    # dprec's contiguity rule agrees with PyTorch's on what DLPack reports.
    views = [
        x,
        x[1:],
        x[2:3],
        x[:, 1:],
        x[:, :1],
        x.t(),
        x[::2],
        x[0].unsqueeze(0),
        x[:, 0].unsqueeze(1),
        torch.zeros(4).expand(3, 4),
        torch.zeros(1, 1),
    ]
    for view in views:
        t = cu.dlpack_import(view.__dlpack__())
        assert t.shape == tuple(view.shape)
        strides = zip(_elements(t.strides, t.shape), view.stride(), view.shape)
        assert all(s == want for s, want, n in strides if n != 1)  # size-1 axes: any stride
        assert _frameworks.c_contiguous(t.shape, t.strides, 1) == view.is_contiguous(), (view.shape, view.stride())


def _capsule_api():
    """Capsule functions of the running interpreter, on a private handle (so that the
    prototypes set here do not leak into ctypes.pythonapi)."""
    api = ctypes.PyDLL(None, handle=ctypes.pythonapi._handle)
    api.PyCapsule_GetName.restype = ctypes.c_char_p
    api.PyCapsule_GetName.argtypes = [ctypes.py_object]
    api.PyCapsule_New.restype = ctypes.py_object
    api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    return api


def test_capsule_is_consumed_once(cu):
    api = _capsule_api()
    a = np.arange(4.0)
    capsule = a.__dlpack__()
    assert api.PyCapsule_GetName(capsule) == b"dltensor"
    t = cu.dlpack_import(capsule)
    assert api.PyCapsule_GetName(capsule) == b"used_dltensor"
    with pytest.raises(ValueError, match="consumed"):
        cu.dlpack_import(capsule)
    assert t.ptr == a.ctypes.data  # the first import is unaffected
    del capsule
    gc.collect()
    assert np.frombuffer((ctypes.c_double * 4).from_address(t.ptr), np.float64).tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("bad", [1, None, "dltensor", b"dltensor", object(), np.zeros(3)], ids=repr)
def test_dlpack_import_rejects_what_is_not_a_capsule(cu, bad):
    with pytest.raises((TypeError, ValueError)):
        cu.dlpack_import(bad)


def test_dlpack_tensor_has_no_python_constructor(cu):
    with pytest.raises(TypeError):
        cu.DLPackTensor()


def test_numpy_producer_lives_until_the_import_is_deleted(cu):
    a = np.arange(64, dtype=np.float64) * 2.0 - 5.0
    alive = weakref.ref(a)
    t = cu.dlpack_import(a.__dlpack__())
    del a
    gc.collect()
    assert alive() is not None, "the imported tensor must keep the producer alive"
    got = np.frombuffer((ctypes.c_double * 64).from_address(t.ptr), np.float64).copy()
    assert np.array_equal(got, np.arange(64) * 2.0 - 5.0)
    del t
    gc.collect()
    assert alive() is None, "deleting the imported tensor must release the producer (the DLPack deleter)"


def test_torch_memory_lives_while_the_import_does(cu):
    torch = pytest.importorskip("torch")
    n = 256
    x = torch.arange(n, dtype=torch.float64) * 3 + 1
    t = cu.dlpack_import(x.__dlpack__())
    del x
    gc.collect()
    # Freed memory of this size would be handed out again here.
    junk = [torch.full((n,), -7.0, dtype=torch.float64) for _ in range(32)]
    assert all(j.data_ptr() != t.ptr for j in junk)
    got = np.frombuffer((ctypes.c_double * n).from_address(t.ptr), np.float64).copy()
    assert np.array_equal(got, np.arange(n) * 3.0 + 1)
    del junk, t


# Hand-made DLPack capsules: the ABI as the bindings declare it (dlpack.h, v0.x).
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]


class HandMade:
    """A DLManagedTensor built with ctypes in a capsule; counts its deleter's calls.

    The data pointer is never dereferenced by the importer, so it can be any number."""

    def __init__(
        self,
        shape,
        strides=None,
        *,
        ndim=None,
        dtype=(2, 32, 1),
        device=(KDL_CPU, 0),
        data=0x10000,
        byte_offset=0,
        name=b"dltensor",
    ):
        self.deleted = 0
        self._shape = None if shape is None else (ctypes.c_int64 * max(len(shape), 1))(*shape)
        self._strides = None if strides is None else (ctypes.c_int64 * max(len(strides), 1))(*strides)
        self._deleter = _DELETER(self._count)
        m = self.managed = _DLManagedTensor()
        m.dl_tensor.data = data
        m.dl_tensor.device = _DLDevice(*device)
        m.dl_tensor.ndim = len(shape) if ndim is None else ndim
        m.dl_tensor.dtype = _DLDataType(*dtype)
        if self._shape is not None:
            m.dl_tensor.shape = ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64))
        if self._strides is not None:
            m.dl_tensor.strides = ctypes.cast(self._strides, ctypes.POINTER(ctypes.c_int64))
        m.dl_tensor.byte_offset = byte_offset
        m.deleter = self._deleter
        self._name = ctypes.create_string_buffer(name)  # a capsule keeps a pointer to its name
        self.capsule = _capsule_api().PyCapsule_New(ctypes.addressof(m), ctypes.addressof(self._name), None)

    def _count(self, _ptr):
        self.deleted += 1


def test_hand_made_capsule_fields_and_ownership(cu):
    h = HandMade((2, 3), None, device=(KDL_CUDA, 3), data=0x20000, byte_offset=48)
    t = cu.dlpack_import(h.capsule)
    assert t.ptr == 0x20000 + 48
    assert t.shape == (2, 3) and t.strides is None
    assert (t.device_type, t.device_id) == (KDL_CUDA, 3)
    assert t.dtype == "float32" and t.itemsize == 4
    assert _capsule_api().PyCapsule_GetName(h.capsule) == b"used_dltensor"
    h.capsule = None
    gc.collect()
    assert h.deleted == 0, "the capsule no longer owns the tensor"
    del t
    gc.collect()
    assert h.deleted == 1, "the imported tensor calls the producer's deleter exactly once"

    h = HandMade((4, 5), (1, 4))
    t = cu.dlpack_import(h.capsule)
    assert t.strides == (1, 4) and not _frameworks.c_contiguous(t.shape, t.strides, 1)
    h = HandMade((), None, ndim=0)
    t = cu.dlpack_import(h.capsule)
    assert t.shape == () and t.strides is None


@pytest.mark.parametrize(
    ("code", "name", "itemsize"),
    [
        ((2, 16, 1), "float16", 2),
        ((4, 16, 1), "bfloat16", 2),
        ((6, 8, 1), "bool", 1),
        ((0, 8, 1), "int8", 1),
        ((1, 64, 1), "uint64", 8),
        ((5, 64, 1), "complex64", 8),
        ((2, 32, 4), "vector4x32", 16),
        ((99, 8, 1), "dlpack-code99-8", 1),
    ],
)
def test_hand_made_capsule_dtype_names(cu, code, name, itemsize):
    t = cu.dlpack_import(HandMade((3,), dtype=code).capsule)
    assert t.dtype == name and t.itemsize == itemsize


@pytest.mark.parametrize(
    "kwargs",
    [
        {"shape": (2,), "ndim": -1},
        {"shape": None, "ndim": 2},
        {"shape": (2,), "name": b"used_dltensor"},
        {"shape": (2,), "name": b"dltensor_versioned"},
        {"shape": (2,), "name": b"something else"},
    ],
    ids=["negative-ndim", "missing-shape", "used", "versioned", "other-name"],
)
def test_hand_made_malformed_capsules_are_refused_untouched(cu, kwargs):
    h = HandMade(**kwargs)
    name = _capsule_api().PyCapsule_GetName(h.capsule)
    with pytest.raises(ValueError):
        cu.dlpack_import(h.capsule)
    assert _capsule_api().PyCapsule_GetName(h.capsule) == name, "a refused capsule keeps its name (not consumed)"
    gc.collect()
    assert h.deleted == 0


# ---------------------------------------------------------------------------------------
# Recognising GPU arrays (dprec._runtime.arrays, dprec._runtime.frameworks)
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "strides", "unit", "expected"),
    [
        ((2, 3), None, 1, True),
        ((2, 3), (3, 1), 1, True),
        ((2, 3), (12, 4), 4, True),
        ((2, 3), (3, 1), 4, False),  # element strides read as byte strides
        ((2, 3), (4, 1), 1, False),  # padded rows
        ((3, 2), (1, 3), 1, False),  # transposed
        ((3, 4), (0, 1), 1, False),  # broadcast
        ((2, 3), (-3, 1), 1, False),
        ((1, 3), (99, 1), 1, True),  # size-1 axes may have any stride
        ((3, 1), (1, 7), 1, True),
        ((1, 1, 5), (0, -2, 8), 8, True),
        ((1,), (123,), 4, True),
        ((), (), 4, True),
        ((5,), (1,), 1, True),
        ((5,), (2,), 1, False),
        ((4, 2, 3), (6, 3, 1), 1, True),
        ((4, 2, 3), (6, 1, 2), 1, False),
    ],
)
def test_c_contiguous(shape, strides, unit, expected):
    assert _frameworks.c_contiguous(shape, strides, unit) is expected


def test_gpu_array_metadata():
    g = _arrays.Array(None, None, 1000, (2, 3), "bfloat16", 1, 0, "dlpack")
    assert (g.size, g.itemsize, g.label, g.offset(3)) == (6, 2, "cuda:1", 1006)
    g = _arrays.Array(None, None, 1000, (4,), "float64", 0, 0, "torch")
    assert (g.size, g.itemsize, g.label, g.offset(3)) == (4, 8, "cuda:0", 1024)
    assert _arrays.Array(None, None, 0, (2,), "int64", 0, 0, "cupy").itemsize == 8


def test_same_device():
    g0 = _arrays.Array(None, None, 0, (2,), "float32", 0, 0, "torch")
    g1 = _arrays.Array(None, None, 0, (2,), "float32", 1, 0, "torch")
    host = _arrays.Array(None, None, 0, (2,), "float32", _arrays.HOST, 0, "numpy")
    _arrays.same_device([("a", host), ("b", host), ("absent", None)])
    _arrays.same_device([("a", g0), ("b", g0)])
    with pytest.raises(ValueError, match="b is on cpu but a is on cuda:0"):
        _arrays.same_device([("a", g0), ("b", host)])
    with pytest.raises(ValueError, match="c is on cuda:1 but a is on cuda:0"):
        _arrays.same_device([("a", g0), ("b", g0), ("c", g1)])


class CpuDLPackOnly:
    """A CPU producer that offers nothing but DLPack; must not be consumed by dprec."""

    def __init__(self, a):
        self._a, self.calls = a, 0

    def __dlpack__(self, stream=None):
        self.calls += 1
        return self._a.__dlpack__()

    def __dlpack_device__(self):
        return (KDL_CPU, 0)


class BrokenDLPackDevice:
    def __dlpack_device__(self):
        raise RuntimeError("broken producer")


HOST_OBJECTS = {
    "ndarray": lambda: np.zeros(3, np.float32),
    "strided-ndarray": lambda: np.zeros((4, 4))[:, 1],
    "list": lambda: [1.0, 2.0],
    "float": lambda: 3.0,
    "None": lambda: None,
    "cpu-dlpack": lambda: CpuDLPackOnly(np.zeros(3)),
    "broken-dlpack-device": BrokenDLPackDevice,
}


@pytest.mark.parametrize("name", sorted(HOST_OBJECTS))
def test_host_objects_are_not_gpu_arrays(name):
    x = HOST_OBJECTS[name]()
    assert _arrays.device_of(x) is None
    assert not _arrays.is_gpu_array(x)
    assert not _arrays.read(x, "x").on_gpu
    if isinstance(x, CpuDLPackOnly):
        assert x.calls == 0


def test_cpu_torch_tensors_are_not_gpu_arrays():
    torch = pytest.importorskip("torch")
    for t in (
        torch.zeros(3),
        torch.zeros(3, 3).t(),
        torch.zeros(2, dtype=torch.bfloat16),
        torch.zeros(2, dtype=torch.int64),
    ):
        assert _arrays.device_of(t) is None
        assert not _arrays.read(t, "t").on_gpu


class FakeInterface:
    """Claims to be a GPU array through __cuda_array_interface__ (null pointer)."""

    def __init__(self, shape=(4,), typestr="<f4"):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (0, False), "version": 3}


class FakeCudaDLPack:
    """Claims to live on a GPU through DLPack; dprec must not consume it without a GPU."""

    def __init__(self, device_type=KDL_CUDA, device_id=0):
        self._device, self.calls = (device_type, device_id), 0

    def __dlpack_device__(self):
        return self._device

    def __dlpack__(self, stream=None):
        self.calls += 1
        raise AssertionError("dprec consumed a capsule although the CUDA backend is unavailable")


def test_pointer_device_of_host_memory(cu):
    a = np.zeros(16)
    assert cu.pointer_device(a.ctypes.data) == -1
    assert cu.pointer_device(0) == -1
    assert cu.pointer_device(1) == -1
    assert _frameworks.pointer_device(a.ctypes.data) == -1
    assert _frameworks.pointer_device(0) == -1


def test_device_of_fake_gpu_arrays():
    assert _arrays.device_of(FakeInterface()) == "cuda:?"  # a null pointer belongs to no device
    assert _arrays.device_of(FakeCudaDLPack()) == "cuda:0"
    assert _arrays.device_of(FakeCudaDLPack(KDL_CUDA, 3)) == "cuda:3"
    assert _arrays.device_of(FakeCudaDLPack(KDL_CUDA_MANAGED, 1)) == "cuda:1"
    assert _arrays.is_gpu_array(FakeInterface()) and _arrays.is_gpu_array(FakeCudaDLPack())


def test_fake_interface_with_a_null_pointer_is_refused():
    with pytest.raises(ValueError, match="x"):
        _arrays.read(FakeInterface(), "x")


@without_gpu
@pytest.mark.parametrize(
    "make",
    [FakeInterface, FakeCudaDLPack, lambda: FakeCudaDLPack(KDL_CUDA_MANAGED, 0)],
    ids=["cuda_array_interface", "dlpack-cuda", "dlpack-managed"],
)
def test_fake_gpu_arrays_without_a_backend(make):
    reason = dprec.cuda.unavailable_reason()
    x = make()
    for fn in (_arrays.read, _arrays.float_input):
        with pytest.raises(ValueError, match=r"x is a GPU array on .*CUDA backend is unavailable") as info:
            fn(x, "x")
        assert reason in str(info.value)
    calls = [
        ("phi", lambda: rec.logits(x, 1, 0, 2, sigma=1.0)),
        ("out", lambda: rec.candidate(1, 0, 0, 4, out=x)),
        ("logits", lambda: rec.sample_index(x)),
        ("out", lambda: rec.accumulate(x, 0, *_fake_seeds(), sigma=1.0)),
        ("out", lambda: philox.normals(1, 4, out=x)),
        ("update['w']", lambda: DPRECCodec(sigma=1.0).encode({"w": x})),
    ]
    for name, call in calls:
        with pytest.raises(ValueError) as info:
            call()
        assert name in str(info.value) and reason in str(info.value), str(info.value)
    assert getattr(x, "calls", 0) == 0


def test_gumbel_noise_on_a_gpu_is_refused():
    with pytest.raises(ValueError, match="gumbel must be a host"):
        rec.sample_index(np.zeros(4), gumbel=FakeInterface())


# ---------------------------------------------------------------------------------------
# The bindings check devices and pointers themselves
# ---------------------------------------------------------------------------------------


def _binding_calls(cu, device, ptr):
    seeds, idx = _fake_seeds()
    coefs = np.ones(1)
    return {
        "stream_normals": lambda: cu.stream_normals(device, 0, 1, 0, 0, 0, 0, 4, 1.0, ptr),
        "stream_words": lambda: cu.stream_words(device, 0, 1, 0, 0, 0, 0, 4, ptr),
        "rec_dot_products": lambda: cu.rec_dot_products(device, 0, ptr, "float32", 4, 1, 0, 4, 1.0, ptr),
        "generate_only": lambda: cu.generate_only(device, 0, 4, 1, 0, 4),
        "gumbel_argmax": lambda: cu.gumbel_argmax(device, 0, ptr, np.zeros(4), np.array([0, 4], np.int64)),
        "accumulate": lambda: cu.accumulate(device, 0, ptr, "float32", 4, 0, seeds, idx, coefs),
        "aggregate_f32": lambda: cu.aggregate_f32(device, 0, ptr, 4, 0, seeds, idx, coefs),
        "norm_stats": lambda: cu.norm_stats(device, 0, [ptr], ["float32"], [4], 1.0),
        "scale_f64": lambda: cu.scale_f64(device, 0, ptr, 4, 2.0, ptr),
        "to_float32": lambda: cu.to_float32(device, 0, ptr, "float16", 4, ptr),
        "synchronize": lambda: cu.synchronize(device, 0),
        "device_name": lambda: cu.device_name(device),
        "DeviceBuffer": lambda: cu.DeviceBuffer(device, 0, 16),
    }


BINDINGS = sorted(_binding_calls(None, 0, 0))
POINTER_BINDINGS = [n for n in BINDINGS if n not in ("generate_only", "synchronize", "device_name", "DeviceBuffer")]


@pytest.mark.parametrize("name", BINDINGS)
def test_bindings_check_the_device(cu, name):
    n = cu.device_count()
    host = np.zeros(64, np.float64)
    for device in (n, n + 1, -1):
        with pytest.raises(ValueError, match=rf"device must be in \[0, {n}\), got {device}"):
            _binding_calls(cu, device, host.ctypes.data)[name]()


@without_gpu
@pytest.mark.parametrize("name", BINDINGS)
def test_bindings_without_a_gpu_refuse_device_0(cu, name):
    with pytest.raises(ValueError, match=r"device must be in \[0, 0\), got 0"):
        _binding_calls(cu, 0, 0)[name]()


@pytest.mark.parametrize("name", POINTER_BINDINGS)
def test_bindings_refuse_host_pointers_on_a_gpu(cu, name):
    if not CUDA:
        pytest.skip("needs a usable GPU to get past the device check")
    host = np.zeros(64, np.float64)
    with pytest.raises(ValueError, match="not CUDA device memory"):
        _binding_calls(cu, 0, host.ctypes.data)[name]()
    with pytest.raises(ValueError, match="null pointer"):
        _binding_calls(cu, 0, 0)[name]()


def test_copies_refuse_host_and_null_pointers(cu):
    host = np.zeros(8, np.float64)
    with pytest.raises(ValueError, match="src is not CUDA device memory"):
        cu.copy_to_host(0, 0, host.ctypes.data, np.zeros(8))
    with pytest.raises(ValueError, match="src is a null pointer"):
        cu.copy_to_host(0, 0, 0, np.zeros(8))
    with pytest.raises(ValueError, match="dst is not CUDA device memory"):
        cu.copy_to_device(0, 0, np.zeros(8), host.ctypes.data)
    with pytest.raises(ValueError, match="dst is a null pointer"):
        cu.memset_zero(0, 0, 0, 8)
    with pytest.raises(ValueError, match="dst is not CUDA device memory"):
        cu.memset_zero(0, 0, host.ctypes.data, 8)
    ro = np.zeros(8)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writeable C-contiguous"):
        cu.copy_to_host(0, 0, host.ctypes.data, ro)
    with pytest.raises(ValueError, match="writeable C-contiguous"):
        cu.copy_to_host(0, 0, host.ctypes.data, np.zeros(16)[::2])
    with pytest.raises(ValueError, match="C-contiguous"):
        cu.copy_to_device(0, 0, np.zeros(16)[::2], host.ctypes.data)
    assert np.all(host == 0)


def test_bindings_refuse_out_of_range_integers(cu):
    with pytest.raises(TypeError):
        cu.pointer_device(-1)
    with pytest.raises(TypeError):
        cu.stream_normals(0, -1, 1, 0, 0, 0, 0, 4, 1.0, 0)
    with pytest.raises(TypeError):
        cu.stream_normals(0, 0, 2**64, 0, 0, 0, 0, 4, 1.0, 0)


# ---------------------------------------------------------------------------------------
# Host paths that the GPU paths mirror: batched Gumbel-max, out= arguments
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_sample_indices_equals_sample_index_per_row(backend):
    rng = np.random.default_rng(7)
    lg = rng.normal(scale=2.0, size=(9, 32))
    gumbel = rec.gumbel_noise(lg.size, rng).reshape(lg.shape)
    got = rec.sample_indices(lg, gumbel=gumbel, backend=backend)
    assert got.dtype == np.int64 and got.shape == (9,)
    assert got.tolist() == [rec.sample_index(lg[i], gumbel=gumbel[i], backend=backend) for i in range(9)]
    assert got.tolist() == np.argmax(lg + gumbel, axis=1).tolist()
    # float32 and nested lists are accepted like everywhere else.
    lg32 = lg.astype(np.float32)
    assert (
        rec.sample_indices(lg32, gumbel=gumbel, backend=backend).tolist()
        == np.argmax(lg32.astype(np.float64) + gumbel, axis=1).tolist()
    )
    assert rec.sample_indices(lg.tolist(), gumbel=gumbel.tolist(), backend=backend).tolist() == got.tolist()


@pytest.mark.parametrize("backend", BACKENDS)
def test_sample_indices_ties_go_to_the_first_index(backend):
    assert rec.sample_indices(np.zeros((3, 5)), gumbel=np.zeros((3, 5)), backend=backend).tolist() == [0, 0, 0]
    lg = np.array([[0.0, 1.0, 1.0], [2.0, 0.0, 2.0]])
    assert rec.sample_indices(lg, gumbel=np.zeros((2, 3)), backend=backend).tolist() == [1, 0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_sample_indices_draws_the_noise_row_after_row(backend):
    lg = np.linspace(0.0, 0.5, 12 * 64).reshape(12, 64)
    batch_rng = np.random.default_rng(123)
    batch = rec.sample_indices(lg, rng=batch_rng, backend=backend)
    one_rng = np.random.default_rng(123)
    one_by_one = [rec.sample_index(row, rng=one_rng, backend=backend) for row in lg]
    assert batch.tolist() == one_by_one
    # Both consumed the same amount of randomness.
    assert batch_rng.integers(1 << 62) == one_rng.integers(1 << 62)
    # The noise matters: another seed gives other indices.
    assert rec.sample_indices(lg, rng=np.random.default_rng(124), backend=backend).tolist() != batch.tolist()


def test_sample_indices_bad_input():
    lg = np.zeros((5, 16))
    with pytest.raises(ValueError, match="2-D"):
        rec.sample_indices(np.zeros(16))
    with pytest.raises(ValueError, match="2-D"):
        rec.sample_indices(np.zeros((2, 3, 4)))
    with pytest.raises(ValueError, match="empty"):
        rec.sample_indices(np.zeros((0, 4)))
    with pytest.raises(ValueError, match="empty"):
        rec.sample_indices(np.zeros((3, 0)))
    with pytest.raises(ValueError, match="logits contains NaN"):
        rec.sample_indices(np.array([[0.0, np.nan]]))
    with pytest.raises(ValueError, match="logits contains infinite"):
        rec.sample_indices(np.array([[0.0, np.inf]]))
    with pytest.raises(TypeError, match="logits"):
        rec.sample_indices(np.zeros((2, 2), np.int64))
    with pytest.raises(ValueError, match=r"gumbel must have the shape of logits \(5, 16\)"):
        rec.sample_indices(lg, gumbel=np.zeros((16, 5)))
    with pytest.raises(ValueError, match="gumbel must have the shape"):
        rec.sample_indices(lg, gumbel=np.zeros(80))
    with pytest.raises(ValueError, match="gumbel contains"):
        rec.sample_indices(lg, gumbel=np.full((5, 16), np.inf))
    with pytest.raises(ValueError, match="rng or gumbel"):
        rec.sample_indices(lg, gumbel=np.zeros((5, 16)), rng=np.random.default_rng(0))
    with pytest.raises(TypeError, match="rng"):
        rec.sample_indices(lg, rng=7)
    with pytest.raises(ValueError, match="backend"):
        rec.sample_indices(lg, gumbel=np.zeros((5, 16)), backend="gpu")


def _read_only(a):
    a.flags.writeable = False
    return a


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(37,), (1, 37)])
def test_candidate_fills_out(backend, shape):
    out = np.full(shape, np.nan, np.float32)
    got = rec.candidate(11, 2, 5, 37, sigma=0.5, out=out, backend=backend)
    want = rec.candidate(11, 2, 5, 37, sigma=0.5, backend=backend)
    assert np.array_equal(out.reshape(-1), want)
    assert np.shares_memory(got, out) and np.array_equal(np.asarray(got).reshape(-1), want)


def test_out_itself_is_returned():
    out = np.zeros(8, np.float32)
    assert rec.candidate(1, 0, 3, 8, out=out) is out
    words = np.zeros(8, np.uint32)
    assert philox.words(5, 8, out=words) is words
    normals = np.zeros(8, np.float32)
    assert philox.normals(5, 8, out=normals) is normals


BAD_OUTS = [
    ("dtype", lambda dt: np.zeros(6, np.float64 if dt == np.float32 else np.float32), TypeError, "dtype"),
    ("size", lambda dt: np.zeros(5, dt), ValueError, "6 elements"),
    ("strided", lambda dt: np.zeros(12, dt)[::2], ValueError, "C-contiguous"),
    ("fortran", lambda dt: np.zeros((2, 3), dt, order="F"), ValueError, "C-contiguous"),
    ("read-only", lambda dt: _read_only(np.zeros(6, dt)), ValueError, "writeable"),
    ("list", lambda dt: [0.0] * 6, TypeError, "numpy.ndarray"),
]
OUT_CALLS = {
    "rec.candidate": (np.float32, lambda out, b: rec.candidate(3, 1, 2, 6, sigma=2.0, out=out, backend=b)),
    "philox.normals": (np.float32, lambda out, b: philox.normals(3, 6, substream=1, offset=5, out=out, backend=b)),
    "philox.words": (np.uint32, lambda out, b: philox.words(3, 6, group=4, domain=2, out=out, backend=b)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("call", sorted(OUT_CALLS))
@pytest.mark.parametrize("bad", BAD_OUTS, ids=[b[0] for b in BAD_OUTS])
def test_bad_outs_are_refused(backend, call, bad):
    dtype, fn = OUT_CALLS[call]
    _, make, error, message = bad
    out = make(dtype)
    before = np.array(out, copy=True)
    with pytest.raises(error, match=message):
        fn(out, backend)
    assert np.array_equal(np.asarray(out), before), "a refused out is left untouched"


@pytest.mark.parametrize("backend", BACKENDS)
def test_philox_fills_out(backend):
    words = np.zeros(10, np.uint32)
    got = philox.words(5, 10, substream=1, group=2, domain=3, offset=7, out=words, backend=backend)
    assert np.shares_memory(got, words)
    assert np.array_equal(words, philox.words(5, 10, substream=1, group=2, domain=3, offset=7, backend=backend))
    assert words.any()
    normals = np.full((2, 5), np.nan, np.float32)
    philox.normals(5, 10, substream=1, group=2, domain=3, offset=7, out=normals, backend=backend)
    want = philox.normals(5, 10, substream=1, group=2, domain=3, offset=7, backend=backend)
    assert np.array_equal(normals.reshape(-1), want)
    empty = np.zeros(0, np.float32)
    assert philox.normals(5, 0, out=empty, backend=backend).size == 0


def test_host_only_philox_functions_refuse_cuda():
    with pytest.raises(ValueError, match="host only"):
        philox.philox4x32(np.zeros((2, 4), np.uint32), np.zeros(2, np.uint32), backend="cuda")
    with pytest.raises(ValueError, match="host only"):
        philox.uniforms(1, 4, backend="cuda")


def test_resolve():
    assert _dispatch.resolve("auto") in ("cpu", "reference")
    assert _dispatch.resolve("reference") == "reference"
    for backend in ("cpu", "reference"):
        with pytest.raises(ValueError, match=r"phi is on cuda:0, but backend='\w+' runs on the host"):
            _dispatch.resolve(backend, "cuda:0", "phi")
    for bad in ("gpu", None, 0, "CUDA"):
        with pytest.raises(ValueError, match="backend must be one of"):
            _dispatch.resolve(bad)
    if not CUDA:
        for backend in ("auto", "cuda"):
            with pytest.raises(ValueError, match="not available") as info:
                _dispatch.resolve(backend, "cuda:0", "phi")
            assert dprec.cuda.unavailable_reason() in str(info.value)


# ---------------------------------------------------------------------------------------
# backend="cuda" with host data (README: "or the reverse, raises ValueError")
# ---------------------------------------------------------------------------------------


@pytest.fixture
def pretend_cuda(monkeypatch):
    """Make dprec believe a GPU is usable, so that the host-data paths of backend='cuda'
    can be checked here; where a GPU is present this changes nothing."""
    if not BUILT:
        pytest.skip("dprec._cuda is not built here")
    monkeypatch.setattr(_native, "_cuda_reason", "")


HOST_DATA_WITH_CUDA = {
    "rec.candidate(out=host)": ("out", lambda: rec.candidate(1, 0, 0, 4, out=np.zeros(4, np.float32), backend="cuda")),
    "philox.words(out=host)": ("out", lambda: philox.words(1, 4, out=np.zeros(4, np.uint32), backend="cuda")),
    "philox.normals(out=host)": ("out", lambda: philox.normals(1, 4, out=np.zeros(4, np.float32), backend="cuda")),
    "rec.logits(host)": ("phi", lambda: rec.logits(np.ones(4), 1, 0, 2, sigma=1.0, backend="cuda")),
    "rec.sample_indices(host)": ("logits", lambda: rec.sample_indices(np.zeros((2, 4)), backend="cuda")),
    "rec.accumulate(host)": (
        "out",
        lambda: rec.accumulate(np.zeros(4, np.float32), 0, *_fake_seeds(), sigma=1.0, backend="cuda"),
    ),
}


@pytest.mark.parametrize("name", sorted(HOST_DATA_WITH_CUDA))
def test_host_data_with_backend_cuda_is_refused(pretend_cuda, name):
    arg, call = HOST_DATA_WITH_CUDA[name]
    with pytest.raises(ValueError, match=rf"\b{arg}\b.*host|host.*\b{arg}\b"):
        call()


def test_the_cuda_extension_loads_wherever_it_was_built():
    # A missing launcher only shows up as an undefined symbol when the module is loaded.
    if importlib.util.find_spec("dprec._cuda") is None:
        pytest.skip("this build has no CUDA extension (no CUDA compiler at build time)")
    assert dprec._runtime.native._CUDA_IMPORT_ERROR == ""
    assert dprec._runtime.native.cuda_built()
