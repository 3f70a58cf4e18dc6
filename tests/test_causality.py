"""Causality: the output at position i may depend on tokens 0..i only.

The check: for every i, a copy of the sequence whose tokens after i are
replaced must give the same logits at positions <= i. The corrected
(``variant="causal"``) models pass; the published ones leak (defect 1).
"""

import math

import pytest
import torch

import catlib

V = 17
SIZES = dict(vocab_size=V, d_model=32, n_heads=4, n_freq=8, quad_nodes=16)
LENGTHS = [2, 3, 7, 33]   # T = 1 has no later token to change: see test_single_token_*
BASES = ["fourier", "cheb"]
EPS32 = torch.finfo(torch.float32).eps


def _rounding(logits, evaluations=16):
    """How far float32 logits recomputed at another shape (other GEMM blocking, other
    rounding) may move: an ulp of the largest logit per function evaluation (RK4: 16)."""
    return evaluations * EPS32 * float(logits.abs().max())


def _cat(variant, basis, solver="rk4-classic", **kw):
    torch.manual_seed(0)
    return catlib.CAT(catlib.CATConfig(**SIZES, variant=variant, basis=basis, solver=solver,
                                       **kw)).eval()


def _baseline(variant):
    torch.manual_seed(0)
    return catlib.Baseline(catlib.CATConfig(**SIZES, variant=variant)).eval()


def _max_leak(model, length, seed=0):
    """Largest change of logits at positions <= i when every token after i changes, over i < T - 1."""
    assert length >= 2, "a causality check needs at least one later token to change"
    g = torch.Generator().manual_seed(seed)
    base = torch.randint(0, V, (1, length), generator=g)
    # Row i keeps tokens 0..i and replaces all the rest (shifted by a nonzero offset), so
    # every row really differs from the base sequence after position i.
    rows = base.repeat(length - 1, 1)
    for i in range(length - 1):
        rows[i, i + 1:] = (rows[i, i + 1:] + torch.randint(1, V, (length - i - 1,), generator=g)) % V
        assert bool((rows[i, i + 1:] != base[0, i + 1:]).all())
    with torch.no_grad():
        ref_logits, _ = model(base)
        # One sequence at a time: batch-mates must not matter either (see the dopri5 test).
        # Every row has the base's shape, and later tokens reach positions <= i only through
        # exact zeros of the mixing: a causal fixed-step model leaks exactly 0 (measured).
        worst = 0.0
        for i in range(length - 1):
            logits, _ = model(rows[i:i + 1])
            worst = max(worst, float((logits[0, :i + 1] - ref_logits[0, :i + 1]).abs().max()))
    return worst


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("basis", BASES)
def test_causal_cat(basis, length):
    assert _max_leak(_cat("causal", basis), length) < 1e-6


@pytest.mark.parametrize("length", LENGTHS)
def test_causal_baseline(length):
    assert _max_leak(_baseline("causal"), length) < 1e-6


def _single_token_prefix_gap(model):
    """max |logits of [a] - logits at position 0 of [a, x_1, ..., x_k]| over continuations,
    and the bound of float32 rounding between those shapes ([1, 1] against [1, k + 1])."""
    g = torch.Generator().manual_seed(5)
    first = torch.tensor([[4]])
    with torch.no_grad():
        alone, _ = model(first)
        gaps = [float((model(torch.cat([first, torch.randint(0, V, (1, k), generator=g)], 1))[0]
                       [0, 0] - alone[0, 0]).abs().max()) for k in (1, 6, 20)]
    return max(gaps), _rounding(alone)


@pytest.mark.parametrize("basis", BASES)
def test_single_token_cat_is_a_prefix(basis):
    # T = 1: position 0 must read token 0 only, so its logits are those of the one-token
    # sequence whatever follows (the causal query at s = 0 reads token 0 at every length).
    # Catches a model whose position 0 reads later tokens when there are some.
    gap, bound = _single_token_prefix_gap(_cat("causal", basis))
    assert gap < bound


def test_single_token_baseline_is_a_prefix():
    gap, bound = _single_token_prefix_gap(_baseline("causal"))   # one layer: fewer roundings
    assert gap < bound


@pytest.mark.parametrize("length", [2, 7, 33])
@pytest.mark.parametrize("basis", BASES)
def test_published_cat_leaks(basis, length):
    assert _max_leak(_cat("published", basis), length) > 1e-4


@pytest.mark.parametrize("length", [2, 7, 33])
def test_published_baseline_leaks(length):
    assert _max_leak(_baseline("published"), length) > 1e-4


