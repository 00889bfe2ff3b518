"""DPRECCodec.accumulate: float64 sums of weighted decoded updates, in place, batch by batch (a streaming
server's step), and its relation to DPRECCodec.aggregate."""

from __future__ import annotations

import numpy as np
import pytest

from dprec import DPRECCodec

TEMPLATE = {"a": np.zeros((30, 10), np.float32), "b": np.zeros(7, np.float32)}


def _codec(backend: str = "auto") -> DPRECCodec:
    return DPRECCodec(sigma=0.05, clip_multiplier=1.0, bits=7, max_group_size=64, backend=backend)


def _messages(codec: DPRECCodec, n: int, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    return [
        codec.encode({k: rng.normal(0, 0.01, v.shape).astype(np.float32) for k, v in TEMPLATE.items()})
        for _ in range(n)
    ]


def _zeros() -> dict[str, np.ndarray]:
    return {k: np.zeros(v.shape) for k, v in TEMPLATE.items()}


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_batches_give_the_sums_of_one_call_and_aggregate_is_their_float32(backend):
    codec = _codec(backend)
    msgs = _messages(codec, 9)
    w = np.random.default_rng(1).normal(size=9)
    whole = codec.accumulate(msgs, _zeros(), weights=w)
    parts = _zeros()
    for lo, hi in ((0, 2), (2, 3), (3, 9)):
        assert codec.accumulate(msgs[lo:hi], parts, weights=w[lo:hi]) is parts  # in place, returned
    for k in TEMPLATE:
        assert whole[k].dtype == np.float64
        np.testing.assert_array_equal(parts[k], whole[k])
        np.testing.assert_array_equal(whole[k].astype(np.float32), codec.aggregate(msgs, TEMPLATE, weights=w)[k])


def test_native_and_reference_agree_bit_for_bit_and_bytes_are_accepted():
    msgs = _messages(_codec(), 5)
    native = _codec("cpu").accumulate([m.to_bytes() for m in msgs], _zeros())
    reference = _codec("reference").accumulate(msgs, _zeros())
    for k in TEMPLATE:
        np.testing.assert_array_equal(native[k], reference[k])


def test_default_weights_are_one_and_a_negative_weight_subtracts():
    codec = _codec()
    msgs = _messages(codec, 3)
    sums = codec.accumulate(msgs, _zeros())
    decoded = [codec.decode(m, TEMPLATE) for m in msgs]
    for k in TEMPLATE:
        np.testing.assert_allclose(sums[k], sum(d[k].astype(np.float64) for d in decoded), rtol=1e-6, atol=5e-8)
    codec.accumulate(msgs[1:2], sums, weights=[-1.0])
    for k in TEMPLATE:
        np.testing.assert_allclose(sums[k], decoded[0][k] + decoded[2][k].astype(np.float64), rtol=1e-6, atol=5e-8)


def test_bad_input():
    codec = _codec()
    msgs = _messages(codec, 2)
    with pytest.raises(TypeError, match=r"out\['a'\] must be float64"):
        codec.accumulate(msgs, {k: np.zeros(v.shape, np.float32) for k, v in TEMPLATE.items()})
    frozen = _zeros()
    frozen["a"].flags.writeable = False
    with pytest.raises(ValueError, match=r"out\['a'\] must be a C-contiguous, writeable array"):
        codec.accumulate(msgs, frozen)
    strided = _zeros()
    strided["b"] = np.zeros(14)[::2]
    with pytest.raises(ValueError, match=r"out\['b'\] must be a C-contiguous"):
        codec.accumulate(msgs, strided)
    with pytest.raises(ValueError, match=r"messages\[0\].*layout digest"):
        codec.accumulate(msgs, {"a": np.zeros((30, 10))})  # another model: another layout
    with pytest.raises(ValueError, match="weights"):
        codec.accumulate(msgs, _zeros(), weights=[1.0, np.nan])
    with pytest.raises(ValueError, match="weights"):
        codec.accumulate(msgs, _zeros(), weights=[1.0])
    # Weights whose float64 sum could overflow are refused before the sums are touched.
    wide = DPRECCodec(sigma=1.0, clip_multiplier=1.0, bits=7, max_group_size=64)
    with pytest.raises(ValueError, match="too large"):
        wide.accumulate(_messages(wide, 2), _zeros(), weights=[1.5e308, 1.5e308])
    with pytest.raises(ValueError):
        codec.accumulate([], _zeros())
