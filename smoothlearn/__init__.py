"""smoothlearn: certifiably robust classifiers by randomized smoothing.

scikit-learn estimators around torch networks (trained through skorch) whose
smoothed predictions come with certified regions.
"""

from .estimators import MemoryCertifier, SmoothedClassifier
from .noise import get_noise
from .pipeline import certify_estimator
from .regions import Certificates
from .strategies import BaseStrategy, Cohen

__version__ = "0.1.0"

__all__ = [
    "BaseStrategy",
    "Certificates",
    "Cohen",
    "MemoryCertifier",
    "SmoothedClassifier",
    "__version__",
    "certify_estimator",
    "get_noise",
]
