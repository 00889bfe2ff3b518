"""dprec.torch: model updates from PyTorch models, templates, and applying decoded updates."""

from __future__ import annotations

import copy
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import dprec.torch as dpt  # noqa: E402 - after the importorskip
from dprec import DPRECCodec, DPRECMessage  # noqa: E402
from dprec._runtime import native as _native  # noqa: E402


def _codec() -> DPRECCodec:
    return DPRECCodec(sigma=0.01, clip_multiplier=1.0, bits=7)


def _bn_net(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 5), nn.BatchNorm1d(5), nn.ReLU(), nn.Linear(5, 3))


def _perturbed(model: nn.Module, seed: int, scale: float = 0.01) -> nn.Module:
    """A copy of model with every floating entry moved by seeded noise (and one BatchNorm step)."""
    out = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for t in out.state_dict().values():
            if t.is_floating_point():
                t.add_(scale * torch.randn(t.shape, generator=g).to(t.dtype))
    if any(isinstance(m, nn.BatchNorm1d) for m in out.modules()):
        out.train()
        out(torch.randn(8, 6, generator=g))  # bumps num_batches_tracked and the running stats
    return out


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.emb = nn.Embedding(7, 4)
        self.mid = nn.Linear(4, 4)
        self.head = nn.Linear(4, 7, bias=False)
        self.head.weight = self.emb.weight  # tied: same Parameter under two names


def _snapshot(model) -> dict:
    sd = model.state_dict() if isinstance(model, nn.Module) else model
    return {k: v.detach().clone() for k, v in sd.items()}


# -- BatchNorm: integer buffers are skipped -----------------------------------------------


def test_batchnorm_update_encode_decode_apply():
    server = _bn_net()
    client = _perturbed(server, 1)
    upd = dpt.model_update(client, server)

    floating = ["0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var", "3.weight", "3.bias"]
    assert list(upd) == floating
    assert upd.skipped == ("1.num_batches_tracked",)
    assert upd.aliases == {}
    assert "skipped=1" in repr(upd) and "8 tensors" in repr(upd)
    csd, ssd = client.state_dict(), server.state_dict()
    for k in floating:
        assert upd[k].dtype == torch.float32 and not upd[k].requires_grad
        assert torch.equal(upd[k], csd[k] - ssd[k])

    # The raw state-dict difference has the integer buffer, which the codec rejects.
    raw = {k: csd[k] - ssd[k] for k in csd}
    with pytest.raises(TypeError, match="num_batches_tracked"):
        _codec().encode(raw, seed=5)

    codec = _codec()
    msg = codec.encode(upd, rng=np.random.default_rng(0), seed=11)
    template = dpt.decode_template(server)
    assert list(template) == floating
    assert all(template[k].shape == upd[k].shape for k in floating)
    decoded = codec.decode(DPRECMessage.from_bytes(msg.to_bytes()), template)
    assert list(decoded) == floating
    assert all(decoded[k].shape == upd[k].shape and decoded[k].dtype == torch.float32 for k in floating)

    target = copy.deepcopy(server)
    before = _snapshot(target)
    assert dpt.apply_update(target, decoded) is target
    after = target.state_dict()
    for k in floating:
        assert torch.equal(after[k], before[k] + decoded[k]), k
        assert not torch.equal(after[k], before[k]), k
    assert torch.equal(after["1.num_batches_tracked"], before["1.num_batches_tracked"])


# -- half precision ----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_upcast_before_subtract_and_write_back(dtype):
    g = torch.Generator().manual_seed(7)
    ref = {"w": torch.randn(64, 33, generator=g).to(dtype), "b": torch.randn(33, generator=g).to(dtype)}
    model = {k: (v.float() + 0.003 * torch.randn(v.shape, generator=g)).to(dtype) for k, v in ref.items()}
    upd = dpt.model_update(model, ref)
    for k in ref:
        assert upd[k].dtype == torch.float32
        assert torch.equal(upd[k], model[k].float() - ref[k].float())
    # Subtracting in half precision would have rounded the difference: the test can tell.
    assert not torch.equal(upd["w"], (model["w"] - ref["w"]).float())

    step = {k: 0.01 * torch.randn(v.shape, generator=g) for k, v in ref.items()}
    target = {k: v.clone() for k, v in ref.items()}
    dpt.apply_update(target, step)
    eps = torch.finfo(dtype).eps
    for k in ref:
        assert target[k].dtype == dtype
        exact = ref[k].float() + step[k]
        assert torch.equal(target[k], exact.to(dtype))  # one rounding, from the float32 sum
        assert torch.all((target[k].float() - exact).abs() <= eps * exact.abs() + 1e-30)

    # With a reference in another dtype, the target's dtype decides the write.
    target2 = {k: torch.zeros_like(v) for k, v in ref.items()}
    dpt.apply_update(target2, step, reference={k: v.float() for k, v in ref.items()}, scale=2.0)
    for k in ref:
        assert torch.equal(target2[k], (ref[k].float() + step[k] * 2.0).to(dtype))


