"""What the audit reports: the ten defects by number, and one :class:`Finding` per defect.

The defects are numbered as in the book's method page (``book/method.md``) and measured in
the chapter "7. Audit: the ten defects, measured" (``book/notebooks/07_audit``).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

# The ten defects of the published CAT (book/method.md), by number, as the audit names them.
DEFECTS = {
    1: "not causal",
    2: "baseline without positions",
    3: "penalty weight applied twice",
    4: "attention rows do not sum to 1",
    5: "mirror-symmetric kernel",
    6: "dropout inside the dynamics",
    7: "scores depend on dropout",
    8: "T = 1 out of range",
    9: "penalty charges flat kernels",
    10: "few tokens read at long T",
}
# The CATConfig corrections (catlib.nn.config.CORRECTIONS) and the defects each one removes
# on its own. ``causal`` also masks the baseline, and the mask alone already makes it see
# order (defect 2). logit_dropout is a baseline setting, not one of the ten.
CORRECTED_BY = {
    "causal": (1, 2, 8, 10),
    "normalised_integral": (4,),
    "dropout_in_dynamics": (6,),
    "penalty": (9,),
    "half_range_cosine": (5,),
    "penalty_once": (3,),
    "positional_encoding": (2,),
    "logit_dropout": (),
}
# Defect 7 is a property of the evaluation protocol (dropout left on), not of a model:
# catlib evaluates in eval mode; the audit measures how much dropout would move the score.
PROTOCOL_DEFECTS = (7,)
LONG_LENGTH = 5000   # the published longest context, for defect 10
SOLVE = dict(solver="rk4-classic", solver_steps=4)   # the measurements' solver (published MPS path)


class AuditError(ValueError):
    """Bad input to the audit; the message is one line naming the problem and the fix."""


@dataclass
class Finding:
    """The audit of one defect.

    ``shows``: the model shows the defect; ``value``: the number that says so (NaN when
    the measurement itself fails, e.g. defect 8), in ``unit``; ``detail``: this model's
    numbers in words; ``data``: secondary numbers (JSON-ready).
    """

    defect: int
    name: str
    shows: bool
    value: float
    unit: str
    detail: str = ""
    data: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["value"] = _json_number(self.value)
        d["data"] = {k: _json_number(v) for k, v in self.data.items()}
        return d


def _json_number(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None            # JSON has no NaN
    return v

