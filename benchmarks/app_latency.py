"""The explorer app's latency for one query: each method's panel through the app's own code path, and what
dominates it; writes (or replaces) the "## App: single-query latency" section of ``results/benchmark.md``.

The app (:class:`cfkit.interactive.app.ExplorerApp`, no browser: its widgets run without a front end) explains test digits of
the protocol's pairs, so the per-pair methods show too: one query of each pair first (the cold calls: checkpoints,
CVE's distractor pool of each target digit, first-call overheads), then ``--queries`` more of each pair, timed warm.
Each panel's wall time is split into the method's ``explain``, the panel's scores (classifier, oracle, calibrated
IM1), the Integrated Gradients attribution and drawing the panel's widgets; the table gives the median over the warm
queries. Then one warm query of each method runs under cProfile: the cfkit function that holds most of its time
below the method's entry point, and the torch call with the most time of its own.

``--setting`` picks the methods' settings, as the app's toggle does: ``quick`` (each method's catalog quick setting),
``table`` (the results table's and notebooks' settings, slower; the app's default) or ``both`` (the default: one
table per setting in the one section, each measured by a freshly started app so that each has its own cold query).

Run by hand on an otherwise idle machine (one command):

    .venv/bin/python benchmarks/app_latency.py [--setting both|quick|table] [--queries 3] [--write results/benchmark.md]
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time
from pathlib import Path

import torch

from cfkit.data import PAIRS
from cfkit.interactive.app import SETTINGS, Explainer, ExplorerApp
from cfkit.methods import catalog
from cfkit.paths import RESULTS_DIR, atomic_write_text
from cfkit.running.reproduce import machine
from cfkit.scoring.table import markdown
from throughput import APP_HEADING, replace_section

PHASES = ("method", "scores", "attribution", "draw")
WRAPPERS = ("methods/base.py", "profiling.py", "app/explainer.py", "app/page.py", "app/render.py",
            "app/launcher.py")
"""cfkit files whose functions only wrap a method's work (explain, batching, timing): never named as what dominates."""
ENTRY_POINTS = ("explain", "_explain_batch", "_explain_all")
"""A method's own entry points: what dominates is looked for below them."""


def measure(queries: int, setting: str = "quick") -> tuple[list[dict], dict]:
    """The per-method rows (median over the warm queries) and the whole query's numbers, every method at ``setting``
    (chosen on the app's toggle)."""
    start = time.perf_counter()
    explainer = Explainer()
    app = ExplorerApp(explainer)
    startup = time.perf_counter() - start
    app.settings.value = setting
    cold, warm = [], []
    for index in range(queries + 1):
        for query, target in PAIRS:
            app.set_query(explainer.test_digit(query, index), f"test digit {index} of class {query}")
            app.choose_target(target)
            app.explain()
            (cold if index == 0 else warm).append({name: dict(t) for name, t in app.timings.items()})
    names = [name for name in explainer.order(list(warm[0])) if all(name in q for q in warm)]
    rows = []
    for name in names:
        totals = [sum(q[name].values()) for q in warm]
        row = {"method": catalog.label(name), "median_s": round(statistics.median(totals), 3),
               **{f"{phase}_s": round(statistics.median(q[name].get(phase, 0.0) for q in warm), 3)
                  for phase in PHASES},
               "first_query_s": round(sum(cold[0][name].values()), 2) if name in cold[0] else None}
        row.update(profile(explainer, name))
        rows.append(row)
    whole = {"startup_s": round(startup, 1),
             "warm_query_s": round(statistics.median(sum(map(sum_values, q.values())) for q in warm), 2),
             "cold_query_s": round(sum(map(sum_values, cold[0].values())), 2), "queries": len(warm)}
    return rows, whole


def sum_values(timings: dict) -> float:
    return sum(timings.values())


