"""Smoothing on the input's grid: noise drawn exactly, added in integers.

Float arithmetic breaks randomized smoothing's proof: ``fl(x + S z)`` with a
float ``z`` is not the continuous law the certificate assumes, and a base
classifier can read the difference (Voracek and Hein, ICLR 2023, "Sound
randomized smoothing in floating-point arithmetic"). When the inputs lie on a
grid ``h Z^d`` (8-bit images: ``h = 1/255``; scikit-learn's digits divided by
16: ``h = 1/16``) this module removes the float arithmetic from the noise:

* an input ``x`` is the integer vector ``j = x / h`` (checked: inputs off the
  grid are refused, or rounded only when asked);
* each noise coordinate is an integer ``k_i`` drawn exactly from the law of
  ``round(s_i z_i / h)``, ``z_i`` of the family's standard form (the
  *rounded* family: for the gaussian, ``P(k) = Phi((k + 1/2) h / s) -
  Phi((k - 1/2) h / s)``), by comparing a uniform 64-bit random integer with
  thresholds ``floor(2^64 F)`` of the law's distribution function ``F``
  computed in mpmath (:class:`RoundedTable`);
* the noisy input ``j + k`` is formed in integers and the network sees the
  fixed function ``fl32(fl32(j + k) * fl32(h))`` of it (:meth:`Grid.inputs`).

Why the certificates carry over unchanged. With ``R(y) = h round(y / h)``
coordinatewise and ``x = h j``, ``R(x + S z) = h (j + round(S z / h))`` for a
diagonal ``S``, so the network's vote is ``g(x + S z)`` with ``g = f o
fl32(h .) o round(. / h)``: one fixed function of the continuous noisy input.
The smoothed classifier the draws estimate is exactly the continuous smoothing
of ``g``, for which Cohen et al.'s (isotropic), Alfarra et al.'s and ANCER's
(diagonal) gaussian certificates and the l1 certificates of the uniform and
laplace families hold as stated, whatever ``g`` is. The region is the same set
in the same units; what it covers is every grid point ``x' = h j'`` in it
(the inputs the classifier accepts on this path).

What the sampler does not reach exactly, it bounds. Each coordinate's sampled
law differs from the rounded law by at most :attr:`RoundedTable.tv` in total
variation (``2^-63`` per threshold, and the tails beyond the table, each below
``2^-70``); a draw of ``d`` coordinates, by at most their sum, which the
engine subtracts from each Clopper-Pearson bound (:func:`sampling_slack`).

Rotated scales (rancer, rddrs) have no product form: ``round(S z / h)`` for a
non-diagonal ``S`` is not a product of one-dimensional laws, and this module
refuses them; so are mean offsets (UCAN's generators).

Per-input scales (isotropic_dd, ancer) take a table per distinct value: their
values are rounded to the nearest ``2^(i / 256)`` (0.14% at most, recorded as
run) so that tables are few and cached (:func:`rounded_table`).
"""

import functools
import math
from numbers import Real

import mpmath
import numpy as np
import torch

__all__ = [
    "GRID_AUTO_STEPS",
    "Grid",
    "RawWords",
    "RoundedTable",
    "RowSampler",
    "TableSet",
    "quantised_scale",
    "resolve_grid",
    "rounded_table",
    "sampling_slack",
]

#: The steps ``"auto"`` tries, coarsest first: raw 8-bit pixels, and ``1/q``
#: for q of 2 to 256 (8-bit pixels scaled to [0, 1] are ``q = 255``).
GRID_AUTO_STEPS = (1.0, *(1.0 / q for q in range(2, 257)))

#: Per-input scale values are rounded to the nearest ``2^(i / SCALE_LEVELS)``.
SCALE_LEVELS = 256

#: A table's guide has a bucket per value of a word's top bits, about
#: 2^GUIDE_SPARE buckets per threshold (:meth:`RoundedTable.guide`): few
#: buckets hold a threshold, and the guide stays a few times the table.
GUIDE_SPARE = 3

#: Each tail left out of a table has mass below ``2^-TAIL_BITS``.
TAIL_BITS = 70

