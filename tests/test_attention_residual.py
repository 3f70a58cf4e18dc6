"""CATConfig.attention_residual: the CAT block's dynamics add the attention's output itself."""
import pytest
import torch

from catlib.measure.evaluate import leak_score
from catlib.nn.config import CATConfig
from catlib.nn.model import CAT

CFG = dict(d_model=32, n_heads=4, n_freq=8, variant="causal", kernel="kerple-prior",
           train_length=16, solver="euler", solver_steps=1, dropout=0.0, blocks=2)


def _model(**options):
    torch.manual_seed(0)
    return CAT(CATConfig(**CFG, **options)).eval()


def test_default_is_the_published_block_bitwise():
    # Catches the option changing the published dynamics FF(LN(h + a)) when it is off.
    x = torch.randint(0, 65, (2, 24))
    with torch.no_grad():
        assert torch.equal(_model()(x)[0], _model(attention_residual=False)(x)[0])
    assert "attention_residual" not in CATConfig().to_dict()       # earlier runs' hashes
    assert CATConfig.from_dict(CATConfig(attention_residual=True).to_dict()).attention_residual


def test_the_attention_output_is_added_to_the_dynamics():
    # One Euler step of one block: h + a + FF(LN(h + a)) against the published h + FF(LN(h + a)).
    block = _model(attention_residual=True).blocks[0]
    h = torch.randn(2, 10, 32, dtype=torch.float64)
    block = block.double()
    with torch.no_grad():
        a = block.attn(h)
        want = a + block.ff(block.norm(h + a))
        got = block.rhs(h)
    tol = 64 * torch.finfo(torch.float64).eps * float(want.abs().max())
    assert float((got - want).abs().max()) <= tol


def test_causal_with_the_option():
    model = _model(attention_residual=True, far_heads=2)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    assert leak_score(model, 65, length=24) == 0.0


def test_only_a_bool_is_accepted():
    with pytest.raises(ValueError, match="attention_residual"):
        CATConfig(**dict(CFG, attention_residual=1)).validate()
