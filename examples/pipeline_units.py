"""
Pipelines and units: select sigma over a scaler pipeline, certify in raw units
==============================================================================


scikit-learn's wine data has 13 features whose standard deviations run from
0.12 (nonflavanoid phenols) to 325 (proline). A ``StandardScaler`` in front of
the network is what any scikit-learn user writes; the certificates must still
speak of the raw measurements an attacker would change.

``GridSearchCV`` selects ``sigma`` over the pipeline with a scoring dict (the
two full-certification scorers share one certification per split), and
``certify_estimator`` certifies the held-out wines with the refit pipeline:
each region is the preimage of the network's region under the scaler, an
axis-aligned ellipsoid in raw units. Its ``radius`` is its smallest semi-axis,
its ``proxy_radius`` their geometric mean (see the user guide's "Pipelines and
units").

    python examples/pipeline_units.py
"""

import os

import numpy as np
from sklearn.datasets import load_wine
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.preprocessing import StandardScaler

from smoothlearn import SmoothedClassifier, certify_estimator
from smoothlearn.metrics import acr_scorer, certified_accuracy_scorer
from smoothlearn.pipeline import make_pipeline

FAST = os.environ.get("SMOOTHLEARN_EXAMPLES_FAST") == "1"

wine = load_wine()
X_train, X_test, y_train, y_test = train_test_split(
    wine.data, wine.target, test_size=0.3, stratify=wine.target, random_state=0
)
pipe = make_pipeline(
    StandardScaler(),
    SmoothedClassifier(
        n=1_000 if FAST else 10_000,
        max_epochs=10 if FAST else 100,
        lr=0.01,
        random_state=0,
    ),
)
search = GridSearchCV(
    pipe,
    {"smoothedclassifier__sigma": [0.25, 0.5, 1.0]},
    scoring={
        "acr": acr_scorer(),
        "ca@0.5": certified_accuracy_scorer(radius=0.5, sequential=False),
    },
    refit="acr",
    cv=3,
).fit(X_train, y_train)
for sigma, acr, ca in zip(
    search.cv_results_["param_smoothedclassifier__sigma"],
    search.cv_results_["mean_test_acr"],
    search.cv_results_["mean_test_ca@0.5"],
):
    print(f"sigma={sigma}: ACR = {acr:.3f}, certified accuracy at 0.5 = {ca:.3f}")
print("best:", search.best_params_)

cert = certify_estimator(search, X_test)  # the refit pipeline, in raw units
print(cert)
print("space:", cert.space)

# one wine: the network's ball and its preimage in raw units
scaler = search.best_estimator_[0]
scaled = certify_estimator(search, X_test[:1], space="model")  # what it sees
print(f"\nfirst held-out wine: class {cert.label[0]} (true {y_test[0]})")
print(f"radius in the scaled space the network sees: {scaled.radius[0]:.3f}")
print(f"radius in raw units (smallest semi-axis):    {cert.radius[0]:.3f}")
print(f"proxy radius in raw units (geometric mean):  {cert.proxy_radius[0]:.3f}")
print("semi-axes in raw units, smallest and largest:")
semi_axes = scaled.radius[0] * scaler.scale_
for j in np.argsort(semi_axes)[[0, 1, -2, -1]]:
    print(f"  {wine.feature_names[j]:30s} {semi_axes[j]:9.3f}")
