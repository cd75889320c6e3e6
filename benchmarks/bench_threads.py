"""Torch's intra-op threads against ``n_jobs`` workers, on what a user runs
first: the README's main job and its quickstart, each a fresh process.

Each round runs every case once, in turn (so the cases share the machine's
load), and times the whole command (wall clock, training included): the
main job (``smoothlearn certify -q --no-plot``) with ``OMP_NUM_THREADS`` at
each of ``--threads`` and ``--n-jobs 1``, then with one thread and ``--n-jobs
2``; the quickstart (the README's first Python block, as a script) at each of
``--threads``. The table gives each case's times in round order and their
median, and the load average around each round: threads on a shared machine
depend on the others' work, so a run belongs to its load. On a machine with
more cores, pass their counts (``--threads 1 2 8 16``) and a matching
``--n-jobs``.

    python benchmarks/bench_threads.py --rounds 3 \\
        --results-file benchmarks/results/digits.json
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _results import add_arguments, run_record, write_table

ROOT = Path(__file__).resolve().parent.parent


def quickstart_code(readme=ROOT / "README.md"):
    """The README's quickstart: its first Python block."""
    match = re.search(r"```python\n(.*?)\n```", Path(readme).read_text(), re.DOTALL)
    if match is None:
        raise ValueError(f"{readme} has no Python block")
    return match.group(1)


def cases(threads, n_jobs, folder):
    """``{name: (environment, command)}`` in the order a round runs them."""
    # --overwrite: every round trains and certifies afresh
    main_job = [sys.executable, "-m", "smoothlearn", "certify", "-q", "--no-plot"]
    main_job.append("--overwrite")
    out = {}
    for t in threads:
        out[f"main job, {t} thread{'s' * (t != 1)}"] = (
            t,
            [*main_job, "--n-jobs", "1", "--out", os.path.join(folder, f"t{t}")],
        )
    for j in n_jobs:
        if j == 1:
            continue
        out[f"main job, n_jobs={j}, 1 thread each"] = (
            1,
            [*main_job, "--n-jobs", str(j), "--out", os.path.join(folder, f"j{j}")],
        )
    script = os.path.join(folder, "quickstart.py")
    Path(script).write_text(quickstart_code())
    for t in threads:
        out[f"quickstart, {t} thread{'s' * (t != 1)}"] = (t, [sys.executable, script])
    return out


def run(threads, command, folder):
    """Wall seconds of ``command`` with ``threads`` torch threads; a failed
    command stops the benchmark with its output."""
    env = dict(
        os.environ,
        OMP_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
        PYTHONPATH=os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p
        ),
    )
    start = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=folder, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(
            f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}"
        )
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--n-jobs", type=int, nargs="+", default=[1, 2])
    add_arguments(parser, "threads", "benchmarks/results/digits.json")
    args = parser.parse_args()
    if args.rounds < 1 or min(args.threads + args.n_jobs) < 1:
        parser.error("--rounds, --threads and --n-jobs must be at least 1")
    record = run_record("cpu")
    times, loads = {}, []
    with tempfile.TemporaryDirectory() as folder:
        work = cases(args.threads, args.n_jobs, folder)
        for r in range(args.rounds):
            before = os.getloadavg()[0]
            for name, (threads, command) in work.items():
                seconds = run(threads, command, folder)
                times.setdefault(name, []).append(seconds)
                print(f"round {r + 1}: {name:<36} {seconds:7.1f} s", flush=True)
            loads.append([round(before, 2), round(os.getloadavg()[0], 2)])
    print("load average (1 min) before and after each round:", loads)
    rows = [
        {"case": name, "seconds": t, "median": statistics.median(t)}
        for name, t in times.items()
    ]
    if args.results_file:
        write_table(
            args,
            columns=[
                {"key": "case", "label": "work, setting"},
                {"key": "seconds", "label": "wall s, round by round", "format": ".1f"},
                {"key": "median", "label": "median s", "format": ".1f"},
            ],
            rows=rows,
            settings={
                "rounds": args.rounds,
                "threads": args.threads,
                "n_jobs": args.n_jobs,
                "load_average_by_round": loads,
            },
            record=record,
        )


if __name__ == "__main__":
    main()
