"""The memory's joint step: one call's certificates made disjoint together.

Every pair of different labels whose regions meet gets a separating slab
pair: a unit direction ``v`` and extents ``g_i + g_j < v.(x_j - x_i)``, so
that region ``i`` inside ``{|v.(y - x_i)| <= g_i}`` and region ``j`` inside
``{|v.(y - x_j)| <= g_j}`` cannot meet. Where the slabs sit is chosen per pair
by the memory's objective (:func:`split`); each region then takes all its
slabs at once (:func:`realise`): by rank-one cuts of its covariance
(:meth:`~smoothlearn.geometry.Region.cut`, which keep the region's length
along every other direction), by a cap at the smallest extent (the region
inside that ball; a ball lies in every slab of that extent), or the papers'
ball. Nothing here depends on the order of the inputs: pairs are oriented and
a region's slabs applied in an order fixed by the certificates' content.

Both papers (ANCER App. D, Algorithm 1; RANCER section 3) process
certificates one by one, in input order, and name the order dependence as a
limitation. What makes their memory sound is only that no two regions of
different labels given out meet; we keep that argument and drop the order
within a call, whose certificates are given out together. Against regions
of earlier calls the papers' rule stands (abstain where a centre lies in one,
else reduce).
"""

import numpy as np

from ..geometry import support_extent

__all__ = [
    "LENGTH_RANGE",
    "below_floor",
    "candidate_directions",
    "check_lengths",
    "make_contiguous",
    "content_rank",
    "pair_slab",
    "realise",
    "split",
]

#: Slabs a region keeps its ball through (``objective='radius'``): each such
#: cut, and each step of the blend's search, costs O(d q^2) for a region of q
#: cuts, so a region with more slabs (one large region meeting many) takes
#: the largest cuts, or the cap where that keeps a larger inscribed radius.
MAX_BALL_KEEPING_CUTS = 32

#: Relative margin between a pair's two extents and the centres' separation
#: along the pair's direction: far above float64 rounding of the supports.
SLAB_MARGIN = 1e-9


def candidate_directions(diff, region_a, region_b):
    """Unit directions that may separate two regions ``diff = x_b - x_a``
    apart: ``diff`` itself and the normals ``M^-1 diff`` of each region's level
    sets, where they are defined."""
    out = []
    for v in (
        diff,
        region_a.whiten_transpose(region_a.whiten(diff)),
        region_b.whiten_transpose(region_b.whiten(diff)),
    ):
        norm = float(np.linalg.norm(v))
        if np.isfinite(norm) and norm > 0.0:
            out.append(v / norm)
    return out


def split(total, h_a, h_b, r_a, r_b, objective):
    """Extents ``(g_a, g_b)`` with ``g_a + g_b = total`` for a pair whose
    supports along the direction are ``h_a, h_b`` and inscribed radii ``r_a,
    r_b``.

    ``'volume'``: the midpoint, a side shorter than half keeping all its
    length (a cut at ``g`` costs a region ``g / h`` of its volume, and
    ``g_a g_b`` is largest at the midpoint). ``'radius'``: where both
    inscribed balls fit (``r_a + r_b <= total``) the volume's split moved into
    ``[r_a, total - r_b]``, keeping both; otherwise the smaller ball is kept
    whole where at most half the total (the pair's radii then add up to the
    total, which no split exceeds) and the midpoint else. Inscribed radii are
    at most the supports, so the kept extents never exceed them.
    """
    half = total / 2.0
    # a side's extent equal to its support leaves it uncut: set exactly
    # (total - g can round below it), the other side taking the rest
    g_a, g_b = half, half
    if h_a < half:
        g_a, g_b = h_a, total - h_a
    elif h_b < half:
        g_a, g_b = total - h_b, h_b
    if objective == "radius":
        if r_a + r_b <= total:
            if g_a < r_a:
                g_a, g_b = r_a, total - r_a
            elif g_b < r_b:
                g_a, g_b = total - r_b, r_b
        elif 0.0 < min(r_a, r_b) < half:  # a flat region has no ball to keep
            g_a, g_b = (r_a, total - r_a) if r_a <= r_b else (total - r_b, r_b)
        else:
            g_a, g_b = half, half
    return g_a, g_b


