"""The codec's privacy side: EncodeInfo (clipping diagnostics) and the accounting methods."""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import pytest

import dprec
from dprec.rec import codec as codec_module
from dprec.rec.codec import DPRECCodec, EncodeInfo
from tests import fake_cuda as fc
from tests.conftest import requires_native
from tests.fake_cuda import FakeGpuArray

pytest.importorskip("scipy")

from dprec.accounting import (  # noqa: E402 - after the SciPy check
    DPRECPrivacyWarning,
    DPRECRoundAccountant,
    dprec_epsilon,
    dprec_local_epsilon,
    dprec_min_bits,
    dprec_overhead,
)

fake_cuda = fc.fake_cuda  # the fixture, for pytest to find in this module


def _update(seed: int = 0) -> dict[str, np.ndarray]:
    r = np.random.default_rng(seed)
    return {
        "w": r.standard_normal((6, 5)).astype(np.float32),
        "b": r.standard_normal(5),  # float64
        "c": r.standard_normal((2, 3, 2)).astype(np.float32),
        "d": r.standard_normal(7).astype(np.float16),
    }


def _global_norm(update: dict[str, np.ndarray]) -> float:
    return float(np.linalg.norm(np.concatenate([np.asarray(v, dtype=np.float64).ravel() for v in update.values()])))


def _scaled(update: dict[str, np.ndarray], norm: float) -> dict[str, np.ndarray]:
    """The update in float64, scaled to the given global norm."""
    f = norm / _global_norm(update)
    return {k: np.asarray(v, dtype=np.float64) * f for k, v in update.items()}


# ---------------------------------------------------------------------------------------
# EncodeInfo
# ---------------------------------------------------------------------------------------


