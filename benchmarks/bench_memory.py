"""MemoryCertifier query time: ball-tree index against a brute-force scan.

Builds one memory of up to --size certificates (64 dimensions, diagonal
ellipsoids around clustered centres of intrinsic dimension 8, ten labels),
and at each checkpoint times --queries memory-certification queries (without
storing them) with the index and with a linear scan over every entry, on the
same stored regions. Both answer identically (checked); the index should grow
sublinearly. With ``--rank k`` the regions are rotated (k random orthonormal
directions plus an isotropic remainder), as rank-k rancer/rddrs store them:

    python benchmarks/bench_memory.py [--size 100000] [--queries 200]
    python benchmarks/bench_memory.py --dim 784 --rank 9 --size 3000 --queries 50

``--calls`` times instead the joint step of one call of each of these sizes
on a fresh memory (the same certificates): seconds per input, pairs whose
circumscribed balls meet, and pairs whose regions meet, against a scan of
every pair (``index=False``) up to ``--scan-up-to`` inputs; with
``--fixed-density`` the inputs' space grows with the call:

    python benchmarks/bench_memory.py --calls 500 1000 2000 4000 8000 \\
        --rank 4 [--fixed-density]

``--clock cpu`` times by this process's CPU time (for a shared machine).
``--results-file benchmarks/results/synthetic.json`` writes the table into
that results file as ``--results-table`` (default ``memory_queries``, or
``memory_calls`` with ``--calls``), with the command, commit and machine
(``benchmarks/_results.py``).
"""

import argparse
import time

import numpy as np
from _results import add_arguments, record_table, run_record
from _timing import CLOCKS

from smoothlearn import Certificates, MemoryCertifier


def certificates(rng, n, d, means, basis, rank=None):
    label = rng.randint(0, len(means), n)
    center = (
        means[label] + rng.randn(n, basis.shape[0]) @ basis + 0.05 * rng.randn(n, d)
    )
    shape = {"scale": rng.uniform(0.05, 0.3, size=(n, d))}
    if rank is not None:
        # a fifth of the inputs carry another label than their cluster's: the
        # memory then has conflicts to settle inside clusters
        label = np.where(rng.rand(n) < 0.2, rng.randint(0, len(means), n), label)
        shape = {
            "scale": rng.uniform(0.05, 1.5, size=(n, rank)),
            "basis": np.stack([np.linalg.qr(rng.randn(d, rank))[0] for _ in range(n)]),
            "scale_rest": rng.uniform(0.05, 0.3, n),
        }
    return Certificates(
        label=label,
        abstained=np.zeros(n, bool),
        p_lower=np.full(n, 0.99),
        gap=rng.uniform(0.5, 2.0, n),
        center=center,
        noise="gaussian",
        class_index=label,
        **shape,
    )


def time_queries(memory, queries, now=time.perf_counter):
    start = now()
    answers = []
    before = memory.n_inspected_
    for i in range(len(queries)):
        region = memory._region(queries, i, queries.c * queries.gap[i])
        out, reduced = memory._certify_one(region, queries.label[i], "capped")
        answers.append((out is None, reduced, None if out is None else out.inradius))
    seconds = (now() - start) / len(queries)
    return seconds, answers, (memory.n_inspected_ - before) / len(queries)


def time_calls(args, rng, means, basis):
    """The joint step's cost per input as one call grows; the rows of its
    results table (:data:`CALL_COLUMNS`)."""
    now = CLOCKS[args.clock]
    rows = []
    columns = ("inputs", "index ms/input", "scan ms/input", "pairs near", "meeting")
    print(" ".join(f"{c:>{w}}" for c, w in zip(columns, (8, 15, 14, 11, 9))))
    for size in args.calls:
        cert = certificates(rng, size, args.dim, means, basis, args.rank)
        if args.fixed_density:
            # a larger call covers more space: blocks of the first size, each
            # moved far from the others, so each input has as many near
            # neighbours at every size
            block = np.arange(size) // args.calls[0]
            cert = cert._replace(center=cert.center + 100.0 * block[:, None])
        memory = MemoryCertifier()
        start = now()
        out = memory.fit_transform(cert)
        t_index = (now() - start) / size
        t_scan = float("nan")
        if size <= args.scan_up_to:
            scan = MemoryCertifier(index=False)
            start = now()
            again = scan.fit_transform(cert)
            t_scan = (now() - start) / size
            assert np.array_equal(again.radius, out.radius), "index and scan disagree"
        print(
            f"{size:>8} {1e3 * t_index:>15.3f} {1e3 * t_scan:>14.3f} "
            f"{memory.n_inspected_:>11} {int(out.reduced.sum()):>9}"
        )
        rows.append(
            {
                "inputs": size,
                "index_ms": 1e3 * t_index,
                # a call beyond --scan-up-to is not scanned: an empty cell
                "scan_ms": 1e3 * t_scan if size <= args.scan_up_to else "",
                "pairs_near": int(memory.n_inspected_),
                "meeting": int(out.reduced.sum()),
            }
        )
    return rows


