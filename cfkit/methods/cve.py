"""CVE: counterfactual visual explanations by swapping feature-map cells (Goyal et al., ICML 2019).

Split the classifier into its convolutional part f and head g (:func:`.feature_split.split_classifier`: the
model's ``.features``/``.head``, or found in an ``nn.Sequential`` or its torch.export/fx graph). For a query x and a distractor x_d
(a correctly classified training image of the target class, by default the nearest to x in f's
space), greedily replace cells of f(x) — spatial positions of the last feature map — by cells of
f(x_d), each step taking the (query cell, distractor cell) pair that most raises log p(target),
each cell used once, until the head says the target. The image counterfactual pastes the
distractor's patch of every swapped cell into the query: the 28×28 image is tiled like the 4×4
feature map (7×7 tiles), and each tile lies inside its cell's 16×16 receptive field (another classifier's
H×W map tiles the image into H×W near-equal tiles). By default
(``stop="image"``) the greedy search goes on until that pasted image, too, is classified as the
target (or no cell is left); ``stop="features"`` is Goyal et al.'s rule: stop as soon as the head
says the target for the composite feature map, whatever the pasted image is classified as.

``cells="any"`` is Goyal et al.'s search over every (i, j) pair; it flips the *feature map* in
fewer swaps, but moved tiles make an incoherent image (measured: 38 % image validity on 4→9).
The default ``"aligned"`` swaps a query cell only with the distractor cell at the same place, so
the pasted image stays a coherent blend of the two digits and ends, at worst, as the distractor.
``CVE_REFERENCE`` is the paper's setting: ``cells="any"``, ``stop="features"``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..common.batching import INFERENCE_BATCH
from ..data import load_mnist
from .base import CounterfactualMethod
from .feature_split import split_classifier
from .knobs import one_of, positive


@dataclass(frozen=True)
class CVEConfig:
    max_cells: int = 16  # at most this many swapped cells (the 4x4 map has 16)
    distractor: str = "nearest"  # "nearest" in the classifier's feature space, or "random"
    cells: str = "any"  # "any": Goyal et al.'s full search (reference); "aligned": query cell i takes distractor cell i
    seed: int = 0  # for distractor="random"
    # "image": stop when the head says the target for the composite map *and* the classifier does for the
    # pasted image; "features": stop on the head's decision for the composite feature map alone — the
    # reference (Goyal et al., ICML 2019: the greedy search ends once the classifier's decision for the
    # composite feature map is the target; the image is only a visualisation of the swapped cells)
    stop: str = "features"

    def __post_init__(self) -> None:
        positive("max_cells", self.max_cells, integer=True)
        one_of("distractor", self.distractor, ("nearest", "random"))
        one_of("cells", self.cells, ("aligned", "any"))
        one_of("stop", self.stop, ("image", "features"))


CVE_REFERENCE = CVEConfig(cells="any", stop="features")
CVE_KIT = CVEConfig(cells="aligned", stop="image")
"""The kit's first setting: aligned cells, stopped on the pasted image's class (an image-level counterfactual)."""
"""Goyal et al., "Counterfactual Visual Explanations", ICML 2019: the greedy search over every (query cell,
distractor cell) pair, stopped when the classifier's decision for the composite feature map is the target."""