def profile(explainer: Explainer, name: str) -> dict:
    """One warm panel of ``name`` for a 4→9 query under cProfile: what dominates it."""
    x = explainer.test_digit(4, 0)
    profiler = cProfile.Profile()
    profiler.enable()
    explainer.explain(name, x, 4, 9)
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # (file, line, function) -> (calls, primitive, own, cumulative, callers)
    total = max(entry[3] for entry in stats.values())
    own_cfkit = [(key, entry) for key, entry in stats.items()
                 if "/cfkit/" in key[0] and not key[0].endswith(WRAPPERS) and key[2] not in ENTRY_POINTS]
    ops = [(key, entry) for key, entry in stats.items() if "/cfkit/" not in key[0]]
    (where, inner), (op, top) = max(own_cfkit, key=lambda kv: kv[1][3]), max(ops, key=lambda kv: kv[1][2])
    return {"dominant_cfkit_call": f"{where[0].split('/cfkit/')[-1]}:{where[2]} ×{inner[0]} "
                                   f"({inner[3] / total:.0%})",
            "top_torch_call": f"{_short(op)} ({top[2] / total:.0%})"}


def _short(key: tuple) -> str:
    file, _, function = key
    return function if file == "~" else f"{Path(file).name}:{function}"


def section(measured: dict[str, tuple[list[dict], dict]]) -> list[str]:
    """The section's lines: ``measured`` maps each measured setting to its :func:`measure` (one table each)."""
    host = machine()
    settings = " and ".join(f"`{setting}`" for setting in measured)
    lines = [
        f"The explorer app (`make app`) on {host['cpu']}, {host['cores']} cores, torch {host['torch']} with "
        f"{torch.get_num_threads()} threads; measured {time.strftime('%Y-%m-%d')} by `benchmarks/app_latency.py "
        f"--setting {'both' if len(measured) > 1 else next(iter(measured))}` through the app's own code path "
        "(cfkit.interactive.app.ExplorerApp without a browser), on test digits of the protocol's pairs, every method at the "
        f"app's {settings} setting{'s' if len(measured) > 1 else ''} ("
        + "; ".join(f"`{setting}`: {SETTINGS[setting]}" for setting in measured) + ").", "",
        "Per method, the median warm panel (`median_s`) and its parts: the method's `explain` (`method_s`), the "
        "panel's scores: classifier, oracle, calibrated IM1 (`scores_s`), Integrated Gradients of the change "
        "(`attribution_s`) and drawing the panel (`draw_s`); `first_query_s` is its panel on the first query. "
        "`dominant_cfkit_call`: the cfkit function that holds most of one warm panel's time below the method's entry "
        "point (× its calls, share of the panel); `top_torch_call`: the call with the most time of its own "
        "(cProfile).", "",
    ]
    for setting, (rows, whole) in measured.items():
        lines += [
            f"**`{setting}` setting.** One warm query through every method: **{whole['warm_query_s']} s** (median of "
            f"{whole['queries']}); the first query after start {whole['cold_query_s']} s (checkpoints, CVE's "
            f"distractor pool of each new target digit, first calls); loading the app's models "
            f"{whole['startup_s']} s.", "",
            markdown(rows), "",
        ]
    return lines[:-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--setting", choices=[*SETTINGS, "both"], default="both",
                        help="the methods' settings, as the app's toggle: quick, table or both (default both)")
    parser.add_argument("--queries", type=int, default=2, help="warm queries per protocol pair (default 2)")
    parser.add_argument("--write", default=str(RESULTS_DIR / "benchmark.md"),
                        help="the benchmark file whose app section is replaced (default results/benchmark.md)")
    args = parser.parse_args()
    settings = list(SETTINGS) if args.setting == "both" else [args.setting]
    lines = section({setting: measure(args.queries, setting) for setting in settings})
    print("\n".join([APP_HEADING, "", *lines]))
    path = Path(args.write)
    atomic_write_text(path, replace_section(path.read_text() if path.is_file() else "# Benchmarks\n", APP_HEADING,
                                            lines))
    print(f"written to {path}")


if __name__ == "__main__":
    main()
