"""`cfkit sweep`: the grid is checked before anything runs, runs go to local processes or a Dask cluster,
one failing run does not lose the others, and the runs' numbers end up in one CSV and one plot."""
from __future__ import annotations

import csv
import os
import signal
import socket
from pathlib import Path

import pytest

from cfkit.common.threads import THREAD_VARS, threads_per_job
from cfkit.errors import ParameterError
from cfkit.errors import SchedulerError, SweepError
from cfkit.running import cli, sweep
from cfkit.running.run import RECORD_FILE
from cfkit.running.sweep import (SWEEP_CSV, SWEEP_PNG, Point, build_grid, folder_name, gather, parse_sweep_args, run_point,
                         run_sweep)

NOTEBOOK = "01_adversarial"
TINY = {"n_queries": 4, "pairs": "4->9", "steps": 10, "step_size": 0.05, "inception": False}
"""About 15 s a run on one core: four queries of one pair, ten PGD steps."""
TINY_ARGS = [word for name, value in TINY.items() for word in ("--set", name, str(value))]
RADII = [0.02, 0.3]  # measured at TINY: validity 0.0 and 1.0
MEAN = "adv_attack/mean"


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def check_radius_rows(rows: list[dict[str, str]]) -> None:
    """Two good runs, in grid order, with plausible numbers that move with the radius."""
    assert [float(r["radius"]) for r in rows] == RADII
    assert all(r["error"] == "" for r in rows)
    validity = [float(r[f"{MEAN}/validity"]) for r in rows]
    im1 = [float(r[f"{MEAN}/im1"]) for r in rows]
    assert all(0.0 <= v <= 1.0 for v in validity) and validity[1] > validity[0]
    assert all(0.0 < v < 5.0 for v in im1) and im1[0] != im1[1]


# ---- the grid, fast: no notebook runs ----

def test_values_are_parsed_like_cfkit_run() -> None:
    swept, fixed = parse_sweep_args([["radius", "0.1", "1"], ["norm", "Linf", "L2"]], [["pairs", "4->9"]])
    assert swept == {"radius": [0.1, 1], "norm": ["Linf", "L2"]} and fixed == {"pairs": "4->9"}


@pytest.mark.parametrize(("swept", "message"), [
    (None, r"at least one parameter to sweep, e\.g\. `-p guidance"),
    ([["radius", "0.1"], ["radius", "0.2"]], "'radius' is swept twice"),
])
def test_bad_sweep_words(swept, message: str) -> None:
    with pytest.raises(SweepError, match=message):
        parse_sweep_args(swept)


def test_grid_is_the_product_first_parameter_slowest() -> None:
    points = build_grid(NOTEBOOK, {"radius": [0.1, 0.3], "norm": ["Linf", "L2"]}, {"n_queries": 4})
    assert [p.folder for p in points] == ["radius=0.1,norm=Linf", "radius=0.1,norm=L2", "radius=0.3,norm=Linf",
                                          "radius=0.3,norm=L2"]
    assert points[1].parameters == {"n_queries": 4, "radius": 0.1, "norm": "L2"}
    assert points[1].swept == {"radius": 0.1, "norm": "L2"}


def test_folder_names_are_filesystem_safe_and_unique() -> None:
    assert folder_name({"pairs": "4->9,3->8", "guidance": 2.5}) == "pairs=4to9+3to8,guidance=2.5"
    odd = [folder_name({"x": v}) for v in ("a b", "a/b", "a:b", [1, 2])]
    assert len(set(odd)) == len(odd)
    assert all(set(name) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-=~")
               for name in odd)


@pytest.mark.parametrize(("swept", "fixed", "error", "message"), [
    ({"radius": [0.1, "big"]}, {}, ParameterError, r"'radius' of 01_adversarial expects float.*got str 'big'"),
    ({"radius": [0.1]}, {"n_queries": 2.5}, ParameterError, "'n_queries' of 01_adversarial expects int"),
    ({"radius": [0.1], "radiuss": [1]}, {}, ParameterError, "no parameter 'radiuss'.*radius"),
    ({"radius": []}, {}, SweepError, r"no values given for parameter 'radius'.*`-p radius 1 2 3`"),
    ({"radius": [0.1]}, {"radius": 0.2}, SweepError, "both swept .* and fixed"),
    ({"out_dir": ["a", "b"]}, {}, SweepError, "--out"),
    ({"radius": [0.1, 0.1]}, {}, SweepError, "share a folder"),
])
def test_bad_grids_fail_before_any_run(tmp_path, swept, fixed, error, message: str) -> None:
    with pytest.raises(error, match=message):
        run_sweep(NOTEBOOK, swept, fixed, out=tmp_path / "sweep", jobs=2)
    assert not (tmp_path / "sweep").exists()


