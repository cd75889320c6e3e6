"""Renamed parameters of estimator-like objects, still accepted under the old name.

scikit-learn's way: the new name takes the default, the old one stays in
``__init__`` with the marker ``'deprecated'`` (stored untouched, so
``get_params``, ``clone`` and grid searches keep working), and setting it
warns once per validation and stands for the new one.
"""

import warnings

from sklearn.utils._param_validation import Hidden, StrOptions

__all__ = ["DEPRECATED", "RenamedParamsMixin", "deprecated_option"]

DEPRECATED = "deprecated"

#: The release that drops the old names.
REMOVED_IN = "0.3"


def deprecated_option():
    """The constraint that admits the ``'deprecated'`` marker, hidden from errors."""
    return Hidden(StrOptions({DEPRECATED}))


class RenamedParamsMixin:
    """Old parameter names that still work, with a FutureWarning.

    Subclasses list ``_renamed_params = {old: new}`` and read every renamed
    parameter through :meth:`_param`.
    """

    _renamed_params: dict = {}

    def _validate_params(self):
        super()._validate_params()
        for old, new in self._renamed_params.items():
            if getattr(self, old) != DEPRECATED:
                warnings.warn(
                    f"{type(self).__name__}: parameter {old!r} is renamed {new!r} "
                    f"(the old name will be removed in {REMOVED_IN}); "
                    f"use {new}={getattr(self, old)!r}.",
                    FutureWarning,
                    stacklevel=3,
                )

    def _param(self, name):
        """The value of parameter ``name``, given under its old name or its own."""
        for old, new in self._renamed_params.items():
            if new == name and getattr(self, old) != DEPRECATED:
                return getattr(self, old)
        return getattr(self, name)
