"""Property / fuzz tests (hypothesis): byte messages, decode/aggregate of fuzzed messages,
and random arguments to every public function of rec, philox, hadamard, sketch, secagg, qmgeo,
DPRECCodec and QMGeoCodec.

Every call must either succeed or raise TypeError / ValueError; any other exception
(OverflowError, MemoryError, IndexError, ...) is a failure, and so is a crash.

Isolation: each test runs its fuzz body in a subprocess (``python tests/robustness/test_fuzz.py
TARGET N``), so a segfault or abort fails that test instead of killing pytest. Before
each risky call the worker writes a description of the input to a file; when the worker
dies from a signal, the test reports that input and the worker's stderr (faulthandler
prints the Python stack). Hypothesis runs with ``derandomize=True`` and no example
database, so CI is deterministic.

Size: ``DPREC_FUZZ_EXAMPLES`` (default 60) is the number of examples per test; e.g.
``DPREC_FUZZ_EXAMPLES=5000 python -m pytest tests/robustness/test_fuzz.py`` for a long run
(``DPREC_FUZZ_TIMEOUT`` seconds per test, default 600, scales with it if unset).
"""

from __future__ import annotations

import faulthandler
import math
import os
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

DEFAULT_EXAMPLES = 60
ALLOWED = (TypeError, ValueError)

# --------------------------------------------------------------------------------------
# strategies
# --------------------------------------------------------------------------------------

_EDGE_INTS = [0, 1, -1, 2, 3, 7, 16, 24, 25, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**34, 2**34 + 1,
              2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**64), 10**30]
_EDGE_FLOATS = [0.0, -0.0, 1.0, -1.0, 0.5, 16.9, math.nan, math.inf, -math.inf, 1e308, -1e308, 1e39, 3e38,
                1e-46, 5e-324, 2.2250738585072014e-308, 1e-300, 2.0**34, 2.0**64]
_DTYPES = ["float32", "float64", "float16", "int8", "int32", "int64", "uint8", "uint32", "uint64",
           "bool", "complex64", "complex128", "object", "U3", "datetime64[s]", "longdouble"]
_SHAPES = [(), (0,), (1,), (3,), (4,), (8,), (16,), (17,), (2, 8), (1, 16), (4, 4, 1), (0, 4)]
_FILLS = [0.0, 1.0, -1.0, 0.25, math.nan, math.inf, -math.inf, 1e308, 3e38, 1e-46, 7.0]


def _ints() -> st.SearchStrategy:
    """Integers of random sizes and signs."""
    return st.one_of(
        st.sampled_from(_EDGE_INTS),
        st.integers(-64, 64),
        st.integers(0, 130).flatmap(lambda k: st.integers(-(2**k), 2**k)),
    )


def _floats() -> st.SearchStrategy:
    return st.one_of(st.sampled_from(_EDGE_FLOATS), st.floats(allow_nan=True, allow_infinity=True))


@st.composite
def _arrays(draw: Any) -> Any:
    """Small arrays of odd dtypes and shapes: non-contiguous, zero-stride, read-only, big-endian."""
    dtype = np.dtype(draw(st.sampled_from(_DTYPES)))
    shape = draw(st.sampled_from(_SHAPES))
    fill = draw(st.sampled_from(_FILLS))
    try:
        a = np.full(shape, fill).astype(dtype) if dtype.kind not in "OUM" else np.empty(shape, dtype)
    except (ValueError, TypeError, OverflowError):
        a = np.zeros(shape, dtype)
    if a.size and dtype.kind in "fc" and draw(st.booleans()):
        a = np.asarray(a + np.arange(a.size, dtype=np.float64).reshape(shape).astype(dtype))
    kind = draw(st.sampled_from(["plain", "strided", "broadcast", "readonly", "byteswap", "fortran"]))
    if kind == "strided" and a.ndim:
        a = np.repeat(a, 2, axis=-1)[..., ::2]
    elif kind == "broadcast" and a.ndim:
        a = np.broadcast_to(a.reshape(-1)[:1] if a.size else a, a.shape)
    elif kind == "readonly":
        a = a.copy()
        a.flags.writeable = False
    elif kind == "byteswap" and dtype.kind in "fiu":
        a = a.astype(dtype.newbyteorder(">"))
    elif kind == "fortran":
        a = np.asfortranarray(a)
    return a


