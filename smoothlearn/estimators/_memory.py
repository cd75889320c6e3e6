"""MemoryCertifier: memory-based certification for data-dependent smoothing."""

import numbers
import re
import warnings

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
)
from ..noise import get_noise
from ..regions import Certificates, with_abstentions
from ..strategies import STRATEGIES
from ..strategies._base import describe_smoothing, describe_value
from ..strategies._curvature import resolve_rank
from ..utils._sklearn_compat import Interval, StrOptions

__all__ = ["MemoryCertifier", "key_by_smoothing", "remembered", "resolved_rank_key"]


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
    Algorithm 1; general ellipsoids per RANCER section 3) processes
    certificates in order; for each new one it

    * abstains if its centre lies in a remembered region of another class;
    * otherwise shrinks its region until it avoids every intersecting
      remembered region of another class (MaxIntersect by circumscribed
      balls, Intersect by the convex K(t) test, LargestOutSubset by
      projecting the centre onto that region);
    * remembers the final region (an abstention is not remembered).

    The order of processing is part of the state. ``transform`` is the
    certification step itself and therefore updates the memory: every answer
    given must be remembered for later answers to stay consistent with it.

    Parameters
    ----------
    eps : float, default=1e-6
        Margin subtracted from the distance to a region of another class when
        shrinking.
    shrink : {'capped', 'ball'}, default='capped'
        LargestOutSubset's region, for a distance ``D`` (less ``eps``) from
        the centre to the region of another class. ``'ball'``: the ball of
        radius ``min(D, inscribed radius)`` (the papers' method). ``'capped'``:
        the region with every semi-axis capped at ``D``
        (:meth:`~smoothlearn.scale.Scale.capped`): inside the ball of radius
        ``D``, so as sound, and it holds the papers' ball (the same certified
        radius) with a larger or equal proxy radius. They differ where the
        region is shorter than ``D`` along some axes and longer along others:
        on Fashion-MNIST (built-in CNN, first 400 test images, n = 10,000,
        ``benchmarks/bench_memory_shrink.py``) AC R~ rose from 2.24 to 2.30
        for ANCER, 2.07 to 2.13 for rank-9 rancer and 1.95 to 2.13 for rddrs
        (whose ACR rose from 1.33 to 1.41). A reduced region in a diagonal
        frame costs a dense ``eigh`` (O(d^3)): the memory's seconds per input
        rose from 0.14 to 0.18 for rancer there.
    index : bool, default=True
        Find candidate regions with ball trees over the centres (pruned);
        False compares against every entry (brute force, for benchmarks).
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
    ([False, True], [1.0, 0.5])
    """

    _parameter_constraints: dict = {
        "eps": [Interval(numbers.Real, 0, None, closed="left")],
        "index": ["boolean"],
        "shrink": [StrOptions({"capped", "ball"})],
        "verbose": ["verbose"],
    }

    # memories pickled before ``shrink`` existed go on with the default
    shrink = "capped"

    def __init__(self, eps=1e-6, index=True, shrink="capped", verbose=0):
        self.eps = eps
        self.index = index
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

    def _certify_one(self, region, label):
        """Algorithm 1 for one region: ``(region or None, reduced)``."""
        reduced = False
        ord_ = 2 if region.norm == "l2" else 1
        for j in self._candidates(region):
            if self._labels[j] == label:
                continue
            other = self._regions[j]
            if contains_point(other, region.center):
                return None, reduced
            # candidates met the region's circumscribed ball before any shrinking;
            # MaxIntersect again for the (smaller) current region
            gap = np.linalg.norm(region.center - other.center, ord=ord_)
            if gap > region.circumradius + other.circumradius:
                continue
            if ellipsoids_disjoint(region, other):
                continue
            distance = self._distance(other, region.center) - self.eps
            if distance <= 0:
                return None, reduced
            # DESIGN.md section 6 and both papers take the ball of radius
            # min(D, inscribed radius). Any part of the region inside the
            # ball of radius D misses the other region as that ball does, so
            # the capped region is as sound; it holds that ball, and where
            # the region is shorter than D along some axes it keeps them
            # (the default; 'ball' is the papers')
            if self.shrink == "ball":
                region = region.ball(min(distance, region.inradius))
            else:
                region = region.capped(distance)
            reduced = True
        return region, reduced

    def _process(self, certificates, verbose=0):
        abstained = certificates.abstained.copy()
        reduced = certificates.reduced.copy()
        shrunk_rows, shrunk_scales = [], []  # rows the memory shrank, and how
        label = certificates.label.copy()
        class_index = certificates.class_index.copy()
        gap = certificates.gap.copy()
        rows = tqdm(
            range(len(certificates)),
            desc="memory",
            unit="input",
            disable=not verbose,
            leave=False,
        )
        for i in rows:
            self.n_seen_ += 1
            if certificates.abstained[i]:
                continue
            region, shrunk = self._certify_one(
                self._region(certificates, i, certificates.c * certificates.gap[i]),
                certificates.label[i],
            )
            if region is None:
                abstained[i], gap[i], class_index[i] = True, 0.0, -1
                self.n_abstained_ += 1
                continue
            if shrunk:
                reduced[i] = True
                shrunk_rows.append(i)
                shrunk_scales.append(region.form)
                self.n_reduced_ += 1
            self._store(region, certificates.label[i])
        label = with_abstentions(label, abstained, certificates.abstain_label)
        return certificates._replace(
            abstained=abstained,
            reduced=reduced,
            scale=certificates.scales.with_rows(shrunk_rows, shrunk_scales),
            label=label,
            class_index=class_index,
            gap=gap,
        )

    # ------------------------------------------------------------ sklearn API
    def partial_fit(self, certificates, y=None):
        """Memory-certify ``certificates`` in order and remember them.

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
        """Memory-certify ``certificates`` in order (remembering each answer).

        Parameters
        ----------
        certificates : Certificates
        verbose : int, default=None
            This call's verbosity, at least the memory's own (an estimator
            passes its ``verbose``); None: the memory's own.

        Returns
        -------
        Certificates
            The same certificates with regions shrunk (``reduced``) or turned
            into abstentions where they conflicted with the memory.
        """
        self._check(certificates)
        if not hasattr(self, "n_entries_"):
            self._initialise(certificates)
        verbose = self.verbose if verbose is None else max(verbose, self.verbose)
        return self._process(certificates, verbose=verbose)

    def fit_transform(self, certificates, y=None):
        """``reset`` then ``transform``."""
        return self.reset().transform(certificates)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.requires_fit = False
        return tags


