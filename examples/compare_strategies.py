"""Compare cohen, isotropic_dd and ancer on one network: table and plot.

Writes certified_accuracy.png next to where it runs.

    python examples/compare_strategies.py
"""

import matplotlib

matplotlib.use("Agg")

from _settings import EPOCHS, ITERATIONS, N_TEST, N  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

from smoothlearn import SmoothedClassifier  # noqa: E402
from smoothlearn.metrics import (  # noqa: E402
    CertifiedAccuracyDisplay,
    certified_accuracy_table,
)
from smoothlearn.strategies import ANCER, IsotropicDD  # noqa: E402

X, y = load_digits(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(
    X / 16.0, y, test_size=0.2, random_state=0
)
X_test, y_test = X_test[:N_TEST], y_test[:N_TEST]

clf = SmoothedClassifier(sigma=0.25, n=N, max_epochs=EPOCHS, random_state=0)
clf.fit(X_train, y_train)

results = {}
for name, strategy in [
    ("cohen", "cohen"),
    ("isotropic_dd", IsotropicDD(n_iter=ITERATIONS)),
    ("ancer", ANCER(n_iter=ITERATIONS, isotropic=IsotropicDD(n_iter=ITERATIONS))),
]:
    # strategies that train nothing reuse the trained network; the
    # data-dependent ones go through the memory (memory="auto")
    results[name] = clf.set_params(strategy=strategy).certify(X_test)

print(certified_accuracy_table(y_test, results, [0.0, 0.25, 0.5, 0.75, 1.0]))
display = CertifiedAccuracyDisplay.from_certificates(y_test, results, proxy=True)
display.figure_.savefig("certified_accuracy.png")
print("saved certified_accuracy.png")
