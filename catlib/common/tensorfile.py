"""Reading a file of tensors without running code: ``torch.load(weights_only=True)``.

Checkpoints of runs and the state_dicts the audit reads both come through
:func:`load_tensors`, so a crafted pickle is refused the same way everywhere, and every
failure is one :class:`TensorFileError` line that its caller puts in its own message.
"""
from __future__ import annotations

import os
import pickle
import re
import warnings

import torch


class TensorFileError(Exception):
    """A file torch.load cannot read; ``refused`` is true where weights_only refused it
    (it asks for a Python object), false where it is damaged or not a torch file."""

    def __init__(self, reason: str, refused: bool):
        super().__init__(reason)
        self.refused = refused


def load_tensors(path: str | os.PathLike, map_location="cpu"):
    """``torch.load(path, map_location, weights_only=True)``: tensors and plain containers only.

    A missing file raises FileNotFoundError as it is; any other failure TensorFileError.
    """
    try:
        with warnings.catch_warnings():  # e.g. pickle-protocol notes: the error says it all
            warnings.simplefilter("ignore")
            return torch.load(path, map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise
    except pickle.UnpicklingError as e:  # torch's own text suggests weights_only=False: no
        wanted = re.search(r"GLOBAL (\S+)", str(e))
        raise TensorFileError(
            f"it asks for {wanted.group(1)}, which is not a tensor or a plain container"
            if wanted else "it is not a pickle of tensors and plain containers", True) from None
    except Exception as e:  # noqa: BLE001 - corrupt or foreign file: one line, no traceback
        text = str(e).strip()
        first = text.splitlines()[0].split(". ")[0][:200] if text else ""
        raise TensorFileError(f"{e.__class__.__name__}: {first}", False) from None
