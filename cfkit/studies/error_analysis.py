"""What the classifier's mistakes look like: its misclassified test digits, counterfactuals back to their
true label, and correctly classified digits of the same confusions as the yardstick for the edit size.

Used by ``11_ldce_error_analysis``: if a misclassified digit needs a much smaller edit to be read as its
true label than a correct digit of the predicted class does, the error sits near the decision boundary.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..common.batching import INFERENCE_BATCH
from ..data import load_mnist
from ..errors import InputError
from ..methods.base import Result
from ..scoring.metrics import agreement_scores, proximity_scores


@dataclass
class Confusions:
    """Test digits to explain: ``source`` is the classifier's prediction (the counterfactual's query class),
    ``target`` the class to explain toward (for a misclassified digit, its true label), ``index`` the
    position in the MNIST test set."""

    x: torch.Tensor
    source: torch.Tensor
    target: torch.Tensor
    index: torch.Tensor

    def __len__(self) -> int:
        return len(self.x)

    def first(self, n: int) -> Confusions:
        """The first ``n`` cases."""
        return Confusions(self.x[:n], self.source[:n], self.target[:n], self.index[:n])

    def pairs(self) -> list[tuple[int, int]]:
        """The distinct (source, target) confusions, most frequent first."""
        pairs, counts = torch.stack([self.source, self.target], 1).unique(dim=0, return_counts=True)
        return [tuple(p) for p in pairs[counts.argsort(descending=True, stable=True)].tolist()]


@torch.inference_mode()
def test_predictions(classifier: nn.Module) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """MNIST test images, labels and the classifier's predictions."""
    x, y = load_mnist("test")
    return x, y, torch.cat([classifier(chunk).argmax(1) for chunk in x.split(INFERENCE_BATCH)])


def misclassified(classifier: nn.Module) -> Confusions:
    """Every MNIST test digit the classifier gets wrong."""
    x, y, predicted = test_predictions(classifier)
    wrong = (predicted != y).nonzero().flatten()
    return Confusions(x[wrong], predicted[wrong], y[wrong], wrong)


def correct_controls(classifier: nn.Module, errors: Confusions, per_error: int = 2, seed: int = 0) -> Confusions:
    """For each error (true y, predicted p): ``per_error`` correctly classified test digits *of class p*,
    drawn without replacement (seeded). Explained toward y they make the same change as the error's
    counterfactual, p → y, from digits the classifier has right: the yardstick for the edit size."""
    if len(errors) == 0:
        raise InputError("there are no misclassified digits to match controls to.")
    if isinstance(per_error, bool) or not isinstance(per_error, int) or per_error < 1:
        raise InputError(f"per_error must be an int >= 1, got {per_error!r}.")
    x, y, predicted = test_predictions(classifier)
    generator = torch.Generator().manual_seed(seed)
    picked, targets = [], []
    for (p, label), count in zip(*torch.stack([errors.source, errors.target], 1).unique(dim=0, return_counts=True)):
        pool = ((y == p) & (predicted == p)).nonzero().flatten()
        take = min(len(pool), per_error * int(count))
        picked.append(pool[torch.randperm(len(pool), generator=generator)[:take]])
        targets.append(label.repeat(take))
    index = torch.cat(picked)
    return Confusions(x[index], predicted[index], torch.cat(targets), index)


@torch.inference_mode()
def edit_summary(result: Result, oracle: nn.Module) -> dict[str, float]:
    """How big the edit was (mean and median L1 per pixel) and who agrees it changed the digit: the classifier
    (validity), the independent oracle on the counterfactual, and the oracle on the *query* (does the oracle
    already read the query as the target? then the classifier's call was a close one)."""
    distance = proximity_scores(result.x, result.x_cf)
    return {
        "n": len(result.x),
        "validity": result.validity,
        "oracle_agreement": agreement_scores(oracle, result.x_cf, result.target).float().mean().item(),
        "oracle_reads_query_as_target": agreement_scores(oracle, result.x, result.target).float().mean().item(),
        "l1_mean": distance.mean().item(),
        "l1_median": distance.median().item(),
    }


def edit_size_test(errors: Result, controls: Result) -> dict[str, float]:
    """One-sided Mann–Whitney U: are the errors' edits (L1) smaller than the controls'? Returns U, p and the
    ratio of median edits (errors / controls)."""
    from scipy.stats import mannwhitneyu

    a, b = proximity_scores(errors.x, errors.x_cf), proximity_scores(controls.x, controls.x_cf)
    test = mannwhitneyu(a.numpy(), b.numpy(), alternative="less")
    return {"u": float(test.statistic), "p_value": float(test.pvalue),
            "median_ratio": (a.median() / b.median()).item()}


def edits_by_confusion(errors: Confusions, error_result: Result, controls: Confusions, control_result: Result
                       ) -> list[dict]:
    """Per confusion (predicted → true), most frequent first: how many errors and controls, and their mean L1 edit."""
    error_l1 = proximity_scores(error_result.x, error_result.x_cf)
    control_l1 = proximity_scores(control_result.x, control_result.x_cf)
    rows = []
    for source, target in errors.pairs():
        mine = (errors.source == source) & (errors.target == target)
        theirs = (controls.source == source) & (controls.target == target)
        rows.append({"confusion": f"{source}->{target}", "errors": int(mine.sum()), "l1_errors": error_l1[mine].mean().item(),
                     "controls": int(theirs.sum()),
                     "l1_controls": control_l1[theirs].mean().item() if theirs.any() else None})
    return rows
