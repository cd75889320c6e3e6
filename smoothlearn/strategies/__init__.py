"""Smoothing strategies: how the scale of the smoothing noise is chosen per input.

A string names a strategy with its defaults; an instance carries its own
parameters (reachable as ``strategy__<param>`` from the estimator).
"""

import copy

from sklearn.base import clone

from ._base import BaseStrategy, describe_smoothing
from ._from_isotropic import StartsFromIsotropic
from .ancer import ANCER
from .cohen import Cohen
from .isotropic_dd import IsotropicDD
from .rancer import RANCER
from .rddrs import RDDRS
from .ucan_generators import UCANInput, UCANUniversal
from .ucan_pattern import UCANPattern

__all__ = [
    "ANCER",
    "BaseStrategy",
    "Cohen",
    "IsotropicDD",
    "RANCER",
    "RDDRS",
    "STRATEGIES",
    "StartsFromIsotropic",
    "UCANInput",
    "UCANPattern",
    "UCANUniversal",
    "certification_strategy",
    "describe_smoothing",
    "get_strategy",
]

#: Name -> strategy class, from each class's ``name``; ``fixed`` is an alias
#: of ``cohen``.
STRATEGIES = {
    cls.name: cls
    for cls in (
        Cohen,
        IsotropicDD,
        ANCER,
        RANCER,
        RDDRS,
        UCANPattern,
        UCANUniversal,
        UCANInput,
    )
}
STRATEGIES["fixed"] = Cohen


def get_strategy(strategy):
    """A fresh strategy object for a name, or a clone of a strategy object.

    Parameters
    ----------
    strategy : str or BaseStrategy

    Returns
    -------
    BaseStrategy

    Examples
    --------
    >>> get_strategy("fixed")
    Cohen()
    """
    if isinstance(strategy, str):
        try:
            return STRATEGIES[strategy]()
        except KeyError:
            raise ValueError(
                f"strategy must be one of {sorted(STRATEGIES)} or a BaseStrategy "
                f"instance; got {strategy!r}."
            ) from None
    if isinstance(strategy, BaseStrategy):
        return clone(strategy)
    raise TypeError(
        "strategy must be a string or a BaseStrategy instance; got "
        f"{type(strategy).__name__}."
    )


def certification_strategy(strategy, fitted, family, input_shape):
    """The strategy that certifies: ``strategy`` (the estimator's parameter) on
    the network fitted with ``fitted`` (the estimator's ``strategy_``).

    A strategy that trains nothing is resolved afresh from ``strategy``, so
    ``set_params(strategy=...)`` after ``fit`` certifies the trained network
    with the new strategy. One trained in ``fit`` (UCAN's generators) is
    ``fitted``, or a copy of it with new values of the parameters only
    certification reads (``certification_params``); any other change needs a
    new ``fit``.

    Parameters
    ----------
    strategy : str or BaseStrategy
    fitted : BaseStrategy
    family : NoiseFamily
    input_shape : tuple of int

    Returns
    -------
    BaseStrategy
        Checked against ``family`` and ``input_shape``.

    Raises
    ------
    ValueError
        A strategy trained in ``fit`` whose trained parameters changed.
    """
    strategy = get_strategy(strategy)
    if not strategy.trained_in_fit:
        strategy.check(family, input_shape)
        return strategy
    trained = strategy.describe(skip=strategy.certification_params)
    if type(strategy) is not type(fitted) or trained != fitted.describe(
        skip=fitted.certification_params
    ):
        raise ValueError(
            f"strategy {strategy!r} is trained in fit; refit the estimator "
            f"to use it (fitted with {fitted!r})."
        )
    if strategy.describe() == fitted.describe():
        return fitted
    # only parameters that certification reads differ: the trained generator
    # with them (a copy: the fitted strategy stays as fitted)
    certifying = copy.copy(fitted).set_params(
        **{name: getattr(strategy, name) for name in fitted.certification_params}
    )
    certifying.check(family, input_shape)
    return certifying
