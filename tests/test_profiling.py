"""The per-notebook profile: phases timed in the kernel, nested ones counted once, and the rest of the wall time."""
from __future__ import annotations

import json
import time

import pytest
import torch

from cfkit.common import profiling
from cfkit.running.run import read_record, record


@pytest.fixture(autouse=True)
def fresh_phases():
    profiling.reset()
    yield
    profiling.reset()


def test_a_nested_phase_counts_for_itself_alone() -> None:
    with profiling.phase("metrics"):
        time.sleep(0.05)
        with profiling.phase("inception"):
            time.sleep(0.1)
    with profiling.phase("metrics"):
        time.sleep(0.05)
    timed = profiling.phases()
    assert timed["inception"] == pytest.approx(0.1, abs=0.05)
    assert timed["metrics"] == pytest.approx(0.1, abs=0.05), "the inner 0.1 s is not metrics' too"


def test_a_failing_block_still_counts_and_closes_its_phase() -> None:
    with pytest.raises(ValueError):
        with profiling.phase("method"):
            time.sleep(0.02)
            raise ValueError("boom")
    with profiling.phase("metrics"):
        pass
    assert profiling.phases()["method"] >= 0.0 and "metrics" in profiling.phases()
    assert profiling._open == [], "no phase left open"


def test_record_writes_the_kernels_phases_beside_the_numbers(tmp_path) -> None:
    with profiling.phase("method"):
        time.sleep(0.01)
    record(tmp_path, {"a": 1.0})
    saved = read_record(tmp_path)
    assert saved["numbers"] == {"a": 1.0} and set(saved["phases"]) == {"method"}


def test_each_phase_records_the_devices_it_ran_on(tmp_path) -> None:
    with profiling.phase("method", torch.device("cpu")):
        with profiling.phase("inception", "cuda:0"):
            pass
    with profiling.phase("method", "cpu"), profiling.phase("metrics"):  # no device given: none recorded
        pass
    assert profiling.devices() == {"method": ["cpu"], "inception": ["cuda:0"]}
    record(tmp_path, {})
    assert read_record(tmp_path)["devices"] == {"method": ["cpu"], "inception": ["cuda:0"]}


def test_scoring_runs_each_batch_on_the_models_device_and_returns_cpu_scores() -> None:
    """The metrics' networks run where their weights are and hand back CPU tensors (on a machine with a GPU the
    reference profile's test sees them on CUDA)."""
    from cfkit.common.devices import model_device
    from cfkit.scoring.metrics import _batched

    seen = []

    class Probe(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(x.device)
            return x.flatten(1)[:, :10] * self.weight

    probe = Probe()
    out = _batched(probe, torch.rand(3, 1, 28, 28))
    assert model_device(probe) == torch.device("cpu") and out.device == torch.device("cpu") and seen == [out.device]
    assert model_device(torch.nn.ReLU()) == torch.device("cpu"), "a model without weights runs on the CPU"


def test_notebook_profile_splits_the_wall_time(tmp_path) -> None:
    executed = tmp_path / "nb.ipynb"
    cells = [{"cell_type": "code", "metadata": {"papermill": {"duration": d}}, "source": ""} for d in (2.0, 30.0, 8.0)]
    cells.append({"cell_type": "markdown", "metadata": {}, "source": ""})
    executed.write_text(json.dumps({"cells": cells}))
    row = profiling.notebook_profile(45.0, executed, {"method": 20.0, "inception": 6.0, "metrics": 4.0})
    assert row == {"wall": 45.0, "startup": 5.0, "method": 20.0, "metrics": 4.0, "inception": 6.0, "other": 10.0}
    assert row["startup"] + sum(row[k] for k in profiling.PHASES) + row["other"] == row["wall"]
