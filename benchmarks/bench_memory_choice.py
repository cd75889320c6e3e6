"""A memory-aware choice between a strategy's certificate and ANCER's, per input.

Can choosing, input by input, between rank-k RANCER's (or RDDRS's) region and
ANCER's, after seeing what the memory leaves of each, keep the rotated
strategies' lead over ANCER through memory-based certification? Choosing
between two certified bounds after the fact needs a union bound (DESIGN.md
section 5), so each input with two different candidates has both bounded at
``alpha / 2``: the counts behind each certificate's ``alpha`` bound are read
back from ``p_lower`` and bounded again. Rank-k RANCER and RDDRS build on
ANCER's answer and certify on the same banks, so ANCER's certificate of an
input is exactly the second candidate they would certify; inputs whose
strategy kept ANCER's answer (the same smoothing) have one candidate, at
``alpha``.

Reads (or computes) the certificates of ``bench_memory_shrink.py`` (the same
``--results`` folder, ``--model``, inputs and ``n``) and runs the memory
(``shrink='capped'``) in input order under each rule:

* ``alone``: the strategy's certificates, as ``memory='auto'`` gives;
* ``objective``: the candidate whose region leaves the memory with the larger
  ``proxy radius + kappa * radius`` (the strategies' objective, kappa 2);
* ``proxy``: the larger proxy radius;
* ``radius``: the larger radius (the proxy radius breaks ties);
* ``unreduced``: the strategy's region where the memory leaves it whole,
  ANCER's otherwise.

Prints, per rule, certified accuracy at 0.5 and 0.75, ACR, AC R~ and the
reductions, with paired bootstrap 95% intervals against ANCER alone.

    python benchmarks/bench_memory_choice.py \\
        --dataset /usr/share/datasets/fashion-mnist --images \\
        --model fashion.joblib --results raw --inputs 120 --strategies rancer
"""

import argparse

import numpy as np
from bench_memory_shrink import (
    ACCURACY_AT,
    add_run_arguments,
    certificates,
    prepared,
)
from bench_quality import bootstrap_interval

from smoothlearn import MemoryCertifier
from smoothlearn.bounds import clopper_pearson_lower
from smoothlearn.noise import get_noise

RULES = ("alone", "objective", "proxy", "radius", "unreduced")
KAPPA = 2.0


def bound_again(cert, alpha, level):
    """``(gap, abstained)`` of ``cert`` bounded at ``level`` instead of
    ``alpha``: each count recovered from its ``alpha`` bound (the bound is
    increasing in the count), then bounded again."""
    gap, abstained = np.zeros(len(cert)), np.ones(len(cert), dtype=bool)
    tables = {}
    family = get_noise(cert.noise)
    for i in range(len(cert)):
        if cert.p_lower[i] <= 0:
            continue
        n = int(cert.n_draws[i])
        if n not in tables:
            counts = np.arange(n + 1)
            tables[n] = (
                clopper_pearson_lower(counts, n, alpha),
                clopper_pearson_lower(counts, n, level),
            )
        at_alpha, at_level = tables[n]
        count = int(np.argmin(np.abs(at_alpha - cert.p_lower[i])))
        if at_level[count] >= 0.5:
            gap[i] = float(family.gap(np.array([at_level[count]]))[0])
            abstained[i] = False
    return gap, abstained


def run(candidates, y, rule):
    """The memory over the inputs in order, keeping per input the candidate
    ``rule`` prefers; ``candidates``: ``(cert, gap, abstained, offered)``."""
    memory = MemoryCertifier(shrink="capped")
    memory._initialise(candidates[0][0])
    d = candidates[0][0].n_features
    out = {"radius": np.zeros(len(y)), "proxy_radius": np.zeros(len(y))}
    out["correct"] = np.zeros(len(y), dtype=bool)
    out["reduced"], out["second"] = 0, 0
    # tried: (which, region, reduced, label, proxy radius); other rules prefer
    # the strategy's candidate (which 0)
    preferred = {
        "objective": lambda t: t[4] + KAPPA * t[1].inradius,
        "proxy": lambda t: t[4],
        "radius": lambda t: (t[1].inradius, t[4]),
    }.get(rule, lambda t: -t[0])
    for i in range(len(y)):
        tried = []
        for which, (cert, gap, abstained, offered) in enumerate(candidates):
            if not offered[i] or abstained[i]:
                continue
            region = MemoryCertifier._region(cert, i, cert.c * gap[i])
            region, reduced = memory._certify_one(region, cert.label[i])
            if region is not None:
                proxy = region.rho * region.form.geometric_mean(d)[0]
                tried.append((which, region, reduced, cert.label[i], proxy))
        if rule == "unreduced" and len(tried) == 2 and tried[0][2]:
            tried = tried[1:]  # the strategy's region was cut: ANCER's
        if not tried:
            continue
        which, region, reduced, label, proxy = max(tried, key=preferred)
        memory._store(region, label)
        out["reduced"] += reduced
        out["second"] += which == 1
        if label == y[i]:
            out["correct"][i] = True
            out["radius"][i], out["proxy_radius"][i] = region.inradius, proxy
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(parser, inputs=120)
    parser.add_argument("--strategies", nargs="+", default=["rancer"])
    parser.add_argument("--rules", nargs="+", default=list(RULES))
    args = parser.parse_args()
    clf, X, y = prepared(args)
    alpha = clf.alpha
    every = np.ones(len(y), dtype=bool)
    ancer, _ = certificates(clf, "ancer", X, y, args.results, args.chunk)
    base = run([(ancer, ancer.gap, ancer.abstained, every)], y, "alone")
    rng = np.random.RandomState(0)

    def report(name, r):
        acc = [np.mean(r["radius"] >= t) for t in ACCURACY_AT]
        line = (
            f"{name:<22} acc@{ACCURACY_AT} "
            + " ".join(f"{a:.3f}" for a in acc)
            + f"  ACR {r['radius'].mean():.3f}  ACR~ {r['proxy_radius'].mean():.3f}"
            + f"  reduced {r['reduced']}  ANCER's kept {r['second']}"
        )
        if r is not base:
            for key, label in (("proxy_radius", "ACR~"), ("radius", "ACR")):
                mean, low, high = bootstrap_interval(r[key], base[key], args.boot, rng)
                line += f"  {label} {mean:+.3f} [{low:+.3f}, {high:+.3f}]"
        print(line, flush=True)

    report("ancer alone", base)
    ancer_half = bound_again(ancer, alpha, alpha / 2)
    d = ancer.n_features
    for text in args.strategies:
        cert, _ = certificates(clf, text, X, y, args.results, args.chunk)
        # the strategy kept ANCER's answer: one candidate, at alpha
        same = np.isclose(
            cert.scales.geometric_mean(d), ancer.scales.geometric_mean(d), rtol=1e-6
        ) & np.isclose(cert.p_lower, ancer.p_lower, rtol=1e-9)
        half = bound_again(cert, alpha, alpha / 2)
        first = (
            cert,
            np.where(same, cert.gap, half[0]),
            np.where(same, cert.abstained, half[1]),
            every,
        )
        second = (
            ancer,
            ancer_half[0],
            ancer_half[1],
            ~same,
        )
        print(f"{text}: {same.sum()} of {len(y)} inputs kept ANCER's answer")
        for rule in args.rules:
            if rule == "alone":
                candidates = [(cert, cert.gap, cert.abstained, every)]
            else:
                candidates = [first, second]
            report(f"{text} {rule}", run(candidates, y, rule))


if __name__ == "__main__":
    main()