def test_encode_info_is_exported_frozen_and_client_side():
    assert dprec.EncodeInfo is EncodeInfo and "EncodeInfo" in codec_module.__all__ and "EncodeInfo" in dprec.__all__
    info = EncodeInfo(norm=1.0, clip_norm=0.5, clipped=True, scale=0.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.norm = 2.0  # type: ignore[misc]
    assert [f.name for f in dataclasses.fields(EncodeInfo)] == ["norm", "clip_norm", "clipped", "scale"]


def test_encode_info_norm_is_the_float64_global_norm():
    upd = _update(1)
    codec = DPRECCodec(sigma=0.05, clip_multiplier=2.0, bits=5)
    msg, info = codec.encode(upd, rng=np.random.default_rng(0), seed=3, return_info=True)
    assert isinstance(info, EncodeInfo)
    assert info.norm == pytest.approx(_global_norm(upd), rel=1e-12)
    assert info.clip_norm == codec.clip_norm == pytest.approx(0.1)
    assert info.norm > info.clip_norm and info.clipped
    assert info.scale == pytest.approx(0.1 / _global_norm(upd), rel=1e-12)


@pytest.mark.parametrize("factor", [0.5, 0.999, 1.001, 3.0])
def test_encode_info_on_both_sides_of_the_clip_norm(factor):
    codec = DPRECCodec(sigma=0.2, clip_multiplier=1.5, bits=4)
    c_norm = 0.2 * 1.5
    upd = _scaled(_update(2), factor * c_norm)
    _, info = codec.encode(upd, rng=np.random.default_rng(1), seed=2, return_info=True)
    assert info.norm == pytest.approx(factor * c_norm, rel=1e-12)
    assert info.clip_norm == c_norm
    if factor < 1.0:
        assert not info.clipped and info.scale == 1.0
    else:
        assert info.clipped and info.scale == pytest.approx(1.0 / factor, rel=1e-12) and info.scale < 1.0
    assert info.scale == min(1.0, info.clip_norm / info.norm)


def test_encode_info_of_a_zero_update():
    _, info = DPRECCodec(sigma=1.0, bits=3).encode({"z": np.zeros(4)}, seed=1, return_info=True)
    assert info == EncodeInfo(norm=0.0, clip_norm=1.0, clipped=False, scale=1.0)


@pytest.mark.parametrize("factor", [0.3, 4.0])
def test_return_info_does_not_change_the_message(factor):
    codec = DPRECCodec(sigma=0.1, clip_multiplier=0.8, bits={"w": 6}, max_group_size=8)
    upd = _scaled(_update(3), factor * codec.clip_norm)
    plain = codec.encode(upd, rng=np.random.default_rng(11), seed=12)
    msg, _ = codec.encode(upd, rng=np.random.default_rng(11), seed=12, return_info=True)
    assert msg.to_bytes() == plain.to_bytes()
    assert isinstance(codec.encode(upd, seed=1, return_info=False), dprec.DPRECMessage)


def test_return_info_must_be_a_bool():
    with pytest.raises(TypeError, match="return_info"):
        DPRECCodec(sigma=1.0).encode({"w": np.ones(3)}, return_info="yes")  # type: ignore[arg-type]


@requires_native
@pytest.mark.parametrize("factor", [0.4, 2.5])
def test_gpu_path_fills_encode_info_like_the_cpu(fake_cuda, factor):
    codec = DPRECCodec(sigma=0.05, clip_multiplier=1.0, bits=5)
    host = {k: v.astype(np.float32) for k, v in _scaled(_update(4), factor * codec.clip_norm).items()}
    upd = {k: FakeGpuArray(fake_cuda, v) for k, v in host.items()}
    m_gpu, i_gpu = codec.encode(upd, rng=np.random.default_rng(5), seed=6, return_info=True)
    m_cpu, i_cpu = codec.encode(host, rng=np.random.default_rng(5), seed=6, return_info=True)
    assert fake_cuda.calls_named("norm_stats")  # the GPU branch ran
    assert m_gpu.indices == m_cpu.indices
    assert i_gpu.norm == pytest.approx(i_cpu.norm, rel=1e-12)
    assert i_gpu.clip_norm == i_cpu.clip_norm and i_gpu.clipped == i_cpu.clipped == (factor > 1)
    assert i_gpu.scale == pytest.approx(i_cpu.scale, rel=1e-12)
    assert codec.encode(upd, rng=np.random.default_rng(5), seed=6).indices == m_gpu.indices


# ---------------------------------------------------------------------------------------
# Accounting methods
# ---------------------------------------------------------------------------------------

FOUR = {"a": np.zeros(3), "b": np.zeros((2, 2)), "c": np.zeros(5), "d": np.zeros(1)}  # 4 tensors
RUN = dict(rounds=100, clients_per_round=10, num_clients=1000, delta=1e-5)


@pytest.mark.parametrize("sampling", ["with_replacement", "poisson", "without_replacement"])
def test_codec_epsilon_uses_the_layout_total_bits(sampling):
    codec = DPRECCodec(sigma=0.1, clip_multiplier=0.7, bits=12)
    layout = codec.layout(FOUR)
    assert (layout.num_groups, layout.total_bits) == (4, 48)
    result = codec.epsilon(FOUR, **RUN, sampling=sampling)
    expected = dprec_epsilon(**RUN, clip_multiplier=0.7, bits=48, groups=4, sampling=sampling)
    assert result == expected and result.bits == 48 and result.sampling == sampling
    # The groups are passed: REC's bound takes K = 2^12 per group, not 2^48 for one group.
    assert result.epsilon > dprec_epsilon(**RUN, clip_multiplier=0.7, bits=48, groups=1, sampling=sampling).epsilon
    assert codec.epsilon(layout, **RUN, sampling=sampling) == expected  # a Layout works too
    # Non-uniform bits: Algorithm 7 (method="paper") counts the total; the sound bound the
    # smallest group's K (4 groups x 7 bits), never the total's average (43 // 4 = 10 bits).
    mixed = DPRECCodec(sigma=0.1, clip_multiplier=0.7, bits={"a": 20, "b": 9})
    assert mixed.layout(FOUR).total_bits == 20 + 9 + 7 + 7
    got = mixed.epsilon(FOUR, **RUN, sampling=sampling)
    assert got == dprec_epsilon(**RUN, clip_multiplier=0.7, bits=28, groups=4, sampling=sampling) and got.bits == 28
    assert got.epsilon > dprec_epsilon(**RUN, clip_multiplier=0.7, bits=43, groups=4, sampling=sampling).epsilon
    if sampling == "with_replacement":
        paper = dict(RUN, delta=1e-3)
        assert mixed.epsilon(FOUR, **paper, method="paper").bits == 43


def test_codec_local_epsilon():
    codec = DPRECCodec(sigma=0.1, clip_multiplier=0.7, bits=12)
    got = codec.local_epsilon(FOUR, delta=1e-5, rounds=3)
    assert got == dprec_local_epsilon(clip_multiplier=0.7, delta=1e-5, bits=48, rounds=3, groups=4)
    assert math.isfinite(got.epsilon)
    assert got.epsilon > dprec_local_epsilon(clip_multiplier=0.7, delta=1e-5, bits=48, rounds=3, groups=1).epsilon
    # Any bits work against the server: REC's messages are bounded as sent.
    assert math.isfinite(DPRECCodec(sigma=0.1, clip_multiplier=0.7, bits=1).local_epsilon(FOUR, delta=1e-5).epsilon)


def test_codec_epsilon_few_bits_are_fine_against_the_server_and_messages():
    # 4 tensors x 7 bits = 28 total bits for 1000 messages: far below the paper's bit-width rule,
    # but the server and message observers' bounds hold for any K: no error, no warning.
    codec = DPRECCodec(sigma=0.1, clip_multiplier=0.7, bits=7)
    assert dprec_overhead(1000, 0.7, 28) >= 1e-5
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for tm in ("server", "messages"):
            result = codec.epsilon(FOUR, **RUN, threat_model=tm)
            assert math.isfinite(result.epsilon) and result.overhead == 0.0
            assert result == dprec_epsilon(**RUN, clip_multiplier=0.7, bits=28, groups=4, threat_model=tm)
        acc = codec.accountant(FOUR, num_clients=1000, clients_per_round=10, delta=1e-5, rounds=100)
        acc.step(rounds=100)
        assert acc.epsilon == codec.epsilon(FOUR, **RUN).epsilon
    # Fewer bits per group, fewer candidates: a larger (still finite) epsilon.
    assert codec.epsilon(FOUR, **RUN).epsilon > DPRECCodec(sigma=0.1, clip_multiplier=0.7, bits=16).epsilon(
        FOUR, **RUN).epsilon


def test_codec_epsilon_central_names_bits_when_the_total_variation_cost_reaches_delta():
    # Central: eta = 1000 messages x 4 groups x 12 e^0.49 / 2^7 = 612 >> delta.
    # That cannot be paid: the central guarantee is the message observer's bound (post-processing), no error.
    codec = DPRECCodec(sigma=0.1, clip_multiplier=0.7, bits=7)
    central = codec.epsilon(FOUR, **RUN, threat_model="central")
    messages = codec.epsilon(FOUR, **RUN, threat_model="messages")
    assert central.epsilon == messages.epsilon and central.overhead == 0.0 and central.threat_model == "central"
    acc = codec.accountant(FOUR, num_clients=1000, clients_per_round=10, delta=1e-5, rounds=100,
                           threat_model="central")
    assert acc.threat_model == "central"
    # A short run with 24 bits per group: eta = 50 x 4 x 12 e^0.49 / 2^24 = 2.3e-4 < delta / 2.
    short = dict(RUN, rounds=5, delta=1e-2)
    ok = DPRECCodec(sigma=0.1, clip_multiplier=0.7, bits=24).epsilon(FOUR, **short, threat_model="central")
    assert math.isfinite(ok.epsilon) and 0.0 < ok.overhead < 1e-2 / 2
    assert ok == dprec_epsilon(**short, clip_multiplier=0.7, bits=96, groups=4, threat_model="central")
    assert ok.overhead == pytest.approx(50 * 4 * 12 * math.exp(0.49) / 2**24)


def test_codec_epsilon_paper_too_few_bits_names_bits_and_the_fix():
    # method="paper": 4 tensors x 7 bits = 28 total bits for 1000 messages:
    # 12 * 1000 * e^0.49 / 2^28 = 7.3e-5 >= 1e-5 breaks the bit-width rule.
    paper = dict(RUN, method="paper")
    codec = DPRECCodec(sigma=0.1, clip_multiplier=0.7, bits=7)
    need = dprec_min_bits(messages=1000, clip_multiplier=0.7, delta=1e-5, groups=4)
    assert dprec_overhead(1000, 0.7, 28) >= 1e-5
    with pytest.raises(ValueError, match=r"bits: the message has 4 groups x 7 bits = 28 total bits") as err:
        codec.epsilon(FOUR, **paper)
    assert f"at least {need} bits per group (4 x {need} = {4 * need} total bits)" in str(err.value)
    assert "overhead" in str(err.value)
    # That many bits per group does satisfy the rule, without a warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DPRECCodec(sigma=0.1, clip_multiplier=0.7, bits=need).epsilon(FOUR, **paper)
    with pytest.warns(DPRECPrivacyWarning, match="bits per group"):
        DPRECCodec(sigma=0.1, clip_multiplier=0.7, bits=need - 1).epsilon(FOUR, **paper)


def test_codec_epsilon_paper_warns_above_ten_percent_of_delta():
    # 4 groups x 8 bits = 32: overhead 12 * 1000 * e^0.49 / 2^32 = 4.6e-6, 46% of delta.
    codec = DPRECCodec(sigma=0.1, clip_multiplier=0.7, bits=8)
    assert 0.1e-5 < dprec_overhead(1000, 0.7, 32) < 1e-5
    with pytest.warns(DPRECPrivacyWarning, match=r"4 groups x 8 bits = 32 total bits") as record:
        result = codec.epsilon(FOUR, **RUN, method="paper")
    assert record[0].filename == __file__  # points at the caller
    assert issubclass(DPRECPrivacyWarning, UserWarning)
    assert result.epsilon == dprec_epsilon(**RUN, clip_multiplier=0.7, bits=32, method="paper").epsilon
    with pytest.warns(DPRECPrivacyWarning):
        codec.local_epsilon(FOUR, delta=1e-5, rounds=1000, method="paper")
    # The sound default does not warn: its bound has no overhead term.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        codec.epsilon(FOUR, **RUN)
        codec.local_epsilon(FOUR, delta=1e-5, rounds=1000)


def test_codec_accountant_is_tied_to_the_layout():
    codec = DPRECCodec(sigma=0.1, clip_multiplier=0.7, bits=12)
    acc = codec.accountant(FOUR, num_clients=1000, clients_per_round=10, delta=1e-5, sampling="poisson", rounds=100)
    assert isinstance(acc, DPRECRoundAccountant)
    assert (acc.bits, acc.groups, acc.num_clients, acc.sampling, acc.planned_rounds) == (48, 4, 1000, "poisson", 100)
    assert acc.epsilon == 0.0 and acc.accounting is None
    acc.step(rounds=100)
    assert acc.accounting == codec.epsilon(FOUR, **RUN, sampling="poisson")
    # The planned run is checked when the accountant is built (method="paper": the bit-width rule).
    with pytest.raises(ValueError, match="4 groups x 7 bits = 28 total bits"):
        DPRECCodec(sigma=0.1, clip_multiplier=0.7, bits=7).accountant(
            FOUR, num_clients=1000, clients_per_round=10, delta=1e-5, rounds=100, method="paper"
        )


@pytest.mark.parametrize(
    "call, exc, name",
    [
        (lambda c: c.epsilon(FOUR, **dict(RUN, rounds=0)), ValueError, "rounds"),
        (lambda c: c.epsilon(FOUR, **RUN, sampling="shuffled"), ValueError, "sampling"),
        (lambda c: c.epsilon(FOUR, **RUN, sampling="without_replacement", reverse="both"), ValueError, "reverse"),
        (lambda c: c.epsilon(FOUR, **dict(RUN, delta=2.0)), ValueError, "delta"),
        (lambda c: c.epsilon(FOUR, **dict(RUN, clients_per_round=2000), sampling="poisson"), ValueError,
         "clients_per_round"),
        (lambda c: c.local_epsilon(FOUR, delta=1e-5, rounds=1.5), TypeError, "rounds"),
        (lambda c: c.accountant(FOUR, num_clients=0, clients_per_round=1, delta=1e-5), ValueError, "num_clients"),
        (lambda c: c.epsilon({"w": np.zeros(3, dtype=np.int64)}, **RUN), TypeError, "template"),
        # Threat models, relations and methods are named with the valid choices, from every accounting method.
        (lambda c: c.epsilon(FOUR, **RUN, threat_model="curious"), ValueError, r"threat_model must be one of"),
        (lambda c: c.epsilon(FOUR, **RUN, relation="swap"), ValueError, r"relation must be one of"),
        (lambda c: c.epsilon(FOUR, **RUN, method="tight"), ValueError, r"method must be one of"),
        (lambda c: c.epsilon(FOUR, **RUN, sampling="poisson", method="paper"), ValueError,
         r"method='paper'.*with_replacement"),
        (lambda c: c.epsilon(FOUR, **RUN, method="paper", threat_model="server"), ValueError, r"method='paper'"),
        (lambda c: c.local_epsilon(FOUR, delta=1e-5, threat_model="curious"), ValueError, "threat_model"),
        (lambda c: c.local_epsilon(FOUR, delta=1e-5, threat_model="central"), ValueError, "threat_model"),
        (lambda c: c.local_epsilon(FOUR, delta=1e-5, relation="swap"), ValueError, "relation"),
        (lambda c: c.accountant(FOUR, num_clients=100, clients_per_round=10, delta=1e-5, threat_model="curious"),
         ValueError, "threat_model must be one of"),
        (lambda c: c.accountant(FOUR, num_clients=100, clients_per_round=10, delta=1e-5, sampling="poisson",
                                method="paper"), ValueError, r"method='paper'.*with_replacement"),
    ],
)
def test_codec_accounting_bad_arguments_are_named(call, exc, name):
    with pytest.raises(exc, match=name):
        call(DPRECCodec(sigma=0.1, clip_multiplier=0.7, bits=12))


def test_codec_accounting_matches_the_paper_mnist_setting():
    # MNIST (Appendix C.2): T=1000, B=10, N=100, c=0.545, delta=N^-1.1; the paper's 3.0 with
    # enough bits that the overhead is negligible.
    codec = DPRECCodec(sigma=0.01, clip_multiplier=0.545, bits=16)
    result = codec.epsilon(FOUR, rounds=1000, clients_per_round=10, num_clients=100, delta=100**-1.1, method="paper")
    assert result.epsilon == pytest.approx(3.0157, abs=2e-3)
    assert (result.method, result.threat_model, result.relation) == ("paper", None, None)
    assert result.overhead < 1e-3 * result.delta
    assert not math.isnan(result.epsilon)


def test_codec_accounting_states_the_threat_model_and_passes_it_down():
    from dprec.accounting import dprec_epsilon, dprec_local_epsilon

    codec = DPRECCodec(sigma=0.01, clip_multiplier=0.545, bits=16)
    run = dict(rounds=1000, clients_per_round=10, num_clients=100, delta=100**-1.1)
    bits = codec.layout(FOUR).total_bits
    default = codec.epsilon(FOUR, **run)
    # Defaults: the sound accounting against the server, zero-out; add/remove is inf with the reason.
    assert (default.method, default.threat_model, default.relation) == ("sound", "server", "zero")
    assert default.epsilon == default.epsilons["zero"] and math.isfinite(default.epsilon)
    assert math.isinf(default.epsilons["add_remove"]) and default.reasons["add_remove"]
    assert default.guarantee.threat_model == "server" and "'server'" in default.summary()
    # A central observer: REC's total-variation cost, which 16 bits per group cannot pay over this run (the
    # message observer's bound then holds, by post-processing); 24 bits per group over 10 rounds can.
    codec24, short = DPRECCodec(sigma=0.01, clip_multiplier=0.545, bits=24), dict(run, rounds=10)
    assert codec.epsilon(FOUR, **run, threat_model="central").epsilon == \
        codec.epsilon(FOUR, **run, threat_model="messages").epsilon
    for tm, c, r, b in (("server", codec, run, bits), ("messages", codec, run, bits), ("central", codec24, short, 96)):
        for rel in ("zero", "add_remove"):
            got = c.epsilon(FOUR, **r, threat_model=tm, relation=rel)
            want = dprec_epsilon(**r, clip_multiplier=0.545, bits=b, groups=4, threat_model=tm, relation=rel)
            assert (got.threat_model, got.relation) == (tm, rel)
            assert got.epsilon == want.epsilon and got.epsilons == want.epsilons and got.reasons == want.reasons
            assert math.isfinite(got.epsilons["zero"])
    inf = codec.epsilon(FOUR, **run, relation="add_remove")
    assert math.isinf(inf.epsilon) and "takes part" in inf.reasons["add_remove"]
    # The local guarantee and the round accountant pass them down too.
    local = codec.local_epsilon(FOUR, delta=1e-5, rounds=3, relation="add_remove")
    assert math.isinf(local.epsilon) and local.relation == "add_remove"
    assert codec.local_epsilon(FOUR, delta=1e-5, rounds=3, method="paper") == dprec_local_epsilon(
        clip_multiplier=0.545, delta=1e-5, bits=bits, rounds=3, method="paper")
    assert codec.local_epsilon(FOUR, delta=1e-5, rounds=3) == dprec_local_epsilon(
        clip_multiplier=0.545, delta=1e-5, bits=bits, rounds=3, groups=4)
    acc = codec24.accountant(FOUR, num_clients=100, clients_per_round=10, delta=100**-1.1, sampling="poisson",
                             threat_model="central")
    assert (acc.threat_model, acc.relation, acc.method) == ("central", "zero", "sound")
    acc.step()
    assert acc.accounting.threat_model == "central" and acc.epsilon == acc.accounting.epsilons["zero"]
    assert acc.accounting.overhead > 0.0 and math.isfinite(acc.epsilon)
