"""The values a notebook's parameters may take, checked before a kernel starts: the pairs, the counts, and each
method notebook's knobs, which build the method's config dataclass (its ``__post_init__`` checks their ranges).

A bad value fails at the command line with one line naming the notebook and the parameter, instead of a
traceback from inside a kernel minutes later.
"""
from __future__ import annotations

from dataclasses import fields
from typing import Any

from ..errors import CfkitError, InputError, ParameterError
from ..methods import catalog
from ..methods.ldce import LDCEConfig
from ..scoring.evaluation import fewest_query_class, parse_pairs, query_ceiling
from ..zoo.classifiers import DEFAULT as DEFAULT_CLASSIFIER, fingerprint, load_classifier

OTHER_CONFIGS: dict[str, type] = {"11_ldce_error_analysis": LDCEConfig}
"""Notebooks that build a method's config without being that method's notebook in the catalog."""


def notebook_configs() -> dict[str, type]:
    """The config each notebook builds from its parameters named as the config's fields (every such parameter
    goes to the field of its name): the catalog's method notebooks, and :data:`OTHER_CONFIGS`."""
    configs = {entry.notebook: entry.method.config_type for entry in catalog.entries()
               if entry.notebook is not None and entry.method.config_type is not None}
    return {**configs, **OTHER_CONFIGS}


COUNTS = {"n_queries": 0, "ablation_queries": 0, "max_errors": 0, "cem_patience": 0, "seed": 0,
          "n_images": 1, "per_error": 1, "show": 1, "samples_per_class": 2, "inception_cfs": 0}
"""Count parameters and their least value: 0 where the notebook gives 0 a meaning (all, skip, never); two
samples a class, the fewest FID can score."""


def check_values(notebook: str, values: dict[str, Any]) -> None:
    """Refuse pairs, counts and knobs that ``notebook`` would fail on; ``values``: its defaults with the given
    values over them, so a knob given alone is checked together with the others."""
    if "pairs" in values:
        try:
            parse_pairs(values["pairs"])
        except ValueError as exc:  # InputError, or int() of a class that is not a number
            problem = str(exc).rstrip(".")
            fix = "" if "; give " in problem else ("; give comma-separated query->target pairs of distinct digits "
                                                   "0-9, e.g. -p pairs '4->9,3->8'")  # unless it names its own fix
            raise ParameterError(f"parameter 'pairs' of {notebook}: {problem}{fix}.") from None
    for name, least in COUNTS.items():
        value = values.get(name)
        if isinstance(value, int) and value < least:  # a value of another type is check_parameters' to refuse
            raise ParameterError(f"parameter {name!r} of {notebook} must be an int >= {least}, got {value!r}.")
    if "pairs" in values:
        _check_ceilings(notebook, values)
    if "classifier" in values:
        _check_classifier(notebook, values)
    config = notebook_configs().get(notebook)
    if config is not None:
        knobs = {field.name: values[field.name] for field in fields(config) if field.name in values}
        try:
            config(**knobs)
        except InputError as exc:  # its message starts with the field's name, which is the parameter's
            named = [name for name in knobs if str(exc).startswith(f"{name} ")] or list(knobs)
            raise ParameterError(f"parameter {', '.join(map(repr, named))} of {notebook}: {exc}") from None


QUERY_SPLITS = {"n_queries": ("test", "test images"), "ablation_queries": ("train", "training (validation) images")}
"""Counts of query images a pair, with the MNIST split they are drawn from: none may exceed what the split has."""


def _check_ceilings(notebook: str, values: dict[str, Any]) -> None:
    """Refuse more queries a pair than the pairs' query classes have images (the official MNIST counts)."""
    for name, (split, images) in QUERY_SPLITS.items():
        value = values.get(name)
        if not isinstance(value, int) or isinstance(value, bool):
            continue
        ceiling = query_ceiling(values["pairs"], split)
        if value > ceiling:
            fewest = fewest_query_class(values["pairs"], split)
            raise ParameterError(f"parameter {name!r} of {notebook}: {value} exceeds the {ceiling} MNIST {images} of "
                                 f"digit {fewest}, a query class of pairs {values['pairs']!r}; give at most {ceiling}"
                                 + (" (0 means all of them)." if split == "test" else "."))


def _check_classifier(notebook: str, values: dict[str, Any]) -> None:
    """Load the classifier the notebook would explain: a missing file, a model without 10 logits, or one the
    notebook's method cannot explain (CVE and a model it cannot split, say) fails here, and so does a per-pair
    method's notebook asked to explain another classifier with the shipped pair models."""
    try:
        model = load_classifier(values["classifier"], values.get("classifier_state") or None)
    except CfkitError as exc:
        message = " ".join(str(exc).split())  # one line, whatever torch put in it
        raise ParameterError(f"parameter 'classifier' of {notebook}: {message}") from None
    for entry in catalog.entries():
        reason = catalog.cannot_explain(entry, model) if entry.notebook == notebook and not entry.reference else None
        if reason is not None:
            raise ParameterError(f"parameter 'classifier' of {notebook}: {entry.label} cannot explain it: {reason}")
    per_pair = {entry.notebook: entry.name for entry in catalog.entries() if entry.per_pair}
    shipped = values["classifier"] == DEFAULT_CLASSIFIER or fingerprint(model) == fingerprint(load_classifier())
    if notebook in per_pair and not shipped and not values.get("pair_dir") and not values.get("retrain"):
        raise ParameterError(f"parameter 'classifier' of {notebook}: the shipped {per_pair[notebook]} models were "
                             "trained against the zoo's classifier; train them for yours (`cfkit train "
                             f"{per_pair[notebook]} --pair Q T --classifier … --out DIR`, then -p pair_dir DIR) or "
                             "pass -p retrain True.")
