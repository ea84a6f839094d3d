"""Counterfactuals per second of each method on a full protocol pair, and CEM's gain from batching.

The per-pair generators (ExpGAN, C3LT) are timed after a warm-up call that loads their checkpoints,
so the figure is the forward passes alone.

Run by hand (not in CI), on an otherwise idle machine:

    .venv/bin/python benchmarks/throughput.py [--pair 4->9] [--single 16] [--write results/benchmark_methods.md]

For CEM it also runs the same code one image at a time on the first ``--single`` queries and
reports the ratio of per-image times (batched is faster by that factor).
"""
from __future__ import annotations

import argparse
import platform
import time

import torch

from cfkit.data import ensure_mnist
from cfkit.evaluation import parse_pairs, protocol_queries
from cfkit.methods.adversarial import AdversarialAttack
from cfkit.methods.c3lt import C3LT
from cfkit.methods.cem import CEM
from cfkit.methods.cve import CVE
from cfkit.methods.expgan import ExpGAN
from cfkit.methods.ldce import LDCE
from cfkit.paths import atomic_write_text
from cfkit.table import markdown
from cfkit.zoo.checkpoints import load


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pair", default="4->9")
    parser.add_argument("--single", type=int, default=16, help="CEM queries to run one at a time")
    parser.add_argument("--write", default=None, help="also write the table (Markdown) to this file")
    args = parser.parse_args()
    ensure_mnist(verbose=False)
    (query, target), = parse_pairs(args.pair)
    x, _ = protocol_queries((query, target))
    source = torch.full((len(x),), query)
    classifier = load("classifier")
    methods = [AdversarialAttack(classifier), CEM(classifier, load("ae_all")), CVE(classifier), ExpGAN(classifier),
               C3LT(classifier), LDCE(classifier)]
    rows = []
    for method in methods:
        method.explain(x[:2], target, source=source[:2])  # warm-up: checkpoint loading, first-call overheads
        result = method.explain(x, target, source=source)
        rows.append({"method": method.name, "pair": args.pair, "n": len(x), "seconds": round(result.seconds, 1),
                     "cf_per_second": round(len(x) / result.seconds, 2), "validity": round(result.validity, 4)})
        print(rows[-1], flush=True)
    cem = methods[1]
    start = time.perf_counter()
    for i in range(args.single):
        cem.explain(x[i : i + 1], target, source=source[i : i + 1])
    single = (time.perf_counter() - start) / args.single
    batched = rows[1]["seconds"] / len(x)
    lines = [
        f"# Method throughput ({args.pair}, {platform.machine()}, {torch.get_num_threads()} torch threads, "
        f"torch {torch.__version__})", "", markdown(rows), "",
        f"CEM one image at a time: {single:.3f} s per counterfactual over {args.single} queries; batched: "
        f"{batched:.3f} s; batching speed-up {single / batched:.1f}x.", "",
    ]
    print("\n".join(lines))
    if args.write:
        atomic_write_text(args.write, "\n".join(lines))


if __name__ == "__main__":
    main()
