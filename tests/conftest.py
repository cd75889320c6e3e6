import os
import warnings

import numpy as np
import pytest
import torch
from hypothesis import settings
from sklearn.datasets import load_digits

# torch imports its forward-mode decompositions lazily, on the first
# torch.func.hessian, warning (torch.jit.script is deprecated) inside whichever
# test comes first; pytest.warns re-emits that outside the filter for torch's
# own warnings, so a test run alone failed. Import them once, here.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import torch._decomp.decompositions_for_jvp  # noqa: F401

# The suite is deterministic: hypothesis draws the same examples every run.
# HYPOTHESIS_PROFILE=explore draws fresh ones each run, to search further.
settings.register_profile("deterministic", derandomize=True, database=None)
settings.register_profile("explore", database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))


@pytest.fixture(autouse=True)
def seeds_fixed():
    """Every test starts from the same global seeds (skorch's conftest habit)."""
    np.random.seed(0)
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def digits():
    X, y = load_digits(return_X_y=True)
    return (X / 16.0).astype(np.float32), y


def linear_module(w, b):
    """A torch module computing f(x) = 1[w.x + b > 0] as two logits (0, w.x + b)."""
    w = np.asarray(w, dtype=np.float32)
    layer = torch.nn.Linear(len(w), 2)
    with torch.no_grad():
        layer.weight.zero_()
        layer.weight[1] = torch.as_tensor(w)
        layer.bias.zero_()
        layer.bias[1] = float(b)
    return layer


@pytest.fixture(scope="session")
def fitted_isotropic_dd(digits):
    """A data-dependent classifier on digits, trained once (copy it to certify:
    ``_factories.fresh_copy``, so that each test starts with an empty memory)."""
    from smoothlearn import SmoothedClassifier
    from smoothlearn.strategies import IsotropicDD

    X, y = digits
    return SmoothedClassifier(
        strategy=IsotropicDD(n_iter=10, n_draws=32),
        n=400,
        n0=40,
        module__hidden_units=(32,),
        max_epochs=5,
        random_state=0,
    ).fit(X[:400], y[:400])
