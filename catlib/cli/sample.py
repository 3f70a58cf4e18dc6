"""Text from a trained model: characters drawn one at a time, reproducible from a seed.

:func:`generate` continues a prompt with a model that maps tokens [B, T] to
(logits [B, T, V], _) (CAT or a baseline), in eval mode, reading the whole text so far
at every step (no cache: a continuous-attention model has none), so the text runs past
the training length and shows how each model reads long contexts.
:func:`sample_run` does it for a model of a finished run directory.
"""
from __future__ import annotations

import torch

from ..data import Vocab, load_corpus
from ..measure.evaluate import eval_mode
from ..runs import Run, RunError, open_run

MODEL_NAMES = ("cat", "base")  # as a run directory names its models
PROMPT_CHARS = 64              # the default prompt: this many validation characters


def generate(model: torch.nn.Module, prompt: torch.Tensor, n_new: int,
             temperature: float = 1.0, seed: int = 0) -> torch.Tensor:
    """``prompt`` (int64 [P], P >= 1) followed by ``n_new`` drawn tokens: int64 [P + n_new].

    Each token is drawn from softmax(logits[-1] / ``temperature``) of the model on the
    whole sequence so far, by a CPU generator seeded with ``seed``, so the same model,
    prompt and seed give the same tokens; ``temperature`` 0 takes the most likely token.
    The model runs in eval mode (restored afterwards) and the global RNG is untouched.
    """
    if prompt.dim() != 1 or len(prompt) < 1:
        raise ValueError(f"prompt must be a non-empty 1-D tensor of token ids, got shape "
                         f"{tuple(prompt.shape)}")
    if n_new < 0 or temperature < 0:
        raise ValueError(f"n_new and temperature must be >= 0, got {n_new}, {temperature}")
    device = next(model.parameters()).device
    g = torch.Generator().manual_seed(seed)
    ids = prompt.to(torch.int64).cpu()
    with eval_mode(model, False), torch.inference_mode():
        for _ in range(n_new):
            logits = model(ids[None].to(device))[0][0, -1].double().cpu()  # [V]
            if temperature == 0:
                nxt = logits.argmax()[None]
            else:
                nxt = torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=g)
            ids = torch.cat([ids, nxt])
    return ids


def sample_run(run: Run | str, n_chars: int = 600, prompt: str | None = None, model: str = "cat",
               temperature: float = 1.0, seed: int = 0, device="cpu", data=None,
               vocab: Vocab | None = None) -> str:
    """``n_chars`` characters that ``model`` ("cat" or "base") of a finished run writes
    after ``prompt`` (the prompt not included; None: the first :data:`PROMPT_CHARS`
    characters of the run's validation split). RunError, one line, for a run that is not
    finished or did not train ``model``, or a prompt outside the corpus's characters.
    ``data``: the corpus path (:func:`catlib.data.load_corpus`), read for its vocabulary
    (unless ``vocab`` is given) and the default prompt."""
    run = open_run(run) if not isinstance(run, Run) else run
    if model not in MODEL_NAMES:
        raise RunError(f"model must be one of {list(MODEL_NAMES)}, got {model!r}")
    status = run.status.get("status")
    if status != "finished":
        raise RunError(f"{run.path} is not finished (it is {status} at step "
                       f"{run.status.get('step')}); run its train command again to finish it")
    if model not in run.train_config.models:
        raise RunError(f"{run.path} did not train {model!r} (it trained "
                       f"{' and '.join(run.train_config.models)}); choose --model "
                       f"{run.train_config.models[0]}")
    if vocab is None or prompt is None:
        corpus = load_corpus(data, split=run.train_config.split)
        vocab = vocab or corpus.vocab
        prompt = corpus.vocab.decode(corpus.val[:PROMPT_CHARS]) if prompt is None else prompt
    try:
        prompt_ids = vocab.encode(prompt)
    except ValueError as e:
        raise RunError(f"the prompt: {e}; use characters of the corpus") from None
    least = 1 if run.model_config.resolved().causal else 2
    if len(prompt_ids) < least:
        raise RunError(f"the prompt must have at least {least} character(s) for this model "
                       "(the published, non-causal CAT is undefined on one token)")
    models, _ = run.load_weights(device)
    ids = generate(models[model], prompt_ids, n_chars, temperature, seed)
    return vocab.decode(ids[len(prompt_ids):])
