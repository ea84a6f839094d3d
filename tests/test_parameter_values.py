"""Bad parameter values fail at the command line, naming the parameter, before any kernel starts."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import fields

import pytest

from cfkit.errors import ParameterError
from cfkit.paths import NOTEBOOK_DIR
from cfkit.running.parameter_values import notebook_configs
from cfkit.running.run import notebook_parameters, run_notebook


def test_cli_refuses_a_pair_with_one_digit_in_one_line_before_any_kernel(tmp_path) -> None:
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "cfkit.running.cli", "run", "01_adversarial", "-p", "pairs", "4->4",
                           "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cfkit: error: parameter 'pairs' of 01_adversarial"), done.stderr
    assert "must differ" in lines[0] and "-p pairs '4->9,3->8'" in lines[0]
    assert not out.exists()  # run_notebook makes the output folder just before papermill starts the kernel


@pytest.mark.parametrize(
    ("notebook", "values", "message"),
    [
        ("01_adversarial", {"radius": -0.1}, r"'radius' of 01_adversarial: radius must be a positive number"),
        ("02_cem", {"kappa": -1.0}, r"'kappa' of 02_cem: kappa must be a number >= 0"),
        ("06_ldce", {"strength": 1.5}, r"'strength' of 06_ldce: strength must be a number in \(0, 1\]"),
        ("01_adversarial", {"n_queries": -1}, r"'n_queries' of 01_adversarial must be an int >= 0, got -1"),
        ("10_metrics", {"pairs": "4->9,3->12"}, r"'pairs' of 10_metrics: target class must be a digit 0-9, got 12"),
        ("01_adversarial", {"pairs": "4->nine"}, r"'pairs' of 01_adversarial: .*'nine'; give comma-separated"),
        ("03_cve", {"cells": "some"}, r"'cells' of 03_cve: cells must be one of"),
        ("04_expgan", {"mask_threshold": 2.0}, r"'mask_threshold' of 04_expgan"),
        ("05_c3lt", {"fraction": -0.5}, r"'fraction' of 05_c3lt"),
        ("11_ldce_error_analysis", {"consensus_angle": 200.0}, r"'consensus_angle' of 11_ldce_error_analysis"),
        ("11_ldce_error_analysis", {"per_error": 0}, r"'per_error' of 11_ldce_error_analysis must be an int >= 1"),
        ("06_ldce", {"seed": -3}, r"'seed' of 06_ldce must be an int >= 0"),
        ("00_models", {"n_images": 0}, r"'n_images' of 00_models must be an int >= 1"),
    ],
)
def test_bad_values_are_refused_naming_the_parameter(notebook, values, message, no_kernel) -> None:
    with pytest.raises(ParameterError, match=message):
        run_notebook(notebook, values)
    assert no_kernel == []


def test_good_values_reach_papermill(tmp_path, no_kernel) -> None:
    run_notebook("06_ldce", {"strength": 1.0, "consensus_angle": 180.0, "n_queries": 0}, out_dir=tmp_path)
    assert no_kernel == [str(NOTEBOOK_DIR / "06_ldce.ipynb")]


@pytest.mark.parametrize("path", sorted(NOTEBOOK_DIR.glob("*.ipynb")), ids=lambda p: p.stem)
def test_every_notebook_passes_at_its_defaults(path, tmp_path, no_kernel) -> None:
    run_notebook(path, out_dir=tmp_path)
    assert no_kernel == [str(path)]


@pytest.mark.parametrize("notebook", sorted(notebook_configs()))
def test_each_knob_goes_to_the_config_field_of_its_name(notebook: str) -> None:
    """What notebook_configs() assumes: a parameter named as a field of the config is passed as that field."""
    source = "".join("".join(cell["source"]) for cell in json.loads((NOTEBOOK_DIR / f"{notebook}.ipynb").read_text())
                     ["cells"] if cell["cell_type"] == "code")
    knobs = [f.name for f in fields(notebook_configs()[notebook]) if f.name in notebook_parameters(notebook)]
    assert knobs
    for knob in knobs:
        assert f"{knob}={knob}" in source, f"{notebook} does not pass its parameter {knob} as {knob}="
