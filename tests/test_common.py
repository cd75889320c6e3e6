"""scikit-learn's estimator checks, on every strategy that takes flat inputs."""

from sklearn.utils.estimator_checks import parametrize_with_checks

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