def _junk() -> st.SearchStrategy:
    """Anything: ints, floats (nan/inf/huge/tiny), bools, strings, None, bytes, NumPy scalars,
    lists, dicts and arrays of odd dtypes/shapes."""
    scalars = st.one_of(
        _ints(), _floats(), st.booleans(), st.none(), st.text(max_size=4), st.binary(max_size=4),
        st.sampled_from(["auto", "cpu", "reference", "cuda", "mean", "median", "", "1", "16", "float32"]),
        st.sampled_from([np.int64(3), np.uint64(2**64 - 1), np.float32(1.5), np.float32("nan"), np.bool_(True),
                         np.int8(-1), np.float64(1e300), complex(1, 1), np.float16(2.0)]),
    )
    return st.one_of(
        scalars,
        _arrays(),
        st.lists(st.one_of(_ints(), _floats(), st.booleans()), max_size=4),
        st.tuples(_ints(), _ints()),
        st.dictionaries(st.text(max_size=2), st.one_of(_ints(), _arrays()), max_size=2),
    )


def _sizes() -> st.SearchStrategy:
    """Size-like arguments: small valid sizes, or invalid ones (negative, > 2**34, not int).

    Valid sizes are kept small so that a valid call stays cheap: a valid 2**34-element
    request legitimately needs 64 GiB and is not what this fuzzing is about.
    """
    return st.one_of(
        st.integers(0, 40),
        st.integers(2**34 + 1, 2**130),
        st.integers(-(2**70), -1),
        _junk().filter(lambda v: not (isinstance(v, (int, np.integer)) and 40 < int(v) <= 2**34)),
    )


def _maybe(valid: Any, fuzz: st.SearchStrategy) -> st.SearchStrategy:
    """The valid value or a fuzzed one (each parameter independently)."""
    return st.one_of(st.just(valid), fuzz)


# --------------------------------------------------------------------------------------
# worker side
# --------------------------------------------------------------------------------------

_LAST = os.environ.get("DPREC_FUZZ_LAST")


def _describe(x: Any) -> str:
    if isinstance(x, np.ndarray):
        flags = "C" if x.flags.c_contiguous else ("F" if x.flags.f_contiguous else "nc")
        return f"ndarray(dtype={x.dtype.str}, shape={x.shape}, strides={x.strides}, {flags}, w={x.flags.writeable}, first={x.ravel()[:3].tolist() if x.size else []})"
    if isinstance(x, (list, tuple)):
        inner = ", ".join(_describe(v) for v in x)
        return f"[{inner}]" if isinstance(x, list) else f"({inner})"
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k!r}: {_describe(v)}" for k, v in x.items()) + "}"
    r = repr(x)
    return r if len(r) < 300 else r[:300] + "..."


