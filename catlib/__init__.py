"""catlib: the Continuous Attention Transformer, published and corrected.

The house, each layer importing only those above it in this list (tests/test_layers.py):

- ``nn/``          the method: bases, quadrature, kernels, attention, baselines, the model, solvers;
- ``code_corpus``  the second corpus: the pinned SymPy release's source, split by file;
- ``data``         the corpora (Tiny Shakespeare and code; a split names its corpus), their
                   splits and the training batches;
- ``common/``      what every layer uses: devices, provenance, tensor files, number formatting;
- ``measure/``     what a trained model does: CE per length and position, copying, refinement, cost;
- ``training/``    the training loop and its recipe (warm-up, constant rate, decay), the
                   optimiser, the inputs' copy to the device, distributed training;
- ``runs/``        run directories: train, resume, evaluate, store;
- ``experiment/``  the book's rows, its grid and config, the pool that trains it, compute and
                   frontiers, the scale study, its artefacts;
- ``audit/``       the published prototype's defects, measured;
- ``cli/``         ``python -m catlib``: train, eval, audit, sample;
- ``book/``        the book: profiles, the papermill runner, the pages' helpers and tables.

Module paths of the previous release (``catlib.train``, ``catlib.evaluate``, ...) still
import, for one release, with a ``DeprecationWarning`` naming the new path.
"""
import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings

from .data import load_corpus
from .measure.config import EvalConfig
from .measure.evaluate import leak_score
from .nn.attention import ContinuousAttention
from .nn.baselines import Baseline
from .nn.compat import load_published, load_published_baseline
from .nn.config import CATConfig
from .nn.kernel import Kernel2D
from .nn.model import CAT
from .nn.quadrature import gauss_legendre
from .nn.solvers import SOLVERS, integrate
from .runs import open_run, train_run
from .training.config import TrainConfig

__all__ = [
    "CATConfig", "CAT", "Baseline", "Kernel2D", "ContinuousAttention",
    "gauss_legendre", "integrate", "SOLVERS", "load_published", "load_published_baseline",
    "load_corpus", "TrainConfig", "EvalConfig", "train_run", "open_run", "leak_score",
]
__version__ = "0.1.0"

# The previous release's module paths and where each module lives now.
MOVED = {
    "catlib.train": "catlib.training.loop", "catlib.optim": "catlib.training.optim",
    "catlib.distributed": "catlib.training.distributed",
    "catlib.evaluate": "catlib.measure.evaluate", "catlib.eval_config": "catlib.measure.config",
    "catlib.cost": "catlib.measure.cost", "catlib.copying": "catlib.measure.copying",
    "catlib.extrapolation": "catlib.measure.extrapolation",
    "catlib.refinement": "catlib.measure.refinement",
    "catlib.experiment_config": "catlib.experiment.config", "catlib.pool": "catlib.experiment.pool",
    "catlib.progress": "catlib.experiment.progress",
    "catlib.devices": "catlib.common.devices", "catlib.provenance": "catlib.common.provenance",
    "catlib.tensorfile": "catlib.common.tensorfile", "catlib.report": "catlib.common.formatting",
    "catlib.page": "catlib.book.page", "catlib.context_use": "catlib.book.context_use",
    "catlib.cli_flags": "catlib.cli.flags", "catlib.sample": "catlib.cli.sample",
    "catlib.book.report": "catlib.book.run_report",
}


class _MovedModule(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old path of :data:`MOVED` as a thin module holding the new module's
    names, with a ``DeprecationWarning`` that names the new path."""

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name in MOVED else None

    def create_module(self, spec):
        return types.ModuleType(spec.name)

    def exec_module(self, module):
        new = MOVED[module.__name__]
        warnings.warn(f"{module.__name__} is now {new}; import it from there "
                      f"(the old path goes in the next release)", DeprecationWarning, stacklevel=2)
        module.__dict__.update({k: v for k, v in vars(importlib.import_module(new)).items()
                                if not k.startswith("__")})


if not any(isinstance(f, _MovedModule) for f in sys.meta_path):
    sys.meta_path.append(_MovedModule())