def pair_slab(region_a, region_b, r_a, r_b, objective, eps):
    """``(v, g_a, g_b)``: the separating slabs of a pair whose regions meet,
    or None where their centres coincide (nothing separates them).

    Among :func:`candidate_directions`, the one whose split keeps the most:
    by volume (the sum of ``log(h / g)`` the cuts cost), or for ``'radius'``
    first by the inscribed radii kept (``min(g, r)`` summed).
    """
    diff = region_b.center - region_a.center
    best, best_score = None, None
    for v in candidate_directions(diff, region_a, region_b):
        # the margin is the pair's own, against the centres' distance (v is a
        # unit vector): the slabs stay apart whatever eps, 0 included
        total = float(v @ diff) - SLAB_MARGIN * float(np.linalg.norm(diff)) - eps
        if not total > 0.0:
            continue
        h_a, h_b = support_extent(region_a, v), support_extent(region_b, v)
        g_a, g_b = split(total, h_a, h_b, r_a, r_b, objective)
        if not (g_a > 0.0 and g_b > 0.0):
            continue
        cost = np.log(max(h_a / g_a, 1.0)) + np.log(max(h_b / g_b, 1.0))
        kept = min(g_a, r_a) + min(g_b, r_b)
        score = (kept, -cost) if objective == "radius" else (-cost,)
        if best_score is None or score > best_score:
            best, best_score = (v, g_a, g_b), score
    return best


def realise(region, planes, shrink, objective):
    """``region`` inside every slab ``(v, g, order)`` of ``planes`` (a
    non-empty list), or None where no sound region is left.

    The ball of the smallest extent ``g`` around the centre lies in every
    slab, so misses every region the slabs keep away: the cap's limit.
    ``'cut'``: rank-one cuts in
    the slabs' ``order`` (the tightest first), the largest each for
    ``'volume'``, the largest keeping the inscribed ball it can (the
    region's, or the slab's) for ``'radius'``; ``'capped'``: every
    semi-axis capped at ``cap_limit``; ``'ball'``: the ball of ``cap_limit``
    or the inscribed radius; ``'auto'``: the better of ``'cut'`` and
    ``'capped'`` by ``objective`` (volume; or inscribed radius, then
    volume). l1 regions are capped (a cut is an l2 down-date).
    """
    cap_limit = min(g for _, g, _ in planes)
    if not cap_limit > 0.0:
        return None
    if shrink == "ball":
        return region.ball(min(cap_limit, region.inradius))
    capped = region.capped(cap_limit)
    if shrink == "capped" or region.norm != "l2":
        return capped
    cut = region
    # a slab the region already lies in takes no cut (a pair's extents leave
    # their margin between the slabs, not inside them)
    ordered = sorted(
        (g / h, order, i)
        for i, (v, g, order) in enumerate(planes)
        if (h := support_extent(region, v)) > g
    )
    # for the radius, every cut keeps the ball a cap keeps (the region's, or
    # the smallest extent's), a hair inside each earlier cut's
    keep = min(region.inradius, cap_limit) * (1.0 - 1e-6)
    keeping = objective == "radius" and len(ordered) <= MAX_BALL_KEEPING_CUTS
    for _, _, i in ordered:
        v, g, _ = planes[i]
        cut = cut.cut(v, g, keep=keep if keeping else None)
        keep *= 1.0 - 1e-8  # each kept ball touches: the next one inside it
        if cut is None:  # too thin to be sound in floating point
            return capped
    if shrink == "cut" or (cut is region and capped.form.equals(region.form)):
        return cut
    d = region.d
    if objective == "radius":
        # the same inscribed radius (to the cuts' margins and the bound's
        # looseness, 1e-4) keeps the larger volume
        if cut.inradius >= capped.inradius * (1.0 - 1e-4):
            return cut
        if not keeping:  # each step of the blend's search is a secular equation
            return capped
        return _blended(region, cut, capped, planes)
    volume = (cut.form.geometric_mean(d)[0], capped.form.geometric_mean(d)[0])
    return cut if volume[0] >= volume[1] else capped


def _blended(region, cut, capped, planes, steps=20):
    """The region of covariance ``(1 - t) M_cut + t M_capped`` with the least
    ``t`` whose inscribed radius reaches the capped region's (the most
    volume for that radius along this line), or ``capped`` where the two do
    not share their axes (a diagonal frame, cuts in the original).

    Sound for every ``t``: both covariances are below the original's and
    have supports within every slab along its direction, so their convex
    combination does too (re-checked after rounding on each of
    ``planes``). Where the capped row keeps the original's axes, the
    combination is a cut row of the same form: base values
    ``sqrt((1 - t) s^2 + t s_capped^2)`` (never above ``s``) and cuts
    ``sqrt(1 - t) C``. Its inscribed radius is concave in ``t``, so the ``t``
    reaching the capped one's bounds an interval: bisection.
    """
    base, top = region.form, capped.form
    if base.frame is not None or base.cuts is not None or top.cuts is not None:
        return capped
    if top.kind != base.kind or (
        base.basis is not None and not np.array_equal(top.basis, base.basis)
    ):
        return capped
    target = capped.inradius * (1.0 - 1e-9)
    cuts = cut.form.cuts

    def at(t):
        def mixed(a, b):
            if a is None:
                return None
            a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
            return np.minimum(np.sqrt((1.0 - t) * a**2 + t * b**2), a)

        form = type(base)(
            mixed(base.values, top.values),
            base.basis,
            mixed(base.rest, top.rest),
            cuts=np.sqrt(1.0 - t) * cuts,
        )
        return type(region)(region.center, region.rho, form, region.norm)

    lo, hi = 0.0, 1.0
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        if at(mid).inradius >= target:
            hi = mid
        else:
            lo = mid
    if not hi < 1.0:
        return capped
    blended = at(hi)
    # the mixture's rounding (sqrt(1 - t) C against supports that thin cuts
    # make far smaller than ||C^T v||) is checked, not assumed: every slab
    # by the proved support, else the cap
    if any(support_extent(blended, v) > g for v, g, _ in planes):
        return capped
    return blended


