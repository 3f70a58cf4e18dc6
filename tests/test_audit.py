"""The audit (catlib.audit): each defect measured on published and corrected CATs, inputs, CLI."""
import json
import math
import os

import numpy as np
import pytest
import torch

import catlib
from catlib import audit
from catlib.audit import AuditError, audit_model, load_for_audit
from catlib.cli.commands import add_audit_parser, main as cli_main
from catlib.nn.config import CORRECTIONS

SMALL = dict(d_model=16, n_heads=2, n_freq=8)
# A non-default size: the state_dict round trip infers every size from the tensors.
ODD = dict(d_model=32, n_heads=4, n_freq=8, blocks=2)
CORRECTED = {d for ds in audit.CORRECTED_BY.values() for d in ds}


def _cat(seed=0, **cfg):
    torch.manual_seed(seed)
    return catlib.CAT(catlib.CATConfig(**{**SMALL, **cfg}))


@pytest.fixture(scope="module")
def published():
    model = _cat()
    return model, {f.defect: f for f in audit_model(model)}


@pytest.fixture(scope="module")
def causal():
    model = _cat(variant="causal")
    return model, {f.defect: f for f in audit_model(model)}


def test_published_fourier_cat_shows_its_defects(published):
    _, found = published
    assert sorted(found) == list(range(1, 11))
    # Defect 9 is the Chebyshev penalty: a Fourier model's penalty charges no flat kernel.
    assert {d for d, f in found.items() if f.shows} == set(range(1, 11)) - {9}
    for f in found.values():
        assert f.name == audit.DEFECTS[f.defect] and f.unit and isinstance(f.shows, bool)


def test_causal_cat_shows_none_of_the_corrected_defects(causal):
    _, found = causal
    assert CORRECTED == set(range(1, 11)) - set(audit.PROTOCOL_DEFECTS)
    assert not [d for d in CORRECTED if found[d].shows]
    # Defect 7 is the evaluation protocol's: dropout on would still move the causal CAT's
    # score (its dropout sits after each block); catlib evaluates in eval mode.
    assert found[7].shows and found[7].value != 0


def test_published_chebyshev_cat_shows_the_penalty_defect_not_the_mirror():
    model = _cat(basis="cheb")
    found = {f.defect: f for f in audit_model(model, only=(5, 9))}
    assert found[9].shows and not found[5].shows
    # The flat kernels T_0, T_1(s), T_1(t), T_1(s) T_1(t): the last pays (2 pi)^4 (1 + 1)^2.
    # penalty_charges works in float64: 1e-9 is far above its rounding.
    np.testing.assert_allclose(found[9].value, 4 * (2 * math.pi) ** 4, rtol=1e-9)
    np.testing.assert_allclose(found[9].data["linear"], (2 * math.pi) ** 4, rtol=1e-9)
    exact = _cat(basis="cheb", penalty="exact")
    assert not audit.penalty_formula(exact).shows
    assert audit.penalty_formula(exact).data["ratio"] == pytest.approx(1.0)


