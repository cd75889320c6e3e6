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
  computed in mpmath (the gaussian's in exact integers between mpmath
  anchors, within ``2^-90``: :class:`RoundedTable`);
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
from fractions import Fraction
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

#: The most top bits a guide is indexed by (2^16 buckets: 128 KiB as int16).
GUIDE_MAX_BITS = 16

#: Fixed-point bits of the gaussian tables' Taylor sums (:func:`_gaussian_cdf_fixed`).
TAYLOR_BITS = 128

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
    ``F(t) = P(rho z < t)`` computed in mpmath to 96 bits (the gaussian's
    within ``2^-90`` by Taylor sums in exact integers from mpmath anchors,
    :func:`_gaussian_cdf_fixed`, many times faster); a uniform 64-bit
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
            # half mirrored: floor(2^64 (1 - F)) from the same values of F
            if family.name == "gaussian":  # fixed point, TAYLOR_BITS bits
                ratio = Fraction(float(scale)) / Fraction(float(step))
                values = _gaussian_cdf_fixed(ratio, K)
                shift = TAYLOR_BITS - 64
                lower = [max(v, 0) >> shift for v in values]
                upper = [(2**TAYLOR_BITS - v) >> shift for v in reversed(values)]
            else:
                values = [cdf((j + mpmath.mpf(0.5)) / rho) for j in range(-K, 0)]
                scale64 = mpmath.mpf(2) ** 64
                lower = [int(mpmath.floor(v * scale64)) for v in values]
                upper = [int(mpmath.floor((1 - v) * scale64)) for v in reversed(values)]
        thresholds = np.array([t - 2**63 for t in lower + upper], dtype=np.int64)
        # compared, not differenced: a gap over 2^63 (an atom above 1/2, at
        # rho below 0.67) overflows int64
        if np.any(thresholds[1:] < thresholds[:-1]):  # pragma: no cover - a cdf
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
        """How many of a word's top bits a guide for this table wants: about
        ``2^GUIDE_SPARE`` buckets per threshold, 8 to :data:`GUIDE_MAX_BITS`."""
        need = int(np.ceil(np.log2(len(self.thresholds) + 1))) + GUIDE_SPARE
        return min(max(need, 8), GUIDE_MAX_BITS)

    def guide(self, bits):
        """Per bucket ``b`` of the words' top ``bits`` bits (read signed):
        ``2 k + flag``, ``k = c - K`` with ``c`` the count of thresholds at or
        below the bucket's first word, ``flag`` whether a threshold lies
        inside the bucket (then ``c`` is where counting starts; otherwise
        ``k`` is the draw of every word in the bucket). Cached per ``bits``;
        int16 where the values fit, else int32; shape (2^bits,).
        """
        cache = self.__dict__.setdefault("_guides", {})
        if bits not in cache:
            buckets = 2**bits
            first = np.arange(buckets, dtype=np.int64) - buckets // 2
            first <<= 64 - bits
            low = np.searchsorted(self.thresholds, first, side="right")
            # thresholds below the next bucket's first word (the last bucket
            # ends at the top of the range, past which no threshold lies)
            high = np.append(low[1:], len(self.thresholds))
            encoded = 2 * (low - self.half_width) + (high > low)
            cache[bits] = (
                encoded.astype(_guide_dtype(self.half_width)),
                high > low + 1,
            )
        return cache[bits][0]

    def crowded(self, bits):
        """Per bucket of :meth:`guide`: whether more than one threshold lies
        inside it (elsewhere a flagged bucket's word needs one compare)."""
        self.guide(bits)
        return self._guides[bits][1]

    def pmf(self):
        """The sampled law: ``(atoms, probabilities)`` as exact fractions of
        ``2^64`` (python ints over ``2^64``), for tests."""
        edges = [0] + [int(t) + 2**63 for t in self.thresholds] + [2**64]
        atoms = np.arange(-self.half_width, self.half_width + 1)
        return atoms, [b - a for a, b in zip(edges[:-1], edges[1:])]


