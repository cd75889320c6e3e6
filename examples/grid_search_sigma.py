"""
Model selection: GridSearchCV over sigma, scored by certified accuracy
======================================================================


Two certificate scorers in one scoring dict: ``certified_accuracy_scorer``
decides "certified at 0.25" sequentially on each test fold (each input stops
as soon as that is decided, a fraction of the draws), ``acr_scorer``
certifies the fold in full.

    python examples/grid_search_sigma.py
"""

import os

from sklearn.model_selection import GridSearchCV

from smoothlearn import SmoothedClassifier
from smoothlearn.datasets import load_dataset
from smoothlearn.metrics import acr_scorer, certified_accuracy_scorer

FAST = os.environ.get("SMOOTHLEARN_EXAMPLES_FAST") == "1"
EPOCHS, CV = (3, 2) if FAST else (20, 3)

data = load_dataset("digits")
X, y = data.X_train, data.y_train  # model selection on the training split only
if FAST:
    X, y = X[:300], y[:300]

search = GridSearchCV(
    SmoothedClassifier(
        n=300 if FAST else 2_000, n0=50, max_epochs=EPOCHS, random_state=0
    ),
    {"sigma": [0.12, 0.25, 0.5]},
    scoring={"ca@0.25": certified_accuracy_scorer(radius=0.25), "acr": acr_scorer()},
    refit="ca@0.25",
    cv=CV,
)
search.fit(X, y)
print("best sigma:", search.best_params_["sigma"])
for sigma, ca, acr in zip(
    search.cv_results_["param_sigma"],
    search.cv_results_["mean_test_ca@0.25"],
    search.cv_results_["mean_test_acr"],
):
    print(f"sigma={sigma}: certified accuracy at 0.25 = {ca:.3f}, ACR = {acr:.3f}")
