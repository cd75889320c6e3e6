"""Smoothing strategies: how the scale of the smoothing noise is chosen per input.

A string names a strategy with its defaults; an instance carries its own
parameters (reachable as ``strategy__<param>`` from the estimator).
"""

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
