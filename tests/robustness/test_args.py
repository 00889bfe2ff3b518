"""Issue 12, item 4: every integer parameter of the public API is type-checked.

bool, float (even integral) and str must raise TypeError naming the parameter; before the
fix ``rec.candidate(1, 0, 0, 16.9)`` returned 16 elements, ``size=True`` returned 1 and
``rec.gumbel_noise(2.7)`` returned 2.
"""

from __future__ import annotations

import numpy as np
import pytest

from dprec import DPRECCodec, philox, qmgeo, secagg
from dprec.rec import codec
from dprec.rec import kernels as rec
from dprec.transforms import hadamard, sketch

BAD = [("float", 16.9), ("integral_float", 16.0), ("bool", True), ("str", "16")]

_PHI = np.ones(16, np.float32)
_MSG_DIGEST = b"\0" * 8


def _message(**kw):
    args = dict(seed=1, bits=(4,), indices=(3,), layout_digest=_MSG_DIGEST)
    args.update(kw)
    return codec.DPRECMessage(**args)


# (label, argument name, call taking the bad value)
CASES = [
    ("rec.candidate", "seed", lambda v: rec.candidate(v, 0, 0, 16)),
    ("rec.candidate", "group", lambda v: rec.candidate(1, v, 0, 16)),
    ("rec.candidate", "index", lambda v: rec.candidate(1, 0, v, 16)),
    ("rec.candidate", "size", lambda v: rec.candidate(1, 0, 0, v)),
    ("rec.logits", "seed", lambda v: rec.logits(_PHI, v, 0, 4, sigma=1.0)),
    ("rec.logits", "group", lambda v: rec.logits(_PHI, 1, v, 4, sigma=1.0)),
    ("rec.logits", "bits", lambda v: rec.logits(_PHI, 1, 0, v, sigma=1.0)),
    ("rec.encode_group", "seed", lambda v: rec.encode_group(_PHI, v, 0, 4, sigma=1.0)),
    ("rec.encode_group", "group", lambda v: rec.encode_group(_PHI, 1, v, 4, sigma=1.0)),
    ("rec.encode_group", "bits", lambda v: rec.encode_group(_PHI, 1, 0, v, sigma=1.0)),
    ("rec.gumbel_noise", "n", lambda v: rec.gumbel_noise(v)),
    ("rec.accumulate", "group", lambda v: rec.accumulate(np.zeros(16, np.float32), v, [1], [0], sigma=1.0)),
    ("rec.accumulate", "seeds[0]", lambda v: rec.accumulate(np.zeros(16, np.float32), 0, [v], [0], sigma=1.0)),
    ("rec.accumulate", "indices[0]", lambda v: rec.accumulate(np.zeros(16, np.float32), 0, [1], [v], sigma=1.0)),
    ("philox.philox4x32", "counter", lambda v: philox.philox4x32(np.full(4, v), np.zeros(2, np.uint32))),
    ("philox.philox4x32", "key", lambda v: philox.philox4x32(np.zeros(4, np.uint32), np.full(2, v))),
    ("hadamard.RandomizedHadamard", "dim", lambda v: hadamard.RandomizedHadamard(v, 1)),
    ("hadamard.RandomizedHadamard", "seed", lambda v: hadamard.RandomizedHadamard(16, v)),
    ("hadamard.RandomizedHadamard", "repeats", lambda v: hadamard.RandomizedHadamard(16, 1, repeats=v)),
    ("hadamard.RandomizedHadamard", "group", lambda v: hadamard.RandomizedHadamard(16, 1, group=v)),
    ("hadamard.RandomizedHadamard.signs", "repeat", lambda v: hadamard.RandomizedHadamard(16, 1, 2).signs(v)),
    ("sketch.CountSketch", "dim", lambda v: sketch.CountSketch(v, 3, 8, 1)),
    ("sketch.CountSketch", "rows", lambda v: sketch.CountSketch(16, v, 8, 1)),
    ("sketch.CountSketch", "cols", lambda v: sketch.CountSketch(16, 3, v, 1)),
    ("sketch.CountSketch", "seed", lambda v: sketch.CountSketch(16, 3, 8, v)),
    ("sketch.CountSketch", "group", lambda v: sketch.CountSketch(16, 3, 8, 1, group=v)),
    ("codec.DPRECCodec", "bits", lambda v: DPRECCodec(sigma=1.0, bits=v)),
    ("codec.DPRECCodec", "bits['w']", lambda v: DPRECCodec(sigma=1.0, bits={"w": v})),
    ("codec.DPRECCodec", "max_group_size", lambda v: DPRECCodec(sigma=1.0, max_group_size=v)),
    ("codec.DPRECCodec.encode", "seed", lambda v: DPRECCodec(sigma=1.0).encode(_PHI, seed=v)),
    ("codec.DPRECMessage", "seed", lambda v: _message(seed=v)),
    ("codec.DPRECMessage", "bits[0]", lambda v: _message(bits=(v,))),
    ("codec.DPRECMessage", "indices[0]", lambda v: _message(indices=(v,))),
]

_INTS = np.arange(-3, 5, dtype=np.int64)
_F64 = np.linspace(-2.0, 2.0, 16)
_U32S = np.zeros((2, 16), np.uint32)


def _pipeline(**kw):
    args = dict(dim=16, clip=1.0, bits=16, num_clients=4, seed=1, noise_stddev=0.5)
    args.update(kw)
    return secagg.DDGPipeline(**args)


