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
"""

import argparse
import time

import numpy as np

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


def time_queries(memory, queries):
    start = time.perf_counter()
    answers = []
    before = memory.n_inspected_
    for i in range(len(queries)):
        region = memory._region(queries, i, queries.c * queries.gap[i])
        out, reduced = memory._certify_one(region, queries.label[i], "capped")
        answers.append((out is None, reduced, None if out is None else out.inradius))
    seconds = (time.perf_counter() - start) / len(queries)
    return seconds, answers, (memory.n_inspected_ - before) / len(queries)


def time_calls(args, rng, means, basis):
    """The joint step's cost per input as one call grows."""
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
        start = time.perf_counter()
        out = memory.fit_transform(cert)
        t_index = (time.perf_counter() - start) / size
        t_scan = float("nan")
        if size <= args.scan_up_to:
            scan = MemoryCertifier(index=False)
            start = time.perf_counter()
            again = scan.fit_transform(cert)
            t_scan = (time.perf_counter() - start) / size
            assert np.array_equal(again.radius, out.radius), "index and scan disagree"
        print(
            f"{size:>8} {1e3 * t_index:>15.3f} {1e3 * t_scan:>14.3f} "
            f"{memory.n_inspected_:>11} {int(out.reduced.sum()):>9}"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--rank", type=int, default=None)
    parser.add_argument("--calls", type=int, nargs="+", default=None)
    parser.add_argument("--scan-up-to", type=int, default=2000)
    parser.add_argument("--fixed-density", action="store_true")
    args = parser.parse_args()
    rng = np.random.RandomState(0)
    d = args.dim
    means = rng.rand(10, d) * 2
    basis = rng.randn(8, d) * 0.15
    if args.calls:
        time_calls(args, rng, means, basis)
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
    build_start = time.perf_counter()
    for target in checkpoints:
        memory.transform(certificates(rng, target - built, d, means, basis, args.rank))
        built = target
        memory.index = True
        t_index, a_index, cand = time_queries(memory, queries)
        memory.index = False
        t_scan, a_scan, _ = time_queries(memory, queries)
        memory.index = True
        assert a_index == a_scan, "index and scan disagree"
        print(
            f"{memory.n_entries_:>8} {1e3 * t_index:>15.3f} {1e3 * t_scan:>14.3f} "
            f"{cand:>11.1f} {t_scan / t_index:>10.1f}x"
        )
    build = time.perf_counter() - build_start
    print(
        f"built {memory.n_entries_} entries in {build:.1f} s "
        f"({memory.n_reduced_} reduced, {memory.n_abstained_} abstained)"
    )


if __name__ == "__main__":
    main()