def _call(label: str, fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn``; TypeError/ValueError are fine, anything else is re-raised with the input."""
    desc = f"{label}({', '.join([_describe(a) for a in args] + [f'{k}={_describe(v)}' for k, v in kwargs.items()])})"
    if _LAST:
        with open(_LAST, "w") as f:
            f.write(desc)
    try:
        return fn(*args, **kwargs)
    except ALLOWED:
        return None
    except Exception as e:
        raise AssertionError(f"{desc} raised {type(e).__name__}: {e}") from e


def _fix_crc(b: bytearray) -> bytearray:
    if len(b) >= 4:
        b[-4:] = (zlib.crc32(bytes(b[:-4])) & 0xFFFFFFFF).to_bytes(4, "little")
    return b


@st.composite
def _valid_messages(draw: Any) -> Any:
    from dprec import DPRECMessage

    bits = draw(st.one_of(
        st.integers(1, 24).flatmap(lambda b: st.lists(st.just(b), min_size=1, max_size=6)),
        st.lists(st.integers(1, 24), min_size=1, max_size=6),
    ))
    indices = [draw(st.integers(0, (1 << b) - 1)) for b in bits]
    return DPRECMessage(seed=draw(st.integers(0, 2**64 - 1)), bits=bits, indices=indices,
                        layout_digest=draw(st.binary(min_size=8, max_size=8)))


@st.composite
def _mutated(draw: Any, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "set", "truncate", "insert", "delete", "extend", "header"]))
        if op in ("flip", "set") and b:
            i = draw(st.integers(0, len(b) - 1))
            b[i] = b[i] ^ (1 << draw(st.integers(0, 7))) if op == "flip" else draw(st.integers(0, 255))
        elif op == "truncate":
            del b[draw(st.integers(0, len(b))):]
        elif op == "insert":
            i = draw(st.integers(0, len(b)))
            b[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete" and b:
            i = draw(st.integers(0, len(b) - 1))
            del b[i: i + draw(st.integers(1, 8))]
        elif op == "extend":
            b += draw(st.binary(min_size=1, max_size=16))
        elif op == "header" and len(b) > 8:
            # header fields the parser branches on: version, transform, flags, group count
            i = draw(st.integers(4, min(len(b) - 1, 32)))
            b[i] = draw(st.sampled_from([0, 1, 2, 0x7F, 0x80, 0xFF]))
    if draw(st.booleans()):
        _fix_crc(b)
    return bytes(b)


def _check_parsed(data: Any) -> None:
    from dprec import DPRECMessage

    m = _call("DPRECMessage.from_bytes", DPRECMessage.from_bytes, data)
    if m is None:
        return
    assert isinstance(m, DPRECMessage), type(m)
    again = DPRECMessage.from_bytes(m.to_bytes())
    assert again == m, f"from_bytes({bytes(data).hex()}) = {m!r} does not round-trip"
    assert len(m.to_bytes()) == m.nbytes


def fuzz_message_random_bytes(data: Any) -> None:
    from dprec import DPRECMessage

    raw = data.draw(st.one_of(
        st.binary(max_size=96),
        st.binary(max_size=64).map(lambda b: b"DPREC"[: len(b) % 6] + b),
    ))
    raw = data.draw(st.sampled_from([bytes, bytearray, memoryview]))(raw)
    if data.draw(st.booleans()):
        raw = bytes(_fix_crc(bytearray(raw)))
    _check_parsed(raw)
    _call("DPRECMessage.from_bytes", DPRECMessage.from_bytes, data.draw(_junk()))


def fuzz_message_mutations(data: Any) -> None:
    m = data.draw(_valid_messages())
    blob = m.to_bytes()
    assert type(m).from_bytes(blob) == m
    # with MAGIC intact: start from the real prefix, so mutations reach the deeper checks
    _check_parsed(data.draw(_mutated(blob)))


def fuzz_message_fields(data: Any) -> None:
    from dprec import DPRECMessage

    kw = dict(seed=data.draw(_maybe(1, _junk())), bits=data.draw(_maybe([3, 3], _junk())),
              indices=data.draw(_maybe([1, 2], _junk())), layout_digest=data.draw(_maybe(b"\0" * 8, _junk())))
    m = _call("DPRECMessage", DPRECMessage, **kw)
    if m is not None:
        assert DPRECMessage.from_bytes(m.to_bytes()) == m


def _codec_setup() -> tuple[Any, Any, bytes]:
    from dprec import DPRECCodec

    codec = DPRECCodec(sigma=0.5, clip_multiplier=1.0, bits={"a": 3, "b": 5}, max_group_size=8)
    template = {"a": np.zeros(10, np.float32), "b": np.zeros((2, 3), np.float32)}
    rng = np.random.default_rng(0)
    update = {k: rng.normal(size=v.shape).astype(np.float32) for k, v in template.items()}
    return codec, template, codec.encode(update, rng=rng, seed=7).to_bytes()


def _check_decoded(out: Any, template: Any) -> None:
    if out is None:
        return
    if isinstance(template, dict) and all(isinstance(v, np.ndarray) for v in template.values()):
        assert set(out) == set(template), (sorted(out), sorted(template))
        for k in template:
            assert np.shape(out[k]) == template[k].shape, (k, np.shape(out[k]), template[k].shape)
    elif isinstance(template, np.ndarray):
        assert np.shape(out) == template.shape, (np.shape(out), template.shape)


def fuzz_decode_aggregate(data: Any) -> None:
    from dprec import DPRECMessage

    codec, template, blob = _codec_setup()
    msgs = []
    for _ in range(data.draw(st.integers(1, 3))):
        kind = data.draw(st.sampled_from(["valid", "mutated", "mutated", "random", "object", "junk"]))
        if kind == "valid":
            msgs.append(blob)
        elif kind == "mutated":
            msgs.append(data.draw(_mutated(blob)))
        elif kind == "random":
            msgs.append(data.draw(_valid_messages()).to_bytes())
        elif kind == "object":
            parsed = DPRECMessage.from_bytes(blob)
            bits = list(parsed.bits)
            if data.draw(st.booleans()):
                bits[data.draw(st.integers(0, len(bits) - 1))] = data.draw(st.integers(1, 24))
            digest = data.draw(st.sampled_from([parsed.layout_digest, b"\0" * 8]))
            msgs.append(DPRECMessage(seed=parsed.seed, bits=bits, indices=[0] * len(bits), layout_digest=digest))
        else:
            msgs.append(data.draw(_junk()))
    tmpl = data.draw(st.one_of(
        st.just(template),
        st.just({"a": np.zeros(10, np.float32)}),
        st.just({"a": np.zeros(10, np.float64), "b": np.zeros((2, 3), np.float16)}),
        st.just([np.zeros(10, np.float32), np.zeros((2, 3), np.float32)]),
        _junk(),
    ))
    for m in msgs:
        _check_decoded(_call("codec.decode", codec.decode, m, tmpl), tmpl)
    weights = data.draw(_maybe(None, st.one_of(_junk(), st.lists(_floats(), min_size=len(msgs), max_size=len(msgs)))))
    _check_decoded(_call("codec.aggregate", codec.aggregate, msgs, tmpl, weights=weights), tmpl)


def _backend_arg() -> st.SearchStrategy:
    return _maybe("auto", st.one_of(st.sampled_from(["cpu", "reference", "cuda", "CPU", "gpu", ""]), _junk()))


def _rng_arg() -> st.SearchStrategy:
    return st.one_of(st.none(), st.just(np.random.default_rng(1)), _junk())


def fuzz_rec(data: Any) -> None:
    from dprec import rec

    d = data.draw
    phi16 = np.linspace(-1, 1, 16, dtype=np.float32)
    fn = d(st.sampled_from(["candidate", "logits", "gumbel_noise", "sample_index", "sample_indices",
                            "encode_group", "accumulate"]))
    if fn == "candidate":
        _call("rec.candidate", rec.candidate, d(_maybe(1, _ints())), d(_maybe(0, _junk())), d(_maybe(3, _junk())),
              d(_maybe(16, _sizes())), sigma=d(_maybe(1.0, _junk())), out=d(_maybe(None, _junk())),
              backend=d(_backend_arg()))
    elif fn == "logits":
        _call("rec.logits", rec.logits, d(_maybe(phi16, _junk())), d(_maybe(1, _junk())), d(_maybe(0, _junk())),
              d(_maybe(3, _junk())), sigma=d(_maybe(1.0, _junk())), scale=d(_maybe(1.0, _junk())),
              backend=d(_backend_arg()))
    elif fn == "gumbel_noise":
        _call("rec.gumbel_noise", rec.gumbel_noise, d(_maybe(8, _sizes())), rng=d(_rng_arg()))
    elif fn == "sample_index":
        _call("rec.sample_index", rec.sample_index, d(_maybe(np.zeros(8), _junk())), rng=d(_rng_arg()),
              gumbel=d(_maybe(None, _junk())), backend=d(_backend_arg()))
    elif fn == "sample_indices":
        _call("rec.sample_indices", rec.sample_indices, d(_maybe(np.zeros((2, 8)), _junk())), rng=d(_rng_arg()),
              gumbel=d(_maybe(None, _junk())), backend=d(_backend_arg()))
    elif fn == "encode_group":
        _call("rec.encode_group", rec.encode_group, d(_maybe(phi16, _junk())), d(_maybe(1, _junk())),
              d(_maybe(0, _junk())), d(_maybe(3, _junk())), sigma=d(_maybe(1.0, _junk())),
              scale=d(_maybe(1.0, _junk())), rng=d(_rng_arg()), backend=d(_backend_arg()))
    else:
        _call("rec.accumulate", rec.accumulate, d(_maybe(np.zeros(16, np.float32), _junk())), d(_maybe(0, _junk())),
              d(_maybe([1, 2], _junk())), d(_maybe([0, 1], _junk())), sigma=d(_maybe(1.0, _junk())),
              weights=d(_maybe(None, _junk())), backend=d(_backend_arg()))


def fuzz_philox(data: Any) -> None:
    from dprec import philox

    d = data.draw
    fn = d(st.sampled_from(["philox4x32", "words", "uniforms", "normals"]))
    if fn == "philox4x32":
        _call("philox.philox4x32", philox.philox4x32, d(_maybe(np.zeros((2, 4), np.uint32), _junk())),
              d(_maybe([1, 2], _junk())), backend=d(_backend_arg()))
        return
    kw = dict(substream=d(_maybe(0, _junk())), group=d(_maybe(0, _junk())), domain=d(_maybe(0, _junk())),
              offset=d(_maybe(0, _junk())), backend=d(_backend_arg()))
    if fn == "uniforms":
        kw["dtype"] = d(_maybe(np.float32, st.one_of(st.sampled_from([np.float64, np.float16, np.int32, "foo", "f8"]),
                                                     _junk())))
    else:
        kw["out"] = d(_maybe(None, _junk()))
    _call(f"philox.{fn}", getattr(philox, fn), d(_maybe(1, _ints())), d(_maybe(16, _sizes())), **kw)


def fuzz_hadamard(data: Any) -> None:
    from dprec.transforms import hadamard

    d = data.draw
    fn = d(st.sampled_from(["fwht", "RandomizedHadamard"]))
    if fn == "fwht":
        x = d(_maybe(np.arange(8, dtype=np.float32), _junk()))
        _call("hadamard.fwht", hadamard.fwht, x, normalize=d(_maybe(True, _junk())),
              inplace=d(_maybe(False, _junk())), backend=d(_backend_arg()))
        return
    rh = _call("hadamard.RandomizedHadamard", hadamard.RandomizedHadamard, d(_maybe(10, _sizes())),
               d(_maybe(1, _ints())), d(_maybe(1, _sizes())), d(_maybe(0, _junk())))
    if rh is None:
        rh = hadamard.RandomizedHadamard(10, 1, 2)
    for _ in range(2):
        m = d(st.sampled_from(["signs", "forward", "inverse"]))
        if m == "signs":
            _call("RandomizedHadamard.signs", rh.signs, d(_maybe(0, _junk())),
                  dtype=d(_maybe(np.float64, st.one_of(st.sampled_from([np.float32, np.int8, "foo"]), _junk()))),
                  backend=d(_backend_arg()))
        elif m == "forward":
            _call("RandomizedHadamard.forward", rh.forward,
                  d(_maybe(np.ones(rh.dim, np.float32), _junk())), backend=d(_backend_arg()))
        else:
            _call("RandomizedHadamard.inverse", rh.inverse,
                  d(_maybe(np.ones(rh.padded_dim, np.float32), _junk())), backend=d(_backend_arg()))


def fuzz_sketch(data: Any) -> None:
    from dprec.transforms import sketch

    d = data.draw
    cs = _call("sketch.CountSketch", sketch.CountSketch, d(_maybe(12, _sizes())), d(_maybe(3, _sizes())),
               d(_maybe(8, _sizes())), d(_maybe(1, _ints())), d(_maybe(0, _junk())), d(_maybe(True, _junk())))
    if cs is None:
        cs = sketch.CountSketch(12, 3, 8, 1)
    table = _call("CountSketch.encode", cs.encode, d(_maybe(np.ones(cs.dim, np.float32), _junk())),
                  d(_maybe(None, _junk())), backend=d(_backend_arg()))
    if table is None:
        table = np.zeros(cs.shape, np.float32)
    _call("CountSketch.decode", cs.decode, d(_maybe(table, _junk())),
          d(_maybe("mean", st.one_of(st.sampled_from(["median", "min", ""]), _junk()))), backend=d(_backend_arg()))


def fuzz_codec(data: Any) -> None:
    from dprec import DPRECCodec

    d = data.draw
    bits = d(_maybe(3, st.one_of(_junk(), st.dictionaries(st.sampled_from(["a", "b", "c"]), _junk(), max_size=2))))
    codec = _call("DPRECCodec", DPRECCodec, d(_maybe(0.5, _junk())), clip_multiplier=d(_maybe(1.0, _junk())),
                  bits=bits, max_group_size=d(_maybe(None, _sizes())), backend=d(_backend_arg()))
    if codec is None:
        codec = DPRECCodec(sigma=0.5, bits=3, max_group_size=8)
    good = {"a": np.ones(10, np.float32), "b": np.ones((2, 3), np.float32)}
    update = d(_maybe(good, st.one_of(_junk(), st.dictionaries(st.sampled_from(["a", "b"]), _arrays(), max_size=2))))
    _call("DPRECCodec.layout", codec.layout, update)
    msg = _call("DPRECCodec.encode", codec.encode, update, rng=d(_rng_arg()), seed=d(_maybe(None, _ints())),
                return_info=d(_maybe(False, _junk())))
    if msg is not None and not isinstance(msg, tuple):
        _check_decoded(_call("DPRECCodec.decode", codec.decode, msg, update), update)


def fuzz_secagg(data: Any) -> None:
    from dprec import secagg

    d = data.draw
    small_n = st.one_of(st.integers(-3, 64), _junk())  # never a size whose allocation alone fails
    bits = _maybe(16, st.one_of(st.sampled_from([0, 1, 31, 32, 33, 64, 65, -1]), _junk()))
    fn = d(st.sampled_from(["noise", "round", "reduce", "sum", "lift", "pipeline"]))
    if fn == "noise":
        f = d(st.sampled_from([secagg.sample_discrete_gaussian, secagg.sample_skellam]))
        _call(f"secagg.{f.__name__}", f, d(_maybe(8, small_n)), d(_maybe(2.0, _junk())), rng=d(_rng_arg()),
              backend=d(_backend_arg()))
    elif fn == "round":
        _call("secagg.conditional_round", secagg.conditional_round, d(_maybe(np.linspace(-3, 3, 8), _junk())),
              d(_maybe(10.0, _junk())), rng=d(_rng_arg()), max_attempts=d(_maybe(10, small_n)),
              group=d(_maybe(0, _junk())), backend=d(_backend_arg()))
    elif fn == "reduce":
        _call("secagg.modular_reduce", secagg.modular_reduce, d(_maybe(np.arange(-4, 4), _junk())), d(bits),
              backend=d(_backend_arg()))
    elif fn == "sum":
        _call("secagg.modular_sum", secagg.modular_sum, d(_maybe(np.ones((3, 8), np.uint32), _junk())), d(bits),
              out=d(_maybe(None, _junk())), backend=d(_backend_arg()))
    elif fn == "lift":
        _call("secagg.centered_lift", secagg.centered_lift, d(_maybe(np.arange(8, dtype=np.uint32), _junk())),
              d(bits), scale=d(_maybe(None, _junk())), dtype=d(_maybe(None, _junk())), backend=d(_backend_arg()))
    else:
        cls = d(st.sampled_from([secagg.DDGPipeline, secagg.SkellamPipeline]))
        pipe = _call(f"secagg.{cls.__name__}", cls, d(_maybe(10, small_n)), clip=d(_maybe(1.0, _junk())),
                     bits=d(bits), num_clients=d(_maybe(4, small_n)), seed=d(_maybe(1, _ints())),
                     noise_stddev=d(_maybe(0.5, _junk())), sketch=d(_maybe(None, _junk())))
        if pipe is None:
            pipe = cls(10, clip=1.0, bits=16, num_clients=4, seed=1, noise_stddev=0.5)
        msg = _call("pipeline.encode", pipe.encode, d(_maybe(np.ones(10, np.float32), _junk())), rng=d(_rng_arg()))
        total = _call("pipeline.aggregate", pipe.aggregate, d(_maybe([msg] if msg is not None else None, _junk())))
        _call("pipeline.decode", pipe.decode, d(_maybe(total, _junk())), num_clients=d(_maybe(None, small_n)))


def fuzz_qmgeo(data: Any) -> None:
    from dprec import qmgeo

    d = data.draw
    fn = d(st.sampled_from(["quantize", "dequantize", "pack", "unpack", "codec", "message"]))
    levels = d(_maybe(6, st.one_of(st.sampled_from([0, 1, 2, 3, 65536, 65537, -1]), _junk())))
    if fn == "quantize":
        _call("qmgeo.quantize", qmgeo.quantize, d(_maybe(np.linspace(-2, 2, 9), _junk())), d(_maybe(1.0, _junk())),
              levels, d(_maybe(0.5, _junk())), rng=d(_rng_arg()), literal=d(_maybe(False, _junk())),
              group=d(_maybe(0, _junk())), backend=d(_backend_arg()))
    elif fn == "dequantize":
        _call("qmgeo.dequantize", qmgeo.dequantize, d(_maybe(np.arange(6), _junk())), d(_maybe(1.0, _junk())), levels)
    elif fn == "pack":
        _call("qmgeo.pack", qmgeo.pack, d(_maybe(np.arange(6, dtype=np.uint16), _junk())), levels,
              backend=d(_backend_arg()))
    elif fn == "unpack":
        _call("qmgeo.unpack", qmgeo.unpack, d(_maybe(b"\x88\xc6\x0a", st.one_of(st.binary(max_size=12), _junk()))),
              levels, d(_maybe(6, st.one_of(st.integers(-2, 40), _junk()))), backend=d(_backend_arg()))
    else:
        codec = qmgeo.QMGeoCodec(1.0, 6, 0.5)
        template = {"a": np.zeros(10, np.float32), "b": np.zeros((2, 3))}
        blob = codec.encode({"a": np.linspace(-1, 1, 10, dtype=np.float32), "b": np.ones((2, 3))},
                            rng=np.random.default_rng(0)).to_bytes()
        if fn == "codec":
            made = _call("qmgeo.QMGeoCodec", qmgeo.QMGeoCodec, d(_maybe(1.0, _junk())), levels,
                         d(_maybe(0.5, _junk())), backend=d(_backend_arg()))
            update = d(_maybe(template, _junk()))
            _call("QMGeoCodec.encode", (made or codec).encode, update, rng=d(_rng_arg()),
                  return_info=d(_maybe(False, _junk())))
        msgs = [d(st.one_of(st.just(blob), _mutated(blob), st.binary(max_size=48), _junk())) for _ in range(2)]
        for m in msgs:
            parsed = _call("QMGeoMessage.from_bytes", qmgeo.QMGeoMessage.from_bytes, m)
            if parsed is not None:
                assert qmgeo.QMGeoMessage.from_bytes(parsed.to_bytes()) == parsed
            _check_decoded(_call("QMGeoCodec.decode", codec.decode, m, template), template)
        weights = d(_maybe(None, st.one_of(_junk(), st.lists(_floats(), min_size=2, max_size=2))))
        _check_decoded(_call("QMGeoCodec.aggregate", codec.aggregate, msgs, template, weights=weights), template)


def _crafted_dprec(draw: Any) -> bytes:
    """A DP-REC message whose header, bits, length and CRC agree with each other (a well-formed
    message of some layout, or one with bits out of range), of any group count up to 2**20."""
    import struct

    groups = draw(st.one_of(st.integers(1, 8), st.sampled_from([255, 256, 4095, 65536, 1 << 20])))
    uniform = draw(st.booleans())
    if uniform:
        bits_field = bytes([draw(st.sampled_from([0, 1, 2, 7, 24, 25, 255]))])
        total = groups * bits_field[0]
    else:
        small = draw(st.sampled_from([0, 1, 3, 24, 25, 255]))
        bits_field = bytes([small]) * groups
        if groups <= 8:
            bits_field = bytes(draw(st.lists(st.sampled_from([0, 1, 3, 24, 25, 255]), min_size=groups,
                                             max_size=groups)))
        total = sum(bits_field)
    digest = draw(st.sampled_from([b"\0" * 8, b"\xff" * 8]))
    header = struct.pack("<4sBBHQ8sI", b"DPRC", 1, draw(st.sampled_from([1, 2])),
                         1 if uniform else 0, draw(st.integers(0, 2**64 - 1)), digest, groups)
    payload = bytes((total + 7) // 8) if draw(st.booleans()) else b"\xff" * ((total + 7) // 8)
    return bytes(_fix_crc(bytearray(header + bits_field + payload + b"\0\0\0\0")))


def _crafted_qmgeo(draw: Any) -> bytes:
    import struct

    levels = draw(st.sampled_from([0, 1, 2, 3, 4, 256, 65536, 65537]))
    bits = max(1, (levels - 1).bit_length()) if levels >= 2 else draw(st.integers(0, 17))
    count = draw(st.one_of(st.integers(0, 16), st.sampled_from([1 << 20, 1 << 40, (1 << 40) + 1])))
    header = struct.pack("<4sBBHI8sQ", b"QMGO", 1, bits, 0, levels, b"\0" * 8, count)
    payload = bytes(min((count * bits + 7) // 8, 1 << 20))  # a too-short payload for the large claims
    return bytes(_fix_crc(bytearray(header + payload + b"\0\0\0\0")))


def _matching_dprec(draw: Any, layout: Any) -> bytes:
    """A message with the layout's length, group count, digest and bits field, and a random seed, payload
    and padding (CRC fixed or not): what passes the layout checks and reaches the index unpacking."""
    import struct

    uniform = len(set(layout.bits)) == 1
    bits_field = bytes(layout.bits[:1]) if uniform else bytes(layout.bits)
    payload = draw(st.binary(min_size=(layout.total_bits + 7) // 8, max_size=(layout.total_bits + 7) // 8))
    header = struct.pack("<4sBBHQ8sI", b"DPRC", 1, 1, 1 if uniform else 0, draw(st.integers(0, 2**64 - 1)),
                         layout.digest, layout.num_groups)
    b = bytearray(header + bits_field + payload + b"\0\0\0\0")
    return bytes(_fix_crc(b) if draw(st.integers(0, 4)) else b)


def _matching_qmgeo(draw: Any, layout: Any) -> bytes:
    import struct

    nbytes = layout.message_nbytes - 32 - 4
    header = struct.pack("<4sBBHI8sQ", b"QMGO", 1, layout.index_bits, 0, layout.levels, layout.digest,
                         layout.num_elements)
    b = bytearray(header + draw(st.binary(min_size=nbytes, max_size=nbytes)) + b"\0\0\0\0")
    return bytes(_fix_crc(b) if draw(st.integers(0, 4)) else b)


def fuzz_crafted_messages(data: Any) -> None:
    """Crafted messages with valid CRC and self-consistent headers: refused (or accepted) by the
    parser and by the server's codec, against its layout, without crashing. A share of them match
    the layout in everything but the payload (random indices and padding), so that the layout-aware
    path is passed and the unpacking and decoding are reached."""
    from dprec import DPRECMessage, QMGeoCodec, QMGeoMessage

    codec, template, _ = _codec_setup()
    layout = codec.layout(template)
    blob = _matching_dprec(data.draw, layout) if data.draw(st.booleans()) else _crafted_dprec(data.draw)
    _call("DPRECMessage.from_bytes(layout)", DPRECMessage.from_bytes, blob, layout)
    if len(blob) < 1 << 16:  # without a layout the parse is O(groups): keep the large ones to the above
        _check_parsed(blob)
    _call("codec.decode", codec.decode, blob, template)
    _call("codec.aggregate", codec.aggregate, [blob, blob], template)
    qcodec = QMGeoCodec(w_max=1.0, levels=3, p=0.5)  # 2-bit indices, of which 3 is not a level
    qlayout = qcodec.layout(template)
    qblob = _matching_qmgeo(data.draw, qlayout) if data.draw(st.booleans()) else _crafted_qmgeo(data.draw)
    _call("QMGeoMessage.from_bytes", QMGeoMessage.from_bytes, qblob)
    _call("QMGeoMessage.from_bytes(layout)", QMGeoMessage.from_bytes, qblob, qcodec.layout(template))
    _call("QMGeoCodec.decode", qcodec.decode, qblob, template)
    _call("QMGeoCodec.aggregate", qcodec.aggregate, [qblob, qblob], template)


TARGETS = {f.__name__[len("fuzz_"):]: f for f in [
    fuzz_message_random_bytes, fuzz_message_mutations, fuzz_message_fields, fuzz_decode_aggregate,
    fuzz_crafted_messages,
    fuzz_rec, fuzz_philox, fuzz_hadamard, fuzz_sketch, fuzz_codec, fuzz_secagg, fuzz_qmgeo,
]}


def _worker(target: str, examples: int) -> None:
    faulthandler.enable()
    body = TARGETS[target]

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck), print_blob=False)
    @given(st.data())
    def run(data: Any) -> None:
        body(data)

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # RuntimeWarnings of NumPy casts are not findings
        run()


# --------------------------------------------------------------------------------------
# pytest side
# --------------------------------------------------------------------------------------


def _examples() -> int:
    return max(1, int(os.environ.get("DPREC_FUZZ_EXAMPLES", DEFAULT_EXAMPLES)))


def _run(target: str) -> None:
    import dprec

    n = _examples()
    timeout = float(os.environ.get("DPREC_FUZZ_TIMEOUT", max(600.0, n * 2.0)))
    pkg_root = str(Path(dprec.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([pkg_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    with tempfile.TemporaryDirectory() as tmp:
        last = os.path.join(tmp, "last_input.txt")
        env["DPREC_FUZZ_LAST"] = last
        try:
            proc = subprocess.run([sys.executable, __file__, target, str(n)], capture_output=True, text=True,
                                  env=env, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"fuzz {target}: timed out after {timeout:.0f} s (a hang?); last input: {_read(last)}\n"
                        f"{(e.stderr or b'')[-4000:]!r}")
        if proc.returncode != 0:
            how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit status {proc.returncode}"
            pytest.fail(f"fuzz {target} ({n} examples): worker {how}\nlast input: {_read(last)}\n"
                        f"--- worker stderr (tail) ---\n{proc.stderr[-8000:]}\n--- stdout (tail) ---\n{proc.stdout[-2000:]}",
                        pytrace=False)


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return "(none)"


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_fuzz(target: str) -> None:
    _run(target)


if __name__ == "__main__":
    _worker(sys.argv[1], int(sys.argv[2]))