# --------------------------------------------- an estimator's memories by smoothing
def remembered(memories, smoothing):
    """The memory of ``smoothing`` in ``memories`` (an estimator's ``memories_``,
    keyed by :func:`~smoothlearn.strategies.describe_smoothing`), added empty
    when it has none yet."""
    if smoothing not in memories:
        memories[smoothing] = MemoryCertifier()
    return memories[smoothing]


def key_by_smoothing(memories, resolve=None):
    """Memories saved by an earlier version, keyed by their smoothing.

    Earlier versions keyed each memory by ``(name, ((param, repr), ...), noise,
    repr(sigma))``, which split one smoothing's memory between spellings
    (``kappa=2`` and ``kappa=2.0``), and kept rancer's and rddrs's
    ``rank='auto'`` apart from the rank it resolves to (``resolve`` maps a
    description to the resolved one, :func:`resolved_rank_key`); memories
    that turn out to be one smoothing's are joined
    (:meth:`MemoryCertifier._absorb`), so later certificates avoid the regions
    of all of them. A key that cannot be read is kept, with a warning.

    Returns
    -------
    by_smoothing : dict of str to MemoryCertifier
    moved : dict
        ``id`` of each memory given to the memory that now holds its entries.
    """
    by_smoothing, moved = {}, {}
    for key, memory in memories.items():
        smoothing = key if isinstance(key, str) else _smoothing_of_old_key(key)
        if smoothing is None:
            warnings.warn(
                f"a memory saved under {key!r} by an earlier version could not be "
                "matched to a smoothing; it is kept under that key, and later "
                "certificates of its smoothing are not constrained by it.",
                UserWarning,
                stacklevel=4,
            )
            smoothing = key
        elif resolve is not None:
            smoothing = resolve(smoothing)
        if smoothing in by_smoothing:
            warnings.warn(
                f"an earlier version kept two memories for {smoothing}; they are "
                "joined, so later certificates avoid the regions of both.",
                UserWarning,
                stacklevel=4,
            )
            by_smoothing[smoothing]._absorb(memory)
        else:
            by_smoothing[smoothing] = memory
        moved[id(memory)] = by_smoothing[smoothing]
    return by_smoothing, moved


#: A description of rancer or rddrs (a user's subclass too), and its rank.
_RANKED = re.compile(r"^(rancer|rddrs)(<[^>]*>)?\(")
_RANK = re.compile(r"\brank=('auto'|None|\d+)")


def resolved_rank_key(smoothing, n_features, n_classes):
    """``smoothing`` (a description) with rancer's or rddrs's rank as it runs on
    inputs of ``n_features`` and ``n_classes`` classes
    (:func:`~smoothlearn.strategies._curvature.resolve_rank`); other
    descriptions as they are."""
    if not _RANKED.match(smoothing):
        return smoothing
    match = _RANK.search(smoothing)
    if match is None:
        return smoothing
    text = match.group(1)
    rank = "auto" if text == "'auto'" else None if text == "None" else int(text)
    resolved = describe_value(resolve_rank(rank, n_features, n_classes))
    return smoothing[: match.start(1)] + resolved + smoothing[match.end(1) :]


def _smoothing_of_old_key(key):
    """The smoothing an earlier version's memory key stood for, or None."""
    try:
        name, params, noise, sigma = key
        # the reprs were written by this library into the pickle being loaded
        # (which could run any code anyway): numbers, strings, None, strategies
        namespace = {cls.__name__: cls for cls in STRATEGIES.values()}
        namespace.update(np=np, inf=np.inf, nan=np.nan)
        values = {
            param: eval(text, {"__builtins__": {}}, namespace)  # noqa: S307
            for param, text in params
        }
        strategy = STRATEGIES[name](**values)
        return describe_smoothing(strategy, get_noise(noise), float(sigma))
    except Exception:  # any key this function cannot read: the caller warns
        return None
