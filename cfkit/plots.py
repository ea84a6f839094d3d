"""Figures shared by every notebook: image grids, query / counterfactual / difference, probability bars."""
from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure


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


def metric_bars(rows: list[dict], column: str, paper: dict[str, float] | None = None, ax: Axes | None = None) -> Axes:
    """Bars of one metric per method and pair; the paper's value drawn as a marker on the mean where given."""
    ax = ax or plt.subplots(figsize=(6, 2.8))[1]
    labels = [f"{r['method']}\n{r['pair']}" for r in rows]
    values = [r[column] if r[column] is not None else float("nan") for r in rows]
    ax.bar(range(len(rows)), values, color=["tab:blue" if r["pair"] == "mean" else "tab:cyan" for r in rows])
    if paper:
        for i, r in enumerate(rows):
            if r["pair"] == "mean" and r["method"] in paper:
                ax.plot(i, paper[r["method"]], "k*", markersize=10, label="paper")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_title(column)
    return ax


def swapped_cells(x: torch.Tensor, distractor: torch.Tensor, x_cf: torch.Tensor, swaps: torch.Tensor,
                  width: int = 4, tile: int = 7) -> Figure:
    """CVE: the query, the distractor and the counterfactual, with each swapped cell outlined and numbered
    in the order the greedy search took it (query cell on the query, distractor cell on the distractor)."""
    from matplotlib.patches import Rectangle

    fig = image_rows({"query": x, "distractor": distractor, "counterfactual": x_cf}, size=1.5)
    axes = fig.axes
    n = len(x)
    for k in range(n):
        for order, (i, j) in enumerate(swaps[k].tolist(), start=1):
            if i < 0:
                break
            for ax, cell in ((axes[k], i), (axes[n + k], j)):
                r, c = divmod(cell, width)
                ax.add_patch(Rectangle((c * tile - 0.5, r * tile - 0.5), tile, tile, fill=False, color="tab:red", lw=1))
                ax.text(c * tile + 1, r * tile + 3, str(order), color="yellow", fontsize=5)
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
