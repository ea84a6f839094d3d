"""benchmarks/throughput.py imported from its file (benchmarks/ is not a package), for the tests that call it."""
from __future__ import annotations

import importlib.util
import types
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "throughput.py"


def benchmark_script() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("throughput", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
