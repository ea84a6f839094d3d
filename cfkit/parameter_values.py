"""The values a notebook's parameters may take, checked before a kernel starts: the pairs, the counts, and each
method notebook's knobs, which build the method's config dataclass (its ``__post_init__`` checks their ranges).

A bad value fails at the command line with one line naming the notebook and the parameter, instead of a
traceback from inside a kernel minutes later.
"""
from __future__ import annotations

from dataclasses import fields
from typing import Any

from .errors import InputError, ParameterError
from .evaluation import parse_pairs
from .methods.adversarial import AttackConfig
from .methods.c3lt import C3LTConfig
from .methods.cem import CEMConfig
from .methods.cve import CVEConfig
from .methods.expgan import ExpGANConfig
from .methods.ldce import LDCEConfig

NOTEBOOK_CONFIGS: dict[str, type] = {
    "01_adversarial": AttackConfig, "02_cem": CEMConfig, "03_cve": CVEConfig, "04_expgan": ExpGANConfig,
    "05_c3lt": C3LTConfig, "06_ldce": LDCEConfig, "11_ldce_error_analysis": LDCEConfig,
}
"""The config each notebook builds from its parameters named as the config's fields (every such parameter
goes to the field of its name)."""
COUNTS = {"n_queries": 0, "ablation_queries": 0, "max_errors": 0, "cem_patience": 0, "seed": 0,
          "n_images": 1, "per_error": 1, "show": 1, "samples_per_class": 2}
"""Count parameters and their least value: 0 where the notebook gives 0 a meaning (all, skip, never); two
samples a class, the fewest FID can score."""


def check_values(notebook: str, values: dict[str, Any]) -> None:
    """Refuse pairs, counts and knobs that ``notebook`` would fail on; ``values``: its defaults with the given
    values over them, so a knob given alone is checked together with the others."""
    if "pairs" in values:
        try:
            parse_pairs(values["pairs"])
        except ValueError as exc:  # InputError, or int() of a class that is not a number
            raise ParameterError(f"parameter 'pairs' of {notebook}: {str(exc).rstrip('.')}; give comma-separated "
                                 "query->target pairs of distinct digits 0-9, e.g. -p pairs '4->9,3->8'.") from None
    for name, least in COUNTS.items():
        value = values.get(name)
        if isinstance(value, int) and value < least:  # a value of another type is check_parameters' to refuse
            raise ParameterError(f"parameter {name!r} of {notebook} must be an int >= {least}, got {value!r}.")
    config = NOTEBOOK_CONFIGS.get(notebook)
    if config is not None:
        knobs = {field.name: values[field.name] for field in fields(config) if field.name in values}
        try:
            config(**knobs)
        except InputError as exc:  # its message starts with the field's name, which is the parameter's
            named = [name for name in knobs if str(exc).startswith(f"{name} ")] or list(knobs)
            raise ParameterError(f"parameter {', '.join(map(repr, named))} of {notebook}: {exc}") from None