@pytest.mark.parametrize("basis", BASES)
def test_causal_cat_batch_rows_independent(basis):
    # Fixed-step solvers treat each batch row on its own: batching changes nothing.
    model = _cat("causal", basis)
    tokens = torch.randint(0, V, (3, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        together, _ = model(tokens)
        alone = torch.cat([model(tokens[b:b + 1])[0] for b in range(3)])
    # [3, 9] against [1, 9] products: the same up to float32 rounding.
    assert float((together - alone).abs().max()) < _rounding(alone)


def test_causal_cat_dopri5_leaks_only_at_solver_tolerance():
    # dopri5 picks its steps from an error norm over the whole state, future positions
    # included: the causal model is causal only up to the solver tolerance, and at rtol
    # 1e-7 (below float32 resolution) the steps follow rounding: up to an ulp of the
    # logits per evaluation.
    model = _cat("causal", "fourier", solver="dopri5")
    leak = _max_leak(model, 7)
    print(f"\n[causality] causal CAT under dopri5 (rtol 1e-7): max leak {leak:.3e}")
    with torch.no_grad():
        logits, _ = model(torch.randint(0, V, (1, 7), generator=torch.Generator().manual_seed(0)))
    assert leak < _rounding(logits, model.nfe["forward"])


# ---- the causal operator against its definition, loop by loop -----------------------

def _phi(basis, t, n):
    k = torch.arange(n, dtype=torch.float64)[:, None]
    if basis == "cosine":
        return torch.cos(math.pi * k * t[None]) / math.sqrt(n)
    if basis == "fourier":
        return torch.cos(2 * math.pi * k * t[None]) / math.sqrt(n)
    x = 2 * t - 1
    rows = [torch.ones_like(x), x]
    for _ in range(2, n):
        rows.append(2 * x * rows[-1] - rows[-2])
    return torch.stack(rows[:n]) / math.sqrt(n)


def _causal_attention_loop(attn, x, basis):
    """out(s_i) = sum_q k(s_i, t_q) v(t_q) over the rule mapped to [0, s_i], normalised."""
    B, T, D = x.shape
    h = len(attn.kernels)
    d = D // h
    nodes, weights = attn.t_nodes.double(), attn.t_w.double()
    values = x @ attn.v_proj.weight.T
    out = torch.zeros(B, T, D, dtype=torch.float64)
    for i in range(T):
        s = i / (T - 1) if T > 1 else 0.0
        for j, kernel in enumerate(attn.kernels):
            scale = torch.nn.functional.softplus(kernel.log_scale.double())
            num = torch.zeros(B, d, dtype=torch.float64)
            den = 0.0
            for q in range(len(nodes)):
                t = s * nodes[q]
                w = scale * (_phi(basis, torch.tensor([s], dtype=torch.float64), kernel.n_freq).T
                             @ kernel.coeffs.double()
                             @ _phi(basis, t.reshape(1), kernel.n_freq))
                f = float(t) * (T - 1)
                i0 = min(int(math.floor(f)), max(T - 2, 0))
                a = f - i0
                v = (1 - a) * values[:, i0, j * d:(j + 1) * d]
                if T > 1:
                    v = v + a * values[:, i0 + 1, j * d:(j + 1) * d]
                # The interval length s cancels between numerator and denominator.
                e = float(torch.exp(w)) * float(weights[q])
                num += e * v
                den += e
            out[:, i, j * d:(j + 1) * d] = num / den
    return out @ attn.out_proj.weight.double().T


@pytest.mark.parametrize("length", [1, 2, 9])
@pytest.mark.parametrize("basis", BASES)
def test_causal_attention_matches_definition(basis, length):
    torch.manual_seed(0)
    attn = catlib.ContinuousAttention(16, 2, 5, basis, quad_nodes=6, dropout=0.0, causal=True,
                                      normalised_integral=True,
                                      half_range_cosine=True).double().eval()
    with torch.no_grad():
        for k in attn.kernels:
            k.coeffs.mul_(50.0)  # a kernel far from flat
        x = torch.randn(2, length, 16, dtype=torch.float64)
        out = attn(x)
        expected = _causal_attention_loop(attn, x, "cosine" if basis == "fourier" else basis)
    # float64 both, sums in other orders: 1e-10 is far above their rounding (~1e-15).
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-12)


# ---- the sparse (gather) path used for long sequences -------------------------------

def _causal_attention(basis, seed=0):
    torch.manual_seed(seed)
    attn = catlib.ContinuousAttention(16, 2, 5, basis, quad_nodes=6, dropout=0.0, causal=True,
                                      normalised_integral=True,
                                      half_range_cosine=True).double().eval()
    with torch.no_grad():
        for k in attn.kernels:
            k.coeffs.mul_(50.0)
    return attn


@pytest.mark.parametrize("length", [1, 2, 9])
@pytest.mark.parametrize("basis", BASES)
def test_sparse_causal_path_matches_definition(basis, length, monkeypatch):
    import catlib.nn.attention

    monkeypatch.setattr(catlib.nn.attention, "DENSE_CAUSAL_MAX", 0)
    monkeypatch.setattr(catlib.nn.attention, "GATHER_CHUNK", 64)  # several chunks
    attn = _causal_attention(basis)
    x = torch.randn(2, length, 16, dtype=torch.float64)
    with torch.no_grad():
        assert attn.plan(length).mixing is None  # really the sparse path
        out = attn(x)
        expected = _causal_attention_loop(attn, x, "cosine" if basis == "fourier" else basis)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("basis", BASES)
def test_sparse_and_dense_paths_agree_past_the_threshold(basis, monkeypatch):
    import catlib.nn.attention

    monkeypatch.setattr(catlib.nn.attention, "DENSE_CAUSAL_MAX", 300)  # a threshold cheap to pass
    length = catlib.nn.attention.DENSE_CAUSAL_MAX + 77
    attn = _causal_attention(basis, seed=1)
    x = torch.randn(1, length, 16, dtype=torch.float64, requires_grad=True)
    sparse = attn(x)
    assert attn.plan(length).mixing is None
    g_sparse = torch.autograd.grad(sparse.square().sum(), [x, attn.kernels[0].coeffs])
    monkeypatch.setattr(catlib.nn.attention, "DENSE_CAUSAL_MAX", 10 ** 9)
    dense = attn(x)
    g_dense = torch.autograd.grad(dense.square().sum(), [x, attn.kernels[0].coeffs])
    torch.testing.assert_close(sparse, dense, rtol=1e-12, atol=1e-12)   # float64, 2Q-term sums
    for a, b in zip(g_sparse, g_dense):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("basis", BASES)
def test_causal_cat_sparse_path(basis, monkeypatch):
    import catlib.nn.attention

    monkeypatch.setattr(catlib.nn.attention, "DENSE_CAUSAL_MAX", 0)
    assert _max_leak(_cat("causal", basis), 33) < 1e-6


# ---- row sums of the mixing matrix, against the formula -----------------------------

def _row_sums_by_formula(attn, length, causal, normalised):
    """sum_j M_ij from the definition, float64: nodes L_i t_q, weights L_i w_q, L_i = s_i
    (causal) or 1; c_iq = softmax_q(W(s_i, L_i t_q)) L_i w_q, or that normalised to sum 1.
    Interpolation weights sum to 1, so a row of M sums to sum_q c_iq."""
    basis = attn.basis_name
    nodes, weights = attn.t_nodes.double(), attn.t_w.double()
    sums = torch.zeros(len(attn.kernels), length, dtype=torch.float64)
    for j, kernel in enumerate(attn.kernels):
        scale = torch.nn.functional.softplus(kernel.log_scale.double())
        for i in range(length):
            s = i / (length - 1)
            extent = s if causal else 1.0
            w = scale * (_phi(basis, torch.tensor([s], dtype=torch.float64), kernel.n_freq).T
                         @ kernel.coeffs.double() @ _phi(basis, extent * nodes, kernel.n_freq))[0]
            c = torch.softmax(w, 0) * extent * weights
            sums[j, i] = 1.0 if normalised else c.sum()   # normalised: 1, even on [0, 0]
    return sums


@pytest.mark.parametrize("causal,normalised", [(True, False), (True, True), (False, False),
                                               (False, True)])
def test_mixing_row_sums(causal, normalised):
    # Q = 16, T = 9. "Causal alone" (causal, not normalised): the query at s = 0 integrates
    # over the empty interval [0, 0], so its row must carry no weight at all. Catches the
    # weights of the whole interval [0, 1] given to that row (row sum 0.0625 against
    # 0.0078 at s = 1/8). With the normalised integral every row sums to 1 and the row at
    # s = 0 reads token 0 alone (the limit of the kernel normalised on [0, s]).
    torch.manual_seed(0)
    attn = catlib.ContinuousAttention(16, 2, 5, "fourier", quad_nodes=16, dropout=0.0,
                                      causal=causal, normalised_integral=normalised).double()
    with torch.no_grad():
        for k in attn.kernels:
            k.coeffs.mul_(50.0)  # far from flat, so softmax-weighted sums differ from w sums
        plan = attn.plan(9)
        rows = plan.mixing.sum(-1) if causal else plan.weights.sum(-1)   # [h, T]
    expected = _row_sums_by_formula(attn, 9, causal, normalised)
    print(f"\n[causality] row sums causal={causal} normalised={normalised}: "
          f"{[round(float(r), 4) for r in rows[0]]}")
    torch.testing.assert_close(rows, expected, rtol=1e-12, atol=1e-15)   # float64, Q = 16 terms
    if causal and not normalised:
        # Exact: exp(-inf) = 0 weights, whatever the CPU.
        assert bool((rows[:, 0] == 0).all()) and bool((rows[:, 1:] > 0).all())
    if causal and normalised:
        # Row s = 0 reads token 0 alone: exact zeros elsewhere (every node sits at t = 0, its
        # split is (1, 0)); its weight, a float64 softmax summed, is 1 to Q ulps.
        assert bool((plan.mixing[:, 0, 1:] == 0).all())
        one = torch.ones(2, dtype=torch.float64)
        torch.testing.assert_close(plan.mixing[:, 0, 0], one, rtol=0,
                                   atol=16 * torch.finfo(torch.float64).eps)
