"""A pipeline: MinMaxScaler then a smoothed classifier on raw digits (0..16).

Certified radii are in the scaled space the classifier sees.

    python examples/pipeline_scaler.py
"""

from _settings import EPOCHS, ITERATIONS, N_TEST, N
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler

from smoothlearn import SmoothedClassifier
from smoothlearn.metrics import certified_accuracy
from smoothlearn.strategies import ANCER, IsotropicDD

X, y = load_digits(return_X_y=True)  # raw pixel values 0..16
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, random_state=0)

pipe = make_pipeline(
    MinMaxScaler(),
    SmoothedClassifier(
        strategy=ANCER(n_iter=ITERATIONS, isotropic=IsotropicDD(n_iter=ITERATIONS)),
        sigma=0.25,
        n=N,
        max_epochs=EPOCHS,
        random_state=0,
    ),
)
pipe.fit(X_train, y_train)
print(
    "smoothed accuracy (abstentions wrong):",
    pipe.score(X_test[:N_TEST], y_test[:N_TEST]),
)

scaler, clf = pipe[0], pipe[-1]
cert = clf.certify(scaler.transform(X_test[:N_TEST]))
print(cert)
print("certified accuracy at 0.25:", certified_accuracy(y_test[:N_TEST], cert, 0.25))
print(
    "memory:", clf.memory_.n_reduced_, "reduced,", clf.memory_.n_abstained_, "abstained"
)
