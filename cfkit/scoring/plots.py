"""Figures shared by every notebook: image grids, query / counterfactual / difference, probability bars."""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..methods import catalog
from ..methods.cve import tile_starts
from ..paths import atomic_write_bytes
from . import columns as table_columns


def _image(ax: Axes, img: torch.Tensor, title: str | None = None, diff: bool = False,
           scale: float = 1.0) -> None:
    data = img.detach().cpu().squeeze().numpy()
    if diff:
        ax.imshow(data, cmap="RdBu_r", vmin=-scale, vmax=scale)
    else:
        ax.imshow(data, cmap="gray", vmin=0, vmax=1)
    ax.set_xticks([])
    ax.set_yticks([])
    if title:
        ax.set_title(title, fontsize=8)


def image_rows(rows: dict[str, torch.Tensor], titles: Sequence[str] | None = None, size: float = 1.2,
               title: str | None = None) -> Figure:
    """One row per entry of ``rows`` (label -> (N, 1, 28, 28)).

    Rows labelled 'difference…' use a diverging map on [-1, 1]; rows labelled 'attribution…' a diverging
    map scaled to each image's largest |value|.
    """
    n = max(len(t) for t in rows.values())
    fig, axes = plt.subplots(len(rows), n, figsize=(size * n, size * len(rows)), squeeze=False)
    for r, (label, images) in enumerate(rows.items()):
        for c in range(n):
            ax = axes[r, c]
            if c < len(images):
                signed = label.startswith(("difference", "attribution"))
                scale = (images[c].abs().max().item() or 1.0) if label.startswith("attribution") else 1.0
                _image(ax, images[c], titles[c] if titles is not None and r == 0 else None, diff=signed, scale=scale)
            else:
                ax.axis("off")
        axes[r, 0].set_ylabel(label, fontsize=8)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def counterfactual_grid(x: torch.Tensor, x_cf: torch.Tensor, n: int = 8, titles: Sequence[str] | None = None,
                        title: str | None = None) -> Figure:
    """Queries, counterfactuals and their difference (red: ink added, blue: ink removed)."""
    x, x_cf = x[:n], x_cf[:n]
    return image_rows({"query": x, "counterfactual": x_cf, "difference": x_cf - x}, titles=titles, title=title)


def probability_bars(ax: Axes, probs: torch.Tensor, highlight: Sequence[int] = (), title: str = "") -> None:
    """Bar chart of the ten class probabilities; ``highlight`` classes drawn in a strong colour."""
    colours = ["tab:red" if c in highlight else "tab:gray" for c in range(10)]
    ax.bar(range(10), probs.detach().cpu().numpy(), color=colours)
    ax.set_xticks(range(10))
    ax.set_ylim(0, 1)
    ax.set_title(title, fontsize=8)


def explain_one(
    x: torch.Tensor, x_cf: torch.Tensor, probs_x: torch.Tensor, probs_cf: torch.Tensor, source: int, target: int,
    note: str = "",
) -> Figure:
    """One query in detail: query, counterfactual, difference, and the classifier's probabilities for both."""
    fig, axes = plt.subplots(1, 5, figsize=(11, 2.3), gridspec_kw={"width_ratios": [1, 1, 1, 1.6, 1.6]})
    _image(axes[0], x, f"query ({source})")
    _image(axes[1], x_cf, f"counterfactual → {target}")
    _image(axes[2], x_cf - x, "difference", diff=True)
    probability_bars(axes[3], probs_x, (source, target), "p(class | query)")
    probability_bars(axes[4], probs_cf, (source, target), "p(class | counterfactual)")
    if note:
        fig.suptitle(note, fontsize=9)
    fig.tight_layout()
    return fig


PANELS_PER_ROW = 7
"""The table figure's width in panels; rows are added as columns are."""
_PAIR_MARKERS = ("o", "s", "^", "D", "v")


