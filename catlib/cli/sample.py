"""Text from a trained model: characters drawn one at a time, reproducible from a seed.

:func:`generate` continues a prompt with a model that maps tokens [B, T] to
(logits [B, T, V], _) (CAT or a baseline), in eval mode, reading the whole text so far
at every step (no cache: a continuous-attention model has none), so the text runs past
the training length and shows how each model reads long contexts.
:func:`sample_run` does it for a model of a finished run directory.
"""
from __future__ import annotations

import math

import torch

from ..data import Vocab, load_corpus
from ..measure.evaluate import eval_mode
from ..runs import Run, RunError, open_run

MODEL_NAMES = ("cat", "base")  # as a run directory names its models
PROMPT_CHARS = 64              # the default prompt: this many validation characters
SEED_RANGE = (0, 2**64 - 1)    # what a torch.Generator's manual_seed accepts, from 0


def check_sampling(temperature: float, seed: int) -> None:
    """ValueError, one line beginning with the setting's name, for a ``temperature`` that is
    not a finite number >= 0 or a ``seed`` outside :data:`SEED_RANGE`."""
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"temperature must be a finite number >= 0 (0: the most likely character), "
                         f"got {temperature}; use e.g. 1")
    lo, hi = SEED_RANGE
    if not isinstance(seed, int) or not lo <= seed <= hi:
        raise ValueError(f"seed must be an integer from {lo} to 2**64 - 1, got {seed}; use e.g. 0")


def generate(model: torch.nn.Module, prompt: torch.Tensor, n_new: int,
             temperature: float = 1.0, seed: int = 0) -> torch.Tensor:
    """``prompt`` (int64 [P], P >= 1) followed by ``n_new`` drawn tokens: int64 [P + n_new].

    Each token is drawn from softmax(logits[-1] / ``temperature``) of the model on the
    whole sequence so far, by a CPU generator seeded with ``seed``, so the same model,
    prompt and seed give the same tokens; ``temperature`` 0 takes the most likely token
    (and a temperature so small that logits / temperature overflow tends to it).
    The model runs in eval mode (restored afterwards) and the global RNG is untouched.
    """
    if prompt.dim() != 1 or len(prompt) < 1:
        raise ValueError(f"prompt must be a non-empty 1-D tensor of token ids, got shape "
                         f"{tuple(prompt.shape)}")
    if n_new < 0:
        raise ValueError(f"n_new must be >= 0, got {n_new}")
    check_sampling(temperature, seed)
    device = next(model.parameters()).device
    g = torch.Generator().manual_seed(seed)
    ids = prompt.to(torch.int64).cpu()
    with eval_mode(model, False), torch.inference_mode():
        for _ in range(n_new):
            logits = model(ids[None].to(device))[0][0, -1].double().cpu()  # [V]
            if temperature == 0:
                nxt = logits.argmax()[None]
            else:
                scaled = logits / temperature
                if not torch.isfinite(scaled).all():   # overflow: the same softmax, shifted
                    scaled = (logits - logits.max()) / temperature
                nxt = torch.multinomial(torch.softmax(scaled, -1), 1, generator=g)
            ids = torch.cat([ids, nxt])
    return ids


def sample_run(run: Run | str, n_chars: int = 600, prompt: str | None = None, model: str = "cat",
               temperature: float = 1.0, seed: int = 0, device="cpu", data=None,
               vocab: Vocab | None = None) -> str:
    """``n_chars`` characters that ``model`` ("cat" or "base") of a finished run writes
    after ``prompt`` (the prompt not included; None: the first :data:`PROMPT_CHARS`
    characters of the run's validation split). RunError, one line, for a run that is not
    finished or did not train ``model``, a prompt outside the corpus's characters or too
    short for the model, or a ``temperature`` or ``seed`` :func:`check_sampling` refuses.
    ``data``: the corpus path (:func:`catlib.data.load_corpus`), read for its vocabulary
    (unless ``vocab`` is given) and the default prompt."""
    try:
        check_sampling(temperature, seed)
    except ValueError as e:
        raise RunError(str(e)) from None
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
    if model == "cat" and not run.model_config.resolved().causal:
        if len(prompt_ids) < 2:   # t_j = j / (T - 1): the non-causal operator needs T >= 2
            raise RunError("the prompt must have at least 2 characters for the published, "
                           "non-causal CAT (undefined on one token); give a longer prompt")
    elif len(prompt_ids) < 1:
        raise RunError(f"the prompt must have at least 1 character for the {model} model of "
                       f"{run.path.name}; give a prompt, or none for the validation text")
    models, _ = run.load_weights(device)
    ids = generate(models[model], prompt_ids, n_chars, temperature, seed)
    return vocab.decode(ids[len(prompt_ids):])
