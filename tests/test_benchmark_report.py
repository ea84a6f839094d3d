"""results/benchmark.md's derived sections: the Inception cost of each subsample size and the kept findings."""
from __future__ import annotations

from benchmark_script import benchmark_script


def test_inception_costs_scale_with_the_images_of_seven_sets() -> None:
    script = benchmark_script()
    table = "\n".join(script.inception_section(0.1))
    cells = [line.strip("| ").split(" | ") for line in table.splitlines() if line.startswith("| ")]
    rows = {row[0]: row[1:] for row in cells[1:]}
    # 7 sets (six methods and Original Data) of three pairs; 4->9, 3->8 and 5->6 have 982, 1010 and 892 queries;
    # the extra wall time is half the extra core-seconds on two cores
    assert rows["100"][:3] == ["2100", "210", "-105"]
    assert rows["200 (default)"][:3] == ["4200", "420", "0"]
    assert rows["300"][:3] == ["6300", "630", "105"]
    assert rows["every counterfactual (`inception_cfs 0`)"][:2] == [str(7 * 2884), str(round(7 * 2884 * 0.1))]
    assert "0.100 s an image" in table and "150 core-seconds on a cold cache" in table
    assert "could not be had" in script.inception_section(None)[0]


def test_rewriting_keeps_the_hand_written_findings(tmp_path) -> None:
    script = benchmark_script()
    report = tmp_path / "benchmark.md"
    assert script.kept_findings(str(report)) == []
    report.write_text("# Benchmarks\n\n## make reproduce\n\nold\n\n## Findings\n\nCEM is held down by pooling.\n")
    assert script.kept_findings(str(report)) == ["## Findings\n\nCEM is held down by pooling.", ""]
