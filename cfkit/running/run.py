"""Notebook runs with papermill and their recorded numbers.

``run_notebook("10_metrics", {"n_queries": 40})`` checks the parameters against the notebook's
``parameters`` cell (names, types and values) before any kernel starts, then executes it headless into
``runs/<notebook>/``. Notebooks write their numbers with :func:`record` (atomic JSON).
"""
from __future__ import annotations

import ast
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..common.profiling import devices, phases
from ..errors import MissingResultsError, ParameterError
from ..paths import NOTEBOOK_DIR, RUNS_DIR, atomic_write_json, make_folder
from .parameter_values import check_values

RECORD_FILE = "metrics.json"
TIMING = ("seconds_per_cf",)
"""Recorded columns that measure the machine, not the method: never held to expected values."""


def reproducible(numbers: dict[str, float]) -> dict[str, float]:
    """The recorded numbers without wall-clock timings."""
    return {k: v for k, v in numbers.items() if k.rsplit("/", 1)[-1] not in TIMING}


_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,), "float": (float, int), "str": (str,), "bool": (bool,), "list": (list,), "dict": (dict,),
}


def notebook_path(name: str | Path) -> Path:
    """Resolve '10_metrics', '10_metrics.ipynb' or a path to an existing notebook."""
    path = Path(name)
    candidates = [path, NOTEBOOK_DIR / path, NOTEBOOK_DIR / f"{path}.ipynb"]
    for candidate in candidates:
        if candidate.suffix == ".ipynb" and candidate.is_file():
            return candidate.resolve()
    known = ", ".join(sorted(p.stem for p in NOTEBOOK_DIR.glob("*.ipynb")))
    raise ParameterError(f"no notebook {str(name)!r}; known notebooks: {known}.")


def notebook_parameters(name: str | Path) -> dict[str, dict[str, Any]]:
    """The parameters cell of a notebook as papermill infers it: name -> {default, inferred_type_name, help}."""
    import papermill  # lazy: kernels import this module for record(), and papermill costs them 2.3 s

    return papermill.inspect_notebook(str(notebook_path(name)))


def check_parameters(name: str | Path, values: dict[str, Any]) -> dict[str, Any]:
    """Refuse unknown names and values whose type differs from the default's (an int is a fine float)."""
    spec, notebook = notebook_parameters(name), Path(str(name)).stem
    defaults = literal_defaults(spec)
    for key, value in values.items():
        if key not in spec:
            raise ParameterError(f"{notebook} has no parameter {key!r}; its parameters are {', '.join(spec)}.")
        expected = spec[key]["inferred_type_name"]
        if expected in ("None", None):  # not annotated: the type of its default literal
            expected = type(defaults.get(key)).__name__
        allowed = _TYPES.get(expected)
        if allowed is None:  # None default or an expression papermill cannot type: accept anything
            continue
        ok = isinstance(value, allowed) and not (isinstance(value, bool) and bool not in allowed)
        if not ok:
            raise ParameterError(
                f"parameter {key!r} of {notebook} expects {expected} (default "
                f"{spec[key]['default']}), got {type(value).__name__} {value!r}."
            )
    return values


