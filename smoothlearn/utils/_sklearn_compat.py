"""scikit-learn's private helpers, imported in one place.

A rename in a future scikit-learn release then touches this file only.
"""

from sklearn.base import _fit_context
from sklearn.utils._param_validation import (
    HasMethods,
    Interval,
    StrOptions,
    validate_params,
)
from sklearn.utils.validation import validate_data

__all__ = [
    "HasMethods",
    "Interval",
    "StrOptions",
    "_fit_context",
    "validate_data",
    "validate_params",
]
