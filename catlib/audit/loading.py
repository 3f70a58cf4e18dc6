"""The audit's inputs: a published-script ``state_dict`` file or a catlib run directory.

A file written by ``torch.save(model.state_dict(), PATH)`` from the published script's CAT
module is read with ``weights_only=True``; the basis is not recorded in such a file and comes
from ``basis=``. Anything else raises :class:`~catlib.audit.findings.AuditError` with one line
naming the problem and the fix.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch

from ..nn.baselines import Baseline
from ..nn.config import BASES
from ..nn.model import CAT
from ..common.tensorfile import TensorFileError, load_tensors
from .findings import AuditError


@dataclass
class AuditInput:
    """What :func:`load_for_audit` found: the CAT, the baseline (runs only), where they
    came from, and notes for the reader (e.g. that the basis was assumed)."""

    model: CAT
    baseline: Baseline | None
    source: str
    notes: list[str]

    def describe(self) -> dict:
        c = self.model.config
        return {"source": self.source, "basis": c.basis, "variant": c.variant,
                "sizes": {"vocab_size": c.vocab_size, "d_model": c.d_model, "n_heads": c.n_heads,
                          "n_freq": c.n_freq, "blocks": c.blocks, "quad_nodes": c.quad_nodes},
                "notes": self.notes}


STATE_DICT_FIX = "save the published CAT module with torch.save(model.state_dict(), PATH)"


def load_for_audit(path, basis: str | None = None, device="cpu") -> AuditInput:
    """Load a published-script state_dict file or a catlib run directory for the audit.

    ``basis`` ("fourier" or "cheb", default fourier) is the basis of a state_dict file,
    which does not record it; a run directory records its own. Raises AuditError (one
    line: the problem and the fix) for anything else.
    """
    if basis is not None and basis not in BASES:
        raise AuditError(f"unknown basis {basis!r}; choose one of {list(BASES)}")
    path = Path(path)
    if path.is_dir():
        result = _load_run(path, basis)
    elif path.is_file():
        result = _load_state_dict_file(path, basis or "fourier", basis is None)
    else:
        raise AuditError(f"{path} does not exist; pass a file written by torch.save(model.state_dict(), "
                         f"PATH) or a catlib run directory")
    result.model.to(device)
    if result.baseline is not None:
        result.baseline.to(device)
    return result


def _load_run(path: Path, basis: str | None) -> AuditInput:
    from ..runs import RunError, open_run
    if not (path / "config.json").is_file():
        raise AuditError(f"{path} is a directory but not a catlib run (it has no config.json); pass a "
                         f"run directory, or a file written by torch.save(model.state_dict(), PATH)")
    try:
        run = open_run(path)
        cat, baseline = run.load_models()
    except RunError as err:
        raise AuditError(str(err).strip().splitlines()[0]) from None
    except (OSError, RuntimeError, ValueError, KeyError) as err:   # a damaged run: one line
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
        raise AuditError(f"run {path} cannot be loaded ({type(err).__name__}: {first}); "
                         f"retrain it, or audit another run") from None
    if cat is None:
        raise AuditError(f"run {path} trained only the baseline; the audit needs a CAT: "
                         f"train one (--models cat base)")
    notes = [f"run directory; variant {run.model_config.variant}, basis {cat.config.basis} "
             f"(recorded in the run)"]
    if basis is not None and basis != cat.config.basis:
        notes.append(f"--basis {basis} ignored: the run records basis {cat.config.basis}")
    return AuditInput(cat, baseline, "run", notes)


def _read_torch_file(path: Path):
    with open(path, "rb") as f:
        head = f.read(4)
    if not (head.startswith(b"PK\x03\x04") or head[:1] == b"\x80"):
        raise AuditError(f"{path} is not a PyTorch file (neither a torch.save zip nor a pickle); "
                         f"{STATE_DICT_FIX}")
    try:
        return load_tensors(path, "cpu")
    except TensorFileError as err:
        if err.refused:
            raise AuditError(f"{path} was refused by torch.load(weights_only=True): {err}; the "
                             f"audit loads tensors only, so {STATE_DICT_FIX}") from None
        raise AuditError(f"{path} cannot be read by torch.load ({err}); {STATE_DICT_FIX}") from None


def _load_state_dict_file(path: Path, basis: str, assumed: bool) -> AuditInput:
    from ..nn.compat import load_published
    sd = _read_torch_file(path)
    if not isinstance(sd, dict):
        raise AuditError(f"{path} holds a {type(sd).__name__}, not a state_dict; {STATE_DICT_FIX}")
    if "trainer" in sd or ("state_dict" in sd and "config_hash" in sd):
        raise AuditError(f"{path} is a catlib run file; pass its run directory ({path.parent}) instead")
    bad = [k for k, v in sd.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise AuditError(f"{path} is a dict but not a state_dict (entry {bad[0]!r} is a "
                         f"{type(sd[bad[0]]).__name__}, not a tensor); {STATE_DICT_FIX}")
    if any(k.startswith("enc.layers.") for k in sd):
        raise AuditError(f"{path} is a checkpoint of the published baseline (enc.layers.* keys), "
                         f"not of CAT; pass the CAT module's state_dict")
    try:
        model = load_published(sd, basis=basis)
    except RuntimeError as err:     # load_state_dict: missing, unexpected or mis-shaped tensors
        raise AuditError(f"{path} does not match a published CAT: {_key_problems(str(err))}; "
                         f"{STATE_DICT_FIX}") from None
    except (ValueError, KeyError, IndexError) as err:
        msg = str(err).strip("'\"").splitlines()[0]
        raise AuditError(f"{path}: {msg}; {STATE_DICT_FIX}") from None
    note = (f"basis {basis}: assumed, the basis is not recorded in a state_dict (pass --basis cheb "
            f"for a Chebyshev model)" if assumed else
            f"basis {basis}: as given; the basis is not recorded in a state_dict")
    return AuditInput(model, None, "state_dict",
                      [note, "audited as the published architecture (variant published)"])


def _key_problems(message: str) -> str:
    """One line out of load_state_dict's multi-line error."""
    parts = []
    for label, pattern in (("missing", r"Missing key\(s\) in state_dict: (.*?)\.\s*$"),
                           ("unexpected", r"Unexpected key\(s\) in state_dict: (.*?)\.\s*$")):
        m = re.search(pattern, message, re.M)
        if m:
            keys = re.findall(r'"([^"]+)"', m.group(1))
            more = f" (+{len(keys) - 3} more)" if len(keys) > 3 else ""
            parts.append(f"{label} keys {', '.join(keys[:3])}{more}")
    sizes = re.findall(r"size mismatch for ([^:]+):", message)
    if sizes:
        parts.append(f"wrong shapes for {', '.join(sizes[:3])}")
    return "; ".join(parts) or message.strip().splitlines()[0][:160]

