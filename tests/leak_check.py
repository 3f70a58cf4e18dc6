"""One check shared by the tests of the kernels built on causal scores: a prefix's logits do
not see the characters after it."""
import torch


def assert_no_future(model, base: torch.Tensor, positions, vocab: int) -> None:
    """For each position p of ``positions``, the logits of ``model`` at positions <= p are
    exactly those of ``base`` ``[1, T]`` when every character after p is changed: the future
    enters only through -inf scores, whose weights are exactly 0."""
    with torch.no_grad():
        ref = model(base)[0]
        for p in positions:
            other = base.clone()
            other[0, p + 1:] = (other[0, p + 1:] + 1) % vocab
            assert torch.equal(model(other)[0][0, :p + 1], ref[0, :p + 1]), p
