"""Counterfactuals per second and peak memory of every method on a full protocol pair, and the wall time of
the last ``make reproduce``: together, ``results/benchmark.md``.

Each method runs in a fresh process (so its peak resident memory is its own: the process's high-water
mark, models and data included), after a two-image warm-up call that loads its checkpoints. The
reproduce time is read from ``results/reproduce.json``, which ``cfkit reproduce`` writes.

Run by hand (not in CI), on an otherwise idle machine:

    .venv/bin/python benchmarks/throughput.py [--pair 4->9] [--methods cem ldce] [--write results/benchmark.md]

The methods are the catalog's (cfkit/methods/catalog.py); a plugin module named in CFKIT_PLUGINS registers its
own, in this process and in the workers.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import time

import torch

from cfkit.data import ensure_mnist
from cfkit.evaluation import parse_pairs, protocol_queries
from cfkit.methods import catalog
from cfkit.paths import RESULTS_DIR, atomic_write_text
from cfkit.reproduce import REPRODUCE_RECORD, machine
from cfkit.table import markdown
from cfkit.zoo.checkpoints import load


def benchmarked() -> list[str]:
    """Every catalog method but the real-data reference (plugins in CFKIT_PLUGINS included)."""
    return [entry.name for entry in catalog.entries() if not entry.reference]


def measure(name: str, pair: str, n_queries: int = 0) -> dict:
    """Explain the first ``n_queries`` test queries of ``pair`` (0: all of them; the report runs each method in a
    fresh process): time, validity and peak memory."""
    ensure_mnist(verbose=False)
    (query, target), = parse_pairs(pair)
    x, _ = protocol_queries((query, target), n_queries)
    source = torch.full((len(x),), query)
    method = catalog.get(name).make(load("classifier"))
    method.explain(x[:2], target, source=source[:2])  # warm-up: checkpoint loading, first-call overheads
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = method.explain(x, target, source=source)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"method": catalog.label(name), "pair": pair, "n": len(x), "seconds": round(result.seconds, 1),
            "cf_per_second": round(len(x) / result.seconds, 2), "seconds_per_cf": round(result.seconds / len(x), 5),
            "peak_rss_mib": round(peak), "rss_before_run_mib": round(before), "validity": round(result.validity, 4)}


def reproduce_section() -> list[str]:
    path = RESULTS_DIR / REPRODUCE_RECORD
    if not path.is_file():
        return ["`make reproduce` has not been timed here yet: run it, then this script again."]
    record = json.loads(path.read_text())
    rows = [{"notebook": name, "seconds": seconds} for name, seconds in record["notebooks"].items()]
    size = "full size" if record["full_size"] else "NOT full size"
    return [f"`make reproduce` ({size}, finished {record['finished']}, install excluded): **{record['seconds']:.0f} s "
            f"= {record['seconds'] / 60:.1f} min** on {record['machine']['cpu']}, {record['machine']['cores']} cores, "
            f"{record['machine']['torch_threads']} torch threads.", "", markdown(rows)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pair", default="4->9")
    parser.add_argument("--methods", nargs="*", default=benchmarked(), choices=benchmarked())
    parser.add_argument("--write", default=None, help="also write the report (Markdown) to this file")
    args = parser.parse_args()
    context = multiprocessing.get_context("spawn")
    rows = []
    for name in args.methods:
        with context.Pool(1) as pool:
            rows.append(pool.apply(measure, (name, args.pair)))
        print(rows[-1], flush=True)
    host = machine()
    lines = [
        "# Benchmarks", "",
        f"Machine: {host['cpu']}, {host['cores']} cores, {host['memory_gib']} GiB, torch {host['torch']} with "
        f"{host['torch_threads']} threads, GPU: {host['gpu'] or 'none'}; measured {time.strftime('%Y-%m-%d')} by "
        "`benchmarks/throughput.py`.", "",
        f"## Counterfactuals per second on a full pair ({args.pair}, every test image of the query class)", "",
        "Each method in a fresh process after a two-image warm-up; peak RSS is the process's high-water mark "
        "(models, MNIST and the batch included).", "",
        markdown(rows), "", "## make reproduce", "", *reproduce_section(), "",
    ]
    print("\n".join(lines))
    if args.write:
        atomic_write_text(args.write, "\n".join(lines))


if __name__ == "__main__":
    main()
