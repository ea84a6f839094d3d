"""The contract every counterfactual method passes: the shipped ones (test_methods.py) and the README's
example of a new one (test_add_a_method.py) run these same checks."""
from __future__ import annotations

import pytest
import torch

from cfkit.data import load_mnist
from cfkit.errors import InputError
from cfkit.methods.base import CounterfactualMethod, Result

BAD_INPUTS = [
    (torch.zeros(0, 1, 28, 28), 9, "empty batch"),
    (torch.zeros(2, 1, 28, 28) - 0.5, 9, r"\[0, 1\]"),
    (torch.zeros(2, 1, 28, 28), 10, "0-9"),
]
"""(x, target, the message's pattern): input that ``explain`` must refuse with an InputError."""


def contract_queries(per_pair: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """12 real test digits with per-image targets: (x, source, target).

    Per-pair methods get mixed pairs in one batch (six 4->9, six 3->8), the others six fours to 9 and six to 7.
    """
    fours = load_mnist("test", digits=(4,))[0][:12]
    if per_pair:
        threes = load_mnist("test", digits=(3,))[0][:6]
        return (torch.cat([fours[:6], threes]), torch.tensor([4] * 6 + [3] * 6),
                torch.tensor([9] * 6 + [8] * 6))
    return fours, torch.full((12,), 4), torch.tensor([9] * 6 + [7] * 6)


def check_explain_contract(
    method: CounterfactualMethod, x: torch.Tensor, source: torch.Tensor, target: torch.Tensor,
    alone: slice | None = None,
) -> Result:
    """Shapes, range, validity flags, validity >= 0.9, timing and determinism; with ``alone``, those
    queries explained on their own must get the answers they got in the whole batch."""
    result = method.explain(x, target, source=source)
    assert result.x_cf.shape == x.shape and result.x_cf.dtype == torch.float32
    assert 0 <= result.x_cf.min() and result.x_cf.max() <= 1
    assert torch.equal(result.valid, method.predict(result.x_cf) == target)
    assert result.validity >= 0.9 and result.seconds > 0
    again = method.explain(x, target, source=source)
    assert torch.allclose(again.x_cf, result.x_cf, atol=1e-5), "explain must be deterministic"
    if alone is not None:
        part = method.explain(x[alone], target[alone], source=source[alone])
        assert torch.allclose(part.x_cf, result.x_cf[alone], atol=1e-5), "a query's answer must not depend on its batch"
    return result


def check_bad_input(method: CounterfactualMethod, x: torch.Tensor, target: object, message: str) -> None:
    with pytest.raises(InputError, match=message):
        method.explain(x, target)


def check_refuses_the_query_class(method: CounterfactualMethod) -> None:
    """A target equal to the query's own class is no counterfactual."""
    fours = load_mnist("test", digits=(4,))[0][:2]
    with pytest.raises(InputError, match="target equals the query class"):
        method.explain(fours, 4, source=torch.full((2,), 4))
