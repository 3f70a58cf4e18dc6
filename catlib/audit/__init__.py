"""The audit: measure the ten defects of the published CAT on any CAT model.

Each defect (numbered as in the book's method page, measured in the book's chapter
"7. Audit: the ten defects, measured", ``book/notebooks/07_audit``) has one function that
takes a :class:`catlib.CAT` (any size, Fourier or Chebyshev basis, published or corrected)
and returns a :class:`Finding`: whether the model shows the defect and the number that
says so. The package, one concept a module:

- :mod:`.findings`: the defects by number (:data:`DEFECTS`, :data:`CORRECTED_BY`) and
  :class:`Finding`, :class:`AuditError`;
- :mod:`.defects`: the ten measurements and :func:`audit_model`, which runs them all;
- :mod:`.ablation`: :func:`ablation`, one correction at a time, from the same weights;
- :mod:`.tables`: :func:`format_audit` (a text or Markdown table), :func:`compare_audits`,
  :func:`details_table`, :func:`format_ablation`, :func:`audit_to_json`;
- :mod:`.loading`: :func:`load_for_audit`, a published-script state_dict file or a catlib
  run directory.

Command line (``catlib.cli.commands``)::

    python -m catlib audit PATH [--basis fourier|cheb] [--json] [--device auto|cpu|cuda|mps]

(``python -m catlib.audit PATH ...`` runs the same command).
"""
from .ablation import ablation, build_cat, logits_zeroed
from .defects import (attention_row_sums, audit_model, baseline_positions, causality,
                      dopri5_nfe, dropout_ce_shift, dropout_in_dynamics, dropout_in_evaluation,
                      kernel_grid, length_one, long_context, mirror_symmetry, penalty_charges,
                      penalty_formula, penalty_weight_applied, permutation_gap, rhs_gap,
                      row_sums, tokens_read)
from .findings import (CORRECTED_BY, DEFECTS, LONG_LENGTH, PROTOCOL_DEFECTS, SOLVE, AuditError,
                       Finding)
from .loading import STATE_DICT_FIX, AuditInput, load_for_audit
from .tables import (audit_to_json, cell, compare_audits, details_table, format_ablation,
                     format_audit, format_value)

__all__ = [
    "AuditError", "AuditInput", "CORRECTED_BY", "DEFECTS", "Finding", "LONG_LENGTH",
    "PROTOCOL_DEFECTS", "SOLVE", "STATE_DICT_FIX",
    "ablation", "attention_row_sums", "audit_model", "audit_to_json", "baseline_positions",
    "build_cat", "causality", "cell", "compare_audits", "details_table", "dopri5_nfe",
    "dropout_ce_shift", "dropout_in_dynamics", "dropout_in_evaluation", "format_ablation",
    "format_audit", "format_value", "kernel_grid", "length_one", "load_for_audit",
    "logits_zeroed", "long_context", "mirror_symmetry", "penalty_charges", "penalty_formula",
    "penalty_weight_applied", "permutation_gap", "rhs_gap", "row_sums", "tokens_read",
]
