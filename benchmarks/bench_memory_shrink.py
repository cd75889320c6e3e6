"""The memories on the same certificates: quality per strategy, before and
after each memory.

Certifies the first ``--inputs`` test inputs with each strategy once, without
a memory (``memory=None``, the certificates each input's smoothing gives),
then passes them whole to each memory of ``--memories``:
``sequential[-SHRINK]`` (the papers' Algorithm 1, in input order),
``joint[-OBJECTIVE][-SHRINK]`` (one call made disjoint together: what
``memory="auto"`` gives, the memory only post-processing the certificates),
``rowwise`` (one certificate per call, a stream of single queries). Prints,
per memory ("none": before any), each strategy's certified accuracy at
``bench_quality.RADII``, ACR, AC R~, the reductions and abstentions, the
share of AC R~ kept and the memory's seconds per input against
certification's; then each strategy against ``ancer`` and each memory
against the sequential one, with paired bootstrap 95% intervals (AC R~, ACR,
certified accuracy at ``ACCURACY_AT``). ``--shuffle K`` runs each memory on
K shuffles of the inputs and prints the largest change of a certificate.
``--results DIR`` keeps the certificates per chunk of ``--chunk`` inputs (an
interrupted run resumes; a later run with more inputs certifies only the new
ones). ``--results-file benchmarks/results/<dataset>.json`` writes the table
(one row per memory and strategy) and the paired intervals into that data
set's results file as ``--results-table`` (default ``memory``).

    python benchmarks/bench_memory_shrink.py \\
        --dataset /usr/share/datasets/fashion-mnist --images --train 12000 \\
        --epochs 5 --model fashion.joblib --results raw --inputs 400 \\
        --strategies ancer isotropic_dd rancer rddrs \\
        --memories sequential joint joint-radius rowwise --shuffle 1
"""

import argparse
import os
import warnings

import joblib
import numpy as np
from _results import add_arguments, radii_column, run_record, write_table
from _timing import CLOCKS
from bench_quality import RADII, bootstrap_interval, load, parse_strategy

from smoothlearn import Certificates, MemoryCertifier, SmoothedClassifier

#: Radii of the certified-accuracy differences (against ancer, and against
#: the sequential memory)
ACCURACY_AT = (0, 0.25, 0.5, 0.75)


def certificates(clf, text, X, y, results, chunk, clock="wall"):
    """``text``'s certificates of ``X`` without a memory, kept per chunk, and
    the seconds per input on ``clock`` (both clocks are kept)."""
    parts, seconds, resumed = [], [], 0
    for first in range(0, len(X), chunk):
        index = slice(first, min(first + chunk, len(X)))
        path = results and os.path.join(results, f"{text}@{first}.joblib")
        if path and os.path.exists(path):
            saved = joblib.load(path)
            resumed += len(saved["cert"])
        else:
            clf.set_params(strategy=parse_strategy(text))
            start = {name: now() for name, now in CLOCKS.items()}
            with warnings.catch_warnings():  # memory=None on purpose
                warnings.simplefilter("ignore", UserWarning)
                cert = clf.certify(X[index])
            saved = {"cert": cert, "y": y[index]}
            for name, now in CLOCKS.items():
                saved[f"{name}_seconds"] = (now() - start[name]) / len(cert)
            if path:
                joblib.dump(saved, path)
        if not np.array_equal(saved["y"], y[index]):
            raise ValueError(f"{path} holds certificates of other inputs")
        parts.append(saved["cert"])
        if f"{clock}_seconds" not in saved:
            raise ValueError(f"{path} has no {clock} time: certify it again")
        seconds.append(np.full(len(saved["cert"]), saved[f"{clock}_seconds"]))
    return Certificates.concatenate(parts), np.concatenate(seconds), resumed


def row(cert, y):
    correct = (~cert.abstained) & (cert.label == y)
    return {
        "correct": correct,
        "radius": np.where(correct, cert.radius, 0.0),
        "proxy_radius": np.where(correct, cert.proxy_radius, 0.0),
        "reduced": int(cert.reduced.sum()),
    }


def add_run_arguments(parser, inputs):
    """The options of a run over the certificates of ``certificates``."""
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--images", action="store_true")
    parser.add_argument("--train", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--inputs", type=int, default=inputs)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--sigma", type=float, default=0.25)
    parser.add_argument("--boot", type=int, default=2000)
    parser.add_argument("--chunk", type=int, default=20)
    parser.add_argument("--model", default=None, help="joblib file to reuse")
    parser.add_argument("--results", default=None, help="folder of certificates")
    parser.add_argument("--device", default="cpu", help="torch device (cpu)")
    parser.add_argument(
        "--batch-size", type=int, default=1000, help="noisy inputs per forward pass"
    )


