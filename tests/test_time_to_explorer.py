"""benchmarks/time_to_explorer.py's report: its section of results/benchmark.md is written or replaced, every other
section kept (the browser part is exercised by running the script)."""
from __future__ import annotations

import importlib.util
import types
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "time_to_explorer.py"
HOST = {"cpu": "AMD EPYC", "cores": 2, "memory_gib": 23.5, "torch": "2.14"}
REPORT = ("# Benchmarks\n\nMachine: x\n\n## make reproduce\n\n772 s\n\n"
          "## Findings\n\nCEM is held down by pooling.\n\n### Pooling\n\nrewritten.\n")


def script() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("time_to_explorer", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rows_say_whether_the_explorer_came_within_30_seconds() -> None:
    module = script()
    rows = [module.row("01_adversarial", 4.2, 12.5, HOST), module.row("06_ldce", 4.0, 31.0, HOST),
            module.row("02_cem", None, None, HOST, "Timeout 600000ms exceeded")]
    assert [r["within_30_s"] for r in rows] == ["yes", "no", "—"]
    lines = module.section(rows, HOST, module.note_on_metrics(["01_adversarial", "10_metrics"]))
    table = lines[-1]
    assert "| 01_adversarial | 12.5 | yes | 4.2 | AMD EPYC, 2 cores |" in table and "Timeout 600000ms" in table
    assert "`10_metrics` scored the sets that 01_adversarial saved" in lines[0]
    assert "empty runs folder" in module.note_on_metrics(["00_models", "10_metrics"])
    assert module.note_on_metrics(["06_ldce"]) == "" and "12_faithfulness" not in module.explorer_notebooks()


def test_the_section_goes_before_the_findings_and_replaces_itself() -> None:
    module = script()
    heading = module.throughput.EXPLORER_HEADING
    once = module.throughput.replace_section(REPORT, heading, ["first", "", "| a |"])
    assert once.index("## make reproduce") < once.index(heading) < once.index("## Findings")
    assert "772 s\n\n## Time to explorer\n\nfirst\n\n| a |\n\n## Findings" in once
    twice = module.throughput.replace_section(once, heading, ["second"])
    assert "first" not in twice and twice.count(heading) == 1
    assert twice == REPORT.replace("## Findings", f"{heading}\n\nsecond\n\n## Findings")
    # the throughput script's own rewrites keep it: its reproduce section replaced in place, the section kept
    renewed = module.throughput.replace_section(twice, module.throughput.REPRODUCE_HEADING, ["800 s"])
    assert "800 s" in renewed and "772 s" not in renewed and f"{heading}\n\nsecond\n" in renewed
    assert renewed.endswith("### Pooling\n\nrewritten.\n")
    assert module.throughput.replace_section("# Benchmarks\n", heading, ["x"]) == f"# Benchmarks\n\n{heading}\n\nx\n"


def test_the_throughput_script_keeps_the_section_when_it_rewrites_the_file(tmp_path) -> None:
    module = script()
    heading = module.throughput.EXPLORER_HEADING
    report = tmp_path / "benchmark.md"
    assert module.throughput.kept_section(str(report), heading) == []
    report.write_text(module.throughput.replace_section(REPORT, heading, ["12 s", "", "| table |"]))
    assert module.throughput.kept_section(str(report), heading) == [f"{heading}\n\n12 s\n\n| table |", ""]
