"""catlib: the Continuous Attention Transformer, published and corrected."""
from .nn.attention import ContinuousAttention
from .nn.baselines import Baseline
from .nn.compat import load_published, load_published_baseline
from .nn.config import CATConfig
from .data import load_corpus
from .eval_config import EvalConfig
from .evaluate import leak_score
from .nn.kernel import Kernel2D
from .nn.model import CAT
from .nn.quadrature import gauss_legendre
from .runs import open_run, train_run
from .nn.solvers import SOLVERS, integrate
from .train import TrainConfig

__all__ = [
    "CATConfig", "CAT", "Baseline", "Kernel2D", "ContinuousAttention",
    "gauss_legendre", "integrate", "SOLVERS", "load_published", "load_published_baseline",
    "load_corpus", "TrainConfig", "EvalConfig", "train_run", "open_run", "leak_score",
]
__version__ = "0.1.0"