def test_numbers_match_independent_computations(published, causal):
    model, found = published
    cfg = model.config
    # 1: the library's leak score of the same model, eval mode, classical RK4.
    ref = catlib.CAT(catlib.CATConfig(**{**SMALL, "solver": "rk4-classic"}))
    ref.load_state_dict(model.state_dict())
    # The same solve of a copy (measured: equal); rel 1e-6 = 8 float32 ulps.
    assert found[1].value == pytest.approx(catlib.leak_score(ref, cfg.vocab_size, 64), rel=1e-6)
    # 3: lambda^2 published, lambda corrected: lambda P / P of float32 numbers, a few ulps.
    assert found[3].value == pytest.approx(cfg.sob_lambda ** 2, rel=1e-6)
    assert causal[1][3].value == pytest.approx(cfg.sob_lambda, rel=1e-6)
    # 4: sum_q softmax_q(W(s_i, t_q)) w_q, from Kernel2D's own forward.
    attn = model.blocks[0].attn
    s = torch.linspace(0, 1, 64)
    with torch.no_grad():
        sums = torch.stack([k(s, attn.t_nodes) @ attn.t_w for k in attn.kernels])
    # float32 sums of Q = 64 (2Q) terms by two paths: within ~log2(Q) + 2 ulps (measured
    # 1.2 and 2); 1e-5 is 80 ulps, far below the published deviation from 1 (1 - 1/Q).
    np.testing.assert_allclose(found[4].value, sums.mean().item(), rtol=1e-5)
    np.testing.assert_allclose(audit.attention_row_sums(causal[0]).numpy(), 1.0, atol=1e-5)
    # 5: cos(2 pi k t) written out in numpy: W(s, t) = W(s, 1 - t) to rounding.
    c = attn.kernels[0].coeffs.detach().double().numpy()
    u = np.linspace(0, 1, 33)
    phi = np.cos(2 * np.pi * np.arange(cfg.n_freq)[:, None] * u) / np.sqrt(cfg.n_freq)
    w = phi.T @ c @ phi
    assert np.abs(w - w[:, ::-1]).max() / np.abs(w).max() < 1e-9 and found[5].value < 1e-9
    # 10: floor(t_q (T - 1)) and its right neighbour, from numpy's Gauss-Legendre nodes.
    x, _ = np.polynomial.legendre.leggauss(cfg.quad_nodes)
    f = ((x + 1) / 2).astype(np.float32) * np.float32(4999)
    i0 = np.floor(f).astype(int)
    read = set(i0) | set(i0[f - i0 > 0] + 1)
    assert found[10].value == len(read) <= 2 * cfg.quad_nodes
    # 9 (Fourier): the published weights are n^2 / (c_k c_l) times the exact seminorm's,
    # c_0 = 1, c_k = 1/2 (the integral of cos^2): the ratio on the model's own kernels.
    k = np.arange(cfg.n_freq)
    ck = np.where(k == 0, 1.0, 0.5)
    pub = ((k[:, None] ** 2 + k[None] ** 2) ** 2)
    exact = pub * ck[:, None] * ck[None] / cfg.n_freq ** 2
    coeffs = [kk.coeffs.detach().double().numpy() for kk in attn.kernels]
    ratio = sum((pub * c ** 2).sum() for c in coeffs) / sum((exact * c ** 2).sum() for c in coeffs)
    assert found[9].data["ratio"] == pytest.approx(ratio, rel=1e-6)   # float64 both


def test_tokens_read_agrees_with_the_attention_plan():
    for variant in ("published", "causal"):
        model = _cat(variant=variant)
        plan = model.blocks[0].attn.plan(300)
        if plan.interp is not None:
            used = (plan.interp != 0).any(0)
        else:
            used = (plan.mixing != 0).any(0).any(0)
        assert audit.tokens_read(model, 300) == int(used.sum())


def test_each_correction_removes_its_defects_alone():
    """The ablation of notebook 07: the published config with one CATConfig correction
    switched on stops showing exactly the defects of that correction."""
    rows = audit.ablation(catlib.CATConfig(**SMALL), length=32)
    assert set(CORRECTIONS) == set(audit.CORRECTED_BY) == {r["field"] for r in rows}
    for field, wanted in audit.CORRECTED_BY.items():
        mine = [r for r in rows if r["field"] == field]
        assert [r["defect"] for r in mine] == (list(wanted) or [0])
        for r in mine:
            assert r["published"].shows and not r["alone"].shows and not r["causal"].shows, r
    # ... and no other defect changes: each field alone, audited on all ten.
    for field, (_, corrected) in CORRECTIONS.items():
        basis = "cheb" if field == "penalty" else "fourier"
        before = {f.defect: f.shows for f in audit_model(_cat(basis=basis), nfe=False)}
        alone = {f.defect: f.shows for f in audit_model(_cat(basis=basis, **{field: corrected}),
                                                          nfe=False)}
        assert {d for d in before if before[d] != alone[d]} == set(audit.CORRECTED_BY[field])
    table = audit.format_ablation(rows)
    assert len(table.splitlines()) == 2 + len(rows) and len(table.splitlines()[0].split(" | ")) == 6