def prepared(args):
    """``(clf, X, y)``: the classifier of ``--model`` (trained and saved there
    if missing) without a memory, and the first ``--inputs`` test inputs."""
    X_train, y_train, X_test, y_test = load(args.dataset, args.images)
    X, y = X_test[: args.inputs], y_test[: args.inputs]
    if args.model and os.path.exists(args.model):
        clf = joblib.load(args.model)
    else:
        clf = SmoothedClassifier(
            max_epochs=args.epochs, random_state=0, device=args.device
        )
        clf.fit(X_train[: args.train], y_train[: args.train])
        if args.model:
            joblib.dump(clf, args.model)
    clf.set_params(
        sigma=args.sigma,
        n=args.n,
        memory=None,
        device=args.device,
        batch_size=args.batch_size,
    )
    if args.results:
        os.makedirs(args.results, exist_ok=True)
    return clf, X, y


class RowByRow:
    """A memory given one certificate per call (``rowwise``): what a stream of
    single queries gets."""

    def fit_transform(self, cert):
        memory = MemoryCertifier()
        return Certificates.concatenate(
            [memory.transform(cert[i : i + 1]) for i in range(len(cert))]
        )


def memory_of(spec):
    """A memory from its spec: ``sequential[-SHRINK]`` (the papers' order),
    ``joint[-OBJECTIVE][-SHRINK]``, or ``rowwise`` (one row per call); None
    for ``none``."""
    if spec == "none":
        return None
    if spec == "rowwise":
        return RowByRow()
    mode, *rest = spec.split("-")
    params = {"joint": mode == "joint"}
    for part in rest:
        key = "objective" if part in ("volume", "radius") else "shrink"
        params[key] = part
    return MemoryCertifier(**params)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(parser, inputs=500)
    parser.add_argument("--strategies", nargs="+", default=["ancer", "rancer"])
    parser.add_argument(
        "--memories",
        nargs="+",
        default=["sequential", "joint", "joint-radius"],
        help="sequential[-SHRINK] or joint[-OBJECTIVE][-SHRINK] ('none' is "
        "always first)",
    )
    parser.add_argument(
        "--shuffle",
        type=int,
        default=0,
        help="also run each memory on this many shuffles of the inputs and "
        "report the largest change of a certificate",
    )
    add_arguments(parser, "memory")
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="the seconds reported: wall, or this process's CPU time (with one "
        "torch thread on shared cores, the time the work itself took)",
    )
    args = parser.parse_args()
    for spec in args.memories:
        memory_of(spec)  # a misspelt memory fails before any certificate
    record = run_record(args.device)
    clf, X, y = prepared(args)
    raw, resumed = {}, 0
    for text in args.strategies:
        cert, seconds, read = certificates(
            clf, text, X, y, args.results, args.chunk, args.clock
        )
        raw[text] = cert, seconds
        resumed += read
        print(f"{text}: {seconds.mean():.3f} s/input certified", flush=True)
    print(f"{args.dataset}: {len(X)} inputs, n={args.n}, accuracy at radii {RADII}")
    rng = np.random.RandomState(0)
    table, written, differences = {}, [], []
    for spec in ["none", *args.memories]:
        rows = {}
        for text, (cert, seconds) in raw.items():
            memory = memory_of(spec)
            if memory is not None:
                start = CLOCKS[args.clock]()
                out = memory.fit_transform(cert)
                memory_seconds = (CLOCKS[args.clock]() - start) / len(cert)
            else:
                out = cert
            rows[text] = r = row(out, y)
            table[spec, text] = r
            acc = [np.mean(r["correct"] & (out.radius >= t)) for t in RADII]
            extra, figures = "", {}
            if memory is not None:
                base = table["none", text]
                kept = r["proxy_radius"].mean() / max(
                    base["proxy_radius"].mean(), 1e-300
                )
                extra = (
                    f"  reduced {r['reduced']}  abstained "
                    f"{int(out.abstained.sum() - cert.abstained.sum())}  keeps AC R~ "
                    f"{kept:.0%}  memory {memory_seconds:.4f} s/input "
                    f"({memory_seconds / seconds.mean():.1%} of certification)"
                )
                figures = {
                    "kept": kept,
                    "abstained": int(out.abstained.sum() - cert.abstained.sum()),
                    "memory_seconds": memory_seconds,
                    "shuffled_change": 0.0 if args.shuffle else "",
                }
                for _ in range(args.shuffle):
                    order = rng.permutation(len(cert))
                    again = memory_of(spec).fit_transform(cert[order])
                    inverse = np.argsort(order)
                    change = max(
                        np.abs(again.radius[inverse] - out.radius).max(),
                        np.abs(again.proxy_radius[inverse] - out.proxy_radius).max(),
                    )
                    extra += f"  shuffled: max change {change:.1e}"
                    figures["shuffled_change"] = max(
                        figures["shuffled_change"], float(change)
                    )
            written.append(
                {
                    "memory_strategy": f"{spec.replace('-', ' ')}, {text}",
                    "certified_accuracy": [float(a) for a in acc],
                    "acr": float(r["radius"].mean()),
                    "acr_proxy": float(r["proxy_radius"].mean()),
                    "seconds": float(seconds.mean()),
                    **{key: figures.get(key, "") for key in MEMORY_KEYS},
                }
            )
            print(
                f"{spec:<22} {text:<14} acc "
                + " ".join(f"{a:.3f}" for a in acc)
                + f"  ACR {r['radius'].mean():.3f}  ACR~ {r['proxy_radius'].mean():.3f}"
                + extra,
                flush=True,
            )
        if "ancer" not in rows:
            continue
        for text, r in rows.items():
            if text == "ancer":
                continue
            line, found = versus(r, rows["ancer"], args.boot, rng)
            print(f"{spec:<22} {text:<14} - ancer" + line)
            differences += named(
                found,
                f"{spec.replace('-', ' ')}, {text}",
                f"{spec.replace('-', ' ')}, ancer",
            )
    for spec in args.memories:
        if spec == "sequential" or "sequential" not in args.memories:
            continue
        for text in raw:
            line, found = versus(
                table[spec, text], table["sequential", text], args.boot, rng
            )
            print(f"{spec:<22} {text:<14} - sequential" + line)
            differences += named(
                found, f"{spec.replace('-', ' ')}, {text}", f"sequential, {text}"
            )
    if args.results_file:
        write_table(
            args,
            columns=columns(args.clock),
            rows=written,
            differences=differences,
            settings={
                "dataset": args.dataset,
                "inputs": len(X),
                "n": args.n,
                "sigma": args.sigma,
                "alpha": clf.alpha,
                "epochs": args.epochs,
                "train_inputs": args.train,
                "strategies": args.strategies,
                "memories": args.memories,
                "shuffles": args.shuffle,
                "clock": args.clock,
                "bootstrap": args.boot,
                "certificates_read_from_earlier_runs": resumed,
            },
            record=record,
        )