def literal_defaults(spec: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The parameters' defaults that are Python literals (one that is an expression is left out)."""
    defaults = {}
    for key, entry in spec.items():
        try:
            defaults[key] = ast.literal_eval(entry["default"])
        except (ValueError, SyntaxError):
            continue
    return defaults


def child_command(name: str | Path, parameters: dict[str, Any], out_dir: str | Path) -> list[str]:
    """The ``cfkit run`` command line of a child process that runs ``name`` with ``parameters`` into ``out_dir``."""
    command = [sys.executable, "-m", "cfkit.running.cli", "run", str(name), "--out", str(out_dir)]
    for key, value in parameters.items():
        command += ["-p", key, repr(value)]
    return command


def parse_cli_parameters(pairs: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """``-p n_queries 40 -p pairs '4->9'`` -> {"n_queries": 40, "pairs": "4->9"}: literals, else strings."""
    values = {}
    for key, raw in pairs:
        try:
            values[key] = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            values[key] = raw
    return values


PATH_PARAMETERS = ("classifier_state", "pair_dir", "runs_dir", "study_csv", "figure", "out_dir")
"""Parameters whose (non-empty) value is a path; ``classifier`` is one too when it names an existing file."""


def absolute_paths(parameters: dict[str, Any], base: str | Path | None = None) -> dict[str, Any]:
    """The given parameters with relative paths made absolute against ``base`` (default the caller's folder).

    A kernel runs in notebooks/, so a path the user typed relative to their own folder would point elsewhere
    there. Only given values are touched: a notebook's own defaults ("../runs/…") stay relative to notebooks/.
    ``classifier`` is rewritten only when it names an existing file (a zoo name or package.module:factory is not).
    """
    base = Path(base or Path.cwd())
    resolved = dict(parameters)
    for key, value in parameters.items():
        if not isinstance(value, (str, Path)) or not str(value).strip() or Path(value).is_absolute():
            continue
        if key in PATH_PARAMETERS or (key == "classifier" and (base / value).is_file() and not _zoo_name(value)):
            resolved[key] = str((base / value).resolve())
    return resolved


def _zoo_name(value: str | Path) -> bool:
    """Whether ``value`` names a zoo model, which load_classifier takes before a file of that name."""
    from ..zoo.checkpoints import names  # lazy: kernels import this module for record()

    return str(value).strip() in names()


def _kernel_error(notebook: str, output: Path, exc: Exception) -> Exception | None:
    """The cfkit error a kernel raised (papermill's ``ename``/``evalue``) as that class, in one line; else None."""
    from .. import errors

    error_class = getattr(errors, str(getattr(exc, "ename", "")), None)
    if not (isinstance(error_class, type) and issubclass(error_class, errors.CfkitError)):
        return None
    message = " ".join(str(getattr(exc, "evalue", "")).split())
    return error_class(f"{notebook} stopped: {message} (executed notebook: {output})")


def run_notebook(
    name: str | Path, parameters: dict[str, Any] | None = None, out_dir: str | Path | None = None,
    progress: bool = False,
) -> Path:
    """Execute a notebook headless; it writes its outputs (and recorded numbers) to ``out_dir``.

    ``out_dir`` defaults to ``runs/<notebook>``; ``interactive`` is always False. Returns the executed
    notebook's path.
    """
    import papermill  # lazy, as in notebook_parameters

    path = notebook_path(name)
    parameters = absolute_paths(parameters or {})
    out_dir = Path(out_dir or RUNS_DIR / path.stem).resolve()
    spec = notebook_parameters(path)
    if "out_dir" in spec:
        parameters.setdefault("out_dir", str(out_dir))
    if "interactive" in spec:
        parameters.setdefault("interactive", False)
    check_parameters(path, parameters)
    check_values(path.stem, {**literal_defaults(spec), **parameters})
    make_folder(out_dir)  # an unwritable --out is one line before any kernel starts
    output = out_dir / path.name
    try:
        papermill.execute_notebook(
            str(path), str(output), parameters=parameters, cwd=str(path.parent), kernel_name="python3",
            progress_bar=progress, log_output=False,
        )
    except papermill.PapermillExecutionError as exc:  # a cfkit error in a cell: its one line, as a check gives
        error = _kernel_error(path.stem, output, exc)
        if error is None:
            raise
        raise error from None
    return output


def record(out_dir: str | Path, numbers: dict[str, float], **extra: Any) -> Path:
    """Write a notebook's recorded numbers (flat name -> value) and any extras to ``<out_dir>/metrics.json``.

    Written atomically; the tests compare ``numbers`` with ``notebooks/expected/<notebook>.json``. The kernel's
    timed phases so far (:mod:`cfkit.common.profiling`) and the devices they ran on go beside them, for the run's
    profile.
    """
    return atomic_write_json(Path(out_dir) / RECORD_FILE, {"numbers": numbers, **extra, "phases": phases(),
                                                           "devices": devices()})


def read_record(out_dir: str | Path) -> dict[str, Any]:
    """A notebook's recorded numbers; a clear error when the notebook has not been run there."""
    path = Path(out_dir) / RECORD_FILE
    if not path.is_file():
        raise MissingResultsError(
            f"no recorded numbers at {path}: run the notebook first (`cfkit run {Path(out_dir).name}`)."
        )
    return json.loads(path.read_text())


def flatten_rows(rows: list[dict], key: str = "method", prefix: str = "") -> dict[str, float]:
    """{'original_data/4->9/im1': 0.9, …}: table rows as flat keys, for comparing with expected values.

    ``key`` names the row (``method``, or ``setting`` for an ablation); ``prefix`` goes in front of every key.
    """
    flat = {}
    for row in rows:
        for column, value in row.items():
            if column not in (key, "pair") and value is not None:
                flat[f"{prefix}{row[key]}/{row['pair']}/{column}"] = value
    return flat
