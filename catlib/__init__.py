"""catlib: the Continuous Attention Transformer, published and corrected."""
from .attention import ContinuousAttention
from .baselines import Baseline
from .compat import load_published, load_published_baseline
from .config import CATConfig
from .kernel import Kernel2D
from .model import CAT
from .quadrature import gauss_legendre
from .solvers import SOLVERS, integrate

__all__ = [
    "CATConfig", "CAT", "Baseline", "Kernel2D", "ContinuousAttention",
    "gauss_legendre", "integrate", "SOLVERS", "load_published", "load_published_baseline",
]
__version__ = "0.1.0"