#: How far (in steps) an input may lie from its grid point and still count
#: as on it: float32 storage of ``j / 255`` is off by about ``|j| 2^-24``.
ON_GRID_TOLERANCE = 1e-3


class Grid:
    """The grid ``step * Z^d`` the inputs lie on, and its integer coordinates.

    Parameters
    ----------
    step : float
        The grid's step ``h`` (> 0).
    off_grid : {'raise', 'round'}, default='raise'
        What to do with inputs farther than ``1e-3 h`` from the grid: refuse
        them (ValueError) or round them to the nearest grid point (the
        certificate is then about that grid point).
    """

    def __init__(self, step, off_grid="raise"):
        if not (isinstance(step, Real) and math.isfinite(step) and step > 0):
            raise ValueError(f"a grid step must be a finite number > 0; got {step!r}.")
        if off_grid not in ("raise", "round"):
            raise ValueError(f"off_grid must be 'raise' or 'round'; got {off_grid!r}.")
        self.step = float(step)
        self.off_grid = off_grid

    def __repr__(self):
        return f"Grid(step={self.step!r})"

    def indices(self, X):
        """The integer coordinates ``j = x / h`` of inputs ``X`` (int64).

        Raises
        ------
        ValueError
            With ``off_grid='raise'``, for an input off the grid (names the
            first such value); for values too large for exact integers.
        """
        X = np.asarray(X, dtype=np.float64)
        scaled = X / self.step
        j = np.rint(scaled)
        if not np.all(np.isfinite(j)) or np.abs(j).max(initial=0.0) >= 2.0**24:
            raise ValueError(
                f"inputs must be finite with |x / step| < 2^24 on a grid of step "
                f"{self.step!r}."
            )
        far = np.abs(scaled - j) > ON_GRID_TOLERANCE
        if self.off_grid == "raise" and far.any():
            where = np.unravel_index(np.argmax(far), far.shape)
            raise ValueError(
                f"input value {X[where]!r} at {tuple(int(w) for w in where)} is not "
                f"on the grid of step {self.step!r} (multiples of it, to "
                f"{ON_GRID_TOLERANCE} of a step): certificates on the grid hold for "
                "inputs on it. Pass inputs on the grid, another grid, grid=None "
                "(float noise), or off_grid='round' to round them to the grid."
            )
        return j.astype(np.int64)

    def inputs(self, j):
        """What the network sees for integer coordinates ``j`` (a torch tensor
        of integers, or of float32 holding integers below ``2^24``, which it
        may overwrite): ``fl32(j) * fl32(h)`` rounded once, a fixed function
        of ``j``."""
        return j.to(torch.float32).mul_(np.float32(self.step))


def resolve_grid(grid, X=None):
    """The grid step a ``grid`` setting names: None, a step, or one detected.

    Parameters
    ----------
    grid : None, float or 'auto'
    X : ndarray, default=None
        The training inputs, for ``'auto'``: the coarsest step of
        :data:`GRID_AUTO_STEPS` on which every value lies (to the tolerance
        of :meth:`Grid.indices`), or None when there is none.

    Returns
    -------
    float or None
    """
    if grid is None:
        return None
    if isinstance(grid, str):
        if grid != "auto":
            raise ValueError(f"grid must be None, a step > 0 or 'auto'; got {grid!r}.")
        # the distinct values decide (an 8-bit image set has at most 256)
        X = np.unique(np.asarray(X, dtype=np.float32)).astype(np.float64)
        for step in GRID_AUTO_STEPS:
            scaled = X / step
            if np.all(np.abs(scaled - np.rint(scaled)) <= ON_GRID_TOLERANCE):
                return step
        return None
    return Grid(grid).step