def table_figure(rows: list[dict]) -> Figure:
    """The results table as one panel per metric column: a bar per catalog method (its mean over pairs), a marker
    per pair, the paper's IM1 as a star on the panel of the column on its scale (``paper_scale``), the mean's 95 %
    bootstrap interval as an error bar; a method without rows is written in as missing. The grid grows with the
    columns (:data:`PANELS_PER_ROW` a row)."""
    means = {r["method"]: r for r in rows if r["pair"] == "mean"}
    pairs = list(dict.fromkeys(r["pair"] for r in rows if r["pair"] != "mean"))
    labels, paper_im1 = catalog.labels(), catalog.paper_im1()
    references = {entry.name for entry in catalog.entries() if entry.reference}
    methods = list(labels) + [m for m in means if m not in labels]  # sets of an unregistered method still show
    panels = table_columns.panels()
    width = min(PANELS_PER_ROW, len(panels))
    height = -(-len(panels) // width)
    fig, axes = plt.subplots(height, width, figsize=(3.4 * width, 3.4 * height + 0.4), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, panel in zip(axes.flat, panels):
        column = panel.name
        for i, method in enumerate(methods):
            mean = means.get(method, {}).get(column)
            if method not in means:
                ax.text(i, 0.5, "missing", transform=ax.get_xaxis_transform(), rotation=90, ha="center",
                        va="center", fontsize=8, color="tab:gray")
                continue
            if mean is not None:
                ax.bar(i, mean, color="tab:green" if method in references else "tab:blue", alpha=0.75)
                low, high = means[method].get(f"{column}_lo"), means[method].get(f"{column}_hi")
                if low is not None and high is not None:
                    ax.errorbar(i, mean, yerr=[[max(0.0, mean - low)], [max(0.0, high - mean)]], color="tab:gray",
                                capsize=3, linewidth=1)
            for k, pair in enumerate(pairs):
                value = next((r.get(column) for r in rows if r["method"] == method and r["pair"] == pair), None)
                if value is not None:
                    ax.plot(i, value, _PAIR_MARKERS[k % len(_PAIR_MARKERS)], color="black", markersize=3.5,
                            label=pair if i == 0 or method == next(iter(means)) else None)
            if panel.paper_scale and method in paper_im1:
                ax.plot(i, paper_im1[method], "*", color="tab:red", markersize=11,
                        label="paper's IM1 (mean)" if method == next(m for m in methods if m in paper_im1) else None)
        if panel.log_scale:
            ax.set_yscale("log")
        ax.set_xticks(range(len(methods)))
        ax.set_xticklabels([labels.get(m, m) for m in methods], rotation=45, ha="right", fontsize=8)
        ax.set_title(panel.title, fontsize=10, pad=14 if panel.note else None)
        if panel.note:  # what the panel's scale is, in small type under its title
            ax.text(0.5, 1.015, panel.note, transform=ax.transAxes, ha="center", va="bottom", fontsize=8,
                    color="tab:red" if panel.paper_scale else "dimgray")
        ax.tick_params(axis="y", labelsize=8)
    unique = {name: handle for ax in axes.flat for handle, name in zip(*ax.get_legend_handles_labels())}
    if unique:  # none when no method has per-pair rows or a paper figure
        fig.legend(unique.values(), unique.keys(), loc="upper right", fontsize=8, ncol=len(unique))
    fig.suptitle("bars: mean over pairs with its 95 % bootstrap interval; markers: each pair. "
                 "FID/KID in the kit's MNIST feature space unless marked Inception", fontsize=10, x=0.4)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / (3.4 * height + 0.4)))
    return fig


def method_gallery(query: torch.Tensor, counterfactuals: dict[str, torch.Tensor],
                   titles: Sequence[str] | None = None, title: str | None = None) -> Figure:
    """The same queries explained by every method: a row of queries, then one row of counterfactuals per method."""
    return image_rows({"query": query, **counterfactuals}, titles=titles, title=title, size=1.0)


def save_figure(fig: Figure, path: str | Path, dpi: int = 110) -> Path:
    """Save ``fig`` as PNG atomically (so a crash never leaves a half-written picture) and close it."""
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return atomic_write_bytes(path, buffer.getvalue())


def swapped_cells(x: torch.Tensor, distractor: torch.Tensor, x_cf: torch.Tensor, swaps: torch.Tensor,
                  grid: tuple[int, int] = (4, 4)) -> Figure:
    """CVE: the query, the distractor and the counterfactual, with each swapped cell outlined and numbered
    in the order the greedy search took it (query cell on the query, distractor cell on the distractor); ``grid``:
    the feature map's cells (the result's ``extras["grid"]``), which tile the image."""
    from matplotlib.patches import Rectangle

    fig = image_rows({"query": x, "distractor": distractor, "counterfactual": x_cf}, size=1.5)
    axes = fig.axes
    n = len(x)
    height, width = grid
    rows, cols = tile_starts(height, x.shape[-2]).tolist(), tile_starts(width, x.shape[-1]).tolist()
    for k in range(n):
        for order, (i, j) in enumerate(swaps[k].tolist(), start=1):
            if i < 0:
                break
            for ax, cell in ((axes[k], i), (axes[n + k], j)):
                r, c = divmod(cell, width)
                ax.add_patch(Rectangle((cols[c] - 0.5, rows[r] - 0.5), cols[c + 1] - cols[c], rows[r + 1] - rows[r],
                                       fill=False, color="tab:red", lw=1))
                ax.text(cols[c] + 1, rows[r] + 3, str(order), color="yellow", fontsize=5)
    return fig