def test_float64_stays_float64():
    ref = {"w": torch.linspace(-1, 1, 10, dtype=torch.float64)}
    model = {"w": ref["w"] + 1e-12}
    upd = dpt.model_update(model, ref)
    assert upd["w"].dtype == torch.float64
    assert torch.equal(upd["w"], model["w"] - ref["w"])
    target = {"w": ref["w"].clone()}
    dpt.apply_update(target, {"w": np.full(10, 1e-13)})
    assert target["w"].dtype == torch.float64
    assert torch.equal(target["w"], ref["w"] + torch.full((10,), 1e-13, dtype=torch.float64))


# -- tied weights ------------------------------------------------------------------------


def test_tied_weights_encoded_and_applied_once():
    server = Tied()
    client = _perturbed(server, 2)
    assert client.head.weight is client.emb.weight  # deepcopy keeps the tie
    upd = dpt.model_update(client, server)
    assert list(upd) == ["emb.weight", "mid.weight", "mid.bias"]
    assert upd.aliases == {"head.weight": "emb.weight"}
    assert upd.skipped == ()
    assert torch.equal(upd["emb.weight"], client.emb.weight.detach() - server.emb.weight.detach())
    template = dpt.decode_template(server)
    assert list(template) == list(upd)

    codec = _codec()
    decoded = codec.decode(codec.encode(upd, rng=np.random.default_rng(1), seed=3), template)
    before = server.emb.weight.detach().clone()
    dpt.apply_update(server, decoded)
    assert server.head.weight is server.emb.weight
    assert torch.equal(server.emb.weight.detach(), before + decoded["emb.weight"])  # once, not twice

    # Naming the tied tensor by its alias works too; naming it twice is an error.
    before = server.emb.weight.detach().clone()
    d = torch.full_like(before, 0.25)
    dpt.apply_update(server, {"head.weight": d}, strict=False)
    assert torch.equal(server.emb.weight.detach(), before + d)
    with pytest.raises(ValueError, match="'emb.weight'.*twice|twice.*'head.weight'"):
        dpt.apply_update(server, {"emb.weight": d, "head.weight": d}, strict=False)
    # An alias is not required by strict.
    dpt.apply_update(server, {k: torch.zeros_like(v) for k, v in upd.items()})


def test_views_that_only_overlap_are_not_aliases():
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    sd = {"a": base, "b": base.t(), "c": base[1:]}
    upd = dpt.model_update(sd, {k: torch.zeros_like(v) for k, v in sd.items()})
    assert list(upd) == ["a", "b", "c"] and upd.aliases == {}
    assert all(v.is_contiguous() for v in upd.values())
    assert torch.equal(upd["b"], base.t())
    assert all(v.is_contiguous() for v in dpt.decode_template(sd).values())


# -- state dicts, numpy values, scale, strict, reference ---------------------------------


def test_state_dict_target_numpy_values_scale_strict_reference():
    g = torch.Generator().manual_seed(4)
    params = {name: p for name, p in _bn_net(5).named_parameters()}  # Parameters, requires_grad=True
    upd = dpt.model_update({k: v + 0.5 for k, v in params.items()}, params)
    assert all(not v.requires_grad for v in upd.values())
    assert all(torch.allclose(v, torch.full_like(v, 0.5)) for v in upd.values())

    target = {k: v.detach().clone() for k, v in params.items()}
    np_update = {k: torch.randn(v.shape, generator=g).numpy().astype(np.float64) for k, v in target.items()}
    before = _snapshot(target)
    out = dpt.apply_update(target, np_update, scale=0.5)
    assert out is target
    for k in target:
        assert torch.equal(target[k], before[k] + torch.from_numpy(np_update[k]).float() * 0.5)

    # In place into the Parameters themselves (under no_grad).
    dpt.apply_update(params, {k: torch.ones_like(v) for k, v in params.items()}, scale=-1.0)
    for k in params:
        assert params[k].requires_grad and torch.equal(params[k].detach(), before[k] - 1.0)
    # strict: every floating entry is needed, unless strict=False.
    partial = {"0.bias": np.ones(5, dtype=np.float32)}
    with pytest.raises(ValueError, match=r"lacks.*'0\.weight'.*strict=False"):
        dpt.apply_update(target, partial)
    snap = _snapshot(target)
    dpt.apply_update(target, partial, strict=False)
    assert torch.equal(target["0.bias"], snap["0.bias"] + 1.0)
    assert all(torch.equal(target[k], snap[k]) for k in target if k != "0.bias")

    # reference: target <- reference + scale * update, whatever target held.
    ref = {k: torch.full_like(v, 2.0) for k, v in target.items()}
    step = {k: torch.full_like(v, 0.75) for k, v in target.items()}
    dpt.apply_update(target, step, reference=ref, scale=2.0)
    assert all(torch.equal(v, torch.full_like(v, 3.5)) for v in target.values())
    ref_module = _bn_net(9)
    t_module = _bn_net(10)
    t_module.state_dict()["1.num_batches_tracked"].fill_(7)
    zero = {k: torch.zeros_like(v) for k, v in dpt.decode_template(t_module).items()}
    dpt.apply_update(t_module, zero, reference=ref_module)
    for k, v in t_module.state_dict().items():
        if k == "1.num_batches_tracked":
            assert int(v) == 7  # non-floating entries are not touched, also with a reference
        else:
            assert torch.equal(v, ref_module.state_dict()[k])


