"""
A pipeline: MinMaxScaler then a smoothed classifier, on raw pixel values
========================================================================


The scaler maps digits' raw pixels (0..16) to [0, 1]. ``certify_estimator``
certifies the held-out digits through the pipeline and maps each region back
to raw pixel units (the preimage under the scaler: a pixel whose training
range is 0..16 stretches the region 16 times along it), so the radii are in
the units of the input an attacker would change. They are scored from those
certificates (an abstention counts as wrong).

    python examples/pipeline_scaler.py
"""

import os

from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler

from smoothlearn import SmoothedClassifier, certify_estimator
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

cert = certify_estimator(pipe, X_test)  # radii in raw pixel units
print(cert)
print("space:", cert.space)
print("smoothed accuracy:", certified_accuracy(y_test, cert, 0.0))
print("certified accuracy at 0.25 raw units:", certified_accuracy(y_test, cert, 0.25))
# the network's own region of the first digit (c * gap * its smallest scale):
# its inscribed radius in raw units is set by the pixels of smallest training
# range (a constant pixel keeps scale 1), its proxy radius by all of them
scaled = cert.c * cert.gap[0] * cert.min_scale[0]
print(f"first digit: radius {scaled:.3f} scaled, {cert.radius[0]:.3f} raw")
print(f"first digit: proxy radius {cert.proxy_radius[0]:.3f} raw")
clf = pipe[-1]
print(
    "memory:", clf.memory_.n_reduced_, "reduced,", clf.memory_.n_abstained_, "abstained"
)
