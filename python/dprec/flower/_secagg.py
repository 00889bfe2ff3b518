"""Shared by the distributed-DP client mod and server strategy: the ``"dprec.ddp."`` config keys, the round's
pipeline in a ConfigRecord, and the exact carriage of integers mod ``2**bits`` through Flower's SecAgg+.

Flower's SecAgg+ (``flwr.client.mod.secaggplus_mod`` with ``flwr.server.workflow.SecAggPlusWorkflow``) sums
float vectors: each client clips to ``[-c, c]``, maps onto ``[0, q]`` with Flower's stochastic rounding,
multiplies by its weight, masks mod ``M``; the server unmasks the sum mod ``M`` and maps it back to floats.
With ``q = 2**bits - 1``, ``c = q / 2``, ``M = 2**bits``, ``max_weight = 1`` and every client's weight 1, each
step is exact in float64 for an integer ``z`` in ``[0, 2**bits)`` sent as ``z - c``: the scale ``q / (2c)`` is
1.0, ``z - c + c`` is ``z``, the stochastic rounding of an integer returns it, and the masked sum is the
modular sum of the ``z``. The server's float output ``(R - n c) q / (n q mod M)`` is inverted exactly
(:func:`modular_sum_from_secagg`) while ``(n + 2) 2**bits < 2**50``; its int32 quantization caps ``bits`` at 31;
the bias of its masks (uniform on ``[0, M - 1)``) sets the floor at 8 (:data:`MIN_SECAGG_BITS`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

#: Most bits Flower's SecAgg+ carries exactly: its quantization holds a word in an int32.
MAX_SECAGG_BITS = 31
#: Fewest bits: Flower's masks are uniform on ``[0, M - 1)``, not ``[0, M)``, so a masked word's distribution is
#: off uniform by up to ``sqrt(M - 1) / 2 (M - 1)^-k`` with ``k`` masks (its Fourier coefficients are
#: ``(M - 1)^-k``): about 0.04 at 2 bits and 3 masks, below 1e-6 from 8 bits (``k >= 3``), where nothing useful
#: needs fewer bits anyway.
MIN_SECAGG_BITS = 8
#: The most count-sketch rows a client's mod accepts from the server (the sketch costs ``dim x rows``; Chen et al.
#: use one to a few).
MAX_CLIENT_SKETCH_ROWS = 16
#: ``DistributedDPStrategy(mechanism=...)``.
MECHANISMS = ("ddg", "skellam")

#: ConfigRecord keys (server to client) of the round's pipeline, in the ``FitIns`` config.
CONFIG_DDP_MECHANISM = "dprec.ddp.mechanism"
CONFIG_DDP_DIM = "dprec.ddp.dim"
CONFIG_DDP_CLIP = "dprec.ddp.clip"
CONFIG_DDP_BITS = "dprec.ddp.bits"
CONFIG_DDP_CLIENTS = "dprec.ddp.clients"
CONFIG_DDP_SEED = "dprec.ddp.seed"
CONFIG_DDP_NOISE = "dprec.ddp.noise-stddev"
CONFIG_DDP_GRANULARITY = "dprec.ddp.granularity"
CONFIG_DDP_BETA = "dprec.ddp.beta"
CONFIG_DDP_SKETCH_ROWS = "dprec.ddp.sketch-rows"
CONFIG_DDP_SKETCH_COLS = "dprec.ddp.sketch-cols"
CONFIG_DDP_SKETCH_SLACK = "dprec.ddp.sketch-slack"
#: Adaptive clipping only: the lattice ``M`` of the clipping count (int) and each client's integer noise on it.
CONFIG_DDP_COUNT_LATTICE = "dprec.ddp.count-lattice"
CONFIG_DDP_COUNT_NOISE = "dprec.ddp.count-noise"

_REQUIRED = (CONFIG_DDP_MECHANISM, CONFIG_DDP_DIM, CONFIG_DDP_CLIP, CONFIG_DDP_BITS, CONFIG_DDP_CLIENTS,
             CONFIG_DDP_SEED, CONFIG_DDP_NOISE, CONFIG_DDP_GRANULARITY, CONFIG_DDP_BETA)
# The largest integer noise standard deviation the exact samplers take (dprec.secagg.noise).
_MAX_COUNT_NOISE = float(2**24)


def secagg_ranges(bits: int) -> dict[str, Any]:
    """The ``SecAggPlusWorkflow`` keyword arguments under which it carries integers mod ``2**bits`` exactly.

    Parameters
    ----------
    bits : int
        :data:`MIN_SECAGG_BITS` (8) to :data:`MAX_SECAGG_BITS` (31).

    Returns
    -------
    dict
        ``clipping_range = (2**bits - 1) / 2``, ``quantization_range = 2**bits - 1``, ``modulus_range = 2**bits``,
        ``max_weight = 1.0`` (the client mod reports a weight of 1: the distributed-DP mean is unweighted).

    Raises
    ------
    TypeError, ValueError
        ``bits`` not an int, or outside the range.
    """
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)):
        raise TypeError(f"bits must be an int, got {type(bits).__name__}")
    if not MIN_SECAGG_BITS <= int(bits) <= MAX_SECAGG_BITS:
        raise ValueError(
            f"bits must be in [{MIN_SECAGG_BITS}, {MAX_SECAGG_BITS}] for Flower's SecAgg+, got {bits!r}: its "
            "quantization holds each word in an int32 (no modulus above 2**31), and its masks are uniform on "
            "[0, M - 1) only, which shows through the masking at small moduli"
        )
    q = (1 << int(bits)) - 1
    return {"clipping_range": q / 2.0, "quantization_range": q, "modulus_range": 1 << int(bits), "max_weight": 1.0}


def words_to_secagg(words: np.ndarray, bits: int) -> np.ndarray:
    """The float64 array a client hands SecAgg+ so that it masks exactly ``words`` (integers in ``[0, 2**bits)``)."""
    return np.asarray(words, dtype=np.float64) - ((1 << bits) - 1) / 2.0


def max_secagg_clients(bits: int) -> int:
    """The most vectors whose SecAgg+ sum :func:`modular_sum_from_secagg` inverts exactly (and fewer than ``2**bits``).

    Flower's output ``(R - n c) q / (n q mod M)`` is rounded once in the product; its inverse is exact while
    ``(n + 2) 2**bits`` stays below ``2**50`` (relative errors of ``2**-52`` leave under ``1/4``), and ``n`` must
    not be a multiple of ``M`` (Flower would divide by zero).
    """
    return min((1 << bits) - 1, (1 << (50 - bits)) - 2)


def modular_sum_from_secagg(output: np.ndarray, bits: int, num_clients: int) -> np.ndarray:
    """The modular sum ``R`` (in ``[0, 2**bits)``, of :func:`dprec.secagg.storage_dtype`) of ``num_clients`` vectors sent as
    :func:`words_to_secagg`, from the float array ``SecAggPlusWorkflow`` hands ``aggregate_fit``.

    Raises
    ------
    ValueError
        When ``output`` is not such a sum: a value that is not finite, out of range, or more than 1/4 from an
        integer (e.g. a workflow not configured by :func:`secagg_ranges`). Clients that sent other floats are
        not always caught (Flower rounds what it is given to integers); the strategy also checks the shapes.
    """
    n = int(num_clients)
    if not 1 <= n <= max_secagg_clients(bits):
        raise ValueError(f"num_clients={n} is out of range for bits={bits} (at most {max_secagg_clients(bits)})")
    modulus = 1 << bits
    q = modulus - 1
    half = q / 2.0
    # Flower: inv = q / (n q mod M), out = ((R - c) - (n - 1) c) * inv, every step exact but the product.
    inv = q / ((n * q) % modulus)
    y = np.asarray(output, dtype=np.float64) / inv + n * half
    if not np.all(np.isfinite(y)):
        raise ValueError("the secure aggregate is not finite: not a sum of words_to_secagg vectors")
    r = np.rint(y)
    if y.size and (float(np.max(np.abs(y - r))) > 0.25 or float(r.min()) < 0.0 or float(r.max()) >= modulus):
        raise ValueError(
            "the secure aggregate is not a sum of integers mod 2**bits: SecAggPlusWorkflow was not built with "
            "secagg_ranges(bits) (use DistributedDPStrategy.secagg_workflow), or a client did not run "
            "distributed_dp_mod"
        )
    from ..secagg.modular import storage_dtype  # noqa: PLC0415

    return r.astype(storage_dtype(bits))


def count_lattice(num_clients: int, noise: float, bits: int, headroom: float) -> int:
    """``M`` of the clipping count: the largest power of two up to ``2**16`` with the count's sum and ``headroom``
    standard deviations of its noise inside ``[-2**(bits-1), 2**(bits-1))`` and ``noise M <= 2**24``; 0 when
    even ``M = 1`` does not fit."""
    n = float(num_clients)
    span = n + headroom * math.sqrt(n) * noise
    m = 1 << 16
    while m >= 1 and (m * span >= 2.0 ** (bits - 1) or noise * m > _MAX_COUNT_NOISE):
        m //= 2
    return max(m, 0)


def pipeline_config(pipeline: Any, *, count_lattice: int = 0, count_noise: float = 0.0) -> dict[str, Any]:
    """The ConfigRecord entries that rebuild ``pipeline`` on a client (:func:`pipeline_from_config`)."""
    out: dict[str, Any] = {
        CONFIG_DDP_MECHANISM: pipeline.mechanism,
        CONFIG_DDP_DIM: int(pipeline.dim),
        CONFIG_DDP_CLIP: float(pipeline.clip),
        CONFIG_DDP_BITS: int(pipeline.bits),
        CONFIG_DDP_CLIENTS: int(pipeline.num_clients),
        CONFIG_DDP_SEED: int(pipeline.seed),
        CONFIG_DDP_NOISE: float(pipeline.noise_stddev),
        CONFIG_DDP_GRANULARITY: float(pipeline.granularity),
        CONFIG_DDP_BETA: float(pipeline.beta),
    }
    if pipeline.sketch is not None:
        rows, cols = pipeline.sketch.shape
        out.update({CONFIG_DDP_SKETCH_ROWS: int(rows), CONFIG_DDP_SKETCH_COLS: int(cols),
                    CONFIG_DDP_SKETCH_SLACK: float(pipeline.sketch_slack)})
    if count_lattice:
        out.update({CONFIG_DDP_COUNT_LATTICE: int(count_lattice), CONFIG_DDP_COUNT_NOISE: float(count_noise)})
    return out


def pipeline_from_config(config: Mapping[str, Any], *, dim: int | None = None, max_cells: int | None = None) -> Any:
    """The server's pipeline of the round, from the entries of :func:`pipeline_config` (untrusted values checked:
    a KeyError, TypeError or ValueError names the entry).

    ``dim``: the model's size the client expects (checked first). ``max_cells``: the most sketch cells it accepts;
    a sketch also has at most :data:`MAX_CLIENT_SKETCH_ROWS` rows (its encode costs ``dim x rows``)."""
    from ..secagg.pipeline import DDGPipeline, SkellamPipeline  # noqa: PLC0415 - SciPy on first use only

    missing = [k for k in _REQUIRED if k not in config]
    if missing:
        raise KeyError(f"the train config lacks the distributed-DP keys {missing}")
    if dim is not None and config[CONFIG_DDP_DIM] != dim:
        raise ValueError(f"the server's dim={_text(config[CONFIG_DDP_DIM])} is not the model's {dim} floating-point "
                         "parameters")
    mechanism = config[CONFIG_DDP_MECHANISM]
    if mechanism not in MECHANISMS:
        raise ValueError(f"config[{CONFIG_DDP_MECHANISM!r}] must be one of {MECHANISMS}, got {_text(mechanism)}")
    bits = config[CONFIG_DDP_BITS]
    secagg_ranges(bits)  # the bits SecAgg+ can carry
    sketch_kw: dict[str, Any] = {}
    if CONFIG_DDP_SKETCH_ROWS in config or CONFIG_DDP_SKETCH_COLS in config:
        rows, cols = config.get(CONFIG_DDP_SKETCH_ROWS), config.get(CONFIG_DDP_SKETCH_COLS)
        if isinstance(rows, int) and rows > MAX_CLIENT_SKETCH_ROWS:
            raise ValueError(f"the sketch has {rows} rows, more than the {MAX_CLIENT_SKETCH_ROWS} a client encodes")
        if max_cells is not None and isinstance(rows, int) and isinstance(cols, int) and rows * cols > max_cells:
            raise ValueError(f"the sketch {(rows, cols)} has more cells than the {max_cells} the client accepts")
        sketch_kw["sketch"] = (rows, cols)
        if CONFIG_DDP_SKETCH_SLACK in config:
            sketch_kw["sketch_slack"] = config[CONFIG_DDP_SKETCH_SLACK]
    cls = DDGPipeline if mechanism == "ddg" else SkellamPipeline
    return cls(
        config[CONFIG_DDP_DIM],
        clip=config[CONFIG_DDP_CLIP],
        bits=bits,
        num_clients=config[CONFIG_DDP_CLIENTS],
        seed=config[CONFIG_DDP_SEED],
        noise_stddev=config[CONFIG_DDP_NOISE],
        granularity=config[CONFIG_DDP_GRANULARITY],
        beta=config[CONFIG_DDP_BETA],
        **sketch_kw,
    )


def _text(value: Any) -> str:
    """A bounded repr of an untrusted config value."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def count_from_config(config: Mapping[str, Any]) -> tuple[int, float] | None:
    """``(M, integer noise)`` of the clipping count, or None without adaptive clipping (checked)."""
    if CONFIG_DDP_COUNT_LATTICE not in config:
        return None
    m, noise = config[CONFIG_DDP_COUNT_LATTICE], config.get(CONFIG_DDP_COUNT_NOISE)
    if isinstance(m, bool) or not isinstance(m, int) or not 1 <= m <= 1 << 16:
        raise ValueError(f"config[{CONFIG_DDP_COUNT_LATTICE!r}] must be an int in [1, 2**16], got {_text(m)}")
    if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not 0.0 < noise <= _MAX_COUNT_NOISE:
        raise ValueError(f"config[{CONFIG_DDP_COUNT_NOISE!r}] must be a float in (0, 2**24], got {_text(noise)}")
    return m, float(noise)
