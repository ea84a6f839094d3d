"""The explain(x, target) contract, shown on the Original Data reference."""
from __future__ import annotations

import pytest
import torch

from cfkit.data import load_mnist
from cfkit.errors import InputError
from cfkit.methods.base import Result
from cfkit.methods.original import OriginalData
from cfkit.zoo.checkpoints import load


@pytest.fixture(scope="module")
def method() -> OriginalData:
    return OriginalData(load("classifier"), seed=0, device="cpu")


def test_explain_contract(method) -> None:
    x = load_mnist("test", digits=(4,))[0][:20]
    result = method.explain(x, 9, source=torch.full((20,), 4))
    assert isinstance(result, Result)
    assert result.x_cf.shape == x.shape and result.x_cf.dtype == torch.float32
    assert 0 <= result.x_cf.min() and result.x_cf.max() <= 1
    assert result.valid.dtype == torch.bool and result.valid.shape == (20,)
    assert result.target.tolist() == [9] * 20 and result.seconds >= 0
    train_x, train_y = load_mnist("train")
    index = result.extras["train_index"]
    assert (train_y[index] == 9).all() and len(set(index.tolist())) == 20
    assert torch.equal(train_x[index], result.x_cf)


def test_source_defaults_to_the_classifiers_prediction(method) -> None:
    x = load_mnist("test", digits=(3,))[0][:8]
    result = method.explain(x, torch.tensor([8, 8, 8, 8, 1, 1, 1, 1]))
    assert result.source.tolist() == method.predict(x).tolist()
    assert result.target.tolist() == [8] * 4 + [1] * 4


def test_seeded_and_reproducible(method) -> None:
    x = load_mnist("test", digits=(5,))[0][:10]
    a, b = method.explain(x, 6), method.explain(x, 6)
    assert torch.equal(a.x_cf, b.x_cf)
    other = OriginalData(load("classifier"), seed=1).explain(x, 6)
    assert not torch.equal(a.x_cf, other.x_cf)


@pytest.mark.parametrize(
    ("x", "target", "message"),
    [
        (torch.zeros(0, 1, 28, 28), 9, "empty batch"),
        (torch.zeros(2, 28, 28), 9, "channel axis"),
        (torch.ones(2, 1, 28, 28) * 2, 9, r"\[0, 1\]"),
        (torch.zeros(2, 1, 28, 28), 12, "0-9"),
        (torch.zeros(2, 1, 28, 28), torch.tensor([9, 9, 9]), "one per image"),
    ],
)
def test_bad_input(method, x, target, message: str) -> None:
    with pytest.raises(InputError, match=message):
        method.explain(x, target)


def test_target_equal_to_query_class_is_refused(method) -> None:
    x = load_mnist("test", digits=(4,))[0][:3]
    with pytest.raises(InputError, match="target equals the query class"):
        method.explain(x, 4, source=torch.full((3,), 4))
