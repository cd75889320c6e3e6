"""UCAN's pattern-fixed anisotropic noise (ucan.md section 4.1)."""

from numbers import Real

import numpy as np

from ..scale import Scale
from ..utils._deprecation import DEPRECATED, deprecated_option
from ..utils._sklearn_compat import Interval, StrOptions
from ._base import BaseStrategy

__all__ = ["UCANPattern", "spatial_pattern"]


def spatial_pattern(height, width, *, border_weight=1.0, iota=1.0, p=2):
    """UCAN's multipliers ``border_weight ||(a, b)||_p^2 + iota``, geometric mean 1.

    ``border_weight`` is the paper's kappa (renamed: ANCER's kappa weighs
    another term).

    Pixel coordinates ``(a, b)`` are centred on the image centre and scaled so
    that the image edge sits at distance 1 (the middle of each border row or
    column is at ``||.||_p = 1``). The pattern is divided by its geometric
    mean, so ``sigma`` keeps its meaning: the certified volume (proxy radius)
    of a pattern and of isotropic noise of the same ``sigma`` compare directly.

    Parameters
    ----------
    height, width : int
    border_weight : float, default=1.0
        Growth of the multipliers with the squared distance from the centre.
    iota : float, default=1.0
        The centre's value before normalisation (> 0).
    p : {1, 2, inf}, default=2

    Returns
    -------
    ndarray of shape (height, width)

    Examples
    --------
    >>> m = spatial_pattern(5, 5)
    >>> round(float(np.exp(np.log(m).mean())), 12), round(float(m[0, 0] / m[2, 2]), 12)
    (1.0, 3.0)
    """
    half_h, half_w = max((height - 1) / 2, 0.5), max((width - 1) / 2, 0.5)
    b = (np.arange(height) - (height - 1) / 2) / half_h
    a = (np.arange(width) - (width - 1) / 2) / half_w
    bb, aa = np.meshgrid(b, a, indexing="ij")
    distance = np.linalg.norm(np.stack([aa, bb]), ord=p, axis=0)
    pattern = border_weight * distance**2 + iota
    return pattern / np.exp(np.log(pattern).mean())


class UCANPattern(BaseStrategy):
    """Pattern-fixed anisotropic noise: larger noise towards the image border.

    The scale of every input is ``sigma`` times UCAN's spatial pattern
    ``border_weight ||(a, b)||_p^2 + iota`` (normalised to geometric mean 1, repeated
    over channels); training and certification both use it. The same scale
    for every input, so not data-dependent (no memory needed) and the first
    layer's response to the noise is reused. Needs image inputs (n, C, H, W).

    The defaults make the pattern materially anisotropic: with
    ``border_weight = iota = 1`` and ``p = 2`` a corner gets 3 times the
    centre's noise (``p = inf``: 2 times; ``p = 1``: 5 times). Smaller
    ``border_weight / iota`` tends to isotropic noise.

    Parameters
    ----------
    border_weight : float, default=1.0
        The paper's kappa: growth of the noise towards the border.
    iota : float, default=1.0
        The pattern's value at the centre before normalisation.
    p : {1, 2, 'inf'} or float, default=2
    kappa : float
        Deprecated name of ``border_weight`` (ANCER's ``kappa`` means
        another thing); removed in 0.3.

    References
    ----------
    Universally Amplifying Randomized Smoothing for Certified Robustness with
    Anisotropic Noise (UCAN), section 4.1.
    """

    name = "ucan_pattern"
    data_dependent = False
    shared_scale = True

    _parameter_constraints = {
        "border_weight": [Interval(Real, 0, None, closed="left")],
        "iota": [Interval(Real, 0, None, closed="neither")],
        "p": [StrOptions({"inf"}), Interval(Real, 1, None, closed="left")],
        "kappa": [deprecated_option(), Interval(Real, 0, None, closed="left")],
    }
    _renamed_params = {"kappa": "border_weight"}

    def __init__(self, border_weight=1.0, iota=1.0, p=2, kappa=DEPRECATED):
        self.border_weight = border_weight
        self.iota = iota
        self.p = p
        self.kappa = kappa

    def check_input_shape(self, input_shape):
        if len(input_shape) != 3:
            raise ValueError(
                "strategy 'ucan_pattern' needs image inputs shaped (n_samples, C, H, "
                f"W); got inputs of shape {input_shape}. Reshape X, e.g. "
                "X.reshape(-1, 1, 8, 8) for digits."
            )

    def multipliers(self, input_shape):
        """The pattern over one input, shape ``input_shape`` (C, H, W)."""
        channels, height, width = input_shape
        p = np.inf if self.p == "inf" or self.p == np.inf else self.p
        pattern = spatial_pattern(
            height,
            width,
            border_weight=self._param("border_weight"),
            iota=self.iota,
            p=p,
        )
        return np.broadcast_to(pattern, (channels, height, width))

    def training_scale(self, sigma, input_shape):
        self.check_input_shape(input_shape)
        return float(sigma) * np.array(self.multipliers(input_shape))

    def scales(self, network, X, *, sigma, family, bank, p_max=None):
        row = float(sigma) * self.multipliers(network.input_shape).reshape(-1)
        return Scale(np.tile(row, (len(X), 1)))