def test_params_updated_in_place_keep_identity():
    net = _bn_net(1)
    p = net[0].weight
    dpt.apply_update(net, {k: torch.ones_like(v) for k, v in dpt.decode_template(net).items()})
    assert net[0].weight is p and p.requires_grad


# -- federated round trip ----------------------------------------------------------------


def test_round_trip_server_moves_by_exactly_the_aggregate():
    server = _bn_net(0)
    codec = _codec()
    blobs = []
    for c in range(4):
        client = _perturbed(server, 100 + c, scale=0.002)
        upd = dpt.model_update(client, server)
        blobs.append(codec.encode(upd, rng=np.random.default_rng(c), seed=1000 + c).to_bytes())
    template = dpt.decode_template(server)
    mean = codec.aggregate(blobs, template)
    assert list(mean) == list(template)
    decoded = [codec.decode(b, template) for b in blobs]
    for k in mean:
        assert mean[k].dtype == torch.float32 and mean[k].device.type == "cpu"
        manual = sum(d[k].double() for d in decoded) / 4
        assert torch.allclose(mean[k].double(), manual, rtol=0, atol=1e-7)
    before = _snapshot(server)
    dpt.apply_update(server, mean)
    after = server.state_dict()
    for k in mean:
        assert torch.equal(after[k], before[k] + mean[k]), k
    assert torch.equal(after["1.num_batches_tracked"], before["1.num_batches_tracked"])


_NO_CUDA = (
    "torch.cuda is not available on this machine"
    if not torch.cuda.is_available()
    else f"dprec's CUDA backend is unavailable: {_native.cuda_unavailable_reason()}"
    if not _native.cuda_available()
    else ""
)


@pytest.mark.skipif(bool(_NO_CUDA), reason=_NO_CUDA)
def test_cuda_model():
    server = _bn_net(0)
    client = _perturbed(server, 1).cuda()
    server = server.cuda()
    upd = dpt.model_update(client, server.state_dict())
    assert all(v.device.type == "cuda" for v in upd.values())
    assert torch.equal(upd["0.weight"], client[0].weight.detach() - server[0].weight.detach())
    codec = _codec()
    msg = codec.encode(upd, rng=np.random.default_rng(0), seed=9)
    host = dpt.decode_template(server, device="cpu")
    assert all(v.device.type == "cpu" for v in host.values())
    decoded = codec.decode(msg, host)
    on_gpu = codec.decode(msg, dpt.decode_template(server))
    for k in decoded:
        assert decoded[k].device.type == "cpu" and on_gpu[k].device.type == "cuda"
        assert torch.equal(decoded[k], on_gpu[k].cpu())
    before = _snapshot(server)
    dpt.apply_update(server, decoded)
    for k in decoded:
        assert server.state_dict()[k].device.type == "cuda"
        assert torch.equal(server.state_dict()[k], before[k] + decoded[k].cuda())


# -- bad input ---------------------------------------------------------------------------


