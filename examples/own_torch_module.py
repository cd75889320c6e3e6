"""
Certify your own torch module: a class of yours, trained through skorch
=======================================================================


Any ``nn.Module`` class or instance works as skorch takes it; its parameters
are set as ``module__<name>``. Certification reuses the first linear map's
response to the noise wherever the module starts with one (found by tracing
it with torch.fx); at DEBUG level the ``smoothlearn`` logger says why where it
does not (a first step that is not linear, a module torch.fx cannot trace).

    python examples/own_torch_module.py
"""

import logging
import os

import torch
from torch import nn

from smoothlearn import SmoothedClassifier
from smoothlearn.datasets import load_dataset
from smoothlearn.metrics import certified_accuracy

FAST = os.environ.get("SMOOTHLEARN_EXAMPLES_FAST") == "1"


class DigitsNet(nn.Module):
    def __init__(self, hidden=128, n_classes=10):
        super().__init__()
        self.fc1 = nn.Linear(64, hidden)
        self.fc2 = nn.Linear(hidden, n_classes)

    def forward(self, x):
        x = x.view(x.size(0), -1)
        return self.fc2(torch.relu(self.fc1(x)))


logging.basicConfig(format="%(name)s: %(message)s")
logging.getLogger("smoothlearn").setLevel(logging.DEBUG)

data = load_dataset("digits")
X_test, y_test = data.X_test[:200], data.y_test[:200]
clf = SmoothedClassifier(
    DigitsNet,
    module__hidden=64 if FAST else 128,
    sigma=0.25,
    n=2_000 if FAST else 100_000,
    max_epochs=3 if FAST else 20,
    random_state=0,
).fit(data.X_train, data.y_train)
# a module that cannot reuse its first layer would log why here ("plain path ...")
cert = clf.certify(X_test)
print("certified accuracy at 0.25:", certified_accuracy(y_test, cert, 0.25))
