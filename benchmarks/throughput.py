"""Counterfactuals per second and peak memory of every method on a full protocol pair, and the wall time of
the last ``make reproduce``: together, ``results/benchmark.md``.

Each method runs in a fresh process (so its peak resident memory is its own: the process's high-water
mark, models and data included), after a two-image warm-up call that loads its checkpoints. The
reproduce time is read from ``results/reproduce.json``, which ``cfkit reproduce`` writes.

Run by hand (not in CI), on an otherwise idle machine:

    .venv/bin/python benchmarks/throughput.py [--pair 4->9] [--methods cem ldce] [--write results/benchmark.md]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import time

from cfkit.paths import RESULTS_DIR, atomic_write_text
from cfkit.reproduce import REPRODUCE_RECORD, machine
from cfkit.table import LABELS, markdown

METHODS = ("adv_attack", "cem", "cve", "expgan", "c3lt", "ldce")


def build(name: str):
    """The method with the defaults its notebook uses."""
    from cfkit.zoo.checkpoints import load

    classifier = load("classifier")
    if name == "adv_attack":
        from cfkit.methods.adversarial import AdversarialAttack
        return AdversarialAttack(classifier)
    if name == "cem":
        from cfkit.methods.cem import CEM
        return CEM(classifier, load("ae_all"))
    if name == "cve":
        from cfkit.methods.cve import CVE
        return CVE(classifier)
    if name == "expgan":
        from cfkit.methods.expgan import ExpGAN
        return ExpGAN(classifier)
    if name == "c3lt":
        from cfkit.methods.c3lt import C3LT
        return C3LT(classifier)
    from cfkit.methods.ldce import LDCE
    return LDCE(classifier)


def measure(name: str, pair: str) -> dict:
    """In a fresh process: explain every test query of ``pair``; time, validity and peak memory."""
    import torch

    from cfkit.data import ensure_mnist
    from cfkit.evaluation import parse_pairs, protocol_queries

    ensure_mnist(verbose=False)
    (query, target), = parse_pairs(pair)
    x, _ = protocol_queries((query, target))
    source = torch.full((len(x),), query)
    method = build(name)
    method.explain(x[:2], target, source=source[:2])  # warm-up: checkpoint loading, first-call overheads
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = method.explain(x, target, source=source)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"method": LABELS[name], "pair": pair, "n": len(x), "seconds": round(result.seconds, 1),
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
    parser.add_argument("--methods", nargs="*", default=list(METHODS), choices=METHODS)
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