def latent_walk(x: torch.Tensor, path: torch.Tensor, fractions: Sequence[float]) -> Figure:
    """C3LT: one row per query, then the images along its latent path (``path``: (points, N, 1, 28, 28))."""
    rows = {f"query {i}": torch.cat([x[i : i + 1], path[:, i]]) for i in range(len(x))}
    return image_rows(rows, titles=["query"] + [f"step {f:.2f}" for f in fractions])


def denoising_trajectory(x: torch.Tensor, trajectory: torch.Tensor, p_target: torch.Tensor,
                         mask_kept: torch.Tensor, timesteps: Sequence[int], columns: int = 8) -> Figure:
    """LDCE: per query, the decoded x̂₀ at ``columns`` of its DDIM steps, then p(target) and the share of
    latent positions the consensus mask kept, step by step (``trajectory``: (N, steps, 1, 28, 28))."""
    steps = trajectory.shape[1]
    picked = torch.linspace(0, steps - 1, min(columns, steps)).round().long().tolist()
    rows = {f"query {i}": torch.cat([x[i : i + 1], trajectory[i, picked]]) for i in range(len(x))}
    figure = image_rows(rows, titles=["query"] + [f"t={timesteps[s]}" for s in picked])
    curves, axes = plt.subplots(1, 2, figsize=(8, 2.4))
    for i in range(len(x)):
        axes[0].plot(timesteps, p_target[i].numpy(), marker=".", label=f"query {i}")
        axes[1].plot(timesteps, mask_kept[i].numpy(), marker=".")
    for ax, label in zip(axes, ("p(target | x̂₀)", "share of positions kept")):
        ax.set_xlabel("timestep t (denoising runs right to left)")
        ax.set_ylabel(label, fontsize=8)
        ax.invert_xaxis()
        ax.set_ylim(-0.02, 1.02)
    axes[0].legend(fontsize=6)
    curves.tight_layout()
    return figure


def distributions(values: dict[str, torch.Tensor], xlabel: str, bins: int = 30) -> Figure:
    """Overlaid histograms (as densities) of one quantity for a few groups, e.g. edit sizes."""
    figure, ax = plt.subplots(figsize=(5, 2.6))
    everything = torch.cat([v.flatten() for v in values.values()])
    edges = torch.linspace(everything.min().item(), everything.max().item(), bins + 1).numpy()
    for label, v in values.items():
        ax.hist(v.flatten().numpy(), bins=edges, density=True, alpha=0.5, label=f"{label} (n={v.numel()})")
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel("density", fontsize=8)
    ax.legend(fontsize=7)
    figure.tight_layout()
    return figure


def comparison_matrix(comparisons: list[dict], labels: dict[str, str] | None = None,
                      metrics: Sequence[str] = ("im1", "fid"), pair: str = "mean") -> Figure:
    """One panel per metric: cell (A, B) is A − B on ``pair`` from the paired bootstrap, coloured by sign, with
    ``*`` where its 95 % interval excludes zero (the row method is A); ``labels`` default to the catalog's."""
    import numpy as np

    labels = labels or catalog.labels()
    chosen = [c for c in comparisons if c["pair"] == pair and c["metric"] in metrics]
    shown = [m for m in metrics if any(c["metric"] == m for c in chosen)] or list(metrics)[:1]
    methods = list(dict.fromkeys([c["a"] for c in chosen] + [c["b"] for c in chosen]))
    fig, axes = plt.subplots(1, len(shown), figsize=(4.6 * len(shown), 4.2), squeeze=False)
    for ax, metric in zip(axes[0], shown):
        grid = np.full((len(methods), len(methods)), np.nan)
        stars = {}
        for c in (c for c in chosen if c["metric"] == metric):
            i, j = methods.index(c["a"]), methods.index(c["b"])
            grid[i, j], grid[j, i] = c["difference"], -c["difference"]
            stars[(i, j)] = stars[(j, i)] = c["significant"]
        limit = np.nanmax(np.abs(grid)) if np.isfinite(grid).any() else 1.0
        ax.imshow(grid, cmap="coolwarm", vmin=-limit, vmax=limit)
        for (i, j), significant in stars.items():
            ax.text(j, i, f"{grid[i, j]:.2f}{'*' if significant else ''}", ha="center", va="center", fontsize=7)
        names = [labels.get(m, m) for m in methods]
        ax.set_xticks(range(len(methods)), names, rotation=45, ha="right", fontsize=8)
        ax.set_yticks(range(len(methods)), names, fontsize=8)
        ax.set_title(f"{metric}: row − column ({pair}); * 95 % CI excludes 0", fontsize=9)
    fig.tight_layout()
    return fig


