"""README's "How to add a method", followed to the letter: its example method, taken out of the README
and run, passes the contract every shipped method passes and goes through the protocol and the scoring.

The README holds the example in a ```python fence right after the line ``<!-- add-a-method example -->``.
``CFKIT_README`` points the test at another file (a draft of the section) instead of README.md.
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
import sys
import types
from pathlib import Path

import pytest
import torch
from matplotlib import pyplot as plt

from cfkit.data import PAIRS, load_mnist, pair_name
from cfkit.errors import InputError
from cfkit.methods import catalog
from cfkit.methods.base import CounterfactualMethod
from cfkit.scoring import evaluation, plots, table
from cfkit.zoo.checkpoints import load

from benchmark_script import benchmark_script
from method_contract import (BAD_INPUTS, check_bad_input, check_explain_contract, check_refuses_the_query_class,
                             contract_queries)

README = Path(os.environ.get("CFKIT_README") or Path(__file__).resolve().parents[1] / "README.md")
MARKER = "<!-- add-a-method example -->"


def readme_example() -> str:
    """The code of the ```python fence that follows the marker line."""
    found = re.search(re.escape(MARKER) + r"\s*```python\n(.*?)^```", README.read_text(), re.S | re.M)
    if found is None:
        pytest.fail(f"{README.name} lacks the add-a-method example block: a ```python fence right after "
                    f"the line {MARKER} ({README})")
    return found.group(1)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """These tensors are small: one thread is faster than two, and far faster on a busy 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def example() -> types.ModuleType:
    """The README's example, executed as a module of its own, as a contributor's cfkit/methods/<name>.py would be."""
    module = types.ModuleType("readme_add_a_method")
    sys.modules[module.__name__] = module  # dataclasses look their module up while building the config
    try:
        exec(compile(readme_example(), f"{README}:add-a-method example", "exec"), module.__dict__)
        yield module
    finally:
        del sys.modules[module.__name__]


@pytest.fixture(scope="module")
def method(example) -> CounterfactualMethod:
    # batch_size 5: the 12 contract queries take three batches, so batching and merging extras are exercised
    return example.PrototypeBlend(load("classifier"), batch_size=5, device="cpu")


def test_the_example_has_the_documented_shape(example, method) -> None:
    assert issubclass(example.PrototypeBlend, CounterfactualMethod)
    assert example.PrototypeBlend._explain_batch is not CounterfactualMethod._explain_batch
    assert method.name == "prototype_blend" and method.name not in catalog.names(), "the example is not a shipped method"
    assert isinstance(method.config, example.BlendConfig)
    with pytest.raises(dataclasses.FrozenInstanceError):
        method.config.steps = 3


@pytest.mark.parametrize(("knobs", "message"), [
    ({"steps": 0}, "steps must be a positive integer"),
    ({"steps": 2.5}, "steps must be a positive integer"),
    ({"max_weight": 0}, r"max_weight must be a number in \(0, 1\]"),
    ({"max_weight": 1.5}, r"max_weight must be a number in \(0, 1\]"),
])
def test_knobs_out_of_range(example, knobs: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        example.BlendConfig(**knobs)


def test_explain_contract(method) -> None:
    """The shipped methods' contract, plus: the example does what it says it does."""
    x, source, target = contract_queries()
    result = check_explain_contract(method, x, source, target, alone=slice(6, None))
    weight = result.extras["weight"].view(-1, 1, 1, 1)
    assert weight.shape[0] == len(x) and result.extras["found"].shape == (len(x),)
    train_x, train_y = load_mnist("train")
    prototypes = torch.stack([train_x[train_y == t].mean(0) for t in target.tolist()])
    assert torch.allclose(result.x_cf, (1 - weight) * x + weight * prototypes, atol=1e-6)
    assert torch.equal(result.valid, result.extras["found"])
    step = method.config.max_weight / method.config.steps
    smaller = (weight - step).clamp(min=0)
    assert not (method.predict((1 - smaller) * x + smaller * prototypes) == target).any(), \
        "one grid step less must not flip: the weight is the smallest that does"


@pytest.mark.parametrize(("x", "target", "message"), BAD_INPUTS + [
    (torch.zeros(2, 28, 28), 9, "channel axis"),
    (torch.zeros(2, 1, 32, 32), 9, r"shape \(N, 1, 28, 28\)"),
    (torch.ones(2, 1, 28, 28) * 2, 9, r"\[0, 1\]"),
])
def test_bad_input_is_refused_by_the_base(method, x, target, message: str) -> None:
    check_bad_input(method, x, target, message)


def test_target_equal_to_query_class(method) -> None:
    check_refuses_the_query_class(method)


def test_one_catalog_entry_is_all_it_takes(example, method, tmp_path) -> None:
    """Registered with one catalog entry (the README's step 2), the method is saved, scored, tabled, plotted
    and benchmarked: a table row per pair in table.csv and table.md, a bar in the figure, a benchmark row."""
    entry = catalog.MethodEntry(example.PrototypeBlend, "Prototype blend",
                                lambda classifier: example.PrototypeBlend(classifier, batch_size=5, device="cpu"))
    with catalog.registered(entry):
        paths = evaluation.run_method(entry.make(load("classifier")), tmp_path, PAIRS, n_queries=6)
        assert [p.name for p in paths] == [f"cfs_prototype_blend_{q}to{t}.pt" for q, t in PAIRS]
        rows = evaluation.evaluate_sets(paths, inception=False)
        csv_path, md_path, _ = table.write_table(rows, tmp_path)
        figure = plots.table_figure(rows)
        benchmark = benchmark_script().measure(method.name, "4->9", n_queries=8)
    pairs = [pair_name(p) for p in PAIRS] + ["mean"]
    assert [(r["method"], r["pair"]) for r in rows] == [(method.name, pair) for pair in pairs]
    for row in rows:
        assert 0 <= row["validity"] <= 1 and 0 <= row["oracle_agreement"] <= 1
        assert row["seconds_per_cf"] > 0 and 0 < row["proximity"] < 1 and -1 <= row["cout"] <= 1
        assert all(math.isfinite(row[k]) for k in ("im1", "im2", "fid", "kid"))
    assert rows[-1]["n"] == 6 * len(PAIRS)
    assert rows[-1]["validity"] == pytest.approx(sum(r["validity"] for r in rows[:-1]) / len(PAIRS))
    assert [r["method"] for r in table.read_csv(csv_path)] == [method.name] * len(pairs)
    markdown = md_path.read_text()
    assert f"| Prototype blend | mean | {rows[-1]['n']} |" in markdown
    assert "| Prototype blend |  |  | missing" not in markdown
    assert all("Prototype blend" in [t.get_text() for t in ax.get_xticklabels()] for ax in figure.axes
               if ax.get_visible())
    plt.close(figure)
    assert benchmark["method"] == "Prototype blend" and benchmark["n"] == 8 and 0 <= benchmark["validity"] <= 1
    assert method.name not in catalog.names(), "the with block takes it out again"