def test_bad_input_names_the_argument_and_entry():
    net = _bn_net(0)
    sd = _snapshot(net)
    with pytest.raises(TypeError, match="model must be a torch.nn.Module or a Mapping"):
        dpt.model_update(42, net)
    with pytest.raises(TypeError, match="reference must be"):
        dpt.model_update(net, [1, 2])
    with pytest.raises(TypeError, match=r"model\['w'\] must be a torch.Tensor, got ndarray"):
        dpt.model_update({"w": np.ones(3)}, {"w": torch.ones(3)})
    with pytest.raises(TypeError, match="model keys must be str"):
        dpt.model_update({1: torch.ones(3)}, {"w": torch.ones(3)})
    bad = dict(sd, **{"0.weight": torch.zeros(5, 7)})
    with pytest.raises(ValueError, match=r"reference\['0\.weight'\] has shape \(5, 7\).*\(5, 6\)"):
        dpt.model_update(net, bad)
    with pytest.raises(ValueError, match="reference lacks the entry '3.bias'"):
        dpt.model_update(net, {k: v for k, v in sd.items() if k != "3.bias"})
    with pytest.raises(ValueError, match="reference has entries that model lacks: \\['extra'\\]"):
        dpt.model_update(net, dict(sd, extra=torch.ones(1)))
    with pytest.raises(TypeError, match=r"reference\['3\.bias'\] must be floating point"):
        dpt.model_update(net, dict(sd, **{"3.bias": torch.zeros(3, dtype=torch.int32)}))
    with pytest.raises(ValueError, match="no non-empty floating-point"):
        dpt.model_update({"n": torch.ones(2, dtype=torch.int64)}, {"n": torch.ones(2, dtype=torch.int64)})

    with pytest.raises(TypeError, match="device must be"):
        dpt.decode_template(net, device=3.5)
    with pytest.raises(ValueError, match="device 'nope'"):
        dpt.decode_template(net, device="nope")
    with pytest.raises(TypeError, match="model must be"):
        dpt.decode_template("net")

    zeros = {k: torch.zeros_like(v) for k, v in dpt.decode_template(net).items()}
    with pytest.raises(TypeError, match="target must be"):
        dpt.apply_update(None, zeros)
    with pytest.raises(TypeError, match=r"target\['w'\] must be a torch.Tensor, got ndarray"):
        dpt.apply_update({"w": np.zeros(3)}, {"w": np.ones(3)})
    with pytest.raises(TypeError, match="update must be a Mapping"):
        dpt.apply_update(net, [torch.zeros(1)])
    with pytest.raises(ValueError, match=r"update has entries that target lacks: \['ghost'\]"):
        dpt.apply_update(net, dict(zeros, ghost=torch.zeros(1)))
    shape_msg = r"update\['3\.bias'\] has shape \(4,\) but target\['3\.bias'\] has shape \(3,\)"
    with pytest.raises(ValueError, match=shape_msg):
        dpt.apply_update(net, dict(zeros, **{"3.bias": torch.zeros(4)}))
    with pytest.raises(TypeError, match=r"update\['3\.bias'\] must be a torch.Tensor or a numpy.ndarray, got list"):
        dpt.apply_update(net, dict(zeros, **{"3.bias": [0.0, 0.0, 0.0]}))
    with pytest.raises(TypeError, match=r"update\['3\.bias'\] must be floating point"):
        dpt.apply_update(net, dict(zeros, **{"3.bias": np.zeros(3, dtype=np.int32)}))
    with pytest.raises(TypeError, match="num_batches_tracked.*not floating point"):
        dpt.apply_update(net, dict(zeros, **{"1.num_batches_tracked": torch.zeros(())}))
    with pytest.raises(ValueError, match="reference lacks the entry '3.bias'"):
        dpt.apply_update(net, zeros, reference={k: v for k, v in sd.items() if k != "3.bias"})
    with pytest.raises(ValueError, match="scale must be finite"):
        dpt.apply_update(net, zeros, scale=float("nan"))
    with pytest.raises(TypeError, match="scale must be a real number"):
        dpt.apply_update(net, zeros, scale="1")
    with pytest.raises(TypeError, match="strict must be a bool"):
        dpt.apply_update(net, zeros, strict=None)
    # A failing call writes nothing, even where earlier entries were fine.
    ones = {k: torch.ones_like(v) for k, v in zeros.items()}
    with pytest.raises(ValueError, match="ghost"):
        dpt.apply_update(net, dict(ones, ghost=torch.zeros(1)))
    assert all(torch.equal(v, sd[k]) for k, v in net.state_dict().items())


# -- torch stays optional ----------------------------------------------------------------


def test_import_dprec_does_not_import_torch():
    code = "import dprec, sys; assert 'torch' not in sys.modules, 'torch was imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_import_without_torch_says_how_to_install():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "try:\n    import dprec.torch\nexcept ImportError as e:\n    print(e)\n"
        "else:\n    raise SystemExit('no error')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert 'pip install "dprec[torch]"' in r.stdout and "torch==2.13.0" in r.stdout
