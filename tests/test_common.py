"""scikit-learn's estimator checks, on every strategy that takes flat inputs."""

import torch
from sklearn.utils.estimator_checks import parametrize_with_checks
from torch import nn

from smoothlearn.strategies import STRATEGIES, get_strategy

from ._factories import FLAT_INPUT_STRATEGIES, fast_classifier, fast_strategy

ABSTAINS = (
    "predict may abstain (returning abstain_label) where the top two noisy vote "
    "counts do not differ significantly; the argmax of predict_proba (the vote "
    "shares) does not abstain, so the two differ on such rows by design"
)
REMEMBERS = (
    "predict of a data-dependent strategy is the memory-based decision (ANCER "
    "section 6): it remembers each answer in memories_, so that later answers "
    "stay consistent with it; without that the certificates it stands for would "
    "not be sound"
)

#: What is not run through check_estimator, and why.
NOT_CHECKED = {
    "ucan_pattern": (
        "its noise is a spatial pattern over (C, H, W) images: it refuses the "
        "flat inputs scikit-learn's checks use, with a ValueError saying so "
        "(tests/test_ucan.py::test_flat_inputs_get_a_clear_error)"
    ),
    "fixed": "an alias of cohen, which is checked",
    "MemoryCertifier": (
        "a transformer of Certificates, not of arrays: the checks feed it "
        "numeric X, which it refuses with a TypeError; its scikit-learn API "
        "(fit, partial_fit, transform, get_params, clone, pickling) is tested "
        "in tests/test_memory.py and tests/test_memory_state.py"
    ),
}


def _expected_failures(estimator):
    strategy = get_strategy(estimator.strategy)
    expected = {"check_classifiers_train": ABSTAINS}
    if strategy.data_dependent:
        expected["check_dict_unchanged"] = REMEMBERS
    return expected


@parametrize_with_checks(
    [fast_classifier(strategy=fast_strategy(name)) for name in FLAT_INPUT_STRATEGIES],
    expected_failed_checks=_expected_failures,
)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


def test_every_strategy_is_checked_or_excused():
    assert set(STRATEGIES) == set(FLAT_INPUT_STRATEGIES) | (
        set(NOT_CHECKED) - {"MemoryCertifier"}
    )


class ThreeClassNetwork(nn.Module):
    """A "pretrained" network scoring three classes from any number of features,
    so that scikit-learn's checks, whose data vary in width, can give it to a
    denoised classifier as its frozen module."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.tensor([1.0, -1.0, 0.5]))

    def forward(self, x):
        h = x.reshape(len(x), -1)
        return torch.stack([h.mean(1), h[:, 0], -h[:, -1]], 1) * self.weight


FIXED_CLASSES = (
    "a pretrained network scores a fixed set of classes (three here): on this "
    "check's data of two (or four) classes fit raises the ValueError that says "
    "the module must output one score per class"
)

#: The checks a denoised classifier around a three-class network cannot pass.
DENOISED_EXPECTED = dict.fromkeys(
    (
        "check_classifier_data_not_an_array",
        "check_classifiers_classes",
        "check_classifiers_train",
        "check_dtype_object",
        "check_estimators_dtypes",
        "check_estimators_nan_inf",
        "check_estimators_pickle",
        "check_fit2d_1feature",
        "check_fit_check_is_fitted",
        "check_fit_idempotent",
        "check_n_features_in",
        "check_pipeline_consistency",
    ),
    FIXED_CLASSES,
) | {
    "check_estimators_overwrite_params": (
        "it compares joblib.hash of each parameter before and after fit, and the "
        "hash of a torch module differs from its deepcopy's (the pickled bytes of "
        "its Parameters), so the module parameter always reads as changed; "
        "tests/test_denoised.py asserts the module is bit-identical after fit"
    ),
}


@parametrize_with_checks(
    [
        fast_classifier(
            module=ThreeClassNetwork(),
            denoiser="auto",
            training=training,
            max_epochs=3,
        )
        for training in ("stability", "mse")
    ],
    expected_failed_checks=lambda estimator: DENOISED_EXPECTED,
)
def test_sklearn_compatible_with_a_denoiser(estimator, check):
    check(estimator)
