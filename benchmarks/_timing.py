"""Timing shared by the benchmarks: interleaved runs, best or median of repeats."""

import statistics
import time

__all__ = ["CLOCKS", "best_of", "median_of"]


#: The clocks a benchmark can time with: ``wall`` (what a user waits) or
#: ``cpu`` (this process's CPU time: on a machine shared with other work, the
#: time the work itself took, which the others' load inflates far less; with
#: one torch thread it is the wall time of a quiet machine).
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def _interleaved(runs, repeats, clock="wall"):
    """Times of each callable in ``runs`` (a dict) over ``repeats`` rounds.

    Interleaving puts every contender under the same machine load.
    """
    now = CLOCKS[clock]
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            start = now()
            fn()
            times[name].append(now() - start)
    return times


def best_of(runs, repeats, clock="wall"):
    """Best time of each callable: the least disturbed run."""
    return {name: min(t) for name, t in _interleaved(runs, repeats, clock).items()}


def median_of(runs, repeats, clock="wall"):
    """Median time of each callable: robust to a disturbed run either way."""
    return {
        name: statistics.median(t)
        for name, t in _interleaved(runs, repeats, clock).items()
    }
