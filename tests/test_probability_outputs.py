"""Modules that output probabilities (skorch's NLLLoss convention) get the right
losses: every training method and RANCER's curvature see the same loss as for
the equivalent logit module."""

import copy

import numpy as np
import pytest
import torch
from torch import nn

from smoothlearn.estimators._noisy_net import NoisyNeuralNetClassifier
from smoothlearn.network import FlatInputNetwork
from smoothlearn.strategies._curvature import input_hessians, predicted_labels
from smoothlearn.training import MACER, Consistency, GaussianAugmentation, SmoothAdv


def _logit_module():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))


def _step_loss(module, criterion, training):
    net = NoisyNeuralNetClassifier(
        module,
        criterion=criterion,
        noise="gaussian",
        noise_scale=0.3,
        training=training,
        max_epochs=1,
        lr=0.0,
        train_split=None,
    ).initialize()
    X = torch.as_tensor(np.random.RandomState(0).randn(6, 4), dtype=torch.float32)
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    torch.manual_seed(1)
    return float(net.train_step_single((X, y))["loss"].detach())


@pytest.mark.parametrize(
    "training",
    [GaussianAugmentation(), Consistency(), MACER(n_draws=4), SmoothAdv()],
    ids=lambda t: type(t).__name__,
)
def test_training_loss_of_a_probability_module_is_that_of_its_logits(training):
    logits = _logit_module()
    probabilities = nn.Sequential(copy.deepcopy(logits), nn.Softmax(dim=-1))
    expected = _step_loss(logits, nn.CrossEntropyLoss, training)
    got = _step_loss(probabilities, nn.NLLLoss, training)
    assert got == pytest.approx(expected, rel=1e-4, abs=1e-5)


def test_curvature_of_a_probability_module_is_that_of_its_logits():
    logits = _logit_module().double()
    probabilities = nn.Sequential(copy.deepcopy(logits), nn.Softmax(dim=-1))
    X = torch.randn(5, 4, dtype=torch.float64)
    plain = FlatInputNetwork(logits, (4,), 3)
    probs = FlatInputNetwork(probabilities, (4,), 3, outputs_probabilities=True)
    labels = predicted_labels(plain, X)
    torch.testing.assert_close(predicted_labels(probs, X), labels)
    torch.testing.assert_close(
        input_hessians(probs, X, labels), input_hessians(plain, X, labels)
    )
    torch.testing.assert_close(probs.probabilities(X), plain.probabilities(X))
