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

Draws that certify
------------------
A certificate's constant is exact only for noise of the family's law, tails
included, so the certification banks draw with :meth:`NoiseFamily.bank_sample`,
not with the float32 samplers training uses (``torch.randn`` never exceeds
``|z| = 5.77``: it maps 24-bit uniforms). ``bank_sample`` maps uniforms of
enough bits that every tail is exact far past 8 standard deviations, in
float32 where float32 is exact enough and float64 where it is not:

* gaussian: Box-Muller, ``r = sqrt(-2 log u1)``, ``(r cos 2 pi u2, r sin 2 pi
  u2)``, with ``u1`` of 31 bits, ``log u1`` in float64 (exact at the smallest
  radii) and, below ``2^-12`` (radii above 4.08), ``u1`` drawn again with 53
  more bits (:data:`DEEP_TAIL`); ``u2`` of 32 bits: tails exact out to ``|z| =
  sqrt(130 log 2) = 9.49`` (the radius's mass beyond: 3e-20);
* laplace: ``-sign log(2 v) / sqrt(2)`` with ``2 v`` of 31 bits in float32
  and, below ``2^-12`` (magnitudes above 5.9), of 53 more bits in float64:
  exact out to ``65 log(2) / sqrt(2) = 31.9`` (mass beyond: 1e-20);
* uniform: 32-bit uniforms, bounded, with no tail to lose.

Each value is within ``2e-7 max(1, |z|)`` of the float64 transform of the same
random bits (a gaussian value within ``4e-7 max(1, r)``, ``r`` its pair's
radius: its float32 angle is rounded by about 1e-7), and
``tests/test_noise.py`` checks every family against that reference; at about
the cost of float32 ``torch.randn``
(``benchmarks/bench_noise_bank.py``). The random bits come from the bank
(:class:`~smoothlearn.banks.NoiseBank`), on the device that certifies.
"""

import math
import warnings

import numpy as np
import torch
from scipy.stats import norm as _std_normal

#: A bank's exponential draws ``-log u`` whose 31-bit uniform ``u`` lies below
#: this (gaussian radii above 4.08, laplace magnitudes above 5.9) are drawn
#: again with 53 more bits, in float64 (:func:`_exponential_`).
DEEP_TAIL = 2.0**-12

__all__ = [
    "DEEP_TAIL",
    "NoiseFamily",
    "Gaussian",
    "Uniform",
    "Laplace",
    "gaussian_quantile",
    "get_noise",
    "NOISES",
]


#: Relative margin that puts a probability bound or a quantile computed by
#: scipy (``beta.ppf``, ``ndtri``, ``binom.sf``: no proved error bound) on its
#: sound side. Against 50-digit references they were within 2 ulps, on
#: either side (``tests/test_bound_rounding.py``); 2^-40 is about 4,000 ulps,
#: and moves a radius by 1e-11 of itself (at most 5e-11 seen).
QUANTILE_MARGIN = 2.0**-40


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

    def bank_sample(self, n_values, bits):
        """``n_values`` (even) standard-form float32 draws for the certification
        banks, exact in the tails (module docstring).

        Parameters
        ----------
        n_values : int
        bits : smoothlearn.banks.ChunkBits
            The random bits of one chunk, on the device that certifies.

        Returns
        -------
        torch.Tensor of shape (n_values,), float32, on the bits' device
        """
        raise NotImplementedError  # abstract

    #: Whether :meth:`gap` is exact in float64 for ``p >= 1/2`` (uniform's
    #: ``2 p - 1``); otherwise :meth:`certified_gap` takes a margin off it.
    gap_is_exact = False

    def gap(self, p):
        """The certified gap for a lower bound ``p`` of the top-class probability.

        Float64 numpy in, float64 numpy out; ``p <= 1/2`` gives a gap ``<= 0``.
        """
        raise NotImplementedError  # abstract

    def torch_gap(self, p):
        """``gap`` on torch tensors, differentiable."""
        raise NotImplementedError  # abstract

    def certified_gap(self, p_lower):
        """The gap CERTIFY states for a bound ``p_lower``: :meth:`gap` taken
        down by :data:`QUANTILE_MARGIN` where it is not exact in float64 (a
        smaller gap is certified too), and 0 where ``p_lower < 1/2`` (an
        abstention)."""
        p_lower = np.asarray(p_lower, dtype=np.float64)
        abstained = p_lower < 0.5
        gap = self.gap(np.where(abstained, 0.5, p_lower))
        if not self.gap_is_exact:
            gap = gap - np.abs(gap) * QUANTILE_MARGIN
        return np.where(abstained, 0.0, gap)

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

        In float64: ``Phi^-1(u)`` of 53-bit uniforms, exact out to ``|z| =
        Phi^-1(1 - 2^-53)`` (8.2). In float32 (training) ``torch.randn``, whose
        CPU sampler takes 24-bit uniforms and never exceeds ``|z| = 5.77``
        (missing mass 8e-9 per coordinate): fine for training, not for a
        certificate, whose banks draw with :meth:`bank_sample`.
        """
        if dtype != torch.float64:
            return torch.randn(shape, generator=generator, device=device, dtype=dtype)
        u = torch.rand(shape, generator=generator, device=device, dtype=dtype)
        return gaussian_quantile(u)

    def bank_sample(self, n_values, bits):
        """Box-Muller: per pair of values, two 32-bit words, a radius word and an
        angle word. The ``n_values // 2`` 64-bit words drawn for the pairs
        are read as twice as many 32-bit words: the first half are the radius
        words, the second half the angle words, pair ``i`` taking word ``i``
        of each half.

        With ``t`` a signed 32-bit word, ``u1 = |t + 1/2| 2^-31`` is uniform on
        ``(0, 1)``; ``r^2 = -2 log u1`` is taken in float64 (exact at the
        smallest radii), with ``u1 <= 2^-12`` refined by 53 more bits
        (:func:`_exponential_`: exact tails). The angle ``2 pi a 2^-32`` of a
        signed 32-bit ``a`` spans ``[-pi, pi)``. The cosines fill the first
        half, the sines the second: the two values of a pair are independent
        standard normals.
        """
        half = n_values // 2
        words = bits.words(half).view(torch.int32)
        u1 = bits.scratch("gaussian u1", half, torch.float64).copy_(words[:half])
        u1.add_(0.5).abs_().mul_(2.0**-31)
        r = bits.scratch("gaussian r", half, torch.float32)
        r.copy_(_exponential_(u1, bits, 2.0)).sqrt_()
        angle = bits.scratch("gaussian angle", half, torch.float32)
        angle.copy_(words[half:]).mul_(2.0 * math.pi * 2.0**-32)
        z = torch.empty(2 * half, dtype=torch.float32, device=r.device)
        torch.cos(angle, out=z[:half]).mul_(r)
        torch.mul(r, angle.sin_(), out=z[half:])
        return z

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
    gap_is_exact = True  # 2p exact, minus 1 exact for p >= 1/2 (Sterbenz)

    def sample(self, shape, *, generator=None, device="cpu", dtype=torch.float32):
        u = torch.rand(shape, generator=generator, device=device, dtype=dtype)
        return (2.0 * u - 1.0) * math.sqrt(3.0)

    def bank_sample(self, n_values, bits):
        """``(t + 1/2) 2^-31 sqrt(3)`` of signed 32-bit words ``t``."""
        t = bits.words((n_values + 1) // 2).view(torch.int32)[:n_values]
        c = 2.0**-31 * math.sqrt(3.0)
        return t.to(torch.float32).mul_(c).add_(0.5 * c)

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

        In float64: the inverse CDF of 53-bit uniforms, ``-sign(v) log(1 -
        2|v|) / sqrt(2)`` with ``v = u - 1/2``, exact out to ``|z| = 53 log(2)
        / sqrt(2)`` (26). In float32 (training): the difference of two unit
        exponentials. Certificates draw with :meth:`bank_sample`.
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

    def bank_sample(self, n_values, bits):
        """``-sign log(2 v) / sqrt(2)`` from one signed 32-bit word ``t``.

        ``2 v = |t + 1/2| 2^-31`` is uniform on ``(0, 1)`` and the sign of ``t +
        1/2`` a fair coin independent of it. Where ``2 v <= 2^-12`` it is
        drawn again as ``2^-12 U`` (``U`` of 53 bits) and the magnitude taken
        in float64.
        """
        t = bits.words((n_values + 1) // 2).view(torch.int32)[:n_values]
        signed = t.to(torch.float32).add_(0.5)
        two_v = signed.abs().mul_(2.0**-31)
        return _exponential_(two_v, bits, math.sqrt(0.5)).copysign_(signed)

    def gap(self, p):
        p = np.asarray(p, dtype=np.float64)
        with np.errstate(divide="ignore"):
            return -np.log(2.0 * (1.0 - p))

    def probability_for_gap(self, gap):
        return 1.0 - 0.5 * np.exp(-np.asarray(gap, dtype=np.float64))

    def torch_gap(self, p):
        return -torch.log(2.0 * (1.0 - p))


def _exponential_(u, bits, scale):
    """``scale * (-log u)`` in place: exponential draws with exact tails.

    ``u`` holds uniforms on ``(0, 1)`` of 31 bits (a bank's signed 32-bit
    words, ``|t + 1/2| 2^-31``). Those at or below :data:`DEEP_TAIL` (exactly
    ``2^-12`` of the grid) are drawn again as ``DEEP_TAIL U``, ``U`` of 53 bits
    from the chunk's bits, and their logarithm taken in float64: uniform on
    ``(0, 2^-12]`` given that they lie there, so the tail is exact down to
    ``u = 2^-65``. On the CPU only the tail's values draw a ``U``; on another
    device every value does and the tail's are kept (a data-dependent count
    would make the host wait for the device once per chunk).
    """
    deep_log = math.log(1.0 / DEEP_TAIL)
    if bits.device.type == "cpu":
        # numpy finds the few tail positions in a third of torch.nonzero's time
        tail = torch.from_numpy(np.flatnonzero(u.numpy() <= DEEP_TAIL))
        u.log_().mul_(-scale)
        if len(tail):
            deep = (deep_log - torch.log(bits.uniform53(len(tail)))) * scale
            u[tail] = deep.to(u.dtype)
        return u
    low = u <= DEEP_TAIL
    deep = (deep_log - torch.log(bits.uniform53(len(u)))) * scale
    return torch.where(low, deep.to(u.dtype), u.log_().mul_(-scale))


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


def __getattr__(name):
    # smoothlearn 0.1 named the tail bound after the one family that had it
    if name == "LAPLACE_TAIL":
        warnings.warn(
            "smoothlearn.noise.LAPLACE_TAIL is now DEEP_TAIL (gaussian banks "
            "refine the same tail); the old name will be removed in 0.3.",
            FutureWarning,
            stacklevel=2,
        )
        return DEEP_TAIL
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
