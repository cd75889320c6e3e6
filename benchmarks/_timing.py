"""Timing shared by the benchmarks: interleaved runs, best or median of repeats."""

import statistics
import time

__all__ = ["best_of", "median_of"]


def _interleaved(runs, repeats):
    """Wall times of each callable in ``runs`` (a dict) over ``repeats`` rounds.

    Interleaving puts every contender under the same machine load.
    """
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def best_of(runs, repeats):
    """Best wall time of each callable: the least disturbed run."""
    return {name: min(t) for name, t in _interleaved(runs, repeats).items()}


def median_of(runs, repeats):
    """Median wall time of each callable: robust to a disturbed run either way."""
    return {
        name: statistics.median(t) for name, t in _interleaved(runs, repeats).items()
    }
