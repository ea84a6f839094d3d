"""Range checks for method knobs, so a bad setting fails with a message before any work starts."""
from __future__ import annotations

from ..errors import InputError


def positive(name: str, value: object, integer: bool = False) -> float | int:
    """Return ``value`` if it is a positive number (an int when ``integer``)."""
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or not value > 0:
        what = "a positive integer" if integer else "a positive number"
        raise InputError(f"{name} must be {what}, got {value!r}.")
    return value


def non_negative(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise InputError(f"{name} must be a number >= 0, got {value!r}.")
    return float(value)


def one_of(name: str, value: object, options: tuple) -> object:
    if value not in options:
        raise InputError(f"{name} must be one of {', '.join(map(repr, options))}, got {value!r}.")
    return value


def unit_interval(name: str, value: object) -> float:
    """Return ``value`` if it is a number in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise InputError(f"{name} must be a number in [0, 1], got {value!r}.")
    return float(value)


def in_range(name: str, value: object, low: float, high: float, include_low: bool = True, unit: str = "") -> float:
    """Return ``value`` if it is a number in [low, high] (or (low, high] without ``include_low``)."""
    number = not isinstance(value, bool) and isinstance(value, (int, float))
    if not number or not ((value >= low if include_low else value > low) and value <= high):
        bracket = "[" if include_low else "("
        raise InputError(f"{name} must be a number in {bracket}{low:g}{unit}, {high:g}{unit}], got {value!r}.")
    return float(value)