STUDY_METRICS = (("im1", "IM1 ↓"), ("fid", "kit-FID ↓"), ("validity", "validity ↑"), ("proximity", "proximity ↓"),
                 ("seconds_per_cf", "s / CF"))


def budget_curves(rows: list[dict], labels: dict[str, str] | None = None, variants: Sequence[str] = ("per image",)
                  ) -> Figure:
    """The faithfulness study (mean rows): one row of panels per method and budget axis with more than two
    settings, each metric over that budget (log scale). Curve points are lines, one per device that measured them (the GPU's
    dashed); ``kit`` is a circle, ``reference`` a star, a setting naming one of ``variants`` (CEM's per-image
    early stop) a diamond off the curve; IM1 and FID carry their 95 % intervals; ``labels`` default to the
    catalog's."""
    from matplotlib.ticker import NullFormatter

    labels = labels or catalog.labels()
    means = [r for r in rows if r["pair"] == "mean" and isinstance(r.get("budget"), (int, float))
             and r["budget"] == r["budget"]]  # settings only: a floor has no budget
    axes_of = [(m, u) for m, u in dict.fromkeys((r["method"], r.get("budget_unit")) for r in means)
               if len({r["setting"] for r in means if (r["method"], r.get("budget_unit")) == (m, u)}) > 2]
    fig, axes = plt.subplots(max(1, len(axes_of)), len(STUDY_METRICS), figsize=(2.6 * len(STUDY_METRICS),
                             2.1 * max(1, len(axes_of))), squeeze=False)
    for ax_row, (method, unit) in zip(axes, axes_of):  # a row a budget axis: LDCE's steps, LDCE's denoiser epochs
        points = sorted((r for r in means if (r["method"], r.get("budget_unit")) == (method, unit)),
                        key=lambda r: r["budget"])
        marked = [r for r in points if any(v in r["setting"] for v in variants)]
        curve = [r for r in points if r["setting"] != "kit" and r not in marked]
        for ax, (metric, title) in zip(ax_row, STUDY_METRICS):
            for device in dict.fromkeys(r.get("device") for r in curve):
                line = [r for r in curve if r.get("device") == device and r.get(metric) is not None]
                gpu = str(device).startswith("cuda")
                ax.plot([r["budget"] for r in line], [r[metric] for r in line], "--" if gpu else "-", marker=".",
                        lw=1, color="tab:gray" if gpu else "tab:blue", label="GPU" if gpu else "CPU")
            styles = {"kit": ("o", "tab:orange"), "reference": ("*", "tab:red")}
            for r in points:
                style = styles.get(r["setting"], ("D", "tab:green") if r in marked else None)
                if r.get(metric) is None or style is None:
                    continue
                low, high = r.get(f"{metric}_lo"), r.get(f"{metric}_hi")
                error = None if low is None or high is None else [[r[metric] - low], [high - r[metric]]]
                ax.errorbar([r["budget"]], [r[metric]], yerr=error, fmt=style[0], color=style[1],
                            ms=7, capsize=2, label=r["setting"])
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.tick_params(labelsize=7)
            several = sum(m == method for m, _ in axes_of) > 1  # name the axis where a method has two
            ax.set_title(f"{labels.get(method, method)}{f' by {unit}' if several else ''}: {title}", fontsize=8)
            ax.set_xlabel(points[0].get("budget_unit") or "budget", fontsize=7)
        ax_row[0].legend(fontsize=6)
    fig.tight_layout()
    return fig