CASES += [
    ("secagg.sample_discrete_gaussian", "n", lambda v: secagg.sample_discrete_gaussian(v, 1.0)),
    ("secagg.sample_skellam", "n", lambda v: secagg.sample_skellam(v, 1.0)),
    ("secagg.conditional_round", "max_attempts", lambda v: secagg.conditional_round(_F64, 10.0, max_attempts=v)),
    ("secagg.conditional_round", "group", lambda v: secagg.conditional_round(_F64, 10.0, group=v)),
    ("secagg.randomized_round", "group", lambda v: secagg.randomized_round(_F64, group=v)),
    ("secagg.modular_reduce", "bits", lambda v: secagg.modular_reduce(_INTS, v)),
    ("secagg.modular_sum", "bits", lambda v: secagg.modular_sum(_U32S, v)),
    ("secagg.centered_lift", "bits", lambda v: secagg.centered_lift(_U32S[0], v)),
    ("secagg.ModularAccumulator", "m", lambda v: secagg.ModularAccumulator(v, 16)),
    ("secagg.ModularAccumulator", "bits", lambda v: secagg.ModularAccumulator(16, v)),
    ("secagg.DDGPipeline", "dim", lambda v: _pipeline(dim=v)),
    ("secagg.DDGPipeline", "bits", lambda v: _pipeline(bits=v)),
    ("secagg.DDGPipeline", "num_clients", lambda v: _pipeline(num_clients=v)),
    ("secagg.DDGPipeline", "seed", lambda v: _pipeline(seed=v)),
    ("secagg.DDGPipeline", "steps", lambda v: _pipeline(steps=v)),
    ("secagg.DDGPipeline", "group", lambda v: _pipeline(group=v)),
    ("secagg.DDGPipeline", "rows", lambda v: _pipeline(sketch=(v, 8))),
    ("secagg.DDGPipeline", "cols", lambda v: _pipeline(sketch=(3, v))),
    ("secagg.DDGPipeline.decode", "num_clients", lambda v: _pipeline().decode(np.zeros(16, np.uint32), num_clients=v)),
]

CASES += [
    ("qmgeo.quantize", "levels", lambda v: qmgeo.quantize(_F64, 1.0, v, 0.5)),
    ("qmgeo.quantize", "group", lambda v: qmgeo.quantize(_F64, 1.0, 8, 0.5, group=v)),
    ("qmgeo.dequantize", "levels", lambda v: qmgeo.dequantize(_INTS + 3, 1.0, v)),
    ("qmgeo.index_bits", "levels", lambda v: qmgeo.index_bits(v)),
    ("qmgeo.pack", "levels", lambda v: qmgeo.pack(_INTS + 3, v)),
    ("qmgeo.unpack", "levels", lambda v: qmgeo.unpack(b"\0\0\0", v, 8)),
    ("qmgeo.unpack", "count", lambda v: qmgeo.unpack(b"\0\0\0", 8, v)),
    ("qmgeo.QMGeoCodec", "levels", lambda v: qmgeo.QMGeoCodec(1.0, v, 0.5)),
    ("qmgeo.QMGeoCodec.epsilon", "rounds", lambda v: qmgeo.QMGeoCodec(1.0, 8, 0.5).epsilon(_F64, delta=1e-5, rounds=v)),
    ("qmgeo.QMGeoMessage", "levels", lambda v: qmgeo.QMGeoMessage(v, 8, b"\0\0\0", b"\0" * 8)),
    ("qmgeo.QMGeoMessage", "count", lambda v: qmgeo.QMGeoMessage(8, v, b"\0\0\0", b"\0" * 8)),
]

# The three Philox stream functions share their integer parameters.
for _fn in (philox.words, philox.uniforms, philox.normals):
    CASES += [
        (f"philox.{_fn.__name__}", "seed", lambda v, f=_fn: f(v, 4)),
        (f"philox.{_fn.__name__}", "count", lambda v, f=_fn: f(1, v)),
    ] + [
        (f"philox.{_fn.__name__}", _arg, lambda v, f=_fn, a=_arg: f(1, 4, **{a: v}))
        for _arg in ("substream", "group", "domain", "offset")
    ]


@pytest.mark.parametrize("kind,value", BAD, ids=[k for k, _ in BAD])
@pytest.mark.parametrize("label,name,call", CASES, ids=[f"{label}-{name}" for label, name, _ in CASES])
def test_integer_parameter_rejects_non_integers(label, name, call, kind, value):
    if name in ("counter", "key") and kind == "str":
        value = "1"  # np.full of a str makes a '<U1' array
    with pytest.raises(TypeError, match=r"^" + _re(name)):
        call(value)


def _re(name: str) -> str:
    import re  # noqa: PLC0415

    return re.escape(name)


@pytest.mark.parametrize("name", ["size", "seed", "group", "index"])
def test_numpy_integer_scalars_are_accepted(name):
    args = {"seed": 1, "group": 0, "index": 0, "size": 16}
    args[name] = np.int64(args[name]) if name != "seed" else np.uint64(1)
    out = rec.candidate(args["seed"], args["group"], args["index"], args["size"])
    np.testing.assert_array_equal(out, rec.candidate(1, 0, 0, 16))


def test_issue_examples():
    with pytest.raises(TypeError, match="^size must be an integer"):
        rec.candidate(1, 0, 0, 16.9)
    with pytest.raises(TypeError, match="^size must be an integer"):
        rec.candidate(1, 0, 0, size=True)
    with pytest.raises(TypeError, match="^n must be an integer"):
        rec.gumbel_noise(2.7)
    with pytest.raises(TypeError, match="^size must be an integer"):
        rec.candidate(1, 0, 0, size="16")