class RoundedTable:
    """The exact sampler of ``k = round(rho z)``, ``z`` of a family's standard form.

    ``rho = s / h`` is the noise's scale ``s`` in grid steps ``h`` (the exact
    ratio of the two floats). The table holds the
    thresholds ``T_j = floor(2^64 F(j + 1/2))`` for ``j = -K .. K - 1``, with
    ``F(t) = P(rho z < t)`` computed in mpmath to 96 bits; a uniform 64-bit
    integer ``U`` gives ``k = -K + #{j : T_j <= U}``, so ``P(k <= j) = T_j /
    2^64`` (each within ``2^-63`` of ``F``), and ``K`` is the least with both
    tails ``P(|rho z| > K + 1/2)`` below ``2^-70`` (the uniform family's
    support is bounded: no tail). Held as signed words ``T_j - 2^63`` (the
    bank's int64 words are ``U - 2^63``).

    Attributes
    ----------
    thresholds : ndarray of int64, shape (2 K,)
    half_width : int
        ``K``: the table's atoms are ``-K .. K``.
    tv : float
        A bound on the total variation between the sampled law and the law of
        ``round(rho z)`` (``2 K 2^-63 + 2^-69``), rounded up.
    """

    def __init__(self, family, scale, step):
        cdf, tail = _standard_cdf(family.name)
        with mpmath.workprec(96):
            # the exact ratio of the two floats, not its float64 rounding
            rho = mpmath.mpf(float(scale)) / mpmath.mpf(float(step))
            half_width = 0
            while (
                tail((half_width + mpmath.mpf(0.5)) / rho)
                >= mpmath.mpf(2) ** -TAIL_BITS
            ):
                half_width += max(1, half_width // 2)
            # the least K: bisect back between half_width / 1.5 and half_width
            low = 0
            while low < half_width:
                mid = (low + half_width) // 2
                if tail((mid + mpmath.mpf(0.5)) / rho) < mpmath.mpf(2) ** -TAIL_BITS:
                    half_width = mid
                else:
                    low = mid + 1
            K = half_width
            # symmetric laws: F(-t) = 1 - F(t), so the upper half is the lower
            # half mirrored; floor(2^64 (1 - F)) computed from the mpf value
            lower = [
                int(
                    mpmath.floor(cdf((j + mpmath.mpf(0.5)) / rho) * mpmath.mpf(2) ** 64)
                )
                for j in range(-K, 0)
            ]
            upper = [
                int(
                    mpmath.floor(
                        (1 - cdf((-j - mpmath.mpf(0.5)) / rho)) * mpmath.mpf(2) ** 64
                    )
                )
                for j in range(0, K)
            ]
        thresholds = np.array([t - 2**63 for t in lower + upper], dtype=np.int64)
        if np.any(np.diff(thresholds) < 0):  # pragma: no cover - a law's cdf
            raise RuntimeError("rounded-noise thresholds must not decrease")
        self.scale, self.step = float(scale), float(step)
        self.half_width = K
        self.thresholds = thresholds
        self.tv = float(np.nextafter(2 * K * 2.0**-63 + 2.0**-69, np.inf))

    def sample(self, words):
        """``k`` for signed 64-bit words ``words`` (a torch int64 tensor)."""
        table = torch.as_tensor(self.thresholds, device=words.device)
        return torch.searchsorted(table, words, right=True).sub_(self.half_width)

    @property
    def guide_bits(self):
        """How many of a word's top bits index :meth:`guide`: about
        ``2^GUIDE_SPARE`` buckets per threshold, 8 to 20."""
        need = int(np.ceil(np.log2(len(self.thresholds) + 1))) + GUIDE_SPARE
        return min(max(need, 8), 20)

    def guide(self):
        """Per bucket ``b`` of the words' top :attr:`guide_bits` bits: ``2 c +
        flag``, ``c`` the count of thresholds at or below the bucket's first
        word, ``flag`` whether a threshold may lie inside it (then ``c`` is
        where counting starts). Cached; int32 of shape (2^guide_bits,).
        """
        if getattr(self, "_guide", None) is None:
            buckets = 2**self.guide_bits
            first = np.arange(buckets, dtype=np.int64) - buckets // 2
            first <<= 64 - self.guide_bits
            low = np.searchsorted(self.thresholds, first, side="right")
            # thresholds below the next bucket's first word (the last bucket
            # ends at the top of the range, past which no threshold lies)
            high = np.append(low[1:], len(self.thresholds))
            self._guide = (2 * low + (high > low)).astype(np.int32)
        return self._guide

    def pmf(self):
        """The sampled law: ``(atoms, probabilities)`` as exact fractions of
        ``2^64`` (python ints over ``2^64``), for tests."""
        edges = [0] + [int(t) + 2**63 for t in self.thresholds] + [2**64]
        atoms = np.arange(-self.half_width, self.half_width + 1)
        return atoms, [b - a for a, b in zip(edges[:-1], edges[1:])]


class RowSampler:
    """One input's noise on the grid: ``k`` per coordinate from its table.

    Exactly ``k_c = -K_c + #{T_j <= U}`` of the coordinate's table
    (:meth:`RoundedTable.sample`), found fast: a guide of buckets per table
    (:meth:`RoundedTable.guide`, by the word's top bits) gives
    the count outright where no threshold falls inside the bucket, and a
    starting count where some do, which exact int64 compares then advance;
    the guide decides only the speed, never the value.

    Parameters
    ----------
    family : NoiseFamily
    scales : ndarray of shape (d,)
        The noise's scale per coordinate.
    step : float
    device : torch.device
    tables : TableSet, default=None
        Tables shared by the rows of a block (built once for them all); by
        default this row's own.
    """

    def __init__(self, family, scales, step, device, tables=None):
        scales = np.asarray(scales, dtype=np.float64)
        if tables is None:
            tables = TableSet(family, np.unique(scales), step, device)
        which = np.searchsorted(tables.values, scales)
        if np.any(tables.values[np.minimum(which, len(tables.values) - 1)] != scales):
            raise ValueError("a scale without its table")
        self.tables = tables.tables
        self.which = which
        self.cpu = tables.cpu
        arrays = {
            "base": tables.offsets[which],
            "guide_base": tables.guide_offsets[which],
            "shift": 64 - tables.bits[which],
            "half": tables.half[which],
        }
        if not self.cpu:
            arrays = {k: torch.as_tensor(v, device=device) for k, v in arrays.items()}
        self.arrays = {**arrays, "flat": tables.flat, "guides": tables.guides}

    @property
    def reach(self):
        """The largest ``|k|`` drawn."""
        return int(max(self.tables[i].half_width for i in np.unique(self.which)))

    def sample(self, words):
        """``k`` of shape (w, d) for the window's words (a torch int64 tensor
        (w, d) on the device), as float32 (exact integers)."""
        a = self.arrays
        if self.cpu:
            words, take, flat_nonzero = words.numpy(), np.take, np.flatnonzero
        else:
            take = torch.take

            def flat_nonzero(x):
                return torch.nonzero(x.reshape(-1)).reshape(-1)

        guide = take(a["guides"], (words >> a["shift"]) + a["guide_base"])
        count = guide >> 1
        unsure = flat_nonzero(guide & 1)
        if len(unsure):
            flat_count = count.reshape(-1)
            flat_count[unsure] = self._advance(
                words.reshape(-1)[unsure],
                flat_count[unsure],
                unsure % words.shape[1],
                take,
                flat_nonzero,
            )
        k = count - a["half"]
        return (
            torch.from_numpy(k).to(torch.float32) if self.cpu else k.to(torch.float32)
        )

    def _advance(self, words, count, cols, take, flat_nonzero):
        """Counts in buckets that hold thresholds: step past every threshold
        at or below the word (a few steps; a word deep in a tail, where
        thresholds crowd, is searched)."""
        base = self.arrays["base"][cols]
        for _ in range(4):
            step = take(self.arrays["flat"], base + count) <= words
            if not bool(step.any()):
                return count
            count += step
        left = flat_nonzero(take(self.arrays["flat"], base + count) <= words)
        for i in left.tolist():
            table = self.tables[self.which[int(cols[i])]]
            count[i] = int(
                np.searchsorted(table.thresholds, int(words[i]), side="right")
            )
        return count


class TableSet:
    """The rounded-noise tables of a set of scale values, laid end to end.

    What :class:`RowSampler` gathers from: every table's thresholds, each
    followed by ``+inf``, and every table's guide, in one array each, so the
    rows of a block share them (a row of ANCER's per-coordinate scales would
    otherwise copy hundreds of tables).

    Parameters
    ----------
    family : NoiseFamily
    values : ndarray
        Distinct scale values, ascending.
    step : float
    device : torch.device
    """

    def __init__(self, family, values, step, device):
        self.values = np.asarray(values, dtype=np.float64)
        self.tables = [rounded_table(family, v, step) for v in self.values]
        sizes = np.array([len(t.thresholds) + 1 for t in self.tables])
        self.offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        flat = np.full(sizes.sum(), np.iinfo(np.int64).max)
        for offset, t in zip(self.offsets, self.tables):
            flat[offset : offset + len(t.thresholds)] = t.thresholds
        guides = [t.guide() for t in self.tables]
        self.bits = np.array([t.guide_bits for t in self.tables], dtype=np.int64)
        # where each guide's middle bucket (a word's top bits read signed) lies
        starts = np.concatenate([[0], np.cumsum([len(g) for g in guides])[:-1]])
        self.guide_offsets = starts + 2**self.bits // 2
        guides = np.concatenate(guides)
        self.half = np.array([t.half_width for t in self.tables], dtype=np.int32)
        # on the CPU numpy's gathers (torch's take checks bounds element by
        # element: 20 times slower there); elsewhere the device's tensors
        self.cpu = torch.device(device).type == "cpu"
        self.flat = flat if self.cpu else torch.as_tensor(flat, device=device)
        self.guides = guides if self.cpu else torch.as_tensor(guides, device=device)


class RawWords:
    """The "family" of a grid path's selection and estimation banks: raw
    signed 64-bit words, which :class:`RoundedTable` maps to the rounded law
    of ``rounded``, the estimator's family (:class:`~smoothlearn.banks.NoiseBank`
    draws them chunk by chunk, seeded as every bank)."""

    def __init__(self, rounded):
        self.rounded = rounded
        self.name = f"{rounded.name} on a grid"

    def bank_sample(self, n_values, bits):
        return bits.words(n_values)


def _standard_cdf(name):
    """``(F, tail)`` of a family's standard form in mpmath: ``F(t) = P(z < t)``
    and ``tail(t) = P(z > t)`` for ``t >= 0`` (symmetric laws)."""
    if name == "gaussian":
        return mpmath.ncdf, lambda t: mpmath.ncdf(-t)
    if name == "laplace":  # scale b = 1/sqrt(2)

        def cdf(t):
            e = mpmath.exp(-abs(t) * mpmath.sqrt(2)) / 2
            return e if t < 0 else 1 - e

        return cdf, lambda t: mpmath.exp(-t * mpmath.sqrt(2)) / 2
    if name == "uniform":  # on [-sqrt(3), sqrt(3)]

        def cdf(t):
            r3 = mpmath.sqrt(3)
            return min(mpmath.mpf(1), max(mpmath.mpf(0), (t + r3) / (2 * r3)))

        return cdf, lambda t: 1 - cdf(t)
    raise ValueError(f"no rounded form of the noise family {name!r}")


@functools.lru_cache(maxsize=4096)
def _cached_table(family_name, scale, step):
    from .noise import get_noise

    return RoundedTable(get_noise(family_name), scale, step)


def rounded_table(family, scale, step):
    """The (cached) :class:`RoundedTable` of noise scale ``scale`` on step ``step``."""
    return _cached_table(family.name, float(scale), float(step))


def quantised_scale(values):
    """Scale values rounded to the nearest ``2^(i / 256)`` (float64), so that
    per-input scales need few tables; the certificate records these values."""
    values = np.asarray(values, dtype=np.float64)
    if np.any(~np.isfinite(values)) or np.any(values <= 0):
        raise ValueError("scales on the grid must be finite and > 0")
    return np.exp2(np.rint(np.log2(values) * SCALE_LEVELS) / SCALE_LEVELS)


def sampling_slack(family, per_coordinate, step):
    """Each row's bound on the total variation between one draw of its noise
    (all coordinates) and the rounded law: the sum of its coordinates'
    :attr:`RoundedTable.tv`, rounded up. ``per_coordinate`` is (m, d)."""
    per_coordinate = np.asarray(per_coordinate, dtype=np.float64)
    out = np.empty(len(per_coordinate))
    for i, row in enumerate(per_coordinate):
        values, counts = np.unique(row, return_counts=True)
        tv = sum(rounded_table(family, v, step).tv * c for v, c in zip(values, counts))
        out[i] = np.nextafter(tv * (1 + 2.0**-40), np.inf)
    return out
