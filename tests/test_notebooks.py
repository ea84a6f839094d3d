"""Each notebook re-runs headless at its CI size and its recorded numbers reproduce."""
from __future__ import annotations

import json

import pytest

from cfkit.paths import NOTEBOOK_DIR, RESULTS_DIR
from cfkit.run import flatten_rows, read_record, reproduce, reproducible, run_notebook
from cfkit.table import read_csv

EXPECTED_DIR = NOTEBOOK_DIR / "expected"


def _expected(name: str) -> dict:
    return json.loads((EXPECTED_DIR / f"{name}.json").read_text())


def _compare(got: dict[str, float], expected: dict) -> None:
    tolerance = expected["tolerance"]
    want = expected["values"]
    assert all(v > 0 for k, v in got.items() if k not in reproducible(got)), "timings must be measured"
    got = reproducible(got)
    assert set(got) == set(want), f"recorded keys differ: {sorted(set(got) ^ set(want))}"
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=tolerance["rel"], abs=tolerance["abs"]), key


def test_models_notebook_reproduces(tmp_path) -> None:
    expected = _expected("00_models")
    run_notebook("00_models", expected["parameters"], out_dir=tmp_path / "00_models")
    _compare(read_record(tmp_path / "00_models")["numbers"], expected)


def test_metrics_notebook_reproduces(tmp_path) -> None:
    expected = _expected("10_metrics")
    out = tmp_path / "10_metrics"
    run_notebook("10_metrics", {**expected["parameters"], "runs_dir": str(tmp_path)}, out_dir=out)
    record = read_record(out)
    assert {(r["method"], r["pair"]) for r in record["rows"]} == {
        ("original_data", p) for p in ("4->9", "3->8", "5->6", "mean")}
    assert record["numbers"] == flatten_rows(record["rows"])
    _compare(record["numbers"], expected)
    assert (out / "10_metrics.ipynb").is_file() and len(list(out.glob("cfs_*.pt"))) == 3


@pytest.mark.parametrize("name", ["01_adversarial", "02_cem", "03_cve", "04_expgan", "05_c3lt", "06_ldce"])
def test_method_notebook_reproduces(name: str, tmp_path) -> None:
    expected = _expected(name)
    out = tmp_path / name
    run_notebook(name, expected["parameters"], out_dir=out)
    record = read_record(out)
    method = record["rows"][0]["method"]
    assert {r["pair"] for r in record["rows"]} == {"4->9", "3->8", "5->6", "mean"}
    assert sorted(p.name for p in out.glob("cfs_*.pt")) == sorted(
        f"cfs_{method}_{q}to{t}.pt" for q, t in ((4, 9), (3, 8), (5, 6)))
    _compare(record["numbers"], expected)


def test_ldce_error_analysis_notebook_reproduces(tmp_path) -> None:
    expected = _expected("11_ldce_error_analysis")
    out = tmp_path / "11_ldce_error_analysis"
    run_notebook("11_ldce_error_analysis", expected["parameters"], out_dir=out)
    numbers = read_record(out)["numbers"]
    assert numbers["errors/n"] == expected["parameters"]["max_errors"]
    assert numbers["controls/n"] == expected["parameters"]["max_errors"] * expected["parameters"]["per_error"]
    _compare(numbers, expected)


@pytest.mark.slow
def test_full_size_table_reproduces(tmp_path) -> None:
    """`make reproduce` into a scratch folder (13 to 34 minutes on 2 cores) gives the committed results/table.csv."""
    reproduce(runs_dir=tmp_path / "runs", results_dir=tmp_path / "results")
    got = reproducible(flatten_rows(read_csv(tmp_path / "results" / "table.csv")))
    want = reproducible(flatten_rows(read_csv(RESULTS_DIR / "table.csv")))
    assert set(got) == set(want)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-3, abs=1e-5), key
