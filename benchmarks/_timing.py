"""Timing shared by the benchmarks: interleaved runs, best of the repeats."""

import time

__all__ = ["best_of"]


def best_of(runs, repeats):
    """Best wall time of each callable in ``runs`` (a dict), over ``repeats`` rounds.

    Interleaving puts every contender under the same machine load; the best of
    the repeats is the least disturbed run.
    """
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: min(values) for name, values in times.items()}
