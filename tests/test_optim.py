"""The optimiser's parameter groups: which tensors AdamW's weight decay acts on."""
import pytest
import torch

import catlib
from catlib.nn.config import CATConfig
from catlib.training.optim import WEIGHT_DECAY, make_optimizer, param_groups
from catlib.training.loop import TrainConfig

TINY = dict(d_model=16, n_heads=2, n_freq=4, blocks=1, solver="rk4-classic", solver_steps=1,
            dropout=0.0)
QK = ("q_proj", "k_proj", "v_proj", "out_proj")
FF = ("ff.0", "ff.2")
# The weight matrices of each model (blocks=1): the only decayed tensors under "matrices".
SPECTRAL = ["blocks.0.attn.v_proj.weight", "blocks.0.attn.out_proj.weight"]
CONTENT = [f"blocks.0.attn.qk.{p}.weight" for p in QK]
CAT_MATRICES = {
    "absolute": SPECTRAL, "relative": SPECTRAL, "content": CONTENT, "alibi-prior": CONTENT,
    "kerple-prior": CONTENT,
}
QK_LAYER = [f"layers.0.self_attn.{p}.weight" for p in QK] + ["layers.0.ff.0.weight",
                                                             "layers.0.ff.3.weight"]
BASE_MATRICES = {
    "sinusoidal": ["enc.layers.0.self_attn.in_proj_weight", "enc.layers.0.self_attn.out_proj.weight",
                   "enc.layers.0.linear1.weight", "enc.layers.0.linear2.weight"],
    "rope": QK_LAYER, "alibi": QK_LAYER,
}


def _cat(kernel, variant="causal"):
    torch.manual_seed(0)
    prior = kernel.endswith("-prior")
    return catlib.CAT(CATConfig(**TINY, variant=variant, kernel=kernel,
                                train_length=32 if prior else None))


def _base(positions, variant="causal"):
    torch.manual_seed(0)
    return catlib.Baseline(CATConfig(**TINY, variant=variant, baseline_positions=positions))


def _names(model, params):
    ids = {id(p) for p in params}
    return sorted(n for n, p in model.named_parameters() if id(p) in ids)


def _check_matrices(model, matrices):
    groups = param_groups(model, decay_on=None)          # causal: follows the variant
    assert [g["weight_decay"] for g in groups] == [WEIGHT_DECAY, 0.0]
    decayed, kept = (_names(model, g["params"]) for g in groups)
    assert decayed == sorted(matrices)
    # Every parameter in exactly one group, each group in model.parameters() order.
    flat = [id(p) for g in groups for p in g["params"]]
    assert len(flat) == len(set(flat)) and set(flat) == {id(p) for p in model.parameters()}
    order = {id(p): i for i, p in enumerate(model.parameters())}
    for g in groups:
        at = [order[id(p)] for p in g["params"]]
        assert at == sorted(at)
    return kept


@pytest.mark.parametrize("kernel", sorted(CAT_MATRICES))
def test_causal_cat_decays_only_its_weight_matrices(kernel):
    model = _cat(kernel)
    kept = _check_matrices(model, ["embed.weight", "proj.weight"] + CAT_MATRICES[kernel]
                           + [f"blocks.0.{f}.weight" for f in FF])
    # Never decayed: biases, the norm, the kernel's coefficients and scales, the priors.
    assert all(n.endswith(("bias", "norm.weight", "coeffs", "log_scale", "r1_raw", "r2_raw"))
               for n in kept)
    if kernel == "kerple-prior":
        assert {"blocks.0.attn.kernels.r1_raw", "blocks.0.attn.kernels.r2_raw"} <= set(kept)
    if kernel != "absolute":
        assert any(n.endswith("coeffs") for n in kept)


@pytest.mark.parametrize("positions", sorted(BASE_MATRICES))
def test_causal_baselines_decay_only_their_weight_matrices(positions):
    model = _base(positions)
    kept = _check_matrices(model, ["embed.weight", "proj.weight"] + BASE_MATRICES[positions])
    assert all(n.endswith(("bias", "norm1.weight", "norm2.weight")) for n in kept)


@pytest.mark.parametrize("make", [lambda: _cat("absolute", "published"),
                                  lambda: _base("sinusoidal", "published"),
                                  lambda: _cat("kerple-prior")])
def test_all_is_one_group_in_parameter_order(make):
    model = make()
    decay_on = None if model.config.variant == "published" else "all"
    groups = param_groups(model, decay_on=decay_on)
    assert len(groups) == 1 and groups[0]["weight_decay"] == WEIGHT_DECAY == 0.01
    assert [id(p) for p in groups[0]["params"]] == [id(p) for p in model.parameters()]
    ours = make_optimizer(model, 1e-2, decay_on)
    published = torch.optim.AdamW(model.parameters(), lr=1e-2)
    assert ours.state_dict()["param_groups"] == published.state_dict()["param_groups"]


def test_the_field_its_identity_and_its_errors():
    assert TrainConfig().weight_decay_on is None
    # None (by variant) keeps the identity of earlier runs; a choice is part of it.
    assert "weight_decay_on" not in TrainConfig().identity()
    assert TrainConfig(weight_decay_on="all").identity() != TrainConfig().identity()
    assert TrainConfig(weight_decay_on="all").identity() \
        != TrainConfig(weight_decay_on="matrices").identity()
    with pytest.raises(ValueError, match="weight_decay_on must be one of"):
        TrainConfig(weight_decay_on="norms").validate()
    with pytest.raises(ValueError, match="weight_decay_on must be one of"):
        param_groups(_base("alibi"), decay_on="biases")
    with pytest.raises(ValueError, match="has no .config"):
        param_groups(torch.nn.Linear(2, 2), decay_on=None)


def test_training_uses_the_field():
    from catlib.training.loop import SideBySide
    ids = torch.randint(0, 65, (400,))
    model = CATConfig(**TINY, variant="causal", baseline_positions="alibi")
    for decay_on, n_groups in ((None, 2), ("all", 1), ("matrices", 2)):
        tc = TrainConfig(train_steps=1, batch=2, seq=8, models=("base",), weight_decay_on=decay_on)
        assert len(SideBySide(model, tc, ids).opt_base.param_groups) == n_groups
