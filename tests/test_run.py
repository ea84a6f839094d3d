"""Notebook parameters are checked before a kernel starts; the CLI reports errors plainly."""
from __future__ import annotations

import json

import pytest

from cfkit.errors import ParameterError
from cfkit.paths import NOTEBOOK_DIR
from cfkit.running import cli
from cfkit.running.run import check_parameters, flatten_rows, notebook_parameters, parse_cli_parameters, run_notebook


def test_every_notebook_has_a_parameters_cell_with_interactive_and_out_dir() -> None:
    notebooks = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
    assert notebooks
    for path in notebooks:
        cells = json.loads(path.read_text())["cells"]
        assert any("parameters" in c.get("metadata", {}).get("tags", []) for c in cells), path.name
        spec = notebook_parameters(path)
        assert spec["interactive"]["default"] == "True" and "out_dir" in spec, path.name


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"n_queries": "40"}, r"'n_queries' of 10_metrics expects int.*got str '40'"),
        ({"n_queries": 4.5}, "expects int"),
        ({"pairs": 49}, "expects str"),
        ({"interactive": 1}, "expects bool"),
        ({"n_querys": 40}, "no parameter 'n_querys'.*n_queries"),
    ],
)
def test_wrong_parameters_are_refused_before_running(values, message: str) -> None:
    with pytest.raises(ParameterError, match=message):
        run_notebook("10_metrics", values)


def test_good_parameters_pass() -> None:
    assert check_parameters("10_metrics", {"n_queries": 40, "pairs": "4->9", "seed": 1}) == {
        "n_queries": 40, "pairs": "4->9", "seed": 1}


def test_unknown_notebook() -> None:
    with pytest.raises(ParameterError, match="no notebook 'nope'.*10_metrics"):
        run_notebook("nope")


def test_cli_values_are_literals_or_strings() -> None:
    assert parse_cli_parameters([("n_queries", "40"), ("pairs", "4->9"), ("interactive", "False"),
                                 ("scale", "2.5")]) == {"n_queries": 40, "pairs": "4->9", "interactive": False,
                                                         "scale": 2.5}


def test_cli_reports_errors_without_a_traceback(capsys) -> None:
    assert cli.main(["run", "10_metrics", "-p", "n_queries", "many"]) == 2
    assert "expects int" in capsys.readouterr().err
    assert cli.main(["train", "ae_42"]) == 2
    assert "unknown zoo model 'ae_42'" in capsys.readouterr().err


def test_flatten_rows() -> None:
    rows = [{"method": "cem", "pair": "4->9", "im1": 1.0, "seconds_per_cf": None}]
    assert flatten_rows(rows) == {"cem/4->9/im1": 1.0}


def test_table_without_a_metrics_run_says_what_to_run(tmp_path, capsys) -> None:
    assert cli.main(["table", "--runs", str(tmp_path), "--no-write"]) == 2
    assert "cfkit run 10_metrics" in capsys.readouterr().err
