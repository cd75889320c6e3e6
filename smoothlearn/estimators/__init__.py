"""Estimators: the smoothed classifier and its built-in networks."""

from ._memory import MemoryCertifier
from ._networks import MLP, SmallCNN
from ._noisy_net import NoisyNeuralNetClassifier
from ._smoothed import SmoothedClassifier

__all__ = [
    "MLP",
    "MemoryCertifier",
    "NoisyNeuralNetClassifier",
    "SmallCNN",
    "SmoothedClassifier",
]