def training_curve(points: list[dict], name: str, samples: torch.Tensor | None = None) -> Figure:
    """A backbone's convergence curve: sample FID (with its 95 % interval) against epochs, both on log axes, each
    point marked converged or not; beside it, the last point's samples when given."""
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

    fig, axes = plt.subplots(1, 2 if samples is not None else 1, figsize=(9 if samples is not None else 5, 3.2),
                             squeeze=False)
    ax = axes[0, 0]
    epochs = [int(p["epoch"]) for p in points]
    fid = [float(p["fid"]) for p in points]
    errors = [[f - float(p["fid_lo"]) for f, p in zip(fid, points)], [float(p["fid_hi"]) - f for f, p in zip(fid, points)]]
    ax.errorbar(epochs, fid, yerr=errors, marker="o", capsize=3)
    for e, f, p in zip(epochs, fid, points):
        if str(p["converged"]) == "True":
            ax.annotate("converged", (e, f), textcoords="offset points", xytext=(4, 6), fontsize=7)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.set_yscale("log")  # the late doublings move FID by a fraction of the early ones: visible on a log axis
    ax.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("epochs")
    ax.set_ylabel("sample FID (kit features, log) ↓")
    ax.set_title(f"{name}: FID of its samples against MNIST test", fontsize=9)
    if samples is not None:
        grid = samples[:32].view(4, 8, 28, 28).permute(0, 2, 1, 3).reshape(4 * 28, 8 * 28)
        axes[0, 1].imshow(grid.numpy(), cmap="gray", vmin=0, vmax=1)
        axes[0, 1].set_axis_off()
        axes[0, 1].set_title(f"samples after epoch {epochs[-1]}", fontsize=9)
    fig.tight_layout()
    return fig


def rank_stability_figure(scores: list[dict], pairwise: list[dict], labels: dict[str, str] | None = None) -> Figure:
    """Left: each method's mean IM1 under every admitted instrument (the chosen one shaded). Right, one panel per
    metric: cell (A, B) is the share of admitted settings under which the row method A scores below the column
    method B; 0 and 1 are orderings every instrument agrees on, anything between flips."""
    import numpy as np

    labels = labels or catalog.labels()
    means = [r for r in scores if r["pair"] == "mean"]
    settings = list(dict.fromkeys((r["setting"], r["aggregation"]) for r in means))
    methods = list(dict.fromkeys(r["method"] for r in means))
    metrics = list(dict.fromkeys(r["metric"] for r in pairwise))
    fig, axes = plt.subplots(1, 1 + len(metrics), figsize=(7 + 4.6 * len(metrics), 5.2),
                             gridspec_kw={"width_ratios": [1.6] + [1] * len(metrics)})
    ax = axes[0]
    value = {(r["setting"], r["aggregation"], r["method"]): r["im1"] for r in means}
    for method in methods:
        ax.plot(range(len(settings)), [value[(*s, method)] for s in settings], marker="o", label=labels.get(method, method))
    for i, s in enumerate(settings):
        if any(r["chosen"] for r in means if (r["setting"], r["aggregation"]) == s):
            ax.axvspan(i - 0.4, i + 0.4, color="0.85", zorder=0)
    shared = os.path.commonprefix([name for name, _ in settings]).rpartition(" ")[0]  # e.g. every capacity's name
    ax.set_xticks(range(len(settings)), [f"{name[len(shared):].strip()}, {aggregation}" for name, aggregation in settings],
                  rotation=60, ha="right", fontsize=7)
    if shared:
        ax.set_xlabel(f"admitted setting (all {shared}): pixels, code, code activation, epochs, aggregation", fontsize=8)
    ax.set_ylabel("IM1, mean over pairs (lower: more like the target)")
    ax.set_title("IM1 under every admitted instrument (grey: the chosen one)", fontsize=9)
    ax.legend(fontsize=7)
    for ax, metric in zip(axes[1:], metrics):
        grid = np.full((len(methods), len(methods)), np.nan)
        for row in (r for r in pairwise if r["metric"] == metric):
            i, j = methods.index(row["a"]), methods.index(row["b"])
            grid[i, j], grid[j, i] = row["share_a_below"], 1 - row["share_a_below"]
        ax.imshow(grid, cmap="PiYG", vmin=0, vmax=1)
        for i in range(len(methods)):
            for j in range(len(methods)):
                if i != j:
                    robust = grid[i, j] in (0.0, 1.0)
                    ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize=7,
                            color="white" if robust else "black", fontweight="normal" if robust else "bold")
        names = [labels.get(m, m) for m in methods]
        ax.set_xticks(range(len(methods)), names, rotation=45, ha="right", fontsize=8)
        ax.set_yticks(range(len(methods)), names, fontsize=8)
        settings_n = next(r["settings"] for r in pairwise if r["metric"] == metric)
        ax.set_title(f"{metric.upper()}: share of {settings_n} admitted settings with row below column\n"
                     "(bold: the order flips with the instrument)", fontsize=9)
    fig.tight_layout()
    return fig
