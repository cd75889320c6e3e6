"""MemoryCertifier: memory-based certification for data-dependent smoothing."""

import numbers

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.neighbors import BallTree
from tqdm.auto import tqdm

from ..geometry import (
    Region,
    contains_point,
    ellipsoids_disjoint,
    l1_distance_lower_bound,
    l2_distance_to_ellipsoid,
    support_extent,
)
from ..regions import Certificates, with_abstentions
from ..utils._sklearn_compat import Interval, StrOptions
from ._joint import (
    SLAB_MARGIN,
    below_floor,
    candidate_directions,
    check_lengths,
    content_rank,
    make_contiguous,
    pair_slab,
    realise,
)

__all__ = ["MemoryCertifier"]


def _same_region(a, b):
    """Whether two remembered regions are the same region, exactly."""
    return (
        a.norm == b.norm
        and a.rho == b.rho
        and np.array_equal(a.center, b.center)
        and a.form.equals(b.form)
    )


class _CentreIndex:
    """Ball trees over memory centres, rebuilt logarithmically as entries arrive.

    Entries go to a small unindexed buffer; a full buffer merges with the
    trees of equal or smaller size into one new tree (the Bentley-Saxe
    logarithmic method), so inserting N entries costs O(N log^2 N) and a query
    visits O(log N) trees. Each tree remembers the largest circumradius it
    holds: a query for a region of circumradius r around x asks each tree for
    centres within ``r + that maximum``, then filters exactly.
    """

    def __init__(self, metric, buffer_size=64, leaf_size=32):
        self.metric = metric
        self.buffer_size = buffer_size
        self.leaf_size = leaf_size
        self.trees = []  # (BallTree, ids, max circumradius)
        self.buffer = []  # entry ids

    def add(self, entry_id, centres, radii):
        self.buffer.append(entry_id)
        if len(self.buffer) < self.buffer_size:
            return
        ids = list(self.buffer)
        self.buffer = []
        while self.trees and len(self.trees[-1][1]) <= len(ids):
            ids = list(self.trees.pop()[1]) + ids
        ids = np.array(sorted(ids))
        tree = BallTree(centres[ids], leaf_size=self.leaf_size, metric=self.metric)
        self.trees.append((tree, ids, float(radii[ids].max())))

    def candidates(self, x, radius, centres, radii):
        """Ids of entries whose circumscribed ball meets the ball (x, radius).

        Also returns how many entries were inspected (distance computed).
        """
        found = [np.asarray(self.buffer, dtype=np.intp)]
        for tree, ids, max_radius in self.trees:
            hits = tree.query_radius(x[None], r=radius + max_radius)[0]
            found.append(ids[hits])
        ids = np.concatenate(found)
        if len(ids) == 0:
            return ids, 0
        ord_ = 2 if self.metric == "euclidean" else 1
        dist = np.linalg.norm(centres[ids] - x, ord=ord_, axis=1)
        return np.sort(ids[dist <= radius + radii[ids]]), len(ids)


