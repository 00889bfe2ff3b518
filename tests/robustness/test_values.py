"""Issue 12, items 6 and 8: finite input never gives inf/NaN silently, and bad argument
types raise TypeError naming the argument (no loose coercions)."""

from __future__ import annotations

import numpy as np
import pytest

from dprec import DPRECCodec, philox, rec
from dprec.accounting.accountant import Accountant, GaussianEvent, PrivacyEvent


def _acc(out=None, **kw):
    out = np.zeros(4) if out is None else out
    kw.setdefault("sigma", 1.0)
    return rec.accumulate(out, 0, [1, 2], [0, 3], **kw)


# -- item 6: finite in, inf/NaN out ---------------------------------------------------------


@pytest.mark.parametrize("sigma", [1e39, 1e-46, 1e38])
def test_codec_sigma_out_of_float32_range(sigma):
    with pytest.raises(ValueError, match="sigma"):
        DPRECCodec(sigma=sigma)


def test_codec_sigma_bounds_decode_finite():
    template = np.zeros(4096, np.float32)
    for sigma in (rec.MAX_SIGMA, rec.MIN_SIGMA):
        codec = DPRECCodec(sigma=sigma, bits=2)
        out = codec.decode(codec.encode(template, seed=3), template)
        assert np.isfinite(out).all() and np.any(out != 0)


def test_max_abs_normal_is_the_transform_bound():
    from dprec.reference import philox as ref

    radius = np.sqrt(ref._neg2_log_uniform(np.array([0], np.uint32)))[0]
    assert float(radius) == rec.MAX_ABS_NORMAL
    assert np.isfinite(np.float32(rec.MAX_SIGMA) * np.float32(rec.MAX_ABS_NORMAL))


def test_candidate_huge_sigma():
    with pytest.raises(ValueError, match="sigma"):
        rec.candidate(1, 0, 0, 16, sigma=1e308)


def test_candidate_sigma_underflow():
    with pytest.raises(ValueError, match="sigma"):
        rec.candidate(1, 0, 0, 16, sigma=1e-46)


def test_aggregate_huge_weights():
    template = np.zeros(64, np.float32)
    codec = DPRECCodec(sigma=1.0, bits=2)
    msgs = [codec.encode(template, seed=s) for s in (1, 2)]
    with pytest.raises(ValueError, match="weights"):
        codec.aggregate(msgs, template, weights=[1e40, 1])


def test_accumulate_huge_weights_float64():
    # [1e300, 1e300] fits a float64 accumulator (|sum| <= 1.2e301); 1e308 each does not.
    assert np.isfinite(_acc(weights=[1e300, 1e300])).all()
    with pytest.raises(ValueError, match="weights"):
        _acc(weights=[1e308, 1e308])


def test_accumulate_huge_weights_float32():
    with pytest.raises(ValueError, match="weights"):
        _acc(np.zeros(4, np.float32), weights=[1e300, 1e300])
    with pytest.raises(ValueError, match="weights"):
        _acc(np.zeros(4, np.float32), weights=[1e38, 1e38])


def test_accumulate_huge_sigma():
    with pytest.raises(ValueError, match="sigma"):
        _acc(sigma=1e308)


def test_logits_overflow():
    with pytest.raises(ValueError, match="logits overflowed"):
        rec.logits(np.full(16, 1e308), 1, 0, 3, sigma=1.0)


# -- item 8: argument names and loose coercions ---------------------------------------------


def test_uniforms_bad_dtype():
    with pytest.raises(TypeError, match="dtype"):
        philox.uniforms(1, 4, dtype="foo")
    with pytest.raises(TypeError, match="dtype"):
        philox.uniforms(1, 4, dtype=np.int32)
    assert philox.uniforms(1, 4, dtype=np.float64).dtype == np.float64


def test_accumulate_weights_str():
    with pytest.raises(TypeError, match="weights"):
        _acc(weights="ab")


def test_accumulate_weights_bool():
    with pytest.raises(TypeError, match="weights"):
        _acc(weights=[True, False])


def test_accumulate_sigma_wrong_length():
    with pytest.raises(ValueError, match="sigma"):
        _acc(sigma=[1, 2, 3])


@pytest.mark.parametrize("sigma", ["1", b"1", True, [True, True], ["1", "2"]])
def test_accumulate_sigma_not_real(sigma):
    with pytest.raises(TypeError, match="sigma"):
        _acc(sigma=sigma)


def test_accumulate_sigma_per_client_still_works():
    a = _acc(sigma=[1.0, 2.0])
    b = _acc(sigma=np.array([1.0, 2.0]))
    c = _acc(sigma=np.float32(1.0))
    assert np.array_equal(a, b) and np.isfinite(c).all()


@pytest.mark.parametrize("scale", [True, "1", None])
def test_logits_scale_not_real(scale):
    with pytest.raises(TypeError, match="scale"):
        rec.logits(np.ones(16, np.float32), 1, 0, 3, sigma=1.0, scale=scale)


def test_compose_abstract_event():
    with pytest.raises(TypeError, match="event"):
        Accountant().compose(PrivacyEvent())
    Accountant().compose(GaussianEvent(noise_multiplier=1.0))


def test_sparse_and_float8_torch_tensors_name_the_argument():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="^phi must be a dense"):
        rec.logits(torch.ones(16).to_sparse(), 1, 0, 4, sigma=1.0)
    if hasattr(torch, "float8_e4m3fn"):
        with pytest.raises(TypeError, match="^phi must be float16, bfloat16, float32 or float64"):
            rec.logits(torch.ones(16).to(torch.float8_e4m3fn), 1, 0, 4, sigma=1.0)