def test_dropout_makes_dopri5_work_harder_and_the_cap_holds():
    model = _cat()
    x = torch.randint(65, (1, 32), generator=torch.Generator().manual_seed(0))
    train = audit.dopri5_nfe(model, x, True, rtol=1e-5, atol=1e-7, max_steps=200)
    evalm = audit.dopri5_nfe(model, x, False, rtol=1e-5, atol=1e-7, max_steps=200)
    assert evalm["finished"] and train["nfe"] >= 2 * evalm["nfe"]
    capped = audit.dopri5_nfe(model, x, True, rtol=1e-7, atol=1e-9, max_steps=5)
    assert not capped["finished"] and 0 < capped["nfe"] <= 6 * 6 + 6
    timed = audit.dopri5_nfe(model, x, True, rtol=1e-7, atol=1e-9, max_steps=10**6, seconds=0.0)
    # A budget of 0 s stops the solve at its first evaluation, however slow the machine.
    assert not timed["finished"] and timed["nfe"] == 1


def test_the_audit_leaves_the_model_unchanged(published):
    model = _cat()
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    state = torch.get_rng_state()
    audit_model(model, only=(1, 3, 6, 7, 8))
    assert model.training and model.config.solver == "dopri5"
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert torch.equal(state, torch.get_rng_state())


@pytest.mark.parametrize("basis", ["fourier", "cheb"])
def test_state_dict_round_trip(tmp_path, basis):
    model = _cat(**{**ODD, "basis": basis})
    path = tmp_path / "cat.pt"
    torch.save(model.state_dict(), path)
    loaded = load_for_audit(path, basis=basis)
    c = loaded.model.config
    assert (c.d_model, c.n_heads, c.n_freq, c.blocks, c.basis) == (32, 4, 8, 2, basis)
    assert loaded.baseline is None and loaded.source == "state_dict"
    assert all(torch.equal(model.state_dict()[k], v) for k, v in loaded.model.state_dict().items())
    assert any("not recorded" in n for n in loaded.notes)
    found = {f.defect: f.shows for f in audit_model(loaded.model, nfe=False)}
    assert found[9] == (basis == "cheb") and found[5] == (basis == "fourier")
    default = load_for_audit(path)            # no basis given: fourier, and said so
    assert default.model.config.basis == "fourier" and "assumed" in default.notes[0]


def test_run_directory(tmp_path, tiny_path, monkeypatch):
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))
    cfg = catlib.CATConfig(d_model=16, n_heads=2, n_freq=4, solver="rk4-classic", solver_steps=1,
                           variant="causal")
    run = catlib.train_run(cfg, catlib.TrainConfig(train_steps=2, batch=2, seq=16), root=tmp_path,
                           lengths=(16,), eval_windows=2, progress=False, echo=None, device="cpu")
    loaded = load_for_audit(run.path)
    assert loaded.source == "run" and loaded.baseline is not None
    assert loaded.model.config.variant == "causal"
    found = {f.defect: f for f in audit_model(loaded.model, loaded.baseline, nfe=False)}
    assert not found[1].shows and found[1].data["leak_baseline"] < 1e-6
    assert not found[2].shows and found[2].data["built_from_config"] is False


BAD = {
    "text.txt": "not a PyTorch file",
    "missing": "does not exist",
    "tensor.pt": "holds a Tensor, not a state_dict",
    "partial.pt": "missing keys blocks.1.norm.weight",
    "baseline.pt": "published baseline",
    "crafted.pt": "refused by torch.load(weights_only=True)",
    "mixed.pt": "not a state_dict",
    "folder": "not a catlib run",
}


class _Crafted:
    def __reduce__(self):
        return (os.getpid, ())       # a pickle that would call a function when loaded


