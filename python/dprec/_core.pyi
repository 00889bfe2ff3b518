"""Type stubs for the private native module dprec._core (CPU kernels)."""

from types import ModuleType

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

class _GpuEmulation(ModuleType):
    """``_core.gpu_emulation``: the CUDA kernels' per-thread bodies run on the host (tests only)."""

    @staticmethod
    def stream_normals(
        seed: int, substream: int, group: int, domain: int, offset: int, scale: float, out: npt.NDArray[np.float32]
    ) -> None: ...
    @staticmethod
    def stream_words(
        seed: int, substream: int, group: int, domain: int, offset: int, out: npt.NDArray[np.uint32]
    ) -> None: ...
    @staticmethod
    def rec_dot_products(
        phi: npt.NDArray[np.float32] | npt.NDArray[np.float64],
        seed: int,
        group: int,
        factor: float,
        out: npt.NDArray[np.float64],
    ) -> None: ...
    @staticmethod
    def gumbel_argmax(
        logits: npt.NDArray[np.float64], gumbel: npt.NDArray[np.float64], offsets: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]: ...
    @staticmethod
    def gumbel_argmax_plan(offsets: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]: ...
    @staticmethod
    def accumulate(
        out: npt.NDArray[np.float32] | npt.NDArray[np.float64],
        group: int,
        seeds: npt.NDArray[np.uint64],
        indices: npt.NDArray[np.uint32],
        coefs: npt.NDArray[np.float64],
    ) -> None: ...
    @staticmethod
    def aggregate_f32(
        out: npt.NDArray[np.float32],
        group: int,
        seeds: npt.NDArray[np.uint64],
        indices: npt.NDArray[np.uint32],
        coefs: npt.NDArray[np.float64],
    ) -> None: ...
    @staticmethod
    def norm_stats(x: npt.NDArray[np.float32] | npt.NDArray[np.float64], divisor: float) -> tuple[float, float]: ...
    @staticmethod
    def fwht(
        src: npt.NDArray[np.float32] | npt.NDArray[np.float64],
        out: npt.NDArray[np.float32] | npt.NDArray[np.float64],
        n: int,
        normalize: bool,
        max_buf_log2: int = -1,
    ) -> None: ...
    @staticmethod
    def fwht_plan(n: int, rows: int = 1, dtype: str = "float32", max_buf_log2: int = -1) -> list[dict[str, int]]: ...
    @staticmethod
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
    @staticmethod
    def to_float32(
        src: npt.NDArray[np.float16] | npt.NDArray[np.uint16], kind: str, out: npt.NDArray[np.float32]
    ) -> None: ...
    @staticmethod
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
    @staticmethod
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
    @staticmethod
    def count_sketch_encode_plan(
        dim: int, rows: int, cols: int, max_pairs: int = ..., cell_fold_min_run: int = ...
    ) -> dict[str, int]: ...

gpu_emulation: _GpuEmulation
