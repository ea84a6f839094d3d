"""Every bad input gets an error that says what was wrong."""
from __future__ import annotations

import pytest
import torch

from cfkit.common.validate import check_class_id, check_images, check_pair, check_targets
from cfkit.errors import InputError


@pytest.mark.parametrize(
    ("x", "message"),
    [
        (torch.rand(0, 1, 28, 28), "empty batch"),
        (torch.rand(4, 28, 28), "add the channel axis"),
        (torch.rand(4, 3, 28, 28), r"\(N, 1, 28, 28\)"),
        (torch.rand(4, 1, 32, 32), r"\(N, 1, 28, 28\)"),
        (torch.rand(2, 1, 28, 28) * 2 - 1, r"\[0, 1\]"),
        (torch.rand(2, 1, 28, 28) * 255, r"\[0, 1\]"),
        (torch.randint(0, 255, (2, 1, 28, 28), dtype=torch.uint8), "x.float\\(\\) / 255"),
        (torch.full((2, 1, 28, 28), float("nan")), "NaN"),
        ([[0.0]], "torch.Tensor"),
    ],
)
def test_bad_images(x, message: str) -> None:
    with pytest.raises(InputError, match=message):
        check_images(x)


@pytest.mark.parametrize("value", [10, -1, 3.0, "4", True, None])
def test_bad_class_ids(value) -> None:
    with pytest.raises(InputError, match="0-9"):
        check_class_id(value)


def test_target_equal_to_query_class() -> None:
    with pytest.raises(InputError, match="target equals the query class"):
        check_targets(4, 3, source=torch.tensor([4, 4, 4]))
    with pytest.raises(InputError, match="one per image"):
        check_targets(torch.tensor([9, 9]), 3)
    assert check_targets(9, 3, source=torch.tensor([4, 4, 4])).tolist() == [9, 9, 9]


def test_pairs() -> None:
    assert check_pair("4->9") == (4, 9) and check_pair((3, 8)) == (3, 8)
    with pytest.raises(InputError, match="must differ"):
        check_pair((4, 4))
    with pytest.raises(InputError):
        check_pair("4-9")
