"""DP-REC codec for whole model updates (docs/dprec-rec.md, docs/bad-input.md): structure, clipping, groups,
seeds, decoding, aggregation and bad input.

Sizes are small (tens of elements, 3-6 bits) so that the pure-NumPy reference backend
stays fast; every random draw uses a fixed seed or Generator.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np
import pytest

import dprec._runtime.native
import dprec.rec.codec as codec_mod
from dprec import rec
from dprec.rec.codec import DEFAULT_BITS, DPRECCodec, DPRECMessage, Layout

BACKENDS = [b for b in dprec._runtime.dispatch.available_backends() if b != "cuda"]  # host backends


def make_update(seed: int = 0, scale: float = 1.0) -> dict[str, np.ndarray]:
    """A small state-dict-like update, deliberately not in sorted key order."""
    r = np.random.default_rng(seed)
    return {
        "fc.weight": (scale * r.standard_normal((6, 5))).astype(np.float32),
        "conv.weight": (scale * r.standard_normal((2, 3, 4))).astype(np.float32),
        "fc.bias": (scale * r.standard_normal(6)).astype(np.float32),
    }


def global_norm(update: dict[str, np.ndarray]) -> float:
    return math.sqrt(sum(float(np.sum(v.astype(np.float64) ** 2)) for v in update.values()))


def expected_decode(codec: DPRECCodec, msg: DPRECMessage, template, backend: str = "reference") -> dict:
    """Decode by hand from the layout with rec.candidate."""
    layout = codec.layout(template)
    flats = {name: np.empty(math.prod(shape), np.float32) for name, shape in zip(layout.names, layout.shapes)}
    for g in layout.groups:
        flats[g.name][g.start : g.start + g.size] = rec.candidate(
            msg.seed, g.group, msg.indices[g.group], g.size, sigma=codec.sigma, backend=backend
        )
    return {name: flats[name].reshape(shape) for name, shape in zip(layout.names, layout.shapes)}


# --------------------------------------------------------------------------------------
# Layout: canonical order, groups, bits
# --------------------------------------------------------------------------------------


def test_layout_canonical_order_and_group_ids():
    upd = make_update()
    codec = DPRECCodec(sigma=0.1, bits=5)
    layout = codec.layout(upd)
    assert isinstance(layout, Layout)
    assert layout.names == ("conv.weight", "fc.bias", "fc.weight")  # sorted, not insertion order
    assert layout.shapes == ((2, 3, 4), (6,), (6, 5))
    assert [g.group for g in layout.groups] == [0, 1, 2]
    assert [(g.name, g.tensor, g.start, g.size, g.bits) for g in layout.groups] == [
        ("conv.weight", 0, 0, 24, 5),
        ("fc.bias", 1, 0, 6, 5),
        ("fc.weight", 2, 0, 30, 5),
    ]
    assert layout.num_groups == 3 and layout.num_tensors == 3 and layout.num_elements == 60
    assert layout.total_bits == 15 and layout.bits == (5, 5, 5)
    assert len(layout.digest) == 8
    # Insertion order does not matter; names and shapes do.
    reordered = dict(reversed(list(upd.items())))
    assert codec.layout(reordered) == layout
    assert "fc.bias" in layout.describe()
    # Lists: index order, names "0", "1", ...; a single array is one tensor named "".
    lay_list = codec.layout([upd["fc.weight"], upd["fc.bias"]])
    assert lay_list.names == ("0", "1") and lay_list.shapes == ((6, 5), (6,))
    assert codec.layout(upd["fc.bias"]).names == ("",)
    # Every layout ingredient changes the digest.
    digests = {
        layout.digest,
        DPRECCodec(sigma=0.1, bits=6).layout(upd).digest,
        DPRECCodec(sigma=0.2, bits=5).layout(upd).digest,
        DPRECCodec(sigma=0.1, bits=5, max_group_size=10).layout(upd).digest,
        DPRECCodec(sigma=0.1, bits={"fc.bias": 4}).layout(upd).digest,
        codec.layout({**upd, "fc.bias": np.zeros((3, 2), np.float32)}).digest,
        codec.layout({**upd, "fc.biass": upd.pop("fc.bias")}).digest,
    }
    assert len(digests) == 7
    # clip_multiplier and backend do not enter it.
    assert DPRECCodec(sigma=0.1, clip_multiplier=3.0, bits=5, backend="reference").layout(make_update()) == layout


def test_default_bits_is_7():
    codec = DPRECCodec(sigma=1.0)
    assert DEFAULT_BITS == 7 and codec.bits == 7
    assert codec.layout(make_update()).bits == (7, 7, 7)


def test_max_group_size_splits_tensors_into_consecutive_chunks():
    upd = {"a": np.ones(10, np.float32), "b": np.ones((2, 2), np.float32), "c": np.ones((3, 3), np.float32)}
    codec = DPRECCodec(sigma=0.5, bits=3, max_group_size=4)
    layout = codec.layout(upd)
    assert [(g.group, g.name, g.start, g.size) for g in layout.groups] == [
        (0, "a", 0, 4),
        (1, "a", 4, 4),
        (2, "a", 8, 2),
        (3, "b", 0, 4),
        (4, "c", 0, 4),
        (5, "c", 4, 4),
        (6, "c", 8, 1),
    ]
    # max_group_size=1: one group per element.
    assert DPRECCodec(sigma=0.5, bits=3, max_group_size=1).layout(upd).num_groups == 23
    # Larger than every tensor: one group per tensor.
    assert DPRECCodec(sigma=0.5, bits=3, max_group_size=100).layout(upd).num_groups == 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_split_groups_decode_chunk_by_chunk(backend):
    r = np.random.default_rng(5)
    upd = {"a": r.standard_normal(10).astype(np.float32), "c": r.standard_normal((3, 3)).astype(np.float32)}
    codec = DPRECCodec(sigma=0.5, bits=4, max_group_size=4, backend=backend)
    msg = codec.encode(upd, rng=np.random.default_rng(1), seed=77)
    assert msg.num_groups == 6
    out = codec.decode(msg, upd)
    # Each chunk is its own stream: group id g, elements 0..size-1.
    a = np.concatenate([rec.candidate(77, g, msg.indices[g], n, sigma=0.5) for g, n in ((0, 4), (1, 4), (2, 2))])
    c = np.concatenate([rec.candidate(77, g, msg.indices[g], n, sigma=0.5) for g, n in ((3, 4), (4, 4), (5, 1))])
    np.testing.assert_array_equal(out["a"], a)
    np.testing.assert_array_equal(out["c"], c.reshape(3, 3))
    # The chunks are not the unsplit stream (different group ids).
    assert not np.array_equal(out["a"][4:8], rec.candidate(77, 0, msg.indices[0], 8, sigma=0.5)[4:8])


def test_per_group_bits():
    upd = make_update()
    codec = DPRECCodec(sigma=0.1, bits={"fc.weight": 3, "conv.weight": 6}, max_group_size=20)
    layout = codec.layout(upd)
    # conv.weight (24) -> 2 groups of 6 bits; fc.bias default 7; fc.weight (30) -> 2 groups of 3 bits.
    assert layout.bits == (6, 6, 7, 3, 3)
    assert layout.total_bits == 25
    msg = codec.encode(upd, rng=np.random.default_rng(0), seed=1)
    assert msg.bits == layout.bits
    assert all(0 <= k < 2**b for k, b in zip(msg.indices, msg.bits))
    blob = msg.to_bytes()
    assert len(blob) == msg.nbytes == layout.message_nbytes == 28 + 5 + math.ceil(25 / 8) + 4
    assert DPRECMessage.from_bytes(blob) == msg
    # Uniform bits store the bits once.
    msg_u = DPRECCodec(sigma=0.1, bits=5).encode(upd, rng=np.random.default_rng(0), seed=1)
    assert msg_u.nbytes == 28 + 1 + math.ceil(15 / 8) + 4


def test_bits_mapping_with_unknown_name_is_rejected():
    codec = DPRECCodec(sigma=0.1, bits={"fc.weight": 3, "typo": 4})
    with pytest.raises(ValueError, match="typo"):
        codec.encode(make_update(), rng=np.random.default_rng(0), seed=1)
    with pytest.raises(ValueError, match="typo"):
        codec.layout(make_update())


# --------------------------------------------------------------------------------------
# Encode / decode
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_decode_equals_candidates_and_is_bit_identical_between_backends(backend):
    upd = make_update(1)
    codec = DPRECCodec(sigma=0.05, clip_multiplier=2.0, bits=5, backend=backend)
    msg = codec.encode(upd, rng=np.random.default_rng(3), seed=0xDEADBEEF12345678)
    out = codec.decode(msg, upd)
    assert list(out) == list(upd)  # the template's key order
    exp = expected_decode(codec, msg, upd, backend="reference")
    for name in upd:
        assert out[name].dtype == np.float32 and out[name].shape == upd[name].shape
        np.testing.assert_array_equal(out[name], exp[name])
    for other in BACKENDS:
        out2 = DPRECCodec(sigma=0.05, clip_multiplier=2.0, bits=5, backend=other).decode(msg, upd)
        for name in upd:
            assert out2[name].tobytes() == out[name].tobytes()


def test_encode_agrees_between_backends_given_rng_and_seed():
    if len(BACKENDS) < 2:
        pytest.skip("only one backend available")
    upd = make_update(2)
    msgs = {
        b: [
            DPRECCodec(sigma=0.2, bits=4, backend=b).encode(upd, rng=np.random.default_rng(i), seed=i) for i in range(5)
        ]
        for b in BACKENDS
    }
    assert msgs["cpu"] == msgs["reference"]


def test_encode_is_reproducible_with_rng_and_seed():
    upd = make_update(3)
    codec = DPRECCodec(sigma=0.3, bits=6)
    m1 = codec.encode(upd, rng=np.random.default_rng(9), seed=123)
    m2 = codec.encode(upd, rng=np.random.default_rng(9), seed=123)
    assert m1 == m2 and m1.seed == 123
    # Different private randomness changes the indices (K = 64, three groups).
    others = {codec.encode(upd, rng=np.random.default_rng(i), seed=123).indices for i in range(10, 20)}
    assert len(others) > 1


def test_decode_structures_numpy():
    r = np.random.default_rng(4)
    a = r.standard_normal((3, 4)).astype(np.float32)
    b = r.standard_normal(5)  # float64 is accepted, decoded as float32
    codec = DPRECCodec(sigma=0.1, bits=3)
    # single array
    out = codec.decode(codec.encode(a, rng=np.random.default_rng(0), seed=1), a)
    assert isinstance(out, np.ndarray) and out.shape == (3, 4) and out.dtype == np.float32
    # list and tuple
    for container in (list, tuple):
        t = container([a, b])
        out = codec.decode(codec.encode(t, rng=np.random.default_rng(0), seed=1), t)
        assert type(out) is container and len(out) == 2
        assert out[0].shape == (3, 4) and out[1].shape == (5,)
        assert out[0].dtype == out[1].dtype == np.float32
    # dict / OrderedDict, in the template's key order
    for container in (dict, OrderedDict):
        t = container([("z", a), ("a", b)])
        out = codec.decode(codec.encode(t, rng=np.random.default_rng(0), seed=1), t)
        assert type(out) is container and list(out) == ["z", "a"]
        assert out["z"].shape == (3, 4) and out["a"].shape == (5,)
    # 0-d tensors are one-element groups
    t = {"s": np.float32(0.5), "v": a}
    out = codec.decode(codec.encode(t, rng=np.random.default_rng(0), seed=1), t)
    assert out["s"].shape == () and out["s"].dtype == np.float32
    # bytes are accepted in place of a message
    msg = codec.encode(a, rng=np.random.default_rng(0), seed=1)
    np.testing.assert_array_equal(codec.decode(msg.to_bytes(), a), codec.decode(msg, a))


def test_decode_structures_torch():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    sd = OrderedDict(
        [
            ("layer.weight", torch.randn(4, 3, generator=g)),
            ("layer.bias", torch.randn(4, generator=g, dtype=torch.float64)),
        ]
    )
    codec = DPRECCodec(sigma=0.1, bits=4)
    msg = codec.encode(sd, rng=np.random.default_rng(0), seed=5)
    out = codec.decode(msg, sd)
    assert type(out) is OrderedDict and list(out) == list(sd)
    for k in sd:
        assert isinstance(out[k], torch.Tensor) and out[k].dtype == torch.float32
        assert out[k].device.type == "cpu" and tuple(out[k].shape) == tuple(sd[k].shape)
    # Same message as the NumPy version of the same update; same decode.
    sd_np = {k: v.numpy() for k, v in sd.items()}
    assert codec.encode(sd_np, rng=np.random.default_rng(0), seed=5) == msg
    out_np = codec.decode(msg, sd_np)
    for k in sd:
        np.testing.assert_array_equal(out[k].numpy(), out_np[k])
    # Single tensor and list; a template mixing tensors and arrays keeps each leaf's type.
    t = sd["layer.weight"]
    assert isinstance(codec.decode(codec.encode(t, seed=1, rng=np.random.default_rng(0)), t), torch.Tensor)
    mixed = [sd["layer.weight"], sd_np["layer.bias"]]
    out = codec.decode(codec.encode(mixed, rng=np.random.default_rng(0), seed=2), mixed)
    assert isinstance(out, list) and isinstance(out[0], torch.Tensor) and isinstance(out[1], np.ndarray)
    # Parameters with requires_grad are fine.
    p = torch.nn.Parameter(torch.randn(5, generator=g))
    m = codec.encode({"p": p}, rng=np.random.default_rng(0), seed=3)
    assert m == codec.encode({"p": p.detach().numpy()}, rng=np.random.default_rng(0), seed=3)


# --------------------------------------------------------------------------------------
# Clipping
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_clipping_is_applied(backend):
    sigma, c = 0.25, 1.5
    clip = c * sigma
    base = make_update(6)
    norm = global_norm(base)
    codec = DPRECCodec(sigma=sigma, clip_multiplier=c, bits=5, backend=backend)
    assert codec.clip_norm == clip
    huge = {k: v * np.float32(1024.0) for k, v in base.items()}  # exact scaling, norm >> C
    huger = {k: v * np.float32(2.0**20) for k, v in base.items()}
    clipped = {k: (v.astype(np.float64) * (clip / norm)).astype(np.float32) for k, v in base.items()}
    no_clip = DPRECCodec(sigma=sigma, clip_multiplier=1e9, bits=5, backend=backend)
    same, unclipped_same = 0, 0
    n = 8
    for i in range(n):
        m_huge = codec.encode(huge, rng=np.random.default_rng(i), seed=i)
        # Clipping makes the scale irrelevant (both clip to the same phi_hat, exactly).
        assert codec.encode(huger, rng=np.random.default_rng(i), seed=i) == m_huge
        # The clipped version (norm ~= C, so hardly rescaled) draws the same indices.
        m_clipped = codec.encode(clipped, rng=np.random.default_rng(i), seed=i)
        same += m_clipped.indices == m_huge.indices
        # Without clipping the huge update picks (almost deterministically) other indices.
        unclipped_same += no_clip.encode(huge, rng=np.random.default_rng(i), seed=i).indices == m_huge.indices
    assert same == n
    assert unclipped_same == 0


def test_update_within_clip_norm_is_not_scaled():
    base = make_update(7)
    norm = global_norm(base)
    sigma = 0.1
    # C = 2 * norm: no clipping; the logits are those of the raw update.
    codec = DPRECCodec(sigma=sigma, clip_multiplier=2 * norm / sigma, bits=5)
    m = codec.encode(base, rng=np.random.default_rng(0), seed=11)
    layout = codec.layout(base)
    rng = np.random.default_rng(0)
    expected = []
    for g in layout.groups:
        lg = rec.logits(base[g.name].reshape(-1), 11, g.group, 5, sigma=sigma)
        expected.append(rec.sample_index(lg, rng=rng))
    assert m.indices == tuple(expected)
    # Clipped: the logits carry the factor C / norm.
    codec = DPRECCodec(sigma=sigma, clip_multiplier=0.5 * norm / sigma, bits=5)
    m = codec.encode(base, rng=np.random.default_rng(0), seed=11)
    rng = np.random.default_rng(0)
    scale = codec.clip_norm / norm
    expected = [
        rec.sample_index(rec.logits(base[g.name].reshape(-1), 11, g.group, 5, sigma=sigma, scale=scale), rng=rng)
        for g in layout.groups
    ]
    assert m.indices == tuple(expected)


def test_zero_update_is_encoded():
    upd = {"a": np.zeros(7, np.float32), "b": np.zeros((2, 2), np.float32)}
    codec = DPRECCodec(sigma=0.1, bits=3)
    msg = codec.encode(upd, rng=np.random.default_rng(0), seed=1)
    assert msg.num_groups == 2
    assert codec.decode(msg, upd)["a"].shape == (7,)


def test_extreme_float64_values_are_clipped_without_overflow():
    r = np.random.default_rng(8)
    x = r.standard_normal(20)
    norm = float(np.linalg.norm(x))
    # x * 2**1000 overflows a plain float64 sum of squares; x * 2**-600 underflows it to 0.
    for factor in (2.0**1000, 2.0**-600):
        for kernels in (dprec._runtime.dispatch.kernels("reference"), dprec._runtime.dispatch.owner(dprec._runtime.arrays.read(x, "x"))):
            got = codec_mod._global_norm(kernels, [dprec._runtime.arrays.read(x * factor, "x")], ["x"])
            assert got == pytest.approx(norm * factor, rel=1e-12)
    codec = DPRECCodec(sigma=0.5, bits=4)
    ref = codec.encode(x, rng=np.random.default_rng(0), seed=3)
    with np.errstate(all="raise"):
        big = codec.encode(x * 2.0**1000, rng=np.random.default_rng(0), seed=3)
        tiny = codec.encode(x * 2.0**-600, rng=np.random.default_rng(0), seed=3)
    assert big.indices == ref.indices  # the same direction, clipped to C
    assert tiny.num_groups == 1


# --------------------------------------------------------------------------------------
# Seeds and private randomness
# --------------------------------------------------------------------------------------


def test_seed_comes_from_os_entropy(monkeypatch):
    upd = make_update()
    codec = DPRECCodec(sigma=0.1, bits=3)
    seeds = {codec.encode(upd, rng=np.random.default_rng(0)).seed for _ in range(3)}
    assert len(seeds) == 3  # 64-bit OS entropy: a collision has probability ~2**-62
    calls = []

    def fake_os_seed():
        calls.append(1)
        return 0x0123456789ABCDEF

    monkeypatch.setattr(codec_mod, "os_seed", fake_os_seed)
    assert codec.encode(upd, rng=np.random.default_rng(0)).seed == 0x0123456789ABCDEF
    assert calls == [1]
    # An explicit seed bypasses the entropy source.
    assert codec.encode(upd, rng=np.random.default_rng(0), seed=42).seed == 42
    assert calls == [1]


def test_gumbel_noise_is_not_derived_from_the_seed():
    # A zero update has uniform logits; with the same seed and rng=None the draw must vary.
    upd = [np.zeros(4, np.float32) for _ in range(5)]
    codec = DPRECCodec(sigma=0.1, bits=6)
    draws = {codec.encode(upd, seed=7).indices for _ in range(6)}
    assert len(draws) > 1  # all six equal has probability ~ 64**-25


# --------------------------------------------------------------------------------------
# Statistics: the mean decoded update approaches the clipped update
# --------------------------------------------------------------------------------------


def test_mean_of_decodes_approaches_the_clipped_update():
    r = np.random.default_rng(2024)
    sigma, c = 0.5, 1.0
    upd = {"w": r.standard_normal((3, 4)).astype(np.float32), "b": r.standard_normal(4).astype(np.float32)}
    norm = global_norm(upd)
    upd = {k: (v * np.float32(4 * c * sigma / norm)).astype(np.float32) for k, v in upd.items()}  # 4x the clip norm
    norm = global_norm(upd)
    clip = c * sigma
    phi_hat = np.concatenate([upd["b"].reshape(-1), upd["w"].reshape(-1)]).astype(np.float64) * (clip / norm)
    codec = DPRECCodec(sigma=sigma, clip_multiplier=c, bits=8)  # K = 256 >> exp(KL) = exp(c**2 / 2)
    n = 4000
    rng = np.random.default_rng(17)
    msgs = [codec.encode(upd, rng=rng, seed=i) for i in range(n)]
    mean = codec.aggregate(msgs, upd)  # default weights: 1/n, the mean
    m = np.concatenate([mean["b"].reshape(-1), mean["w"].reshape(-1)]).astype(np.float64)
    se = sigma / math.sqrt(n)

    def chi2(target):
        return float(np.sum(((m - target) / se) ** 2))

    # 16 degrees of freedom: the 99.9% quantile is 39.25.
    assert chi2(phi_hat) < 39.25
    assert np.linalg.norm(m - phi_hat) < 0.12 * np.linalg.norm(phi_hat)
    # The test has power: neither zero, the unclipped update, nor a 20% shrinkage fits.
    assert chi2(np.zeros_like(phi_hat)) > 1000
    assert chi2(phi_hat * (norm / clip)) > 1000
    assert chi2(0.8 * phi_hat) > 100


# --------------------------------------------------------------------------------------
# Aggregation
# --------------------------------------------------------------------------------------


def _messages(codec, upd, n, start=0):
    return [codec.encode(upd, rng=np.random.default_rng(100 + i), seed=1000 + i) for i in range(start, start + n)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_aggregate_is_the_weighted_sum_of_decodes(backend):
    upd = make_update(9)
    codec = DPRECCodec(sigma=0.2, bits=4, max_group_size=16, backend=backend)
    msgs = _messages(codec, upd, 5)
    weights = np.array([0.5, -1.25, 2.0, 0.1, 3.0])
    agg = codec.aggregate(msgs, upd, weights=weights)
    decs = [codec.decode(m, upd) for m in msgs]
    assert list(agg) == list(upd)
    for k in upd:
        assert agg[k].dtype == np.float32 and agg[k].shape == upd[k].shape
        exact = sum(w * d[k].astype(np.float64) for w, d in zip(weights, decs))
        np.testing.assert_allclose(agg[k], exact, rtol=1e-6, atol=1e-6)
    # Default weights: the mean.
    mean = codec.aggregate(msgs, upd)
    for k in upd:
        exact = sum(d[k].astype(np.float64) for d in decs) / len(msgs)
        np.testing.assert_allclose(mean[k], exact, rtol=1e-6, atol=1e-7)
    # Bytes and generators are accepted.
    agg2 = codec.aggregate((m.to_bytes() for m in msgs), upd, weights=list(weights))
    for k in upd:
        np.testing.assert_array_equal(agg2[k], agg[k])


def test_aggregate_is_identical_between_backends():
    upd = make_update(10)
    codec = DPRECCodec(sigma=0.2, bits=4, max_group_size=16)
    msgs = _messages(codec, upd, 6)
    w = np.linspace(-1, 2, 6)
    outs = [
        DPRECCodec(sigma=0.2, bits=4, max_group_size=16, backend=b).aggregate(msgs, upd, weights=w) for b in BACKENDS
    ]
    for o in outs[1:]:
        for k in upd:
            assert o[k].tobytes() == outs[0][k].tobytes()


def test_aggregate_single_message_equals_decode():
    upd = make_update(11)
    codec = DPRECCodec(sigma=0.2, bits=4)
    (msg,) = _messages(codec, upd, 1)
    agg = codec.aggregate([msg], upd)
    dec = codec.decode(msg, upd)
    for k in upd:
        # decode rounds float32(sigma) * z; aggregate accumulates sigma * z in float64.
        np.testing.assert_allclose(agg[k], dec[k], rtol=2e-7, atol=0)


def test_aggregate_torch_template():
    torch = pytest.importorskip("torch")
    upd = make_update(12)
    codec = DPRECCodec(sigma=0.2, bits=4)
    msgs = _messages(codec, upd, 3)
    tmpl = {k: torch.from_numpy(v) for k, v in upd.items()}
    agg = codec.aggregate(msgs, tmpl)
    ref = codec.aggregate(msgs, upd)
    for k in upd:
        assert isinstance(agg[k], torch.Tensor) and agg[k].dtype == torch.float32
        np.testing.assert_array_equal(agg[k].numpy(), ref[k])


def test_aggregate_bad_input():
    upd = make_update(13)
    codec = DPRECCodec(sigma=0.2, bits=4)
    msgs = _messages(codec, upd, 3)
    with pytest.raises(ValueError, match="weights"):
        codec.aggregate(msgs, upd, weights=[1.0, 2.0])
    with pytest.raises(ValueError, match="weights"):
        codec.aggregate(msgs, upd, weights=[1.0, np.nan, 2.0])
    with pytest.raises(ValueError, match="weights"):
        codec.aggregate(msgs, upd, weights=[1.0, np.inf, 2.0])
    with pytest.raises(TypeError, match="weights"):
        codec.aggregate(msgs, upd, weights=["a", "b", "c"])
    with pytest.raises(ValueError, match="empty"):
        codec.aggregate([], upd)
    with pytest.raises(TypeError, match="sequence"):
        codec.aggregate(msgs[0], upd)
    with pytest.raises(TypeError, match=r"messages\[1\]"):
        codec.aggregate([msgs[0], "nope"], upd)
    other = DPRECCodec(sigma=0.2, bits=5).encode(upd, rng=np.random.default_rng(0), seed=1)
    with pytest.raises(ValueError, match=r"messages\[2\].*layout digest"):
        codec.aggregate([msgs[0], msgs[1], other], upd)


# --------------------------------------------------------------------------------------
# Mismatched layouts
# --------------------------------------------------------------------------------------


def test_decode_with_mismatched_template_or_codec_raises():
    upd = make_update(14)
    codec = DPRECCodec(sigma=0.2, bits=4)
    msg = codec.encode(upd, rng=np.random.default_rng(0), seed=1)
    missing = {k: v for k, v in upd.items() if k != "fc.bias"}
    extra = {**upd, "extra": np.ones(3, np.float32)}
    renamed = {("fc.b" if k == "fc.bias" else k): v for k, v in upd.items()}
    reshaped = {**upd, "fc.weight": upd["fc.weight"].reshape(5, 6)}
    as_list = [upd[k] for k in sorted(upd)]
    for tmpl in (missing, extra, renamed, reshaped, as_list, upd["fc.bias"]):
        with pytest.raises(ValueError, match="layout digest"):
            codec.decode(msg, tmpl)
    for other in (
        DPRECCodec(sigma=0.21, bits=4),
        DPRECCodec(sigma=0.2, bits=5),
        DPRECCodec(sigma=0.2, bits={"fc.bias": 4}),  # others default to 7
        DPRECCodec(sigma=0.2, bits=4, max_group_size=8),
    ):
        with pytest.raises(ValueError, match="layout digest"):
            other.decode(msg, upd)
        with pytest.raises(ValueError, match="layout digest"):
            other.decode(msg.to_bytes(), upd)
    # A message whose bits disagree with its digest.
    forged = DPRECMessage(seed=1, bits=(5, 4, 4), indices=(0, 0, 0), layout_digest=msg.layout_digest)
    with pytest.raises(ValueError, match="bits"):
        codec.decode(forged, upd)
    with pytest.raises(TypeError, match="DPRECMessage"):
        codec.decode("not a message", upd)


# --------------------------------------------------------------------------------------
# Bad input (docs/bad-input.md)
# --------------------------------------------------------------------------------------


def test_float16_is_converted_to_float32():
    upd = {k: v.astype(np.float16) for k, v in make_update(15).items()}
    codec = DPRECCodec(sigma=0.3, bits=4)
    m16 = codec.encode(upd, rng=np.random.default_rng(0), seed=2)
    m32 = codec.encode({k: v.astype(np.float32) for k, v in upd.items()}, rng=np.random.default_rng(0), seed=2)
    assert m16 == m32
    out = codec.decode(m16, upd)  # a float16 template decodes to float32
    assert all(v.dtype == np.float32 for v in out.values())


def test_bfloat16_tensors_are_converted_to_float32():
    torch = pytest.importorskip("torch")
    t = torch.randn(12, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    codec = DPRECCodec(sigma=0.3, bits=4)
    m = codec.encode({"x": t}, rng=np.random.default_rng(0), seed=2)
    assert m == codec.encode({"x": t.to(torch.float32)}, rng=np.random.default_rng(0), seed=2)
    out = codec.decode(m, {"x": t})
    assert out["x"].dtype == torch.float32
    m_half = codec.encode({"x": t.to(torch.float16)}, rng=np.random.default_rng(0), seed=2)
    assert m_half.num_groups == 1


@pytest.mark.parametrize(
    "bad",
    [
        np.arange(6, dtype=np.int64),
        np.arange(6, dtype=np.uint8),
        np.ones(6, dtype=bool),
        np.ones(6, dtype=np.complex64),
    ],
    ids=["int64", "uint8", "bool", "complex64"],
)
def test_non_float_tensors_are_rejected_naming_the_tensor(bad):
    upd = {**make_update(), "fc.weight": bad}
    codec = DPRECCodec(sigma=0.1, bits=3)
    with pytest.raises(TypeError, match=r"update\['fc.weight'\]"):
        codec.encode(upd, seed=1)
    with pytest.raises(TypeError, match=r"template\['fc.weight'\]"):
        codec.decode(codec.encode(make_update(), seed=1), upd)
    with pytest.raises(TypeError, match=r"update\[1\]"):
        codec.encode([np.ones(3, np.float32), bad], seed=1)
    with pytest.raises(TypeError, match="update"):
        codec.encode(bad, seed=1)


def test_non_float_torch_tensors_are_rejected():
    torch = pytest.importorskip("torch")
    codec = DPRECCodec(sigma=0.1, bits=3)
    for bad in (torch.arange(4), torch.ones(4, dtype=torch.bool), torch.ones(4, dtype=torch.complex64)):
        with pytest.raises(TypeError, match=r"update\['num_batches_tracked'\]"):
            codec.encode({"w": torch.ones(3), "num_batches_tracked": bad}, seed=1)
        with pytest.raises(TypeError, match=r"template\['n'\]"):
            codec.layout({"w": torch.ones(3), "n": bad})


@pytest.mark.parametrize("value,word", [(np.nan, "NaN"), (np.inf, "infinite"), (-np.inf, "infinite")])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_non_finite_values_are_rejected_naming_the_tensor(value, word, dtype):
    upd = {k: v.astype(dtype) for k, v in make_update().items()}
    upd["fc.bias"][3] = value
    codec = DPRECCodec(sigma=0.1, bits=3)
    with pytest.raises(ValueError, match=rf"update\['fc.bias'\] contains {word}"):
        codec.encode(upd, seed=1)
    with pytest.raises(ValueError, match=rf"update\[0\] contains {word}"):
        codec.encode([upd["fc.bias"]], seed=1)


def test_non_finite_torch_values_are_rejected():
    torch = pytest.importorskip("torch")
    t = torch.ones(5)
    t[2] = float("nan")
    with pytest.raises(ValueError, match=r"update\['t'\] contains NaN"):
        DPRECCodec(sigma=0.1, bits=3).encode({"t": t}, seed=1)


def test_empty_inputs_are_rejected():
    codec = DPRECCodec(sigma=0.1, bits=3)
    with pytest.raises(ValueError, match=r"update\['e'\].*empty"):
        codec.encode({"a": np.ones(3, np.float32), "e": np.ones((2, 0), np.float32)}, seed=1)
    with pytest.raises(ValueError, match="empty"):
        codec.encode(np.zeros(0, np.float32), seed=1)
    for empty in ({}, [], ()):
        with pytest.raises(ValueError, match="update is empty"):
            codec.encode(empty, seed=1)
        with pytest.raises(ValueError, match="template is empty"):
            codec.layout(empty)
    with pytest.raises(ValueError, match=r"template\['e'\].*empty"):
        codec.layout({"e": np.ones((0, 3), np.float32)})


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"sigma": 0.0}, "sigma"),
        ({"sigma": -1.0}, "sigma"),
        ({"sigma": float("nan")}, "sigma"),
        ({"sigma": float("inf")}, "sigma"),
        ({"sigma": 1.0, "clip_multiplier": 0.0}, "clip_multiplier"),
        ({"sigma": 1.0, "clip_multiplier": -2.0}, "clip_multiplier"),
        ({"sigma": 1.0, "clip_multiplier": float("nan")}, "clip_multiplier"),
        ({"sigma": 1.0, "bits": 0}, "bits"),
        ({"sigma": 1.0, "bits": 25}, "bits"),
        ({"sigma": 1.0, "bits": -3}, "bits"),
        ({"sigma": 1.0, "bits": {"fc.weight": 25}}, r"bits\['fc.weight'\]"),
        ({"sigma": 1.0, "bits": {"fc.weight": 0}}, r"bits\['fc.weight'\]"),
        ({"sigma": 1.0, "max_group_size": 0}, "max_group_size"),
        ({"sigma": 1.0, "max_group_size": -5}, "max_group_size"),
        ({"sigma": 1.0, "backend": "gpu"}, "backend"),
    ],
)
def test_bad_parameters_raise_value_error_naming_them(kwargs, name):
    with pytest.raises(ValueError, match=name):
        DPRECCodec(**kwargs)


def test_backend_cuda_follows_the_hardware():
    """backend="cuda" is a clear error where the CUDA backend is unusable, and accepted where it is."""
    if dprec._runtime.native.cuda_available():
        assert DPRECCodec(sigma=1.0, backend="cuda") is not None
    else:
        with pytest.raises(ValueError, match="cuda"):
            DPRECCodec(sigma=1.0, backend="cuda")


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"sigma": "0.1"}, "sigma"),
        ({"sigma": 1.0, "bits": 3.0}, "bits"),
        ({"sigma": 1.0, "bits": True}, "bits"),
        ({"sigma": 1.0, "bits": {1: 3}}, "bits"),
        ({"sigma": 1.0, "max_group_size": 2.5}, "max_group_size"),
    ],
)
def test_bad_parameter_types_raise_type_error(kwargs, name):
    with pytest.raises(TypeError, match=name):
        DPRECCodec(**kwargs)


def test_bits_edges_are_accepted():
    for b in (1, 24):
        assert DPRECCodec(sigma=1.0, bits=b).bits == b
    codec = DPRECCodec(sigma=0.1, bits=1)
    msg = codec.encode(make_update(), rng=np.random.default_rng(0), seed=1)
    assert set(msg.indices) <= {0, 1}


def test_bad_encode_arguments():
    codec = DPRECCodec(sigma=0.1, bits=3)
    upd = make_update()
    with pytest.raises(ValueError, match="seed"):
        codec.encode(upd, seed=-1)
    with pytest.raises(ValueError, match="seed"):
        codec.encode(upd, seed=2**64)
    with pytest.raises(TypeError, match="seed"):
        codec.encode(upd, seed=1.5)
    with pytest.raises(TypeError, match="rng"):
        codec.encode(upd, rng=42, seed=1)
    with pytest.raises(TypeError, match="keys must be str"):
        codec.encode({1: np.ones(3, np.float32)}, seed=1)
    with pytest.raises(TypeError, match="nested"):
        codec.encode({"a": {"b": np.ones(3, np.float32)}}, seed=1)
    with pytest.raises(TypeError, match=r"update\['a'\]"):
        codec.encode({"a": "text"}, seed=1)
    with pytest.raises(TypeError, match=r"update\['a'\]"):
        codec.encode({"a": None}, seed=1)
    assert codec.encode(upd, seed=2**64 - 1, rng=np.random.default_rng(0)).seed == 2**64 - 1


def test_non_contiguous_inputs_are_copied():
    r = np.random.default_rng(16)
    base = r.standard_normal((6, 8)).astype(np.float32)
    strided = {"a": base[:, ::2], "b": base.T}
    assert not strided["a"].flags.c_contiguous and not strided["b"].flags.c_contiguous
    contiguous = {k: np.ascontiguousarray(v) for k, v in strided.items()}
    codec = DPRECCodec(sigma=0.2, bits=4)
    m1 = codec.encode(strided, rng=np.random.default_rng(0), seed=3)
    m2 = codec.encode(contiguous, rng=np.random.default_rng(0), seed=3)
    assert m1 == m2
    out = codec.decode(m1, strided)
    assert out["a"].shape == (6, 4) and out["b"].shape == (8, 6)


def test_non_contiguous_torch_tensors_are_copied():
    torch = pytest.importorskip("torch")
    t = torch.randn(6, 8, generator=torch.Generator().manual_seed(2))
    codec = DPRECCodec(sigma=0.2, bits=4)
    m1 = codec.encode({"t": t.t()}, rng=np.random.default_rng(0), seed=3)
    m2 = codec.encode({"t": t.t().contiguous()}, rng=np.random.default_rng(0), seed=3)
    assert m1 == m2


def test_gpu_tensors_are_rejected_clearly():
    torch = pytest.importorskip("torch")
    codec = DPRECCodec(sigma=0.1, bits=3)
    # A tensor on a non-CPU device (the "meta" device exists in every torch build).
    dev = torch.empty(4, device="meta")
    with pytest.raises(ValueError, match=r"update\['w'\].*device 'meta'"):
        codec.encode({"w": dev}, seed=1)
    with pytest.raises(ValueError, match=r"template\['w'\].*device"):
        codec.decode(codec.encode({"w": torch.ones(4)}, seed=1), {"w": dev})


def test_cuda_array_interface_objects_are_rejected_clearly():
    class FakeCuPy:
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (0, False), "version": 3}
        shape = (4,)

    codec = DPRECCodec(sigma=0.1, bits=3)
    with pytest.raises(ValueError, match=r"update\['w'\].*GPU"):
        codec.encode({"w": FakeCuPy()}, seed=1)
    with pytest.raises(ValueError, match=r"template\['w'\].*GPU"):
        codec.layout({"w": FakeCuPy()})


def test_message_constructor_validates():
    d = bytes(8)
    assert DPRECMessage(seed=1, bits=[3, 4], indices=np.array([7, 15]), layout_digest=d).indices == (7, 15)
    with pytest.raises(ValueError, match=r"indices\[0\]"):
        DPRECMessage(seed=1, bits=(3,), indices=(8,), layout_digest=d)
    with pytest.raises(ValueError, match=r"indices\[1\]"):
        DPRECMessage(seed=1, bits=(3, 3), indices=(0, -1), layout_digest=d)
    with pytest.raises(ValueError, match=r"bits\[0\]"):
        DPRECMessage(seed=1, bits=(25,), indices=(0,), layout_digest=d)
    with pytest.raises(ValueError, match=r"bits\[0\]"):
        DPRECMessage(seed=1, bits=(0,), indices=(0,), layout_digest=d)
    with pytest.raises(ValueError, match="indices has 1"):
        DPRECMessage(seed=1, bits=(3, 3), indices=(0,), layout_digest=d)
    with pytest.raises(ValueError, match="at least one group"):
        DPRECMessage(seed=1, bits=(), indices=(), layout_digest=d)
    with pytest.raises(ValueError, match="layout_digest"):
        DPRECMessage(seed=1, bits=(3,), indices=(0,), layout_digest=bytes(7))
    with pytest.raises(TypeError, match="layout_digest"):
        DPRECMessage(seed=1, bits=(3,), indices=(0,), layout_digest="abcdefgh")
    with pytest.raises(ValueError, match="seed"):
        DPRECMessage(seed=2**64, bits=(3,), indices=(0,), layout_digest=d)
    msg = DPRECMessage(seed=1, bits=(3,), indices=(0,), layout_digest=d)
    with pytest.raises(AttributeError):
        msg.seed = 2  # frozen
    assert "DPRECMessage(seed=0x0000000000000001" in repr(msg)


def test_torch_is_not_imported_for_numpy_inputs():
    import subprocess
    import sys

    code = (
        "import sys, numpy as np\n"
        "from dprec.rec.codec import DPRECCodec\n"
        "c = DPRECCodec(sigma=0.1, bits=3)\n"
        "u = {'a': np.ones(4, np.float32), 'b': np.zeros(3)}\n"
        "m = c.encode(u, seed=1)\n"
        "c.decode(m, u); c.aggregate([m, m], u)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
