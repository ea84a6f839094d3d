"""The error analysis finds the classifier's mistakes, matches controls to them and compares edit sizes."""
from __future__ import annotations

import pytest
import torch

from cfkit.errors import InputError
from cfkit.methods.base import Result
from cfkit.studies.error_analysis import (Confusions, correct_controls, edit_size_test, edit_summary, edits_by_confusion,
                                  misclassified)
from cfkit.zoo.checkpoints import load, read_manifest


@pytest.fixture(scope="module")
def errors() -> Confusions:
    return misclassified(load("classifier"))


def test_misclassified_are_exactly_the_classifiers_mistakes(errors: Confusions) -> None:
    accuracy = read_manifest()["classifier"]["quality"]["test_accuracy"]
    assert len(errors) == round((1 - accuracy) * 10_000)
    with torch.inference_mode():
        assert torch.equal(load("classifier")(errors.x).argmax(1), errors.source)
    assert (errors.source != errors.target).all()
    source, target = errors.pairs()[0]
    counts = [int(((errors.source == s) & (errors.target == t)).sum()) for s, t in errors.pairs()]
    assert counts == sorted(counts, reverse=True) and ((errors.source == source) & (errors.target == target)).any()
    assert len(errors.first(5)) == 5 and torch.equal(errors.first(5).index, errors.index[:5])


def test_controls_are_correct_digits_of_the_predicted_class_with_the_same_target(errors: Confusions) -> None:
    some = errors.first(10)
    controls = correct_controls(load("classifier"), some, per_error=2, seed=0)
    assert len(controls) == 20
    with torch.inference_mode():
        assert torch.equal(load("classifier")(controls.x).argmax(1), controls.source)
    wanted = sorted(zip(some.source.tolist() * 2, some.target.tolist() * 2))
    assert sorted(zip(controls.source.tolist(), controls.target.tolist())) == wanted
    assert not set(controls.index.tolist()) & set(errors.index.tolist())
    again = correct_controls(load("classifier"), some, per_error=2, seed=0)
    assert torch.equal(again.index, controls.index)


def test_controls_refuse_bad_input(errors: Confusions) -> None:
    with pytest.raises(InputError, match="per_error must be an int >= 1"):
        correct_controls(load("classifier"), errors, per_error=0)
    with pytest.raises(InputError, match="no misclassified digits"):
        correct_controls(load("classifier"), errors.first(0))


def _result(x: torch.Tensor, change: float, target: int) -> Result:
    x_cf = (x + change).clamp(0, 1)
    n = len(x)
    return Result(x=x, x_cf=x_cf, source=torch.zeros(n, dtype=torch.long), target=torch.full((n,), target),
                  valid=torch.ones(n, dtype=torch.bool), seconds=1.0)


def test_edit_size_test_finds_smaller_edits_and_only_those() -> None:
    x = torch.zeros(40, 1, 28, 28)
    small = _result(x[:20], torch.linspace(0.01, 0.05, 20).view(-1, 1, 1, 1), 1)
    large = _result(x[20:], torch.linspace(0.10, 0.30, 20).view(-1, 1, 1, 1), 1)
    smaller = edit_size_test(small, large)
    assert smaller["p_value"] < 1e-6 and smaller["median_ratio"] < 0.5
    assert edit_size_test(large, small)["p_value"] > 0.99
    summary = edit_summary(small, load("oracle"))
    assert summary["n"] == 20 and summary["l1_mean"] == pytest.approx(0.03, rel=1e-5)
    assert summary["validity"] == 1.0 and 0 <= summary["oracle_agreement"] <= 1


def test_edits_by_confusion_reports_each_confusion(errors: Confusions) -> None:
    some = errors.first(6)
    controls = correct_controls(load("classifier"), some, per_error=1)
    rows = edits_by_confusion(some, _result(some.x, 0.02, 0), controls, _result(controls.x, 0.2, 0))
    assert sum(r["errors"] for r in rows) == 6 and sum(r["controls"] for r in rows) == 6
    assert all(r["l1_errors"] < r["l1_controls"] for r in rows)
