"""Noise families and the certificates they give.

A smoothing distribution is ``x + S z``: ``z`` is drawn from the family's
standard form (zero mean, unit variance per coordinate, so ``sigma`` always
means a per-coordinate standard deviation and sigmas compare across families)
and ``S`` is the scale. With ``p`` the lower confidence bound of the top-class
probability, every family certifies the region

    { delta : ||S^-1 delta|| <= c * gap(p) }

in the family's norm. This module is the one place that holds ``c`` and
``gap`` (DESIGN.md section 3):

========  ==========================  =========  ==================
family    z                           c          gap(p)
========  ==========================  =========  ==================
gaussian  N(0, 1)                     1          Phi^-1(p)
uniform   U[-sqrt(3), sqrt(3)]        sqrt(3)    2p - 1
laplace   Laplace(0, 1/sqrt(2))       1/sqrt(2)  -log(2(1 - p))
========  ==========================  =========  ==================

With half-width ``lambda = sqrt(3) s`` the uniform row is ANCER's Corollary 2
(``||Lambda^-1 delta||_1 <= 2p - 1``) and RS4A's ``R = 2 lambda (p - 1/2)``;
with Laplace scale ``b = s / sqrt(2)`` the laplace row is Teng et al. (2020),
``R = -b log(2(1 - p))``; the gaussian row is Cohen et al. (2019),
``R = sigma Phi^-1(p)``.
"""

import math

import numpy as np
import torch
from scipy.stats import norm as _std_normal

__all__ = [
    "NoiseFamily",
    "Gaussian",
    "Uniform",
    "Laplace",
    "gaussian_quantile",
    "get_noise",
    "NOISES",
]


class NoiseFamily:
    """A noise family: its standard sampler and its certificate constants.

    Subclasses set ``name``, ``norm`` (``"l2"`` or ``"l1"``) and ``c``, and
    implement :meth:`sample`, :meth:`gap` and :meth:`torch_gap`.
    """

    name: str
    norm: str
    c: float
    #: Whether a rotated (non-diagonal) scale is covered by the theory.
    supports_rotation: bool = False

    def sample(self, shape, *, generator=None, device="cpu", dtype=torch.float32):
        """Draw standard-form noise (zero mean, unit variance per coordinate)."""
        raise NotImplementedError  # abstract

    def gap(self, p):
        """The certified gap for a lower bound ``p`` of the top-class probability.

        Float64 numpy in, float64 numpy out; ``p <= 1/2`` gives a gap ``<= 0``.
        """
        raise NotImplementedError  # abstract

    def torch_gap(self, p):
        """``gap`` on torch tensors, differentiable."""
        raise NotImplementedError  # abstract

    def certified_gap(self, p_lower):
        """The gap CERTIFY states for a bound ``p_lower``: :meth:`gap`, and 0
        where ``p_lower < 1/2`` (an abstention)."""
        p_lower = np.asarray(p_lower, dtype=np.float64)
        abstained = p_lower < 0.5
        return np.where(abstained, 0.0, self.gap(np.where(abstained, 0.5, p_lower)))

    def probability_for_gap(self, gap):
        """The smallest bound ``p`` whose :meth:`gap` reaches ``gap`` (its inverse).

        Float64 numpy in and out; a gap no probability reaches gives a value
        above 1 (uniform) or 1.0 (gaussian, laplace), which no bound reaches.
        """
        raise NotImplementedError  # abstract

    def soft_gap(self, top, second):
        """Differentiable gap of the soft smoothed classifier's top two probabilities.

        ``(gap(top) + gap(1 - second)) / 2``: the gaussian case is ANCER's and
        Alfarra et al.'s ``(Phi^-1(top) - Phi^-1(second)) / 2``, the uniform
        case ANCER's ``top - second``, and every case equals ``gap(top)`` when
        ``second = 1 - top``. Callers clamp the probabilities away from 0 and 1.
        """
        return 0.5 * (self.torch_gap(top) + self.torch_gap(1.0 - second))

    def radius(self, p, min_scale):
        """Inscribed radius ``c * gap(p) * min_scale`` in the family's norm."""
        return self.c * self.gap(p) * min_scale

    def __repr__(self):
        return f"{type(self).__name__}()"


