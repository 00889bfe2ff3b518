"""Type stubs for the private native module dprec._cuda (CUDA kernels).

Device pointers and streams (``cudaStream_t``, 0 = the legacy default stream) are plain
``int``. Functions take the ``device`` ordinal first and raise ValueError for a device
outside ``[0, device_count())`` or a pointer that is not device memory of that device.
Host-side parameter arrays (seeds, indices, coefficients, Gumbel noise, offsets) are
NumPy arrays. ``scratch`` is where a kernel's temporary device memory comes from: an object
with ``allocate(device, stream, nbytes) -> int`` and ``free(ptr)`` (PyTorch's or CuPy's
caching allocator, from ``dprec._runtime.frameworks.scratch_allocator``), or None for dprec's own pool.
A failed allocation raises MemoryError.
"""

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt
from typing_extensions import CapsuleType

class ScratchSource(Protocol):
    def allocate(self, device: int, stream: int, nbytes: int) -> int: ...
    def free(self, ptr: int) -> None: ...

# Host-side parameter arrays.
_U32s = npt.NDArray[np.uint32]
_U64s = npt.NDArray[np.uint64]
_I64s = npt.NDArray[np.int64]
_F64s = npt.NDArray[np.float64]

# -- runtime ---------------------------------------------------------------------------------

def device_count() -> int: ...
def unavailable_reason() -> str: ...
def device_name(device: int) -> str: ...
def runtime_version() -> int: ...
def build_architectures() -> str: ...
def driver_version() -> int: ...
def pointer_device(ptr: int) -> int: ...

