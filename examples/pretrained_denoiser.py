"""
Certify a network you already trained: a denoiser in front of it
================================================================


A network trained on clean data, as most are, misclassifies noisy inputs, so
smoothing it as it is certifies little. Denoised smoothing (Salman et al.
2020) trains a denoiser ``D`` in front of the frozen network ``f`` and
certifies ``f(D(x))``: only ``D`` learns, ``f`` is never modified.

Here a small MLP is trained on clean digits with a plain torch loop (the
network "you already have"), then certified three ways at ``sigma = 0.5``: as
it is, through a denoiser trained by stability (no labels needed: ``f``'s own
labels of the clean inputs are the targets), and, for reference, the same
architecture trained under noise, which a user who cannot retrain does not
have.

    python examples/pretrained_denoiser.py
"""

import os

import torch
from torch import nn

from smoothlearn import SmoothedClassifier
from smoothlearn.datasets import load_dataset
from smoothlearn.metrics import certified_accuracy_table

FAST = os.environ.get("SMOOTHLEARN_EXAMPLES_FAST") == "1"


class DigitsNet(nn.Module):
    def __init__(self, hidden=128, n_classes=10):
        super().__init__()
        self.fc1 = nn.Linear(64, hidden)
        self.fc2 = nn.Linear(hidden, n_classes)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x.view(len(x), -1))))


data = load_dataset("digits")
X_test, y_test = data.X_test[: 40 if FAST else 200], data.y_test[: 40 if FAST else 200]

# the network you already have: trained on clean inputs
torch.manual_seed(0)
net = DigitsNet()
optimiser = torch.optim.Adam(net.parameters(), lr=1e-3)
X, y = torch.as_tensor(data.X_train), torch.as_tensor(data.y_train)
for epoch in range(5 if FAST else 30):
    for batch in torch.randperm(len(X)).split(64):
        optimiser.zero_grad()
        nn.functional.cross_entropy(net(X[batch]), y[batch]).backward()
        optimiser.step()
net.eval()

common = {"sigma": 0.5, "n": 2_000 if FAST else 100_000, "random_state": 0}
as_is = SmoothedClassifier(net, max_epochs=0, **common)
denoised = SmoothedClassifier(
    net,
    denoiser="auto",
    training="stability",
    max_epochs=5 if FAST else 30,
    **common,
)
under_noise = SmoothedClassifier(
    DigitsNet, max_epochs=5 if FAST else 30, lr=1e-3, **common
)

results = {}
for name, clf in [
    ("as it is", as_is),
    ("denoised (stability)", denoised),
    ("trained under noise", under_noise),
]:
    clf.fit(data.X_train, data.y_train)
    results[name] = clf.certify(X_test)
print(certified_accuracy_table(y_test, results, radii=[0, 0.25, 0.5, 0.75]))
print("the denoiser:", type(denoised.denoiser_).__name__)
