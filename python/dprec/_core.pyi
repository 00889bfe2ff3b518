"""Type stubs for the private native module dprec._core (CPU kernels)."""

import numpy as np
import numpy.typing as npt

NORMAL_TRANSFORM_VERSION: int
MAX_THREADS: int

def set_num_threads(n: int) -> None: ...
def get_num_threads() -> int: ...
def num_threads_env_problem() -> str: ...
def available_isas() -> list[str]: ...
def set_isa(name: str) -> None: ...
def get_isa() -> str: ...
def philox4x32(counter: npt.NDArray[np.uint32], k0: int, k1: int, out: npt.NDArray[np.uint32]) -> None: ...
def normal_transform(
    radius_words: npt.NDArray[np.uint32],
    angle_words: npt.NDArray[np.uint32],
    cos_out: npt.NDArray[np.float32],
    sin_out: npt.NDArray[np.float32],
) -> None: ...
def stream_words(
    seed: int, substream: int, group: int, domain: int, offset: int, out: npt.NDArray[np.uint32]
) -> None: ...
def stream_normals(
    seed: int, substream: int, group: int, domain: int, offset: int, scale: float, out: npt.NDArray[np.float32]
) -> None: ...
def rec_dot_products(
    phi: npt.NDArray[np.float32] | npt.NDArray[np.float64], seed: int, group: int, out: npt.NDArray[np.float64]
) -> None: ...
def rec_accumulate(
    out: npt.NDArray[np.float32] | npt.NDArray[np.float64],
    group: int,
    seeds: npt.NDArray[np.uint64],
    indices: npt.NDArray[np.uint32],
    coefs: npt.NDArray[np.float64],
) -> None: ...
def gumbel_argmax(logits: npt.NDArray[np.float64], gumbel: npt.NDArray[np.float64]) -> int: ...
def fwht(x: npt.NDArray[np.float32] | npt.NDArray[np.float64], n: int, normalize: bool) -> None: ...
def all_finite(x: npt.NDArray[np.float32] | npt.NDArray[np.float64]) -> bool: ...
def count_sketch_encode(
    x: npt.NDArray[np.float32] | npt.NDArray[np.float64],
    seed: int,
    group: int,
    rows: int,
    cols: int,
    scale: float,
    table: npt.NDArray[np.float32] | npt.NDArray[np.float64],
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
