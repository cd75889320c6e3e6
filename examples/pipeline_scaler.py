"""
A pipeline: MinMaxScaler then a smoothed classifier, on raw pixel values
========================================================================


The scaler maps digits' raw pixels (0..16) to [0, 1]; certified radii are in
that scaled space, the one the classifier sees. The held-out digits are
certified once, through the pipeline's scaler, and scored from their
certificates (an abstention counts as wrong).

    python examples/pipeline_scaler.py
"""

import os

from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler

from smoothlearn import SmoothedClassifier
from smoothlearn.datasets import load_dataset
from smoothlearn.metrics import certified_accuracy
from smoothlearn.strategies import ANCER, IsotropicDD

FAST = os.environ.get("SMOOTHLEARN_EXAMPLES_FAST") == "1"
steps = 5 if FAST else 100

data = load_dataset("digits")
X_train, y_train = 16 * data.X_train, data.y_train  # back to raw pixels 0..16
X_test, y_test = 16 * data.X_test[:200], data.y_test[:200]

pipe = make_pipeline(
    MinMaxScaler(),
    SmoothedClassifier(
        strategy=ANCER(n_iter=steps, isotropic=IsotropicDD(n_iter=steps)),
        sigma=0.25,
        n=2_000 if FAST else 100_000,
        max_epochs=3 if FAST else 20,
        random_state=0,
    ),
)
pipe.fit(X_train, y_train)

scaler, clf = pipe[0], pipe[-1]
cert = clf.certify(scaler.transform(X_test))
print(cert)
print("smoothed accuracy:", certified_accuracy(y_test, cert, 0.0))
print("certified accuracy at 0.25:", certified_accuracy(y_test, cert, 0.25))
print(
    "memory:", clf.memory_.n_reduced_, "reduced,", clf.memory_.n_abstained_, "abstained"
)