def tile_starts(cells: int, size: int) -> torch.Tensor:
    """First pixel of each of ``cells`` near-equal tiles of ``size`` pixels, and ``size`` last (pixel r lies in tile
    ``r * cells // size``); with ``cells`` dividing ``size`` the tiles are equal."""
    return -(-torch.arange(cells + 1) * size // cells)


def paste_tiles(x: torch.Tensor, donor: torch.Tensor, assignment: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """Compose images: the tile of query cell i shows the donor's tile of cell ``assignment[:, i]`` (−1: keep x).

    The image is tiled like the ``grid`` (height, width) feature map. One gather for the whole batch: every pixel
    looks up which donor pixel, if any, replaces it (at its offset in its tile, clipped to the donor tile's size).
    """
    height, width = grid
    rows, cols = x.shape[-2:]
    row_cell, row_offset, row_start, row_length = _tiling(height, rows, x.device)
    col_cell, col_offset, col_start, col_length = _tiling(width, cols, x.device)
    source_cell = assignment[:, row_cell[:, None] * width + col_cell[None, :]]  # (n, rows, cols)
    source_cell_row, source_cell_col = source_cell.clamp(min=0) // width, source_cell.clamp(min=0) % width
    source_row = row_start[source_cell_row] + torch.minimum(row_offset[None, :, None], row_length[source_cell_row] - 1)
    source_col = col_start[source_cell_col] + torch.minimum(col_offset[None, None, :], col_length[source_cell_col] - 1)
    gathered = donor.flatten(1).gather(1, (source_row * cols + source_col).flatten(1)).view_as(x)
    return torch.where((source_cell >= 0)[:, None], gathered, x)


def _tiling(cells: int, size: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """Each pixel's tile and its offset in it, then each tile's first pixel and length: ``cells`` near-equal tiles."""
    starts = tile_starts(cells, size).to(device)
    pixel = torch.arange(size, device=device)
    cell = pixel * cells // size
    return cell, pixel - starts[cell], starts[:-1], starts[1:] - starts[:-1]


class CVE(CounterfactualMethod):
    name = "cve"
    config_type = CVEConfig

    def __init__(self, classifier: nn.Module, config: CVEConfig = CVEConfig(), batch_size: int = 64,
                 **kwargs: Any) -> None:
        super().__init__(classifier, batch_size=batch_size, **kwargs)
        self.split = split_classifier(self.classifier)  # refuses, with the ways out, a model it cannot split
        self.features, self.head = self.split.features, self.split.head
        self.config = config
        self._pools: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def _pool(self, digit: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Correctly classified training images of ``digit`` and their feature maps (cached)."""
        if digit not in self._pools:
            images = load_mnist("train", digits=(digit,))[0].to(self.device)
            with torch.inference_mode():
                maps = torch.cat([self.features(c) for c in images.split(INFERENCE_BATCH)])
                keep = self.head(maps).argmax(1) == digit
            self._pools[digit] = images[keep], maps[keep]
        return self._pools[digit]

    def _distractors(self, maps: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        images, feature_maps = torch.empty(len(maps), 1, 28, 28, device=maps.device), torch.empty_like(maps)
        generator = torch.Generator().manual_seed(self.config.seed)
        chosen = torch.empty(len(maps), dtype=torch.long)
        for digit in target.unique().tolist():
            rows = (target == digit).nonzero().flatten()
            pool_images, pool_maps = self._pool(digit)
            if self.config.distractor == "nearest":
                pick = torch.cdist(maps[rows].flatten(1), pool_maps.flatten(1)).argmin(1)
            else:
                pick = torch.randint(len(pool_images), (len(rows),), generator=generator).to(maps.device)
            images[rows], feature_maps[rows], chosen[rows.cpu()] = pool_images[pick], pool_maps[pick], pick.cpu()
        return images, feature_maps, chosen

    def _explain_batch(
        self, x: torch.Tensor, target: torch.Tensor, source: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        with torch.inference_mode():
            return self._search(x, target)

    def _search(self, x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
        n = len(x)
        query_maps = self.features(x)
        _, channels, height, width = query_maps.shape
        cells = height * width
        distractor, distractor_maps, chosen = self._distractors(query_maps, target)
        current = query_maps.flatten(2).clone()  # (n, C, cells)
        donor = distractor_maps.flatten(2)
        eye = torch.eye(cells, device=x.device)
        used_query = torch.zeros(n, cells, dtype=torch.bool, device=x.device)
        used_donor = torch.zeros_like(used_query)
        swaps = torch.full((n, self.config.max_cells, 2), -1, dtype=torch.long)
        assignment = torch.full((n, cells), -1, dtype=torch.long, device=x.device)  # query cell -> donor cell
        x_cf = x.clone()
        done = torch.zeros(n, dtype=torch.bool, device=x.device)
        for step in range(min(self.config.max_cells, cells)):
            active = (~done).nonzero().flatten()
            if not len(active):
                break
            # candidates[a, i, j]: the current map with query cell i replaced by distractor cell j
            keep = current[active][:, None, None] * (1 - eye)[None, :, None, None, :]
            put = donor[active].transpose(1, 2)[:, None, :, :, None] * eye[None, :, None, None, :]
            candidates = (keep + put).reshape(-1, channels, height, width)
            logp = self.head(candidates).log_softmax(1).view(len(active), cells, cells, -1)
            score = logp[torch.arange(len(active)), ..., target[active]]  # (a, i, j)
            blocked = used_query[active][:, :, None] | used_donor[active][:, None, :]
            if self.config.cells == "aligned":
                blocked = blocked | ~eye.bool()
            score = score.masked_fill(blocked, float("-inf"))
            flat = score.flatten(1).argmax(1)
            i, j = flat // cells, flat % cells
            current[active, :, i] = donor[active, :, j]
            used_query[active, i], used_donor[active, j] = True, True
            swaps[active.cpu(), step] = torch.stack([i, j], 1).cpu()
            assignment[active, i] = j
            x_cf = paste_tiles(x, distractor, assignment, (height, width))
            head_says = self.head(current.view_as(query_maps)).argmax(1) == target
            if self.config.stop == "features":
                done = head_says
            else:
                image_says = self.classifier(x_cf).argmax(1) == target
                done = head_says & image_says
        feature_valid = self.head(current.view_as(query_maps)).argmax(1) == target
        return x_cf, {"distractor": distractor, "distractor_index": chosen, "swaps": swaps,
                      "cells_swapped": used_query.sum(1), "feature_valid": feature_valid, "grid": (height, width)}