#: The memory columns (blank on the rows of no memory).
MEMORY_KEYS = ("kept", "abstained", "memory_seconds", "shuffled_change")


def columns(clock):
    """The table's columns in a results file (``benchmarks/_results.py``); a
    row is named ``"<memory>, <strategy>"`` (``"joint volume, ancer"``)."""
    seconds = "CPU s/input" if clock == "cpu" else "s/input"
    return [
        {"key": "memory_strategy", "label": "memory, strategy"},
        radii_column("certified_accuracy", "certified accuracy at", RADII),
        {"key": "acr", "label": "ACR", "format": ".3"},
        {"key": "acr_proxy", "label": "AC R~", "format": ".3"},
        {"key": "kept", "label": "AC R~ kept", "format": ".0%"},
        {"key": "abstained", "label": "abstained", "format": "d"},
        {"key": "memory_seconds", "label": f"memory {seconds}", "format": ".3f"},
        {"key": "shuffled_change", "label": "shuffled: max change", "format": ".1e"},
        {"key": "seconds", "label": f"certify {seconds}", "format": ".3f"},
    ]


def named(found, a, b):
    """``versus``'s intervals as a results file's differences of ``a`` and ``b``."""
    return [{"a": a, "b": b, **item} for item in found]


def versus(r, base, boot, rng):
    """Paired bootstrap 95% intervals of ``r`` minus ``base``: AC R~, ACR and
    certified accuracy at ``ACCURACY_AT``. Returns the printed line and the
    intervals (``key``, ``mean``, ``low``, ``high``; ``certified_accuracy@t``
    for certified accuracy at ``t``)."""
    line, found = "", []
    for key, label in (("proxy_radius", "ACR~"), ("radius", "ACR")):
        mean, low, high = bootstrap_interval(r[key], base[key], boot, rng)
        verdict = "" if low <= 0 <= high else " *"
        line += f"  {label} {mean:+.3f} [{low:+.3f}, {high:+.3f}]{verdict}"
        name = {"radius": "acr", "proxy_radius": "acr_proxy"}[key]
        found.append({"key": name, "mean": mean, "low": low, "high": high})
    for t in ACCURACY_AT:  # certified accuracy at an l2 radius
        mean, low, high = bootstrap_interval(
            (r["correct"] & (r["radius"] >= t)).astype(float),
            (base["correct"] & (base["radius"] >= t)).astype(float),
            boot,
            rng,
        )
        verdict = "" if low <= 0 <= high else " *"
        line += f"  acc@{t} {mean:+.3f} [{low:+.3f}, {high:+.3f}]{verdict}"
        found.append(
            {"key": f"certified_accuracy@{t:g}", "mean": mean, "low": low, "high": high}
        )
    for item in found:
        for k in ("mean", "low", "high"):
            item[k] = float(item[k])
    return line, found


if __name__ == "__main__":
    main()
