"""An estimator's memories, keyed by the smoothing each makes sound.

``SmoothedClassifier.memories_`` holds one :class:`MemoryCertifier` per
smoothing (:func:`~smoothlearn.strategies.describe_smoothing`, with the grid
and the network's arithmetic where not the default); this module finds or adds
one (:func:`remembered`) and re-keys the memories of models saved by earlier
versions (:func:`key_by_smoothing`, :func:`resolved_rank_key`).
"""

import re
import warnings

import numpy as np

from ..noise import get_noise
from ..strategies import STRATEGIES
from ..strategies._base import describe_smoothing, describe_value
from ..strategies._curvature import resolve_rank
from ._memory import MemoryCertifier

__all__ = ["key_by_smoothing", "remembered", "resolved_rank_key"]


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
