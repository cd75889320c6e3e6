"""
Training for certifiability: noise augmentation, consistency, MACER, SmoothAdv
==============================================================================


``training=`` chooses the base network's loss in ``fit``; each method's own
parameters are reachable as ``training__<name>`` (and so in GridSearchCV).

    python examples/training_methods.py
"""

import os

from smoothlearn import SmoothedClassifier
from smoothlearn.datasets import load_dataset
from smoothlearn.metrics import certified_accuracy_table
from smoothlearn.training import MACER, Consistency, GaussianAugmentation, SmoothAdv

FAST = os.environ.get("SMOOTHLEARN_EXAMPLES_FAST") == "1"

data = load_dataset("digits")
X_test, y_test = data.X_test[: 40 if FAST else 200], data.y_test[: 40 if FAST else 200]

results = {}
for name, training in [
    ("gaussian", GaussianAugmentation()),
    ("consistency", Consistency(lbd=10.0)),
    ("macer", MACER(n_draws=4 if FAST else 16)),
    ("smoothadv", SmoothAdv()),
]:
    clf = SmoothedClassifier(
        training=training,
        sigma=0.25,
        n=2_000 if FAST else 100_000,
        max_epochs=2 if FAST else 20,
        random_state=0,
    ).fit(data.X_train, data.y_train)
    results[name] = clf.certify(X_test)

print(certified_accuracy_table(y_test, results, [0.0, 0.25, 0.5, 0.75]))
