"""
Quickstart: train a smoothed classifier on digits and certify it
================================================================


Every example uses the same split: ``load_dataset("digits")``, scikit-learn's
digits scaled to [0, 1] as float32, 20% held out, stratified, seed 0 (the
split the command line certifies). The examples certify its first 200 test
digits. ``SMOOTHLEARN_EXAMPLES_FAST=1`` (set by the test suite) shrinks every
example to a few seconds; its numbers are then rough.

    python examples/quickstart.py
"""

import os

from smoothlearn import SmoothedClassifier
from smoothlearn.datasets import load_dataset
from smoothlearn.metrics import average_certified_radius, certified_accuracy

FAST = os.environ.get("SMOOTHLEARN_EXAMPLES_FAST") == "1"

data = load_dataset("digits")
X_test, y_test = data.X_test[:200], data.y_test[:200]

clf = SmoothedClassifier(
    sigma=0.25,
    n=2_000 if FAST else 100_000,
    max_epochs=3 if FAST else 20,
    random_state=0,
)
clf.fit(data.X_train, data.y_train)

cert = clf.certify(X_test)
print(cert)
print("first labels:", cert.label[:10], "radii:", cert.radius[:5].round(3))
for radius in (0.0, 0.25, 0.5, 0.75):
    acc = certified_accuracy(y_test, cert, radius)
    print(f"certified accuracy at l2 radius {radius}: {acc:.3f}")
print(f"ACR: {average_certified_radius(y_test, cert):.3f}")
print("smoothed predictions (-1 = abstain):", clf.predict(X_test[:10]))