def _gaussian_cdf_fixed(rho, K):
    """``Phi((j + 1/2) / rho)`` for ``j = -K .. -1``, times ``2^TAYLOR_BITS``, as
    python ints within ``2^(TAYLOR_BITS - 90)`` of the exact values (so a
    table's ``floor(2^64 Phi)`` is within ``2^-64 + 2^-90 < 2^-63`` of ``2^64
    Phi``, the per-threshold error :attr:`RoundedTable.tv` allows).

    ``rho`` is a :class:`fractions.Fraction` (the exact ratio of two floats),
    so every point ``t_j`` is an exact rational. The points are taken in
    blocks of ``floor(rho)`` around an anchor ``a`` (``|t_j - a| <= 1/2``),
    where mpmath gives ``Phi(a)`` and ``phi(a)`` (two evaluations instead of
    one per point, the cost of a table) and the Taylor series ``Phi(a + u) =
    Phi(a) + phi(a) sum_{n >= 1} (-1)^(n-1) He_(n-1)(a) u^n / n!`` gives the
    rest: ``He_n(a) q^n`` exact in integers for ``a = p / q``, the sum in
    fixed point (each product floored: at most one unit per operation, no
    growth with ``|u| <= 1/2``), to the least order ``N`` whose remainder,
    by Cramer's inequality ``|He_N(x)| <= 1.0865 sqrt(N!) e^(x^2 / 4)``, is
    at most ``1.09 sqrt(N!) u^(N+1) / ((N+1)! sqrt(2 pi)) < 2^-100``.
    """
    bits = TAYLOR_BITS
    one = 1 << bits
    span = max(1, int(rho))
    reach = Fraction(span // 2) / rho  # the largest |u| of a block
    order, bound = 1, 1.0
    while True:  # the remainder bound at the largest |u|, in float64 (0 < 2^-100)
        bound = (
            1.09
            * math.sqrt(math.factorial(order))
            * float(reach) ** (order + 1)
            / (math.factorial(order + 1) * math.sqrt(2 * math.pi))
        )
        if bound < 2.0**-101:
            break
        order += 1
    out = []
    for start in range(-K, 0, span):
        stop = min(start + span, 0)
        centre = (start + stop - 1) // 2
        anchor = Fraction(2 * centre + 1, 2) / rho
        p, q = anchor.numerator, anchor.denominator
        with mpmath.workprec(bits + 32):
            a = mpmath.mpf(p) / q
            base = int(mpmath.floor(mpmath.ncdf(a) * one))
            density = int(mpmath.floor(mpmath.npdf(a) * one))
        # D_n = (-1)^(n-1) He_(n-1)(a) / n! in fixed point, from G_k = q^k
        # He_k(p / q): G_(k+1) = p G_k - k q^2 G_(k-1), exact
        coefficients = []
        previous, current, factorial, power = 0, 1, 1, 1
        for n in range(1, order + 1):
            factorial *= n
            signed = current if n % 2 else -current
            coefficients.append((signed << bits) // (power * factorial))
            previous, current = current, p * current - (n - 1) * q * q * previous
            power *= q
        for j in range(start, stop):
            u = Fraction(j - centre) / rho
            step = (u.numerator << bits) // u.denominator
            acc = coefficients[-1]
            for c in reversed(coefficients[:-1]):
                acc = ((acc * step) >> bits) + c
            out.append(base + ((density * ((acc * step) >> bits)) >> bits))
    return out


class RowSampler:
    """One input's noise on the grid: ``k`` per coordinate from its table.

    Exactly ``k_c = -K_c + #{T_j <= U}`` of the coordinate's table
    (:meth:`RoundedTable.sample`), found fast: every table of the
    :class:`TableSet` has a guide of buckets by the word's top bits
    (:meth:`RoundedTable.guide`), which gives ``k`` outright where no
    threshold falls inside the bucket, and a starting count where some do,
    which exact int64 compares then advance (:meth:`_exact`); the guide
    decides only the speed, never the value. The words' top bits are the
    same for every row of a window and are found once
    (:meth:`TableSet.top_bits`); what a row adds is one gather per
    coordinate. (A count with several gaussian rows on the CPU finds the
    same ``k`` by arithmetic its rows share instead:
    ``smoothlearn/_grid_quantiles.py``.)

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
        self.table_set = tables
        self.tables = tables.tables
        self.which = which
        self.cpu = tables.cpu
        self.guide_start = tables.guide_offsets[which]
        self.base = tables.offsets[which]
        self.half = tables.half[which]
        self.first = self.base + self.half
        if not self.cpu:
            self.guide_start = torch.as_tensor(self.guide_start, device=device)

    @property
    def reach(self):
        """The largest ``|k|`` drawn."""
        return int(max(self.tables[i].half_width for i in np.unique(self.which)))

    def sample(self, words):
        """``k`` of shape (w, d) for the window's words (a torch int64 tensor
        (w, d) on the device): a torch tensor of small integers (int16 where
        the tables' reach allows, else int32), exact."""
        top = self.table_set.top_bits(words)
        if self.cpu:
            # coordinate-major: each coordinate's draws read one guide, which
            # stays in cache (row-major reads hundreds of guides per row)
            # into kept buffers: fresh ones for each row cost page faults
            index = np.add(top, self.guide_start[:, None], out=self._scratch("index"))
            guide = np.take(
                self.table_set.guides, index, mode="clip", out=self._scratch("guide")
            )
            # the flags as bytes read as bools: numpy finds those several
            # times faster than nonzero int16s (the flag's byte is either of
            # a value's bytes, by endianness; the others are zero)
            flags = np.bitwise_and(guide, 1, out=self._scratch("flags"))
            unsure = np.flatnonzero(flags.view(np.bool_)) // guide.itemsize
            k = np.right_shift(guide, 1, out=guide)
            if len(unsure):
                flat = k.reshape(-1)
                cols = unsure // k.shape[1]
                flat[unsure] = self._exact(
                    self.table_set.words_t.reshape(-1)[unsure],
                    flat[unsure],
                    cols,
                    self.table_set.crowded.take(index.reshape(-1)[unsure]),
                )
            return torch.from_numpy(k).T.contiguous()
        guide = torch.take(self.table_set.guides, top + self.guide_start)
        unsure = torch.nonzero((guide & 1).reshape(-1)).reshape(-1)
        k = guide >> 1
        if len(unsure):
            flat = k.reshape(-1)
            cols = (unsure % k.shape[1]).cpu().numpy()
            exact = self._exact(
                words.reshape(-1)[unsure].cpu().numpy(),
                flat[unsure].cpu().numpy(),
                cols,
            )
            flat[unsure] = torch.as_tensor(exact, device=k.device)
        return k

    def exact_count(self, words, cols):
        """``k`` of words ``words`` (numpy int64) at coordinates ``cols`` on
        the CPU, as :meth:`sample` finds it (the guide, then exact compares):
        for the few words another path leaves open."""
        tables = self.table_set
        index = np.right_shift(words, 64 - tables.bits) + self.guide_start[cols]
        guide = tables.guides[index]
        k = guide >> 1
        flagged = np.flatnonzero(guide & 1)
        if len(flagged):
            k[flagged] = self._exact(
                words[flagged],
                k[flagged],
                cols[flagged],
                tables.crowded[index[flagged]],
            )
        return k

    def _scratch(self, name):
        """A buffer of the window's shape (d, w), kept by the table set."""
        top = self.table_set._top[1]
        dtype = top.dtype if name == "index" else self.table_set.guides.dtype
        return self.table_set.scratch(name, top.shape, dtype)

    def _exact(self, words, k, cols, crowded=None):
        """``k`` of words in flagged buckets, which hold thresholds (numpy,
        few): from the bucket's first count, step past its first threshold if
        the word is at or above it (the bucket's only one, unless
        ``crowded``: None means all may be), then bisect the crowded ones (a
        word deep in a tail) up to the table's end."""
        flat = self.table_set.flat
        first = self.first[cols]  # where each table's k = 0 count lies in flat
        # a flagged bucket holds a threshold above its first word: ``at`` is
        # one, never the table's end
        at = first + k
        at += flat[at] <= words
        crowded = np.arange(len(at)) if crowded is None else np.flatnonzero(crowded)
        if len(crowded):
            end = self.base[cols[crowded]] + 2 * self.half[cols[crowded]]
            at[crowded] = self._bisect(flat, at[crowded], end, words[crowded])
        return (at - first).astype(k.dtype)

    @staticmethod
    def _bisect(flat, low, high, words):
        """The least ``i`` in ``[low, high]`` with ``flat[i] > word`` (``high``
        where none: a table's end), for each word; ``flat`` ascending there."""
        low, high = low.copy(), high.copy()
        while np.any(low < high):
            active = low < high
            mid = (low + high) // 2  # below high where active; in range else
            below = flat[mid] <= words
            low = np.where(active & below, mid + 1, low)
            high = np.where(active & ~below, mid, high)
        return low


class TableSet:
    """The rounded-noise tables of a set of scale values, laid end to end.

    What :class:`RowSampler` gathers from: every table's thresholds in one
    array, and every table's guide, all by the same top bits of a word, in
    another (int16 where the tables' reach allows), so the rows of a block
    share them (a row of ANCER's per-coordinate scales would otherwise copy
    hundreds of tables) and a window's words are shifted once for all rows
    (:meth:`top_bits`).

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
        # each table followed by a +inf (never read past: counts stop at 2 K)
        self.flat = np.full(sizes.sum(), np.iinfo(np.int64).max)
        for offset, t in zip(self.offsets, self.tables):
            self.flat[offset : offset + len(t.thresholds)] = t.thresholds
        # one guide size for all: the words' top bits serve every table
        self.bits = max(t.guide_bits for t in self.tables)
        self.half = np.array([t.half_width for t in self.tables], dtype=np.int64)
        dtype = _guide_dtype(int(self.half.max()))
        guides = np.concatenate([t.guide(self.bits).astype(dtype) for t in self.tables])
        # where each guide's middle bucket (a word's top bits read signed) lies
        self.guide_offsets = np.arange(len(self.tables), dtype=np.int64) * 2**self.bits
        self.guide_offsets += 2 ** (self.bits - 1)
        # on the CPU numpy's gathers (torch's take checks bounds element by
        # element: 20 times slower there); elsewhere the device's tensors
        self.cpu = torch.device(device).type == "cpu"
        self.guides = guides if self.cpu else torch.as_tensor(guides, device=device)
        self.crowded = np.concatenate([t.crowded(self.bits) for t in self.tables])
        self._top = (None, None)
        self._scratch = {}

    def scratch(self, name, shape, dtype):
        """A kept numpy buffer (its contents are whatever the last row left)."""
        buffer = self._scratch.get(name)
        if buffer is None or buffer.shape != shape or buffer.dtype != dtype:
            buffer = self._scratch[name] = np.empty(shape, dtype)
        return buffer

    def top_bits(self, words):
        """The signed top :attr:`bits` bits of each word, the guides' bucket
        (on the CPU transposed, (d, w), as :meth:`RowSampler.sample` reads
        them, with the words so, :attr:`words_t`); kept for the window: every
        row of a block asks for the same words."""
        if self._top[0] is not words:
            if self.cpu:  # into kept buffers (fresh ones cost page faults)
                shape = tuple(words.shape[::-1])
                self.words_t = self.scratch("words_t", shape, np.int64)
                np.copyto(self.words_t, words.numpy().T)
                top = self.scratch("top", shape, np.int64)
                np.right_shift(self.words_t, 64 - self.bits, out=top)
            else:
                top = words >> (64 - self.bits)
            self._top = (words, top)
        return self._top[1]


def _guide_dtype(half_width):
    """int16 where a guide's values ``2 k + flag``, ``|k| <= K``, fit, else int32."""
    return np.int16 if 2 * half_width + 1 < 2**15 else np.int32


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