class DeviceBuffer:
    """A device allocation owned by dprec, from its pool in stream order on ``stream``
    (returned the same way, without synchronising, when the object goes away)."""

    def __init__(self, device: int, stream: int, nbytes: int) -> None: ...
    @property
    def device(self) -> int: ...
    @property
    def stream(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def ptr(self) -> int: ...

def copy_to_host(device: int, stream: int, src: int, out: npt.NDArray[np.generic]) -> None: ...
def copy_to_device(device: int, stream: int, src: npt.NDArray[np.generic], dst: int) -> None: ...
def memset_zero(device: int, stream: int, dst: int, nbytes: int) -> None: ...
def synchronize(device: int, stream: int) -> None: ...
def memory_pool_release_threshold(device: int) -> int: ...
def set_memory_pool_release_threshold(device: int, bytes: int) -> None: ...
def memory_pool_reserved(device: int) -> int: ...
def empty_cache(device: int) -> None: ...
def driver_mismatch_message(driver_version: int, runtime_version: int) -> str: ...

# -- kernels (pointers in dprec's order: inputs, then outputs; asynchronous on `stream`) ---------

_Scratch = ScratchSource | None

def stream_normals(
    device: int, stream: int, seed: int, substream: int, group: int, domain: int, offset: int, count: int,
    scale: float, out: int,
) -> None: ...
def stream_words(
    device: int, stream: int, seed: int, substream: int, group: int, domain: int, offset: int, count: int, out: int
) -> None: ...
def rec_dot_products(
    device: int, stream: int, phi: int, dtype: str, d: int, seed: int, group: int, n_candidates: int, factor: float,
    out: int, scratch: _Scratch = None,
) -> None: ...
def generate_only(
    device: int, stream: int, d: int, seed: int, group: int, n_candidates: int, scratch: _Scratch = None
) -> None:
    """Benchmark anchor: the normals of rec_dot_products, summed and discarded."""

def gumbel_argmax(
    device: int, stream: int, logits: int, gumbel: _F64s, offsets: _I64s, scratch: _Scratch = None
) -> _I64s: ...
def accumulate(
    device: int, stream: int, out: int, dtype: str, d: int, group: int, seeds: _U64s, indices: _U32s, coefs: _F64s,
    scratch: _Scratch = None,
) -> None:
    """out += coefs[c] * z_c client after client, in out's dtype (bit-identical to the CPU)."""

def aggregate_f32(
    device: int, stream: int, out: int, d: int, group: int, seeds: _U64s, indices: _U32s, coefs: _F64s,
    scratch: _Scratch = None,
) -> None:
    """out <- float32(sum_c coefs[c] * z_c), the sum in float64 (no float64 buffer in device memory)."""

def norm_stats(
    device: int, stream: int, ptrs: Sequence[int], dtypes: Sequence[str], sizes: Sequence[int], divisor: float,
    scratch: _Scratch = None,
) -> _F64s:
    """Row i: (sum of (x_i / divisor)**2, max |x_i| or NaN), shape (len(ptrs), 2); synchronises."""

def scale_f64(device: int, stream: int, src: int, n: int, factor: float, dst: int) -> None: ...
def to_float32(device: int, stream: int, src: int, dtype: str, n: int, dst: int) -> None: ...

# -- count-sketch ------------------------------------------------------------------------------

def count_sketch_encode(
    device: int, stream: int, x: int, x_dtype: str, dim: int, seed: int, group: int, rows: int, cols: int,
    scale: float, table: int, table_dtype: str, scratch: _Scratch = None,
) -> None:
    """table[r, h_r(j)] += s_r(j) * x[j] * scale (x in the table's dtype), bit-identical to the CPU."""

def count_sketch_decode(
    device: int, stream: int, table: int, dtype: str, dim: int, seed: int, group: int, rows: int, cols: int,
    median: bool, median_scale: float, out: int,
) -> None:
    """Mean or median estimate into out (the table's dtype), bit-identical to the CPU; median: rows <= 32."""

# -- Walsh-Hadamard transform (dtype "float32" or "float64") ------------------------------------

def fwht(
    device: int, stream: int, src: int, dst: int, dtype: str, rows: int, n: int, normalize: bool,
    scratch: _Scratch = None,
) -> None:
    """dst <- H_n src for rows x n elements (dst may be src); bit-identical to the CPU."""

def randomized_hadamard(
    device: int, stream: int, src: int, dst: int, dtype: str, rows: int, dim: int, n: int, seed: int, group: int,
    repeats: int, inverse: bool, scratch: _Scratch = None,
) -> None:
    """Forward: rows x dim -> rows x n; inverse: rows x n -> rows x dim (src != dst)."""

# -- SecAgg server side (values mod 2**bits: "uint32" for bits <= 32, "uint64" above) -------------

def mod_sum(
    device: int, stream: int, xs: int, xs_dtype: str, n: int, m: int, bits: int, out: int, out_dtype: str,
    accumulate: bool,
) -> None:
    """out[j] <- ((out[j] if accumulate else 0) + sum_i xs[i, j]) mod 2**bits, xs row-major (n, m); exact."""

def mod_lift(
    device: int, stream: int, x: int, x_dtype: str, count: int, bits: int, scale: float, out: int, out_dtype: str
) -> None:
    """out <- centered lift of x mod 2**bits into [-2**(bits-1), 2**(bits-1)): out int64 (scale 1), or
    float64 / float32 scale * lifted computed in float64 (bit-identical to the CPU)."""

# -- DLPack ------------------------------------------------------------------------------------

class DLPackTensor:
    """A consumed DLPack tensor; frees the producer's handle when deleted (a GPU tensor
    first waits for :attr:`stream`, the stream dprec's work on it runs on).

    Only :func:`dlpack_import` creates one (the class has no Python constructor).
    """

    stream: int
    @property
    def on_gpu(self) -> bool: ...

    @property
    def ptr(self) -> int:
        """``data + byte_offset``."""
    @property
    def device_type(self) -> int:
        """The DLPack device type (1 = CPU, 2 = CUDA, 13 = CUDA managed, ...)."""
    @property
    def device_id(self) -> int: ...
    @property
    def dtype(self) -> str:
        """NumPy-style name ("float32", "bfloat16", "bool", ...)."""
    @property
    def itemsize(self) -> int: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def strides(self) -> tuple[int, ...] | None:
        """Strides in elements, or None for a compact row-major tensor."""

def dlpack_import(capsule: CapsuleType) -> DLPackTensor: ...
