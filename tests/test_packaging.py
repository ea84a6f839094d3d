"""pyproject.toml and environment.yml ask for the same packages with the same ranges (every extra included)."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CONDA_NAMES = {"pytorch": "torch"}  # conda-forge spelling -> PyPI spelling


def _split(requirement: str) -> tuple[str, str]:
    name, spec = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*)$", requirement).groups()
    return name.lower().replace("_", "-"), spec.replace(" ", "")


def test_environment_yml_matches_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [r for group in project["optional-dependencies"].values() for r in group]
    wanted = dict(_split(r) for r in project["dependencies"] + extras)
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = {}
    for entry in env["dependencies"]:
        if isinstance(entry, str):
            name, spec = _split(entry)
            if name not in ("python", "pip"):
                conda[CONDA_NAMES.get(name, name)] = spec
    assert conda == wanted
    assert "conda-forge" in env["channels"]
    pip_section = next(e["pip"] for e in env["dependencies"] if isinstance(e, dict))
    assert any(line.startswith("-e .") for line in pip_section), "environment.yml must install cfkit itself"


def test_python_requirement_agrees() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert f"python{project['requires-python']}" in env["dependencies"]