#: Columns of the query table in a results file (``benchmarks/_results.py``).
QUERY_COLUMNS = [
    {"key": "entries", "label": "entries", "format": ","},
    {"key": "index_ms", "label": "index (ms per query)", "format": ".3f"},
    {"key": "scan_ms", "label": "scan (ms per query)", "format": ".3f"},
    {"key": "inspected", "label": "entries inspected per query", "format": ".1f"},
    {"key": "scan_over_index", "label": "scan/index", "format": ".1fx"},
]
#: Columns of the joint-step table (``--calls``).
CALL_COLUMNS = [
    {"key": "inputs", "label": "inputs", "format": ","},
    {"key": "index_ms", "label": "index (ms per input)", "format": ".3f"},
    {"key": "scan_ms", "label": "scan (ms per input)", "format": ".3f"},
    {"key": "pairs_near", "label": "pairs whose balls meet", "format": ","},
    {"key": "meeting", "label": "inputs reduced", "format": ","},
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--rank", type=int, default=None)
    parser.add_argument("--calls", type=int, nargs="+", default=None)
    parser.add_argument("--scan-up-to", type=int, default=2000)
    parser.add_argument("--fixed-density", action="store_true")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    add_arguments(parser, None, "benchmarks/results/synthetic.json")
    args = parser.parse_args()
    record = run_record()
    now = CLOCKS[args.clock]
    rng = np.random.RandomState(0)
    d = args.dim
    means = rng.rand(10, d) * 2
    basis = rng.randn(8, d) * 0.15
    settings = {
        "dim": d,
        "rank": args.rank,
        "clusters": 10,
        "intrinsic_dim": 8,
        "clock": args.clock,
        "seed": 0,
    }
    if args.calls:
        rows = time_calls(args, rng, means, basis)
        if args.results_file:
            settings.update(
                calls=args.calls,
                scan_up_to=args.scan_up_to,
                fixed_density=args.fixed_density,
            )
            write(args, "memory_calls", CALL_COLUMNS, rows, settings, record)
        return
    memory = MemoryCertifier()
    queries = certificates(
        np.random.RandomState(1), args.queries, d, means, basis, args.rank
    )
    checkpoints = [
        c
        for c in (300, 1_000, 3_000, 10_000, 30_000, 100_000, 300_000)
        if c <= args.size
    ]
    columns = ("entries", "index ms/query", "scan ms/query", "inspected", "scan/index")
    print(" ".join(f"{c:>{w}}" for c, w in zip(columns, (8, 15, 14, 11, 11))))
    built = 0
    rows = []
    build_start = time.perf_counter()
    for target in checkpoints:
        memory.transform(certificates(rng, target - built, d, means, basis, args.rank))
        built = target
        memory.index = True
        t_index, a_index, cand = time_queries(memory, queries, now)
        memory.index = False
        t_scan, a_scan, _ = time_queries(memory, queries, now)
        memory.index = True
        assert a_index == a_scan, "index and scan disagree"
        print(
            f"{memory.n_entries_:>8} {1e3 * t_index:>15.3f} {1e3 * t_scan:>14.3f} "
            f"{cand:>11.1f} {t_scan / t_index:>10.1f}x"
        )
        rows.append(
            {
                "entries": int(memory.n_entries_),
                "index_ms": 1e3 * t_index,
                "scan_ms": 1e3 * t_scan,
                "inspected": float(cand),
                "scan_over_index": t_scan / t_index,
            }
        )
    build = time.perf_counter() - build_start
    print(
        f"built {memory.n_entries_} entries in {build:.1f} s "
        f"({memory.n_reduced_} reduced, {memory.n_abstained_} abstained)"
    )
    if args.results_file:
        settings.update(size=args.size, queries=args.queries, checkpoints=checkpoints)
        write(args, "memory_queries", QUERY_COLUMNS, rows, settings, record)


def write(args, default_name, columns, rows, settings, record):
    name = args.results_table or default_name
    record_table(
        args.results_file,
        name,
        columns=columns,
        rows=rows,
        settings=settings,
        record=record,
    )
    print(f"wrote table {name!r} of {args.results_file}")


if __name__ == "__main__":
    main()
