"""Quickstart: train a smoothed classifier on digits and certify it.

python examples/quickstart.py
"""

from _settings import EPOCHS, N_TEST, N
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from smoothlearn import SmoothedClassifier
from smoothlearn.metrics import average_certified_radius, certified_accuracy

X, y = load_digits(return_X_y=True)
X = X / 16.0  # pixels in [0, 1]
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, random_state=0)

clf = SmoothedClassifier(sigma=0.25, n=N, max_epochs=EPOCHS, random_state=0)
clf.fit(X_train, y_train)

cert = clf.certify(X_test[:N_TEST])
print(cert)
print("first labels:", cert.label[:10], "radii:", cert.radius[:5].round(3))
for radius in (0.0, 0.25, 0.5, 0.75):
    acc = certified_accuracy(y_test[:N_TEST], cert, radius)
    print(f"certified accuracy at l2 radius {radius}: {acc:.3f}")
print(f"ACR: {average_certified_radius(y_test[:N_TEST], cert):.3f}")
print("smoothed predictions (-1 = abstain):", clf.predict(X_test[:10]))