class Gaussian(NoiseFamily):
    """Isotropic standard normal noise; l2 certificates (Cohen et al., 2019)."""

    name = "gaussian"
    norm = "l2"
    c = 1.0
    supports_rotation = True

    def sample(self, shape, *, generator=None, device="cpu", dtype=torch.float32):
        """Standard normal draws.

        In float64 (how the certification banks draw): ``Phi^-1(u)`` of 53-bit
        uniforms, so the tails are exact out to ``|z| = Phi^-1(1 - 2^-53)``
        (8.2; the mass beyond is 2.2e-16 per coordinate). In float32 (training)
        ``torch.randn``, whose CPU sampler takes 24-bit uniforms and never
        exceeds ``|z| = 5.77`` (missing mass 8e-9 per coordinate): fine for
        training, not for a certificate.
        """
        if dtype != torch.float64:
            return torch.randn(shape, generator=generator, device=device, dtype=dtype)
        u = torch.rand(shape, generator=generator, device=device, dtype=dtype)
        return gaussian_quantile(u)

    def gap(self, p):
        return _std_normal.ppf(np.asarray(p, dtype=np.float64))

    def probability_for_gap(self, gap):
        return _std_normal.cdf(np.asarray(gap, dtype=np.float64))

    def torch_gap(self, p):
        return torch.special.ndtri(p)


class Uniform(NoiseFamily):
    """Uniform noise on ``[-sqrt(3), sqrt(3)]`` per coordinate; l1 certificates."""

    name = "uniform"
    norm = "l1"
    c = math.sqrt(3.0)

    def sample(self, shape, *, generator=None, device="cpu", dtype=torch.float32):
        u = torch.rand(shape, generator=generator, device=device, dtype=dtype)
        return (2.0 * u - 1.0) * math.sqrt(3.0)

    def gap(self, p):
        return 2.0 * np.asarray(p, dtype=np.float64) - 1.0

    def probability_for_gap(self, gap):
        return (np.asarray(gap, dtype=np.float64) + 1.0) / 2.0

    def torch_gap(self, p):
        return 2.0 * p - 1.0


class Laplace(NoiseFamily):
    """Laplace noise of scale ``1/sqrt(2)`` per coordinate; l1 certificates."""

    name = "laplace"
    norm = "l1"
    c = 1.0 / math.sqrt(2.0)

    def sample(self, shape, *, generator=None, device="cpu", dtype=torch.float32):
        """Laplace draws of variance 1.

        In float64 (the certification banks): the inverse CDF of 53-bit
        uniforms, ``-sign(v) log(1 - 2|v|) / sqrt(2)`` with ``v = u - 1/2``,
        exact out to ``|z| = 53 log(2) / sqrt(2)`` (26; mass beyond 1.1e-16).
        In float32 (training): the difference of two unit exponentials.
        """
        if dtype == torch.float64:
            v = torch.rand(shape, generator=generator, device=device, dtype=dtype)
            v -= 0.5
            magnitude = torch.log1p(-(2.0 * v.abs()).clamp_max(1.0 - 2.0**-53))
            return magnitude.mul_(-torch.sign(v) / math.sqrt(2.0))
        # The difference of two unit exponentials is Laplace(0, 1) (variance 2).
        e = torch.empty((2, *shape), device=device, dtype=dtype)
        e.exponential_(generator=generator)
        return (e[0] - e[1]) / math.sqrt(2.0)

    def gap(self, p):
        p = np.asarray(p, dtype=np.float64)
        with np.errstate(divide="ignore"):
            return -np.log(2.0 * (1.0 - p))

    def probability_for_gap(self, gap):
        return 1.0 - 0.5 * np.exp(-np.asarray(gap, dtype=np.float64))

    def torch_gap(self, p):
        return -torch.log(2.0 * (1.0 - p))


def gaussian_quantile(u):
    """``Phi^-1(u)`` of float64 uniforms on the 2^-53 grid of ``[0, 1)``, finite.

    ``ndtri`` is accurate in both tails (it mirrors the upper one, where
    ``1 - u`` is exact); ``u = 0`` (probability 2^-53) would give -inf and is
    moved to the grid's next point, so ``|z| <= 8.21`` on both sides.
    """
    return torch.special.ndtri(u.clamp_min(2.0**-53))


NOISES = {cls.name: cls for cls in (Gaussian, Uniform, Laplace)}


def get_noise(noise):
    """Return the :class:`NoiseFamily` for a name or pass an instance through.

    Parameters
    ----------
    noise : {'gaussian', 'uniform', 'laplace'} or NoiseFamily

    Returns
    -------
    NoiseFamily

    Examples
    --------
    >>> get_noise("uniform").norm
    'l1'
    """
    if isinstance(noise, NoiseFamily):
        return noise
    if isinstance(noise, str) and noise in NOISES:
        return NOISES[noise]()
    raise ValueError(f"noise must be one of {sorted(NOISES)}; got {noise!r}.")
