"""Fast strategies and classifiers, one factory shared by the test files."""

import io

import joblib
import numpy as np

from smoothlearn import SmoothedClassifier
from smoothlearn.strategies import STRATEGIES, IsotropicDD, StartsFromIsotropic

#: Few optimisation steps and draws: tests check properties, not the optimum.
FAST_ISOTROPIC = {"n_iter": 30, "n_draws": 64}
FAST_OPTIMISER = {"n_iter": 20, "n_draws": 64}

#: The strategies that take flat inputs (ucan_pattern needs images).
FLAT_INPUT_STRATEGIES = (
    "cohen",
    "isotropic_dd",
    "ancer",
    "rancer",
    "rddrs",
    "ucan_universal",
    "ucan_input",
)


def fast_strategy(name, **params):
    """Strategy ``name`` with few optimisation steps; ``params`` override."""
    cls = STRATEGIES[name]
    defaults = {}
    if cls is IsotropicDD:
        defaults = FAST_ISOTROPIC
    elif issubclass(cls, StartsFromIsotropic):
        defaults = {**FAST_OPTIMISER, "isotropic": IsotropicDD(**FAST_ISOTROPIC)}
    return cls(**{**defaults, **params})


def fast_classifier(strategy="cohen", *, module=None, **params):
    """A SmoothedClassifier that fits and certifies small data in a second."""
    settings = {
        "sigma": 0.1,
        "n0": 20,
        "n": 400,
        "batch_size": 4000,
        "max_epochs": 40,
        "lr": 0.01,
        "random_state": 0,
    }
    return SmoothedClassifier(module, strategy=strategy, **{**settings, **params})


def fresh_copy(clf, **params):
    """A pickled-and-loaded copy of ``clf`` (its memory as it was), ``params`` set.

    Each run from a copy of a fitted classifier with no memory yet starts
    from the same state.
    """
    buf = io.BytesIO()
    joblib.dump(clf, buf)
    buf.seek(0)
    return joblib.load(buf).set_params(**params)


def linear_classifier(w, b, noise, strategy, memory="auto"):
    """A SmoothedClassifier fitted (no epochs) around ``linear_module(w, b)``.

    sigma 0.3 and n = 20,000 in one batch, ``random_state=0``: smoothed
    probabilities are closed-form, so tests compare certificates with them.
    """
    from .conftest import linear_module

    X = np.zeros((2, len(w)), dtype=np.float32)
    return SmoothedClassifier(
        linear_module(w, b),
        strategy=strategy,
        noise=noise,
        sigma=0.3,
        max_epochs=0,
        n=20_000,
        batch_size=20_000,
        random_state=0,
        memory=memory,
    ).fit(X, [0, 1])