@pytest.fixture
def bad_inputs(tmp_path):
    model = _cat(**ODD)
    (tmp_path / "text.txt").write_text("step 0 | CAT 4.2\n")
    torch.save(torch.zeros(3), tmp_path / "tensor.pt")
    partial = dict(model.state_dict())
    del partial["blocks.1.norm.weight"]
    torch.save(partial, tmp_path / "partial.pt")
    torch.save(catlib.Baseline(catlib.CATConfig(**SMALL)).state_dict(), tmp_path / "baseline.pt")
    torch.save({"embed.weight": torch.zeros(2, 2), "x": _Crafted()}, tmp_path / "crafted.pt")
    torch.save({"embed.weight": torch.zeros(2, 2), "note": "hi"}, tmp_path / "mixed.pt")
    (tmp_path / "folder").mkdir()
    return tmp_path


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_inputs_give_one_line_errors(bad_inputs, name):
    with pytest.raises(AuditError) as err:
        load_for_audit(bad_inputs / name)
    msg = str(err.value)
    assert BAD[name] in msg and "\n" not in msg
    # ... naming the fix
    assert any(w in msg for w in ("torch.save(model.state_dict(), PATH)", "pass ")), msg


def test_bad_basis_and_non_cat_model():
    with pytest.raises(AuditError, match="unknown basis"):
        load_for_audit("x.pt", basis="legendre")
    with pytest.raises(AuditError, match="catlib.CAT"):
        audit_model(torch.nn.Linear(2, 2))
    with pytest.raises(AuditError, match="unknown defect"):
        audit_model(_cat(), only=(11,))


def test_command_line(tmp_path, capsys):
    path = tmp_path / "cat.pt"
    torch.save(_cat(**ODD).state_dict(), path)
    assert cli_main(["audit", str(path), "--device", "cpu", "--no-nfe"]) == 0
    out = capsys.readouterr().out
    assert "basis is not recorded" in out and "not causal" in out and len(out.splitlines()) > 20
    assert cli_main(["audit", str(path), "--json", "--basis", "cheb", "--device", "cpu", "--no-nfe"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["basis"] == "cheb" and doc["sizes"]["n_heads"] == 4
    assert [f["defect"] for f in doc["findings"]] == list(range(1, 11))
    eight = doc["findings"][7]
    assert eight["shows"] is True and eight["value"] is None      # NaN becomes null
    (tmp_path / "notes.txt").write_text("not a checkpoint\n")
    assert cli_main(["audit", str(tmp_path / "notes.txt"), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("python -m catlib audit: error:") and "\n" not in err


def test_add_parser_wires_into_a_command_line(tmp_path, capsys):
    import argparse
    top = argparse.ArgumentParser(prog="python -m catlib")
    add_audit_parser(top.add_subparsers(dest="command"))
    args = top.parse_args(["audit", str(tmp_path / "nothing.pt")])
    assert args.func(args) == 2
    assert "does not exist" in capsys.readouterr().err


def test_formats():
    found = audit_model(_cat(), only=(4, 8, 10), nfe=False)
    text = audit.format_audit(found)
    assert "shows" in text and "—" in text          # defect 8's NaN
    md = audit.format_audit(found, markdown=True)
    assert md.splitlines()[1] == "|---:|---|:-:|---:|---|"
    both = audit.compare_audits({"published": found, "causal": audit_model(
        _cat(variant="causal"), only=(4, 8, 10), nfe=False)})
    assert len(both.splitlines()) == 5 and "**yes**\u00a0" in both and "| no\u00a0" in both
    details = audit.details_table({"published": found})
    assert "fails: ValueError" in details and len(details.splitlines()[0].split(" | ")) == 3
    assert len(both.splitlines()[0].split(" | ")) == 5              # five columns


def test_cli_audit_command(tmp_path):
    """`python -m catlib audit` (chapter 7 shows it): a missing file is one line, no
    traceback; its help sends readers to the book's audit chapter. (``catlib.audit`` has no
    ``__main__`` of its own: it would import the command line, a layer above it.)"""
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    run = [sys.executable, "-m", "catlib", "audit"]
    r = subprocess.run([*run, str(tmp_path / "none.pt"), "--device", "cpu"], cwd=root,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "does not exist" in r.stderr and "Traceback" not in r.stderr
    text = subprocess.run([*run, "--help"], cwd=root, capture_output=True, text=True,
                          timeout=600).stdout
    assert "07_audit" in " ".join(text.split()) and "ALGORITHM" not in text
