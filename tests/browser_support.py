"""Helpers for the real-browser tests: find Chromium and playwright, or skip (fail on CI).

The servers themselves (JupyterLab, Voilà) live in :mod:`cfkit.interactive.servers`, shared with the benchmark and the app.
"""
from __future__ import annotations

import os

import pytest

from cfkit.interactive.servers import LabServer, VoilaServer, find_chromium, free_port  # noqa: F401  (re-exported)


def require_browser() -> str:
    """Chromium's path and an importable playwright, or skip with the reason; on CI (``CI=true``) fail instead,
    since CI must have both (``.ci/run`` installs Chromium)."""
    problem = None
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as error:
        problem = f"the playwright package is not importable ({error}); pip install -e '.[dev]'"
    chromium = find_chromium()
    if problem is None and chromium is None:
        problem = "no Chromium binary (/usr/bin/chromium or chromium on PATH); apt-get install chromium"
    if problem is None:
        return chromium
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI must run the browser test, but {problem}", pytrace=False)
    pytest.skip(problem)
