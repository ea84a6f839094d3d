"""Counterfactuals per second, peak memory and the share of the CPU's fp32 peak of every method on a full
protocol pair, and the wall time of the last ``make reproduce``: together, ``results/benchmark.md``.

Each method runs in a fresh process (so its peak resident memory is its own: the process's high-water
mark, models and data included), which first measures the fp32 peak (matmul and convolution) on its own
threads, then makes a two-image warm-up call that loads the method's checkpoints, then the timed run. The method's matmul/conv FLOPs per
counterfactual are counted afterwards (cfkit/running/compute.py), on the whole pair when the timed run was short, else on
evenly spaced queries of it. The reproduce time is read from ``results/reproduce.json``, which ``cfkit reproduce``
writes.

Run by hand (not in CI), on an otherwise idle machine:

    .venv/bin/python benchmarks/throughput.py [--pair 4->9] [--methods cem ldce] [--flop-queries 64] \
        [--write results/benchmark.md]

The methods are the catalog's (cfkit/methods/catalog.py); a plugin module named in CFKIT_PLUGINS registers its
own, in this process and in the workers.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import re
import resource
import time
from pathlib import Path

import torch

from cfkit.data import PAIRS, ensure_mnist
from cfkit.methods import catalog
from cfkit.paths import RESULTS_DIR, atomic_write_text
from cfkit.running.compute import flops_per_counterfactual, peak_gflops, torch_threads
from cfkit.running.reproduce import REPRODUCE_RECORD, machine
from cfkit.scoring.evaluation import parse_pairs, protocol_queries
from cfkit.scoring.table import markdown
from cfkit.zoo.checkpoints import load
from cfkit.zoo.inception import INCEPTION_CFS, INCEPTION_REFERENCE, inception_extractor


def benchmarked() -> list[str]:
    """Every catalog method but the real-data reference (plugins in CFKIT_PLUGINS included)."""
    return [entry.name for entry in catalog.entries() if not entry.reference]


FLOP_QUERIES = 64
"""Queries the FLOPs are counted on (evenly spaced over the pair) when counting the whole pair would take long."""
FULL_COUNT_SECONDS = 15.0
"""A method whose timed run took less has its FLOPs counted on the whole pair: exact even when its work per image
depends on the image (CVE stops each image's search on its own); the longer-running methods do a fixed amount of
work per image at the table's settings (PGD, CEM without ``patience``, LDCE), so a sample gives their exact count."""


def measure(name: str, pair: str, n_queries: int = 0, flop_queries: int = FLOP_QUERIES) -> dict:
    """Explain the first ``n_queries`` test queries of ``pair`` (0: all of them; the report runs each method in a
    fresh process): time, validity, peak memory, and FLOPs per counterfactual against the matmul peak measured in
    this process on the same threads before the method runs."""
    ensure_mnist(verbose=False)
    (query, target), = parse_pairs(pair)
    x, _ = protocol_queries((query, target), n_queries)
    source = torch.full((len(x),), query)
    peaks = peak_gflops()
    method = catalog.get(name).make(load("classifier"))
    method.explain(x[:2], target, source=source[:2])  # warm-up: checkpoint loading, first-call overheads
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = method.explain(x, target, source=source)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    counted = flop_sample(len(x), flop_queries, result.seconds)
    with torch_threads(1):  # the count does not depend on threads; a second one only spins against the counter
        gflop_per_cf = flops_per_counterfactual(method, x[counted], target, source[counted]) / 1e9
    achieved = gflop_per_cf * len(x) / result.seconds
    return {"method": catalog.label(name), "pair": pair, "n": len(x), "seconds": round(result.seconds, 1),
            "cf_per_second": round(len(x) / result.seconds, 2), "seconds_per_cf": round(result.seconds / len(x), 5),
            "peak_rss_mib": round(peak), "rss_before_run_mib": round(before), "validity": round(result.validity, 4),
            "gflop_per_cf": _significant(gflop_per_cf), "flop_n": len(counted),
            "achieved_gflops": _significant(achieved), "matmul_gflops": _significant(peaks["matmul"]),
            "conv_gflops": _significant(peaks["conv"]), "peak_gflops": _significant(peaks["peak"]),
            "fraction_of_peak": _significant(achieved / peaks["peak"], 3)}


def flop_sample(n: int, flop_queries: int, seconds: float) -> torch.Tensor:
    """Which of ``n`` queries the FLOPs are counted on: all of them when the timed run took under
    ``FULL_COUNT_SECONDS`` or ``flop_queries`` is 0, else ``flop_queries`` evenly spaced ones."""
    if flop_queries <= 0 or flop_queries >= n or seconds < FULL_COUNT_SECONDS:
        return torch.arange(n)
    return torch.linspace(0, n - 1, flop_queries).round().long()


def _significant(value: float, digits: int = 4) -> float:
    """``value`` to ``digits`` significant figures: FLOP counts span 0.02 to 10 GFLOP per counterfactual."""
    return float(f"{value:.{digits}g}")


REPRODUCE_HEADING = "## make reproduce"
FINDINGS_HEADING = "## Findings"
"""A hand-written section (what the profiles showed, why a fraction stays low): kept as it is when the file is
rewritten, because it explains measurements rather than being one."""
EXPLORER_HEADING = "## Time to explorer"
"""Written by ``benchmarks/time_to_explorer.py``: kept as it is when this script rewrites the file."""
APP_HEADING = "## App: single-query latency"
"""Written by ``benchmarks/app_latency.py``: kept as it is when this script rewrites the file."""
INCEPTION_HEADING = "## Inception-v3: cost per image and the n a pair"
INCEPTION_TIMED = 24
"""Images the Inception cost is timed on (after a warm-up batch), one torch thread: a `make reproduce` lane's."""
SCORED_SETS = 7
"""Sets `make reproduce` feeds to Inception: the six methods' and Original Data's (10_metrics reuses the others)."""


def inception_seconds_per_image(images: int = INCEPTION_TIMED) -> float | None:
    """One torch thread's seconds per image of the kit's Inception extractor, None when it cannot be had."""
    extractor, _ = inception_extractor()
    if extractor is None:
        return None
    x = torch.rand(images, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    with torch_threads(1):
        extractor.embed(x[:4])
        start = time.perf_counter()
        extractor.embed(x)
        return (time.perf_counter() - start) / images


def inception_section(seconds_per_image: float | None) -> list[str]:
    """What each Inception subsample size costs a full reproduction, from the measured cost per image."""
    if seconds_per_image is None:
        return ["The Inception extractor could not be had here: `cfkit data --inception`, then this script again."]
    protocol = [len(protocol_queries(pair)[0]) for pair in PAIRS]
    rows = []
    for label, per_pair in [("100", [100] * 3), (f"{INCEPTION_CFS} (default)", [INCEPTION_CFS] * 3),
                            ("300", [300] * 3), ("every counterfactual (`inception_cfs 0`)", protocol)]:
        images = SCORED_SETS * sum(min(n, q) for n, q in zip(per_pair, protocol))
        default = SCORED_SETS * sum(min(INCEPTION_CFS, q) for q in protocol)
        rows.append({"n_a_pair": label, "images": images, "core_seconds": round(images * seconds_per_image),
                     "wall_seconds_more_than_default_on_2_cores": round((images - default) * seconds_per_image / 2)})
    reference = len({target for _, target in PAIRS}) * INCEPTION_REFERENCE
    return [f"One 299×299 forward pass costs **{seconds_per_image:.3f} s an image** on one torch thread (a `make "
            f"reproduce` lane's), timed here on {INCEPTION_TIMED} images in batches of 4. A reproduction feeds the "
            f"first n counterfactuals of each pair of {SCORED_SETS} sets to it, plus {reference} real reference "
            f"digits once (then cached on disk: {round(reference * seconds_per_image)} core-seconds on a cold "
            "cache):", "", markdown(rows)]


def kept_findings(path: str | None) -> list[str]:
    """The hand-written findings section of the file being rewritten (empty when there is none)."""
    text = Path(path).read_text() if path and Path(path).is_file() else ""
    if FINDINGS_HEADING not in text:
        return []
    return [FINDINGS_HEADING + text.split(FINDINGS_HEADING, 1)[1].rstrip("\n"), ""]


def _sections(text: str) -> list[str]:
    """``text`` cut before each ``## `` heading: the preamble, then one piece a section (its trailing blank lines
    included)."""
    return re.split(r"(?m)^(?=## )", text)


def kept_section(path: str | None, heading: str) -> list[str]:
    """The section ``heading`` of the file at ``path`` up to the next ``## `` heading (empty when there is none)."""
    text = Path(path).read_text() if path and Path(path).is_file() else ""
    found = [piece for piece in _sections(text) if piece.splitlines()[:1] == [heading]]
    return [found[0].rstrip("\n"), ""] if found else []


def replace_section(text: str, heading: str, lines: list[str]) -> str:
    """``text`` with its section ``heading`` (up to the next ``## `` heading) replaced by ``heading`` and ``lines``;
    a section it lacks goes before the hand-written findings, else at the end. The other sections stay as they
    are."""
    block = "\n".join([heading, "", *lines]).rstrip("\n") + "\n\n"
    pieces = _sections(text)
    at = next((i for i, piece in enumerate(pieces) if piece.splitlines()[:1] == [heading]), None)
    if at is not None:
        pieces[at] = block
    else:
        at = next((i for i, piece in enumerate(pieces) if piece.startswith(FINDINGS_HEADING)), len(pieces))
        if at and pieces[at - 1].strip():
            pieces[at - 1] = pieces[at - 1].rstrip("\n") + "\n\n"
        pieces.insert(at, block)
    return "".join(pieces).rstrip("\n") + "\n"


def reproduce_section() -> list[str]:
    path = RESULTS_DIR / REPRODUCE_RECORD
    if not path.is_file():
        return ["`make reproduce` has not been timed here yet: run it, then this script again."]
    record = json.loads(path.read_text())
    profile = record.get("profile", {})
    threads = record.get("torch_threads") or {}
    rows = [{"notebook": name, "torch_threads": threads.get(name), **profile.get(name, {"wall": seconds})}
            for name, seconds in record["notebooks"].items()]
    rows.append({"notebook": "sum", **{key: round(sum(row.get(key) or 0 for row in rows), 1)
                                       for key in rows[0] if key not in ("notebook", "torch_threads")}})
    size = "full size" if record["full_size"] else "NOT full size"
    speed = record.get("conv_gflops_one_thread")
    host = (f" The host convolved at {speed['start']:.0f} GFLOP/s on one thread at the start and {speed['end']:.0f} "
            "at the end (`conv_gflops_one_thread` in reproduce.json): hosts of this description have differed by 2x "
            "in it, and the wall time follows it." if speed else "")
    return [f"`make reproduce` ({size}, finished {record['finished']}, install excluded): **{record['seconds']:.0f} s "
            f"= {record['seconds'] / 60:.1f} min** on {record['machine']['cpu']}, {record['machine']['cores']} cores, "
            f"{record.get('jobs', 1)} notebooks at a time.{host}", "",
            "Where each notebook's wall seconds went: `startup` is process, papermill and kernel start (the wall time "
            "less the cells' own); `method` the methods' `explain` calls; `metrics` scoring the sets (Inception "
            "left out); `inception` Inception-v3 forward passes (reference features included when not cached); "
            "`other` the rest of the cells (imports, checkpoint loading, plots, widgets). Timed inside the kernels "
            "by `cfkit.common.profiling`.", "", markdown(rows)]


def compute_section(flop_queries: int = FLOP_QUERIES) -> list[str]:
    """What the compute columns mean, and what they leave out."""
    sample = f"{flop_queries} evenly spaced ones" if flop_queries > 0 else "the whole pair too"
    return [
        "## The compute floor: columns", "",
        "- `gflop_per_cf`: matrix-multiply and convolution FLOPs per counterfactual (forward and backward, 2 per "
        "multiply-add), counted with `torch.utils.flop_counter` on `flop_n` queries of the pair: the whole pair for "
        f"methods that ran under {FULL_COUNT_SECONDS:.0f} s, else {sample} (the methods that run long do the same "
        "work for every image at the table's settings). The final validity check is included.",
        "- `achieved_gflops` = `gflop_per_cf` × `cf_per_second` of the timed run.",
        "- `matmul_gflops`: this CPU's fp32 rate in `torch.mm` (MKL), the best of a few timed 2048×2048 products "
        "after a warm-up; `conv_gflops`: the same for a 3×3 convolution of 8×512×32×32 to 512 channels (oneDNN's "
        "implicit matrix multiply, the kernels the methods' convolutions run on); both measured in the method's own "
        "process on the same threads just before it runs. `peak_gflops` is the larger: on AMD CPUs MKL's matmul takes "
        "a narrower code path than oneDNN, so the matmul alone understates what the convolutions can reach.",
        "- `fraction_of_peak` = `achieved_gflops` / `peak_gflops`.", "",
        "Elementwise work (activations, pooling, normalisation, the optimisers' updates, noise) and `torch.cdist` "
        "(CVE's distractor search) are not counted: the "
        "fraction is the share of the peak that the matmul/conv work alone reaches, so time spent on elementwise "
        "ops, small batches or framework overhead shows up as a lower fraction.",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pair", default="4->9")
    parser.add_argument("--methods", nargs="*", default=benchmarked(), choices=benchmarked())
    parser.add_argument("--flop-queries", type=int, default=FLOP_QUERIES,
                        help="queries the FLOPs are counted on when the method ran for long (0: the whole pair)")
    parser.add_argument("--write", default=None, help="also write the report (Markdown) to this file")
    parser.add_argument("--reproduce-only", action="store_true",
                        help="keep the method rows of the --write file and renew only its make reproduce section")
    args = parser.parse_args()
    if args.reproduce_only:
        if not args.write:
            parser.error("--reproduce-only renews the make reproduce section of the --write file: give --write")
        atomic_write_text(args.write, replace_section(Path(args.write).read_text(), REPRODUCE_HEADING,
                                                      reproduce_section()))
        return
    context = multiprocessing.get_context("spawn")
    rows = []
    for name in args.methods:
        with context.Pool(1) as pool:
            rows.append(pool.apply(measure, (name, args.pair), {"flop_queries": args.flop_queries}))
        print(rows[-1], flush=True)
    with context.Pool(1) as pool:
        inception_cost = pool.apply(inception_seconds_per_image)
    host = machine()
    lines = [
        "# Benchmarks", "",
        f"Machine: {host['cpu']}, {host['cores']} cores, {host['memory_gib']} GiB, torch {host['torch']} with "
        f"{host['torch_threads']} threads, GPU: {host['gpu'] or 'none'}; measured {time.strftime('%Y-%m-%d')} by "
        "`benchmarks/throughput.py`.", "",
        f"## Counterfactuals per second on a full pair ({args.pair}, every test image of the query class)", "",
        "Each method in a fresh process after a two-image warm-up; peak RSS is the process's high-water mark "
        "(models, MNIST and the batch included).", "",
        markdown(rows), "", *compute_section(args.flop_queries), "", INCEPTION_HEADING, "",
        *inception_section(inception_cost), "", REPRODUCE_HEADING, "", *reproduce_section(), "",
        *kept_section(args.write, EXPLORER_HEADING), *kept_section(args.write, APP_HEADING),
        *kept_findings(args.write),
    ]
    print("\n".join(lines))
    if args.write:
        atomic_write_text(args.write, "\n".join(lines))


if __name__ == "__main__":
    main()
