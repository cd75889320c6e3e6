"""Fixed isotropic smoothing (Cohen et al., 2019)."""

import numpy as np

from ..scale import Scale
from ._base import BaseStrategy

__all__ = ["Cohen"]


class Cohen(BaseStrategy):
    """Isotropic smoothing with one fixed ``sigma`` for every input: ``S = sigma I``.

    Certifies an l2 ball of radius ``sigma * Phi^-1(p)`` (gaussian) or an l1
    ball (uniform, laplace; see :mod:`smoothlearn.noise`). Not data-dependent,
    so no memory is needed.

    References
    ----------
    J. Cohen, E. Rosenfeld, Z. Kolter. Certified Adversarial Robustness via
    Randomized Smoothing. ICML 2019.

    Examples
    --------
    >>> Cohen().data_dependent
    False
    """

    name = "cohen"
    data_dependent = False
    shared_scale = True

    def scales(self, network, X, *, sigma, family, bank, p_max=None):
        return Scale(np.full(len(X), float(sigma)))
