"""Type stubs for the private, test-only module dprec._gpu_emulation (the CUDA kernels run on
the host). Source builds have it (DPREC_GPU_EMULATION, default ON); the wheels do not."""

import numpy as np
import numpy.typing as npt

def stream_normals(
    seed: int, substream: int, group: int, domain: int, offset: int, scale: float, out: npt.NDArray[np.float32]
) -> None: ...
def stream_words(
    seed: int, substream: int, group: int, domain: int, offset: int, out: npt.NDArray[np.uint32]
) -> None: ...
def rec_dot_products(
    phi: npt.NDArray[np.float32] | npt.NDArray[np.float64],
    seed: int,
    group: int,
    factor: float,
    out: npt.NDArray[np.float64],
) -> None: ...
def gumbel_argmax(
    logits: npt.NDArray[np.float64], gumbel: npt.NDArray[np.float64], offsets: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]: ...
def gumbel_argmax_plan(offsets: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]: ...
def accumulate(
    out: npt.NDArray[np.float32] | npt.NDArray[np.float64],
    group: int,
    seeds: npt.NDArray[np.uint64],
    indices: npt.NDArray[np.uint32],
    coefs: npt.NDArray[np.float64],
) -> None: ...
def aggregate_f32(
    out: npt.NDArray[np.float32],
    group: int,
    seeds: npt.NDArray[np.uint64],
    indices: npt.NDArray[np.uint32],
    coefs: npt.NDArray[np.float64],
) -> None: ...
def norm_stats(x: npt.NDArray[np.float32] | npt.NDArray[np.float64], divisor: float) -> tuple[float, float]: ...
def fwht(
    src: npt.NDArray[np.float32] | npt.NDArray[np.float64],
    out: npt.NDArray[np.float32] | npt.NDArray[np.float64],
    n: int,
    normalize: bool,
    max_buf_log2: int = -1,
) -> None: ...
def fwht_plan(n: int, rows: int = 1, dtype: str = "float32", max_buf_log2: int = -1) -> list[dict[str, int]]: ...
def randomized_hadamard(
    src: npt.NDArray[np.float32] | npt.NDArray[np.float64],
    out: npt.NDArray[np.float32] | npt.NDArray[np.float64],
    dim: int,
    n: int,
    seed: int,
    group: int,
    repeats: int,
    inverse: bool,
    max_buf_log2: int = -1,
) -> None: ...
def to_float32(
    src: npt.NDArray[np.float16] | npt.NDArray[np.uint16], kind: str, out: npt.NDArray[np.float32]
) -> None: ...
def count_sketch_encode(
    x: npt.NDArray[np.float32] | npt.NDArray[np.float64],
    seed: int,
    group: int,
    rows: int,
    cols: int,
    scale: float,
    table: npt.NDArray[np.float32] | npt.NDArray[np.float64],
    max_pairs: int = ...,
    cell_fold_min_run: int = ...,
) -> None: ...
def count_sketch_decode(
    table: npt.NDArray[np.float32] | npt.NDArray[np.float64],
    seed: int,
    group: int,
    rows: int,
    cols: int,
    median: bool,
    median_scale: float,
    out: npt.NDArray[np.float32] | npt.NDArray[np.float64],
) -> None: ...
def count_sketch_encode_plan(
    dim: int, rows: int, cols: int, max_pairs: int = ..., cell_fold_min_run: int = ...
) -> dict[str, int]: ...

# -- the CUDA backend's device guard against a recording fake runtime ---------------------------

def device_guard_trace(current: int, has_context: bool, target: int) -> list[str]:
    """The runtime calls the device guard makes, e.g. ["set_device(1)", "clear_thread_context()"]."""