class MemoryCertifier(TransformerMixin, BaseEstimator):
    """Memory-based certification: makes data-dependent certificates sound.

    A data-dependent smoothed classifier (one whose smoothing depends on the
    input) certifies each input with its own smoothing distribution, so two
    certificates of different labels may overlap. The memory (ANCER App. D,
    Algorithm 1; general ellipsoids per RANCER section 3) keeps every region
    it has given out and makes each new one avoid those of other classes.

    ``transform`` takes one call's certificates together (``joint=True``, the
    default):

    * against regions remembered from earlier calls, each certificate alone,
      as the papers do: it abstains if its centre lies in one of another
      class, else it is reduced until it avoids every such region that it
      meets (MaxIntersect by circumscribed balls, Intersect by the convex
      K(t) test, the reduction by ``shrink``);
    * among the call's own certificates, none has been given out yet: every
      pair of different labels whose regions meet gets a pair of separating
      slabs, ``|v.(y - x_i)| <= g_i`` and ``|v.(y - x_j)| <= g_j`` with
      ``g_i + g_j < v.(x_j - x_i)``, placed by ``objective``; each region
      then takes all its slabs at once (``shrink``). No certificate abstains
      because of another of the call (but two of different labels at one
      centre, which nothing separates: both abstain), and the answer is the
      same for any order of the inputs;
    * it remembers the final regions (an abstention is not remembered).

    ``joint=False`` is the papers' sequential memory: certificates in input
    order, each against everything remembered before it (the earlier ones of
    the same call too), so a later input abstains where an earlier region of
    another class holds its centre, and the answers depend on the order. It
    is kept for comparison and for streams of single queries (where the two
    agree: a call of one certificate).

    ``transform`` is the certification step itself and therefore updates the
    memory: every answer given must be remembered for later answers to stay
    consistent with it. On Fashion-MNIST (ANCER, built-in CNN, first 400 test
    images, n = 10,000; ``benchmarks/bench_memory_shrink.py``, docs page
    Benchmarks) the joint step keeps the certificates' own certified
    accuracy at every radius up to 0.5 (one input fewer of 400 at 0.75) and
    96% of their proxy radius, where
    the sequential memory abstains on 7 inputs and keeps 60% of it; its ACR
    is 77% of the sequential memory's (103% with ``objective='radius'``).

    Parameters
    ----------
    eps : float, default=1e-6
        Margin subtracted from the distance to a region of another class when
        reducing (and from a pair's separation before splitting it).
    index : bool, default=True
        Find candidate regions with ball trees over the centres (pruned);
        False compares against every entry (brute force, for benchmarks).
    joint : bool, default=True
        Make a call's certificates disjoint together, independent of their
        order (True), or one by one in input order (False: the papers'
        Algorithm 1).
    objective : {'volume', 'radius'}, default='volume'
        Where each pair's slabs sit, and how a region is reduced into them.
        ``'volume'``: at the midpoint of the pair's separation (a side shorter
        than half keeps its length), each cut the largest region inside its
        slab, and (``shrink='auto'``) a region takes the cuts or the cap,
        whichever has the larger volume: the proxy radius. ``'radius'``:
        where both inscribed balls fit (``r_i + r_j`` at most the
        separation) both are kept, else the smaller ball where it is at most
        half; each cut the largest region inside its slab that keeps the
        ball a cap would keep (the region's inscribed ball, or the slab's),
        and a region takes the cuts or the cap, whichever has the larger
        inscribed radius, then volume: the certified radius first, then the
        proxy radius.
    shrink : {'auto', 'cut', 'capped', 'ball'}, default='auto'
        How a region is reduced into its slabs (joint) or away from a
        remembered region at distance ``D`` (sequential, and in the joint
        step against earlier calls). ``'cut'``: a rank-one down-date of the
        region's covariance per slab (:meth:`~smoothlearn.geometry.Region.cut`):
        the region keeps its length along every other direction, and a cut
        certificate stores ``O(d)`` numbers per cut (``Certificates.scales``
        with cuts). ``'capped'``: every semi-axis capped at the smallest
        extent or ``D`` (:meth:`~smoothlearn.scale.Scale.capped`), inside that
        ball and holding the papers' ball. ``'ball'``: the papers' ball of
        radius ``min(D, inscribed radius)``. ``'auto'``: in the joint step,
        ``'cut'`` or ``'capped'`` per region by ``objective`` among the
        call's slabs (l1 regions are capped: a cut is an l2 down-date), and
        ``'capped'`` against remembered regions and in the sequential memory
        (a larger remembered region would make later inputs abstain more:
        one certificate per call, on the Fashion-MNIST images above, abstains
        on 7 of 80 with cuts there against 1 capped).
    verbose : int, default=0
        From 1, a progress bar over the certificates of each ``transform``.

    Attributes
    ----------
    n_entries_ : int
        Regions remembered.
    n_seen_ : int
        Certificates processed.
    n_abstained_ : int
        Certificates turned into abstentions by the memory.
    n_reduced_ : int
        Certificates whose region the memory shrank.
    n_inspected_ : int
        Memory entries whose centre a query looked at, summed over queries
        (all entries for a linear scan; far fewer with the index).
    norm_, noise_, n_features_in_ : str, str, int
        What the memory holds (fixed by its first certificates).

    Examples
    --------
    >>> import numpy as np
    >>> from smoothlearn import Certificates
    >>> from smoothlearn.estimators import MemoryCertifier
    >>> cert = Certificates(label=[0, 1], abstained=[False, False],
    ...                     p_lower=[0.9, 0.9], gap=[1.0, 1.0],
    ...                     center=[[0.0, 0.0], [1.5, 0.0]], scale=[1.0, 1.0],
    ...                     noise="gaussian", class_index=[0, 1])
    >>> out = MemoryCertifier().fit_transform(cert)
    >>> out.reduced.tolist(), np.round(out.radius, 3).tolist()
    ([True, True], [0.75, 0.75])
    >>> seq = MemoryCertifier(joint=False).fit_transform(cert)
    >>> seq.reduced.tolist(), np.round(seq.radius, 3).tolist()
    ([False, True], [1.0, 0.5])
    """

    _parameter_constraints: dict = {
        "eps": [Interval(numbers.Real, 0, None, closed="left")],
        "index": ["boolean"],
        "joint": ["boolean"],
        "objective": [StrOptions({"volume", "radius"})],
        "shrink": [StrOptions({"auto", "cut", "capped", "ball"})],
        "verbose": ["verbose"],
    }

    # memories pickled before these parameters existed go on with the defaults
    joint = True
    objective = "volume"
    shrink = "auto"

    def __init__(
        self,
        eps=1e-6,
        index=True,
        joint=True,
        objective="volume",
        shrink="auto",
        verbose=0,
    ):
        self.eps = eps
        self.index = index
        self.joint = joint
        self.objective = objective
        self.shrink = shrink
        self.verbose = verbose

    # --------------------------------------------------------------- state
    def reset(self):
        """Forget every remembered region."""
        for name in (
            "n_entries_",
            "n_seen_",
            "n_abstained_",
            "n_reduced_",
            "n_inspected_",
            "norm_",
            "noise_",
            "n_features_in_",
            "_centres",
            "_radii",
            "_labels",
            "_regions",
            "_index",
        ):
            self.__dict__.pop(name, None)
        return self

    def _initialise(self, certificates):
        self.norm_ = certificates.norm
        self.noise_ = certificates.noise
        self.n_features_in_ = certificates.n_features
        self._start()

    def _start(self):
        """Empty state for the memory's norm, noise and size."""
        d = self.n_features_in_
        self.n_entries_ = self.n_seen_ = self.n_abstained_ = self.n_reduced_ = 0
        self.n_inspected_ = 0
        # grown by doubling; rows past n_entries_ are unused
        self._centres = np.zeros((16, d))
        self._radii = np.zeros(16)
        self._labels = []
        self._regions = []
        metric = "euclidean" if self.norm_ == "l2" else "manhattan"
        self._index = _CentreIndex(metric)

    def _check(self, certificates):
        if not isinstance(certificates, Certificates):
            raise TypeError(
                "MemoryCertifier takes smoothlearn Certificates; got "
                f"{type(certificates).__name__}."
            )
        self._validate_params()
        check_lengths(certificates)
        if not hasattr(self, "n_entries_"):
            return
        if certificates.n_features != self.n_features_in_:
            raise ValueError(
                f"certificates have {certificates.n_features} features; the memory "
                f"holds regions of {self.n_features_in_}."
            )
        if certificates.noise != self.noise_:
            raise ValueError(
                f"certificates of the {certificates.noise} family cannot join a memory "
                f"of {self.noise_} certificates."
            )

    def _entries(self):
        """The remembered ``(region, label)`` pairs, in the order remembered."""
        return list(zip(getattr(self, "_regions", []), getattr(self, "_labels", [])))

    def _starts_with(self, other):
        """Whether this memory's entries begin with all of ``other``'s (same
        regions, same labels, same order): it is ``other`` continued."""
        mine, theirs = self._entries(), other._entries()
        return len(mine) >= len(theirs) and all(
            _same_region(a, b) and la == lb for (a, la), (b, lb) in zip(mine, theirs)
        )

    def _absorb(self, other):
        """Remember ``other``'s entries after this memory's own.

        For memories that should have been one (an earlier version split them):
        later certificates then avoid the regions of both. Certificates the two
        already gave may overlap each other; nothing can take those back.
        """
        if not other._entries():
            return self
        if not hasattr(self, "n_entries_"):
            self._initialise_like(other)
        elif (self.norm_, self.noise_, self.n_features_in_) != (
            other.norm_,
            other.noise_,
            other.n_features_in_,
        ):
            raise ValueError("cannot join memories of different families or sizes")
        for region, label in other._entries():
            self._store(region, label)
        for name in ("n_seen_", "n_abstained_", "n_reduced_"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        return self

    def _initialise_like(self, other):
        self.norm_, self.noise_, self.n_features_in_ = (
            other.norm_,
            other.noise_,
            other.n_features_in_,
        )
        self._start()

    # ------------------------------------------------------------ regions
    @staticmethod
    def _region(certificates, i, rho):
        # copies (a list index copies): a caller editing its Certificates in
        # place must not be able to change what the memory holds
        return Region(
            center=np.array(certificates.center[i], dtype=np.float64),
            rho=float(rho),
            scale=certificates.scales[[i]],
            norm=certificates.norm,
        )

    def _store(self, region, label):
        make_contiguous(region.form)  # as a pickle restores it
        entry = len(self._regions)
        self._regions.append(region)
        self._labels.append(label)
        if entry == len(self._radii):
            self._centres = np.concatenate(
                [self._centres, np.zeros_like(self._centres)]
            )
            self._radii = np.concatenate([self._radii, np.zeros_like(self._radii)])
        self._centres[entry] = region.center
        self._radii[entry] = region.circumradius
        self.n_entries_ = entry + 1
        if self.index:
            self._index.add(entry, self._centres, self._radii)

    def _candidates(self, region):
        """Entries whose circumscribed ball meets the region's (MaxIntersect)."""
        if not self.n_entries_:
            return np.zeros(0, dtype=np.intp)
        if self.index:
            ids, inspected = self._index.candidates(
                region.center, region.circumradius, self._centres, self._radii
            )
            self.n_inspected_ += inspected
            return ids
        # brute force: a linear scan over every entry
        n = self.n_entries_
        self.n_inspected_ += n
        ord_ = 2 if region.norm == "l2" else 1
        dist = np.linalg.norm(self._centres[:n] - region.center, ord=ord_, axis=1)
        return np.flatnonzero(dist <= region.circumradius + self._radii[:n])

    def _distance(self, region, point):
        if region.norm == "l2":
            return l2_distance_to_ellipsoid(region, point)
        return l1_distance_lower_bound(region, point)

    def _conflicts(self, region, label):
        """Remembered regions of another label that meet ``region``: yields
        each, or None (then stops) where one holds the region's centre."""
        ord_ = 2 if region.norm == "l2" else 1
        for j in self._candidates(region):
            if self._labels[j] == label:
                continue
            other = self._regions[j]
            if contains_point(other, region.center):
                yield None
                return
            # candidates met the region's circumscribed ball; MaxIntersect
            # again for the current (possibly smaller) region
            gap = np.linalg.norm(region.center - other.center, ord=ord_)
            if gap > region.circumradius + other.circumradius:
                continue
            if ellipsoids_disjoint(region, other):
                continue
            yield other

    def _plane_from(self, other, region):
        """``(v, g)``: a slab ``|v.(y - x)| <= g`` around the region's centre
        ``x`` that misses ``other`` (``v.(x - a) - h_other(v)`` less the
        margins), the one costing the region least among
        :func:`candidate_directions`; None where none clears the margins."""
        diff = region.center - other.center
        best, best_ratio = None, -np.inf
        for v in candidate_directions(diff, other, region):
            # a margin of the pair's own (against the distance and the
            # other's support): the slab misses the other whatever eps
            reach = support_extent(other, v)
            g = (
                float(v @ diff)
                - reach
                - SLAB_MARGIN * (float(np.linalg.norm(diff)) + reach)
                - self.eps
            )
            if not g > 0.0:
                continue
            ratio = g / max(support_extent(region, v), 1e-300)
            if ratio > best_ratio:
                best, best_ratio = (v, g), ratio
        return best

    def _certify_one(self, region, label, shrink):
        """Algorithm 1 for one region: ``(region or None, reduced)``."""
        reduced = False
        for other in self._conflicts(region, label):
            if other is None:
                return None, reduced
            distance = self._distance(other, region.center) - self.eps
            if not distance > 0:  # NaN too: no distance is certain
                return None, reduced
            # DESIGN.md section 6 and both papers take the ball of radius
            # min(D, inscribed radius). Any part of the region inside the
            # ball of radius D misses the other region as that ball does, so
            # the capped region is as sound; it holds that ball, and where
            # the region is shorter than D along some axes it keeps them.
            # A cut keeps the region in a slab that misses the other region
            if shrink == "ball":
                region = region.ball(min(distance, region.inradius))
            elif shrink == "cut" and region.norm == "l2":  # l1: capped
                plane = self._plane_from(other, region)
                cut = None if plane is None else region.cut(*plane)
                region = region.capped(distance) if cut is None else cut
            else:
                region = region.capped(distance)
            reduced = True
        return region, reduced

    def _resolved_shrink(self, norm):
        """``shrink`` as it runs: ``'auto'`` is the joint step's choice per
        region (l2) and today's capped axes in the sequential memory."""
        if self.shrink == "auto":
            return "auto" if self.joint and norm == "l2" else "capped"
        return self.shrink

    def _process(self, certificates, verbose=0):
        if self.joint:
            return self._process_joint(certificates, verbose)
        return self._process_sequential(certificates, verbose)

    def _process_sequential(self, certificates, verbose=0):
        shrink = self._resolved_shrink(certificates.norm)
        shrunk = {}
        abstain = set()
        for i in self._rows(certificates, verbose):
            self.n_seen_ += 1
            if certificates.abstained[i]:
                continue
            region, reduced = self._certify_one(
                self._region(certificates, i, certificates.c * certificates.gap[i]),
                certificates.label[i],
                shrink,
            )
            if region is None or (reduced and below_floor(region)):
                abstain.add(i)
                continue
            if reduced:
                shrunk[i] = region.form
            self._store(region, certificates.label[i])
        return self._written(certificates, abstain, shrunk)

    def _process_joint(self, certificates, verbose=0):
        """The joint step: against remembered regions each certificate alone,
        as the sequential memory (abstain where a centre lies in one of
        another class, else reduce: capped under ``shrink='auto'``); among the
        call's own certificates, every
        pair of different labels whose regions meet gets separating slabs
        (:func:`~smoothlearn.estimators._joint.pair_slab`); then each region
        takes all its slabs (:func:`~smoothlearn.estimators._joint.realise`).
        No certificate abstains because of another of the call (but for two
        of different labels at one centre, which nothing separates)."""
        shrink = self._resolved_shrink(certificates.norm)
        rho = certificates.c * certificates.gap
        live = np.flatnonzero(~certificates.abstained)
        self.n_seen_ += len(certificates)
        originals = {i: self._region(certificates, i, rho[i]) for i in live}
        regions, abstain = {}, set()
        # against earlier calls, as the sequential memory: each row alone
        earlier = "capped" if shrink == "auto" else shrink
        for i in self._rows(certificates, verbose, rows=live):
            region, reduced = self._certify_one(
                originals[i], certificates.label[i], earlier
            )
            if region is None or (reduced and below_floor(region)):
                abstain.add(i)
            else:
                regions[i] = region
        planes = {i: [] for i in regions}
        rank = content_rank(certificates)
        inradius = {i: regions[i].inradius for i in regions}
        for a, b in self._call_pairs(certificates, regions, rank):
            region_a, region_b = regions[a], regions[b]
            if ellipsoids_disjoint(region_a, region_b):
                continue
            slab = pair_slab(
                region_a, region_b, inradius[a], inradius[b], self.objective, self.eps
            )
            if slab is None:  # one centre, two labels: nothing separates them
                abstain.update((a, b))
                continue
            v, g_a, g_b = slab
            planes[a].append((v, g_a, int(rank[b])))
            planes[b].append((v, g_b, int(rank[a])))
        shrunk = {}
        for i in live:
            if i in abstain:
                continue
            if planes[i]:
                region = realise(regions[i], planes[i], shrink, self.objective)
                if region is None or below_floor(region):
                    abstain.add(i)
                    continue
                regions[i] = region
            if not regions[i].form.equals(originals[i].form):
                shrunk[i] = regions[i].form
        for i in live:
            if i not in abstain:
                self._store(regions[i], certificates.label[i])
        return self._written(certificates, abstain, shrunk)

    def _call_pairs(self, certificates, regions, rank):
        """Pairs ``(a, b)`` of the call's certificates of different labels
        whose circumscribed balls meet, each oriented by ``rank`` (so by
        content, not position) and in that order: a ball tree over the
        centres, O(n log n) plus the pairs found (a scan without ``index``)."""
        rows = np.array(sorted(regions), dtype=np.intp)
        if len(rows) < 2:
            return []
        centres = np.stack([regions[i].center for i in rows])
        radii = np.array([regions[i].circumradius for i in rows])
        labels = certificates.label[rows]
        ord_ = 2 if certificates.norm == "l2" else 1
        if self.index:
            metric = "euclidean" if ord_ == 2 else "manhattan"
            tree = BallTree(centres, metric=metric)
            near = tree.query_radius(centres, r=radii + radii.max())
        else:
            near = [np.arange(len(rows))] * len(rows)
        pairs = []
        for p, found in enumerate(near):
            found = found[(found > p) & (labels[found] != labels[p])]
            if not len(found):
                continue
            dist = np.linalg.norm(centres[found] - centres[p], ord=ord_, axis=1)
            self.n_inspected_ += len(found)
            for q in found[dist <= radii[p] + radii[found]]:
                a, b = rows[p], rows[q]
                pairs.append((a, b) if rank[a] < rank[b] else (b, a))
        pairs.sort(key=lambda pair: (rank[pair[0]], rank[pair[1]]))
        return pairs

    @staticmethod
    def _rows(certificates, verbose, rows=None, what="memory"):
        rows = range(len(certificates)) if rows is None else rows
        return tqdm(rows, desc=what, unit="input", disable=not verbose, leave=False)

    def _written(self, certificates, abstain, shrunk):
        """``certificates`` with the rows of ``abstain`` abstaining and those of
        ``shrunk`` (row to one-row Scale) reduced."""
        abstained = certificates.abstained.copy()
        reduced = certificates.reduced.copy()
        class_index = certificates.class_index.copy()
        gap = certificates.gap.copy()
        rows = sorted(abstain)
        abstained[rows], gap[rows], class_index[rows] = True, 0.0, -1
        self.n_abstained_ += len(rows)
        kept = sorted(i for i in shrunk if i not in abstain)
        reduced[kept] = True
        self.n_reduced_ += len(kept)
        label = with_abstentions(
            certificates.label.copy(), abstained, certificates.abstain_label
        )
        return certificates._replace(
            abstained=abstained,
            reduced=reduced,
            scale=certificates.scales.with_rows(kept, [shrunk[i] for i in kept]),
            label=label,
            class_index=class_index,
            gap=gap,
        )

    # ------------------------------------------------------------ sklearn API
    def partial_fit(self, certificates, y=None):
        """Memory-certify ``certificates`` (one call) and remember them.

        Parameters
        ----------
        certificates : Certificates
        y : ignored

        Returns
        -------
        self
        """
        self.transform(certificates)
        return self

    def fit(self, certificates, y=None):
        """``reset`` then ``partial_fit``."""
        return self.reset().partial_fit(certificates)

    def transform(self, certificates, *, verbose=None):
        """Memory-certify ``certificates``, one call's (remembering each answer).

        Parameters
        ----------
        certificates : Certificates
        verbose : int, default=None
            This call's verbosity, at least the memory's own (an estimator
            passes its ``verbose``); None: the memory's own.

        Returns
        -------
        Certificates
            The same certificates with regions reduced (``reduced``; cut
            regions carry their cuts in ``scales``) or turned into
            abstentions where they conflicted with the memory.

        Raises
        ------
        ValueError
            Semi-axes ``c * gap * scale`` (not 0) or centres outside 1e-30..1e30
            (``LENGTH_RANGE``, where the geometry is proved; reductions below abstain).
        """
        self._check(certificates)
        fresh = not hasattr(self, "n_entries_")
        if fresh:
            self._initialise(certificates)
        verbose = self.verbose if verbose is None else max(verbose, self.verbose)
        saved = self._snapshot()
        try:
            return self._process(certificates, verbose=verbose)
        except BaseException:
            # a failed call leaves the memory exactly as it was
            if fresh:
                self.reset()
            else:
                self._restore(saved)
            raise

    _COUNTERS = ("n_entries_", "n_seen_", "n_abstained_", "n_reduced_", "n_inspected_")

    def _snapshot(self):
        """What a call may change: the counters, and how many entries."""
        return {name: getattr(self, name) for name in self._COUNTERS}

    def _restore(self, saved):
        """Undo a call's changes (:meth:`_snapshot`): entries stored since are
        dropped and the index is rebuilt from the entries kept."""
        n = saved["n_entries_"]
        if len(self._regions) != n:
            del self._regions[n:]
            del self._labels[n:]
            self._centres[n:] = 0.0
            self._radii[n:] = 0.0
            self._index = _CentreIndex(self._index.metric)
            if self.index:
                for entry in range(n):
                    self._index.add(entry, self._centres, self._radii)
        for name, value in saved.items():
            setattr(self, name, value)

    def fit_transform(self, certificates, y=None):
        """``reset`` then ``transform``."""
        return self.reset().transform(certificates)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.requires_fit = False
        return tags