def test_a_bad_value_anywhere_in_the_grid_stops_the_sweep_before_the_first_run(tmp_path, capsys) -> None:
    """radius 0.1 is fine and comes first; -0.1 is refused by the method's config before 0.1 runs."""
    out = tmp_path / "sweep"
    assert cli.main(["sweep", NOTEBOOK, "-p", "radius", "0.1", "-0.1", *TINY_ARGS, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "grid point radius=-0.1: parameter 'radius' of 01_adversarial: radius must be a positive number" in err
    assert len(err.strip().splitlines()) == 1 and not out.exists()
    with pytest.raises(ParameterError, match=r"grid point n_queries=-1: .*'n_queries' of 01_adversarial must be"):
        build_grid(NOTEBOOK, {"n_queries": [4, -1]})
    with pytest.raises(ParameterError, match=r"grid point pairs=4to4: parameter 'pairs' of 01_adversarial"):
        build_grid(NOTEBOOK, {"pairs": ["4->9", "4->4"]}, {"n_queries": 4})


def die_on_negative_radius(notebook: str, parameters: dict, out_dir: str, threads: int | None = None) -> dict:
    """A stand-in for run_point (spawned by name) whose process kills itself on a negative radius."""
    if parameters["radius"] < 0:
        os.kill(os.getpid(), signal.SIGKILL)
    return {"numbers": {"adv_attack/mean/validity": parameters["radius"]}, "error": "", "seconds": 0.0}


def test_a_dead_worker_costs_only_its_own_point(tmp_path) -> None:
    points = [Point({"radius": r}, {"radius": r}, folder_name({"radius": r})) for r in (0.1, -1.0, 0.2, 0.3)]
    dirs = [str(tmp_path / p.folder) for p in points]
    results = sweep._run_locally(NOTEBOOK, points, dirs, 2, False, run=die_on_negative_radius)
    assert [r["numbers"].get(f"{MEAN}/validity") for r in results] == [0.1, None, 0.2, 0.3]
    assert [bool(r["error"]) for r in results] == [False, True, False, False]
    assert results[1]["error"].startswith("worker failed: WorkerDied: the run's process died (killed by SIGKILL)")
    rows = gather(points, results, tmp_path).rows
    assert rows[1]["error"] and rows[1]["radius"] == -1.0 and rows[3]["error"] == ""


def test_cli_refuses_bad_flags_plainly(tmp_path, capsys) -> None:
    assert cli.main(["sweep", NOTEBOOK, "-p", "radius", "0.1", "-j", "0", "--out", str(tmp_path)]) == 2
    assert "must be an int >= 1" in capsys.readouterr().err
    assert cli.main(["sweep", NOTEBOOK, "-p", "radius", "--out", str(tmp_path)]) == 2
    assert "no values given for parameter 'radius'" in capsys.readouterr().err
    assert cli.main(["sweep", NOTEBOOK, "-p", "radius", "0.1", "wide", "--out", str(tmp_path)]) == 2
    assert "expects float" in capsys.readouterr().err


def test_unreachable_scheduler_names_the_address(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(sweep, "CONNECT_TIMEOUT_S", 2)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(SchedulerError, match=rf"{address}.*`dask scheduler`"):
        run_sweep(NOTEBOOK, {"radius": [0.1]}, out=tmp_path, scheduler=address)


def test_threads_share_the_cores() -> None:
    cores = len(os.sched_getaffinity(0))
    assert threads_per_job(1) == cores and threads_per_job(2) == max(1, cores // 2)
    assert threads_per_job(10 * cores) == 1


def test_a_run_never_raises_and_never_reports_stale_numbers(tmp_path, monkeypatch) -> None:
    for var in THREAD_VARS:
        monkeypatch.setenv(var, "0")  # restored after the test
    (tmp_path / RECORD_FILE).write_text('{"numbers": {"adv_attack/mean/validity": 1.0}}')
    result = run_point(NOTEBOOK, {"nope": 1}, str(tmp_path), threads=3)
    assert result["numbers"] == {} and result["error"].startswith("ParameterError: 01_adversarial has no parameter")
    assert not (tmp_path / RECORD_FILE).exists()
    assert all(os.environ[var] == "3" for var in THREAD_VARS)


def test_gather_writes_one_row_a_run_and_one_panel_a_metric(tmp_path, capsys) -> None:
    points = [Point({"radius": r, "norm": n}, {}, folder_name({"radius": r, "norm": n}))
              for r in (0.1, 0.3) for n in ("Linf", "L2")]
    results = [{"numbers": {f"{MEAN}/validity": i / 4, f"{MEAN}/im1": 1 - i / 8, f"{MEAN}/fid": 10.0 + i,
                            f"{MEAN}/kid": 1.0, f"{MEAN}/cout": 0.5}, "error": "", "seconds": 1.0} for i in range(3)]
    results.append({"numbers": {}, "error": "InputError: radius must be a positive number", "seconds": 0.5})
    result = gather(points, results, tmp_path)
    rows = read_csv(tmp_path / SWEEP_CSV)
    assert list(rows[0]) == ["radius", "norm", *(f"{MEAN}/{m}" for m in ("validity", "im1", "fid", "kid", "cout")),
                             "seconds", "error", "folder"]
    assert [(r["radius"], r["norm"], r[f"{MEAN}/validity"]) for r in rows] == [
        ("0.1", "Linf", "0.000000"), ("0.1", "L2", "0.250000"), ("0.3", "Linf", "0.500000"), ("0.3", "L2", "")]
    assert rows[3]["error"].startswith("InputError") and rows[3]["folder"] == "radius=0.3,norm=L2"
    assert result.plotted == [f"{MEAN}/validity", f"{MEAN}/im1"] and result.plot == tmp_path / SWEEP_PNG
    assert (tmp_path / SWEEP_PNG).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(SweepError, match=r"1 of 4 runs failed:\n  radius=0.3,norm=L2: InputError"):
        result.check()

    picked = gather(points[:2], results[:2], tmp_path / "picked", metrics=[f"{MEAN}/fid", "*/k*", "*/im3"])
    assert picked.metrics == picked.plotted == [f"{MEAN}/fid", f"{MEAN}/kid"]  # four or fewer: all plotted
    assert "--metrics */im3 matched no recorded number" in capsys.readouterr().err


# ---- real sweeps of the cheapest method notebook at tiny size ----

def test_local_sweep_in_two_processes(tmp_path) -> None:
    result = run_sweep(NOTEBOOK, {"radius": RADII}, TINY, out=tmp_path, jobs=2, progress=False)
    check_radius_rows(read_csv(tmp_path / SWEEP_CSV))
    assert result.plotted == [f"{MEAN}/im1", f"{MEAN}/validity"] and (tmp_path / SWEEP_PNG).is_file()
    assert (tmp_path / "radius=0.3" / f"{NOTEBOOK}.ipynb").is_file()
    assert "| radius |" in result.summary()


def test_a_failing_run_keeps_the_other_and_exits_non_zero(tmp_path, capsys, monkeypatch) -> None:
    """A run that fails once started: the grid check is skipped here, so -0.1 reaches its run, whose own check
    (run_notebook's) fails it inside the worker process."""
    monkeypatch.setattr(sweep, "check_point", lambda *args: None)
    code = cli.main(["sweep", NOTEBOOK, "-p", "radius", "-0.1", "0.3", *TINY_ARGS, "-j", "2", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "1 of 2 runs failed" in err and "radius=-0.1: ParameterError: parameter 'radius'" in err
    failed, good = read_csv(tmp_path / SWEEP_CSV)
    assert failed["error"].startswith("ParameterError") and failed[f"{MEAN}/validity"] == ""
    assert good["error"] == "" and float(good[f"{MEAN}/validity"]) == 1.0


@pytest.fixture(scope="module")
def cluster():
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as local:
        yield local


def test_sweep_on_a_dask_cluster(cluster, tmp_path, capsys) -> None:
    code = cli.main(["sweep", NOTEBOOK, "-p", "radius", *map(str, RADII), *TINY_ARGS, "--out", str(tmp_path),
                     "--scheduler", cluster.scheduler_address, "--metrics", f"{MEAN}/*"])
    assert code == 0, capsys.readouterr().err
    rows = read_csv(tmp_path / SWEEP_CSV)
    check_radius_rows(rows)
    assert all(column.startswith(f"{MEAN}/") for column in list(rows[0])[1:-3])
    assert (tmp_path / SWEEP_PNG).is_file() and str(tmp_path / SWEEP_CSV) in capsys.readouterr().out


def test_a_point_that_kills_its_dask_workers_costs_only_its_own_row(cluster, tmp_path) -> None:
    """On Dask a killed worker is restarted by its nanny and its point retried; the point that kills every worker
    it lands on ends as KilledWorker in its own row, and the other points finish."""
    points = [Point({"radius": r}, {"radius": r}, folder_name({"radius": r})) for r in (0.1, -1.0, 0.2)]
    dirs = [str(tmp_path / p.folder) for p in points]
    results = sweep._run_on_cluster(NOTEBOOK, points, dirs, cluster.scheduler_address, False,
                                    run=die_on_negative_radius)
    assert [r["numbers"].get(f"{MEAN}/validity") for r in results] == [0.1, None, 0.2]
    assert results[1]["error"].startswith("worker failed: KilledWorker"), results[1]["error"]
    assert gather(points, results, tmp_path).rows[1]["error"]


def test_kernels_follow_the_share_of_cores_their_launcher_writes(tmp_path, monkeypatch) -> None:
    """`cfkit reproduce --jobs` writes how many notebooks run; a kernel reading it takes cores // that many threads."""
    import torch

    from cfkit.common import threads

    share = tmp_path / "share"
    monkeypatch.setenv(threads.SHARE_VAR, str(share))
    monkeypatch.setattr(threads, "cores", lambda: 4)
    before = torch.get_num_threads()
    try:
        for running, expected in ((4, 1), (2, 2), (1, 4)):
            threads.write_share(share, running)
            threads._last_check[0] = float("-inf")
            threads.follow_share()
            assert torch.get_num_threads() == expected, running
        threads.write_share(share, 2)
        threads.follow_share()  # read at most every SHARE_CHECK_SECONDS: not yet
        assert torch.get_num_threads() == 4
        share.write_text("garbage")
        threads._last_check[0] = float("-inf")
        threads.follow_share()
        assert torch.get_num_threads() == 4, "an unreadable share keeps the threads"
    finally:
        torch.set_num_threads(before)
