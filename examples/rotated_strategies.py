"""
RANCER and RDDRS: smoothing along the loss's curvature, against ANCER
=====================================================================


RANCER rotates ANCER's diagonal scale into the eigenbasis of the input Hessian
of the loss; RDDRS optimises a full covariance by Riemannian ascent. Both are
dense for digits' 64 features; from 256 features on their default
``rank="auto"`` keeps K - 1 directions (here 9), and ``rank=k`` asks for k.
Rank-k RANCER and RDDRS build on ANCER: ANCER's diagonal answer, stretched
along the k curvature directions (their regions are ``rotated`` with a
``scale_frame``).

    python examples/rotated_strategies.py
"""

import os

from smoothlearn import SmoothedClassifier
from smoothlearn.datasets import load_dataset
from smoothlearn.metrics import certified_accuracy_table
from smoothlearn.strategies import ANCER, RANCER, RDDRS, IsotropicDD

FAST = os.environ.get("SMOOTHLEARN_EXAMPLES_FAST") == "1"
steps = 5 if FAST else 100

data = load_dataset("digits")
X_test, y_test = data.X_test[: 20 if FAST else 200], data.y_test[: 20 if FAST else 200]

clf = SmoothedClassifier(
    sigma=0.25,
    n=1_000 if FAST else 100_000,
    max_epochs=3 if FAST else 20,
    random_state=0,
).fit(data.X_train, data.y_train)

start = IsotropicDD(n_iter=steps)  # the isotropic solution all three start from
results = {}
for name, strategy in [
    ("ancer", ANCER(n_iter=steps, isotropic=start)),
    ("rancer", RANCER(n_iter=steps, isotropic=start)),
    ("rancer rank 3", RANCER(n_iter=steps, isotropic=start, rank=3)),
    ("rddrs", RDDRS(n_iter=steps, isotropic=start)),
]:
    results[name] = clf.set_params(strategy=strategy).certify(X_test)
    print(f"{name}: {results[name].kind} regions")

# ACR~ (the average proxy radius, the n-th root of the region's volume) is
# what these methods enlarge; R is the inscribed l2 radius
print(certified_accuracy_table(y_test, results, [0.0, 0.25, 0.5], proxy=True))
i = 0
print("row 0's scale matrix (rancer), first 3x3:")
print(results["rancer"].scale_matrix(i)[:3, :3].round(3))
