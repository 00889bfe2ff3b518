"""Type stubs for the private, test-only module dprec._gpu_emulation (the CUDA kernels run on
the host). Source builds have it (DPREC_GPU_EMULATION, default ON); the wheels do not.

The kernels take the arguments of their ``dprec._cuda`` counterparts, with NumPy arrays in
place of device pointers and without device, stream and scratch; ``max_buf_log2``,
``max_pairs`` and ``cell_fold_min_run`` override the launch plans' limits so that tests reach
the multi-pass paths with small inputs."""

import numpy as np
import numpy.typing as npt

_Floats = npt.NDArray[np.float32] | npt.NDArray[np.float64]
_F32 = npt.NDArray[np.float32]
_F64 = npt.NDArray[np.float64]
_U32 = npt.NDArray[np.uint32]
_U64 = npt.NDArray[np.uint64]
_I64 = npt.NDArray[np.int64]

# -- Philox streams and DP-REC ------------------------------------------------------------------

def stream_normals(
    seed: int, substream: int, group: int, domain: int, offset: int, scale: float, out: _F32
) -> None: ...
def stream_words(seed: int, substream: int, group: int, domain: int, offset: int, out: _U32) -> None: ...
def rec_dot_products(phi: _Floats, seed: int, group: int, factor: float, out: _F64) -> None: ...
def gumbel_argmax(logits: _F64, gumbel: _F64, offsets: _I64) -> _I64: ...
def gumbel_argmax_plan(offsets: _I64) -> _I64: ...
def accumulate(out: _Floats, group: int, seeds: _U64, indices: _U32, coefs: _F64) -> None: ...
def aggregate_f32(out: _F32, group: int, seeds: _U64, indices: _U32, coefs: _F64) -> None: ...
def norm_stats(x: _Floats, divisor: float) -> tuple[float, float]: ...
def to_float32(src: npt.NDArray[np.float16] | npt.NDArray[np.uint16], kind: str, out: _F32) -> None: ...

# -- Walsh-Hadamard transform -------------------------------------------------------------------

def fwht(src: _Floats, out: _Floats, n: int, normalize: bool, max_buf_log2: int = -1) -> None: ...
def fwht_plan(n: int, rows: int = 1, dtype: str = "float32", max_buf_log2: int = -1) -> list[dict[str, int]]: ...
def randomized_hadamard(
    src: _Floats, out: _Floats, dim: int, n: int, seed: int, group: int, repeats: int, inverse: bool,
    max_buf_log2: int = -1,
) -> None: ...

# -- count-sketch -------------------------------------------------------------------------------

def count_sketch_encode(
    x: _Floats, seed: int, group: int, rows: int, cols: int, scale: float, table: _Floats, max_pairs: int = ...,
    cell_fold_min_run: int = ...,
) -> None: ...
def count_sketch_decode(
    table: _Floats, seed: int, group: int, rows: int, cols: int, median: bool, median_scale: float, out: _Floats
) -> None: ...
def count_sketch_encode_plan(
    dim: int, rows: int, cols: int, max_pairs: int = ..., cell_fold_min_run: int = ...
) -> dict[str, int]: ...

# -- SecAgg server side (max_blocks: the grid cap, 2**16 on the GPU) ----------------------------

def mod_sum(
    xs: _U32 | _U64, n: int, m: int, bits: int, out: _U32 | _U64, accumulate: bool, max_blocks: int = ...
) -> None: ...
def mod_lift(
    x: _U32 | _U64, bits: int, scale: float, out: _I64 | _F64 | _F32, max_blocks: int = ...
) -> None: ...
def mod_grid(count: int, max_blocks: int = ...) -> dict[str, int]:
    """{"blocks", "threads_per_block", "sum_unroll"} of both kernels' launch over count columns."""

# -- the CUDA backend's device guard against a recording fake runtime ---------------------------

def device_guard_trace(current: int, has_context: bool, target: int) -> list[str]:
    """The runtime calls the device guard makes, e.g. ["set_device(1)", "clear_thread_context()"]."""

# -- discrete-noise samplers: test hooks (csrc/common/discrete_noise.h, uint128.h, det_math.h) ---

#: Whether the compiler has unsigned __int128 (else only the portable 128-bit type exists).
HAVE_BUILTIN_INT128: bool

def uint128_op(op: str, a: tuple[int, int], b: tuple[int, int], portable: bool) -> tuple[int, int]:
    """``op(a, b)`` on (hi, lo) pairs with the portable or the builtin 128-bit type: add, sub, mul
    (by b's low word), mul64 (low words, full product), shl / shr (by b's low word), div, mod,
    lt, le, gt, ge, eq, ne, bit_length (comparisons and bit_length give (0, value))."""

def det_math(op: str, x: _F64, out: _F64) -> None:
    """The samplers' own ``log``, ``log1p``, ``exp`` or ``log_factorial`` of each element."""

def noise_draws(
    kind: str, seed: int, index: int, num: tuple[int, int], den: tuple[int, int], portable: bool, out: _U64
) -> None:
    """Successive draws of a primitive (uniform_below, uniform_below64, bernoulli(num, den),
    bernoulli64, bernoulli_half, bernoulli_exp, uniform01, discrete_laplace with t = den) from
    element ``index``'s stream, as (hi, lo) pairs (discrete_laplace: (negative, |y|);
    uniform01: (0, the float64's bits))."""

def discrete_gaussian(seed: int, sigma: float, out: _I64, portable: bool) -> None:
    """The discrete Gaussian sampler on one thread, with the portable or the builtin 128-bit type."""