def content_rank(certificates):
    """Each row's place in an order of the certificates' content (centre,
    class, gap, the scale's extreme values and volume), not their position."""
    scales = certificates.scales
    keys = [
        scales.geometric_mean(certificates.n_features),
        scales.smallest(),
        certificates.gap,
        certificates.class_index,
        *certificates.center.T[::-1],
    ]
    # ties on every key (mirror images, one region in two bases) are broken
    # by the full content: the raw bytes of every row's arrays, never the
    # input's position
    order = np.lexsort(keys)  # the last key first: the centre's coordinates
    columns = np.stack(keys, axis=1)[order] if len(order) else None
    start = 0
    for stop in range(1, len(order) + 1):
        if stop < len(order) and np.array_equal(columns[stop], columns[start]):
            continue
        if stop - start > 1:  # a run tying on every key
            run = order[start:stop]
            order[start:stop] = sorted(
                run, key=lambda i: _row_bytes(certificates, int(i))
            )
        start = stop
    rank = np.empty(len(order), dtype=np.intp)
    rank[order] = np.arange(len(order))
    return rank


def _row_bytes(certificates, i):
    """Row ``i``'s content as bytes: its centre, gap, class and every array of
    its scale (float64, native order), for a total order of the rows."""
    parts = [
        np.asarray(certificates.center[i], dtype=np.float64),
        np.asarray([certificates.gap[i]], dtype=np.float64),
        np.asarray([certificates.class_index[i]], dtype=np.float64),
    ]
    for array in certificates.scales._arrays().values():
        if array is not None:
            parts.append(np.asarray(array[i], dtype=np.float64).ravel())
    return b"".join(np.ascontiguousarray(p).tobytes() for p in parts)


#: The semi-axes (``c * gap * s``) and centres the memory's floating-point
#: geometry is proved for: squares and fourth powers of lengths, and their
#: ratios, stay normal float64 numbers (two balls of radius 1e-100 or 1e200,
#: centres one radius apart, were both kept: their squared supports
#: underflowed to 0 or overflowed). 1e-30..1e30 holds 1e-7..1e7 with room.
LENGTH_RANGE = (1e-30, 1e30)


def check_lengths(certificates):
    """Refuse (ValueError) a row whose semi-axes or centre lie outside
    :data:`LENGTH_RANGE` (zero semi-axes of flat regions, and abstained rows,
    are allowed)."""
    low, high = LENGTH_RANGE
    live = ~certificates.abstained & (certificates.gap > 0)
    if not live.any():
        return
    if np.abs(certificates.center[live]).max() > high:
        raise ValueError(
            f"centres beyond {high:g} in magnitude are outside the range the "
            f"memory's geometry is proved for ({low:g}..{high:g}): rescale the inputs"
        )
    rho = certificates.c * certificates.gap
    largest = rho * certificates.scales.largest()
    smallest = rho * certificates.scales.smallest()
    bad = live & (
        (largest > high)
        | ((largest > 0) & (largest < low))
        | ((smallest > 0) & (smallest < low))
    )
    if bad.any():
        row = int(np.argmax(bad))
        raise ValueError(
            f"row {row}'s semi-axes (c * gap * scale, {smallest[row]:.3g} to "
            f"{largest[row]:.3g}) are outside the range the memory's geometry is "
            f"proved for ({low:g}..{high:g}): rescale the inputs"
        )


def below_floor(region):
    """Whether a reduced ``region`` is thinner than :data:`LENGTH_RANGE`
    allows (it then abstains: a region of semi-axes 5e-101 is a point to the
    memory's squares)."""
    return region.inradius < LENGTH_RANGE[0]


def make_contiguous(form):
    """Make a Scale's arrays C-contiguous in place (same values), as a pickle
    restores them: a capped row's basis is a strided view of an
    eigendecomposition (strides (0, 32, 8)), and products with it round
    differently (1.4e-15 relative), so a pickled memory would answer
    differently."""
    for name in ("values", "basis", "rest", "frame", "cuts"):
        array = getattr(form, name)
        if isinstance(array, np.ndarray) and not array.flags.c_contiguous:
            setattr(form, name, np.ascontiguousarray(array))
