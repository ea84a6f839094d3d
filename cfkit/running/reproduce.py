"""The whole reproduction: every notebook at full size, the results files, and the timings with the machine
they were measured on (``cfkit reproduce``, ``make reproduce``).

A notebook's own defaults are a small interactive size, so that a person who opens it and runs all reaches its
explorer in seconds; the full protocol's sizes live in one place, :data:`PROTOCOL`, which the reproduction (and
``cfkit run NOTEBOOK --protocol``) passes on top of them."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import torch

from ..common.profiling import notebook_profile
from ..common.threads import SHARE_VAR, cores, thread_limits, threads_per_job, write_share
from ..data import PAIRS, ensure_mnist
from ..errors import InputError, NotebookFailedError, ParameterError
from ..methods import catalog
from ..paths import RESULTS_DIR, RUNS_DIR, atomic_write_bytes, atomic_write_json
from ..scoring.pairs import inception_references
from ..scoring.store import stray_sets
from ..zoo.checkpoints import load, names
from ..zoo.classifiers import DEFAULT as DEFAULT_CLASSIFIER
from ..zoo.classifiers import fingerprint, load_classifier
from ..zoo.inception import inception_extractor
from .compute import conv_peak_gflops
from .parameter_values import check_values
from .report import collect_table, reproduction_cost, write_versus
from .run import (RECORD_FILE, check_parameters, child_command, literal_defaults, notebook_parameters, read_record,
                  run_notebook)

SCORING_NOTEBOOK = "10_metrics"
"""Scores every method's sets (and makes the real-data reference's): it runs after the method notebooks."""
BEFORE, AFTER = ("00_models",), ("11_ldce_error_analysis", "12_faithfulness")
"""Notebooks of the reproduction that belong to no method: the zoo's check first; LDCE's error analysis and the
faithfulness study (which shows the recorded ``results/faithfulness.csv``; ``cfkit faithfulness`` recomputes it)
last, so the gallery has every notebook as executed."""


def method_notebooks() -> list[str]:
    """The notebooks that save the catalog's sets, in catalog order, the scoring notebook left out."""
    return [nb for nb in dict.fromkeys(catalog.notebooks().values()) if nb != SCORING_NOTEBOOK]


def reproduce_order() -> list[str]:
    """Notebooks ``make reproduce`` runs, in order: method notebooks before ``10_metrics``, which scores their sets."""
    return [*BEFORE, *method_notebooks(), SCORING_NOTEBOOK, *AFTER]


_METHOD_PROTOCOL = {"n_queries": 0, "inception": True}
PROTOCOL: dict[str, dict[str, Any]] = {
    "00_models": {"check_zoo": True},
    "01_adversarial": dict(_METHOD_PROTOCOL),
    "02_cem": dict(_METHOD_PROTOCOL),
    "03_cve": dict(_METHOD_PROTOCOL),
    "04_expgan": dict(_METHOD_PROTOCOL),
    "05_c3lt": dict(_METHOD_PROTOCOL),
    "06_ldce": {**_METHOD_PROTOCOL, "samples_per_class": 100},
    "10_metrics": dict(_METHOD_PROTOCOL),
    "11_ldce_error_analysis": {"max_errors": 0},
}
"""The full protocol: for each notebook, the parameters whose values differ from its interactive defaults.

The notebooks' ``parameters`` cells default to a size that reaches the explorer in seconds (20 queries a pair,
no Inception-space FID, LDCE's ablation off, 10 diffusion samples a class, 12 of the classifier's errors, the
zoo's manifest figures not re-measured); here are the values of the protocol: every test image of the query class
(``n_queries`` 0), Inception-space FID/KID, LDCE's model check on 100 samples a class, every misclassified test
digit, every model re-measured. LDCE's ablation is not part of the table; the reproduction shows it as recorded
(:mod:`cfkit.studies.ablation`), which keeps about 160 s of one core out of the 15 minutes. :func:`reproduce` and
``cfkit run NOTEBOOK --protocol`` start from these (:func:`protocol_parameters`); values given to them win. A
notebook not listed (a plugin's) runs at its own defaults."""


def protocol_parameters(notebook: str | Path, given: dict[str, Any] | None = None,
                        profile: str = "default") -> dict[str, Any]:
    """``notebook``'s parameters at the full protocol (:data:`PROTOCOL`), at the reference settings too for the
    ``"reference"`` profile (:func:`reference_parameters`), with ``given`` over them."""
    check_profile(profile)
    reference = reference_parameters().get(Path(notebook).stem, {}) if profile == "reference" else {}
    return {**PROTOCOL.get(Path(notebook).stem, {}), **reference, **(given or {})}


PROFILES = ("default", "reference")
"""``default``: the table's settings (every method at its published setting but CEM, which stays at the kit's);
``reference``: every method at its paper's and public code's setting, Inception on every counterfactual, into
runs/reference and results/reference."""
REFERENCE_DIR = "reference"


def check_profile(profile: str) -> str:
    if profile not in PROFILES:
        raise ParameterError(f"profile must be one of {', '.join(PROFILES)}, got {profile!r}.")
    return profile


REFERENCE_EARLY_STOP = {"02_cem": {"patience": 100, "settle": "batch"}}
"""What the reference profile adds to a reference config: the faithfulness study's reference CEM row (IM1 1.205,
kit-FID 73.5) stopped a round once no image's best iterate or loss had improved for 100 iterations (3,133 of the
9,000 iterations an image ran). IBM's ``aen_CEM.py`` runs all 9,000; ``-p patience 0`` does that (about 8 hours
of one CPU core for the protocol, minutes on a GPU)."""


def reference_parameters() -> dict[str, dict[str, Any]]:
    """Each method notebook's parameters at its method's reference config (the faithfulness study's: the C3LT
    code's attack radius, IBM CEM's 9 × 1000, Goyal et al.'s CVE, Farid et al.'s 500-step LDCE), and Inception on
    every counterfactual (``inception_cfs`` 0). A reference knob the notebook has no parameter for is an error:
    the profile would silently run something else."""
    from dataclasses import asdict

    from ..methods.adversarial import ATTACK_REFERENCE
    from ..methods.cem import CEM_REFERENCE
    from ..methods.cve import CVE_REFERENCE
    from ..methods.ldce import LDCE_REFERENCE

    references = {"01_adversarial": ATTACK_REFERENCE, "02_cem": CEM_REFERENCE, "03_cve": CVE_REFERENCE,
                  "06_ldce": LDCE_REFERENCE}
    out: dict[str, dict[str, Any]] = {}
    for notebook in method_notebooks() + [SCORING_NOTEBOOK]:
        spec = notebook_parameters(notebook)
        values = {"inception_cfs": 0} if "inception_cfs" in spec else {}
        config = references.get(notebook)
        if config is not None:
            defaults = literal_defaults(spec)
            missing = [k for k, v in asdict(config).items() if k not in spec and v != asdict(type(config)())[k]]
            if missing:
                raise ParameterError(f"{notebook} has no parameter for the reference's {', '.join(missing)}; add "
                                     "it to the notebook's parameters cell.")
            values.update({k: v for k, v in asdict(config).items() if k in spec and defaults.get(k) != v})
        values.update(REFERENCE_EARLY_STOP.get(notebook, {}))
        out[notebook] = values
    return out


def for_every_notebook(notebooks: Iterable[str], values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``values`` (``cfkit reproduce -p NAME VALUE``) given to every notebook that has a parameter of that name; a
    name no notebook has is an error."""
    notebooks = list(notebooks)
    spec = {nb: notebook_parameters(nb) for nb in notebooks}
    for name in values:
        if not any(name in spec[nb] for nb in notebooks):
            raise ParameterError(f"no notebook of the reproduction has a parameter {name!r}; see the parameters "
                                 "cell of each notebook (or `cfkit run NOTEBOOK -p NAME VALUE` for one of them).")
    return {nb: {name: value for name, value in values.items() if name in spec[nb]} for nb in notebooks}


def check_reproduction(parameters: dict[str, dict[str, Any]]) -> None:
    """Refuse the reproduction before its first notebook starts if any notebook would refuse its parameters (names,
    types and values, as ``cfkit run`` checks them)."""
    for notebook, values in parameters.items():
        try:
            check_parameters(notebook, values)
            check_values(notebook, {**literal_defaults(notebook_parameters(notebook)), **values})
        except ParameterError as exc:
            raise ParameterError(f"{' '.join(str(exc).split())} No notebook was started.") from None


def runs_inception(notebook: str, parameters: dict[str, Any]) -> bool:
    """Whether ``notebook`` with ``parameters`` (over its defaults) scores Inception-space FID/KID."""
    spec = notebook_parameters(notebook)
    return "inception" in spec and bool(parameters.get("inception", literal_defaults(spec).get("inception")))


EXECUTED_DIR = "notebooks"
"""In results/: each notebook as the last reproduction executed it (``<notebook>.ipynb``), to read the findings
without running anything (the docs gallery renders them)."""


def reproduce_needs() -> dict[str, list[str]]:
    """What a notebook reads from others' output folders: with ``--jobs`` it waits for those to finish."""
    return {SCORING_NOTEBOOK: method_notebooks()}


REPRODUCE_RECORD = "reproduce.json"
"""In results/: the wall time of each notebook of the last ``cfkit reproduce`` and the machine it ran on."""


def host_speed() -> float:
    """One torch thread's rate in a large convolution (GFLOP/s), measured in about a second: machines of the same
    description have differed by 2x in it (and in every timing), so a reproduction's seconds are read beside
    it, at its start and its end."""
    return round(conv_peak_gflops(threads=1, batch=4, repeats=2), 1)


def machine() -> dict[str, Any]:
    """What a timing was measured on: CPU model, cores, memory, torch and its threads, any GPU."""
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        memory_gib = None
    return {"cpu": cpu, "cores": cores(), "memory_gib": memory_gib and round(memory_gib, 1),
            "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "python": platform.python_version()}


class _SetWatcher:
    """Prints each counterfactual set as a running notebook saves it: which notebook, which pair, time so far."""

    def __init__(self, out_dir: Path, notebook: str, start: float, log: Any) -> None:
        self.out_dir, self.notebook, self.start, self.log = out_dir, notebook, start, log
        self.seen = self._sets()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def _sets(self) -> dict[str, float]:
        return {p.name: p.stat().st_mtime for p in self.out_dir.glob("cfs_*.pt")}

    def _watch(self) -> None:
        while not self.stop.wait(1.0):
            self._report()

    def _report(self) -> None:
        now = self._sets()
        for name, mtime in sorted(now.items(), key=lambda item: item[1]):
            if self.seen.get(name) != mtime:
                method, pair = name[len("cfs_"):-len(".pt")].rsplit("_", 1)
                print(f"[{time.perf_counter() - self.start:5.0f} s]   {self.notebook}: {method} "
                      f"{pair.replace('to', '->')} saved", file=self.log, flush=True)
        self.seen = now

    def __enter__(self) -> _SetWatcher:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self._report()


LONGEST = ("02_cem", "06_ldce")
"""The notebooks that take longest at full size (about 9 minutes each on 2 cores): started first."""


def _launch_order(notebooks: list[str], results_dir: Path) -> list[str]:
    """Longest first by the last recorded reproduce (so the parallel run ends together), else :data:`LONGEST`
    first."""
    try:
        last = json.loads((results_dir / REPRODUCE_RECORD).read_text())["notebooks"]
    except (OSError, ValueError, KeyError):
        return sorted(notebooks, key=lambda name: name not in LONGEST)
    return sorted(notebooks, key=lambda name: -last.get(name, 0.0))


def _run_in_subprocess(notebook: str, parameters: dict[str, Any], out_dir: Path, threads: int, share: Path) -> None:
    """``cfkit run`` in a child process whose kernel starts on ``threads`` torch threads and follows the ``share``
    file (:func:`cfkit.common.threads.follow_share`); its output goes to run.log."""
    env = {**os.environ, **thread_limits(threads), SHARE_VAR: str(share)}
    with open(out_dir / "run.log", "w") as log:
        code = subprocess.call(child_command(notebook, parameters, out_dir), stdout=log, stderr=subprocess.STDOUT, env=env)
    if code != 0:
        raise NotebookFailedError(f"{notebook} failed (exit {code}); its output is in {out_dir / 'run.log'}.")


def _profile(notebook: str, out_dir: Path, wall: float) -> dict[str, float]:
    """Where the notebook's ``wall`` seconds went (:func:`cfkit.common.profiling.notebook_profile`)."""
    timed = read_record(out_dir).get("phases", {}) if (out_dir / RECORD_FILE).is_file() else {}
    return notebook_profile(wall, out_dir / f"{notebook}.ipynb", timed)


def _own_folders(runs_dir: Path, results_dir: Path, what: str) -> None:
    """Refuse to write a reproduction that is not the protocol's over runs/ and results/, which hold the table."""
    if runs_dir.resolve() == RUNS_DIR.resolve() or results_dir.resolve() == RESULTS_DIR.resolve():
        raise ParameterError(f"{what} writes to folders of its own: give --runs and --results (not runs/ and "
                             "results/, which hold the protocol's table for the zoo classifier).")


def _for_classifier(notebooks: list[str], parameters: dict[str, dict[str, Any]], classifier: str,
                    state: str | None, runs_dir: Path, results_dir: Path, log: Any
                    ) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """The notebooks and parameters of a reproduction for another classifier (see :func:`reproduce`)."""
    _own_folders(runs_dir, results_dir, "a reproduction for another classifier")
    model = load_classifier(classifier, state)  # a wrong classifier fails here, before any notebook starts
    reasons = {}
    zoo_weights = fingerprint(model) == fingerprint(load_classifier())  # the zoo's model in another file: its pairs fit
    for entry in catalog.entries():
        if entry.per_pair and not zoo_weights:
            reasons[entry.notebook] = (f"its per-pair models learn the zoo classifier (cfkit train {entry.name} … "
                                       f"--classifier {classifier} --out DIR, then cfkit run {entry.notebook} -p "
                                       "classifier … -p pair_dir DIR)")
        elif not entry.reference and (reason := catalog.cannot_explain(entry, model)) is not None:
            reasons[entry.notebook] = f"{entry.label} cannot explain {classifier}: {reason}"
    kept = [nb for nb in notebooks if nb not in reasons]
    for skipped in [nb for nb in notebooks if nb in reasons]:
        print(f"{skipped} left out: {reasons[skipped]}", file=log)
    given = {nb: dict(parameters.get(nb, {})) for nb in kept}
    for notebook in kept:
        if "classifier" in notebook_parameters(notebook):
            given[notebook].update(classifier=classifier, classifier_state=state or "")
    return kept, given


def reproduce(
    runs_dir: str | Path | None = None, results_dir: str | Path | None = None,
    notebooks: Iterable[str] | None = None, parameters: dict[str, dict[str, Any]] | None = None,
    log: Any = None, jobs: int = 1, classifier: str | None = None, classifier_state: str | None = None,
    profile: str = "default", resume: bool = False,
) -> str:
    """Get MNIST, check the zoo loads, run the notebooks (:func:`reproduce_order` unless ``notebooks`` names
    some; at the full protocol, :data:`PROTOCOL`, unless ``parameters`` gives a notebook other values, which win),
    write the table, its figures, the timings and a copy of each executed notebook
    (``results/notebooks/<notebook>.ipynb``); return the table.

    ``classifier`` (and its ``classifier_state``) explains another classifier than the zoo's
    (:func:`cfkit.zoo.classifiers.load_classifier`): every notebook with a ``classifier`` parameter gets it; before the
    first starts, each method is built for it, and a method that cannot explain it is left out with the reason
    (:func:`cfkit.methods.catalog.cannot_explain`), as are the per-pair methods' notebooks (their models learn the
    zoo classifier; train them with ``cfkit train … --classifier``); ``runs_dir`` and ``results_dir`` must be
    folders of its own.

    ``resume``: each method notebook reuses a pair's set that the same method, settings, code and weights saved
    (:func:`cfkit.scoring.evaluation.run_method`), so a reproduction of hours on a CPU goes on where it stopped;
    its record says so, since its seconds then leave those pairs out.

    ``jobs`` > 1 runs that many notebooks at once, a notebook starting once those it reads
    (:func:`reproduce_needs`) are done, each kernel on cores // (notebooks running with it) torch threads
    (so the last one, ``10_metrics``, gets every core). Progress goes to ``log`` (stderr):
    each notebook as it starts and ends, each pair's set as it is saved.
    """
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ParameterError(f"jobs must be an int >= 1 (notebooks run at once), got {jobs!r}.")
    log = log or sys.stderr
    check_profile(profile)
    folder = REFERENCE_DIR if profile == "reference" else ""  # the reference's runs and table live apart
    runs_dir, results_dir = Path(runs_dir or RUNS_DIR / folder), Path(results_dir or RESULTS_DIR / folder)
    notebooks, given = list(reproduce_order() if notebooks is None else notebooks), dict(parameters or {})
    full_size = not any(given.values()) and classifier is None  # every notebook at the protocol, for the zoo classifier
    if any(given.values()) and classifier is None and profile == "default":
        _own_folders(runs_dir, results_dir, "a reproduction with other parameter values")
    if classifier is not None:
        notebooks, given = _for_classifier(notebooks, given, classifier, classifier_state, runs_dir, results_dir, log)
    parameters = {nb: protocol_parameters(nb, given.get(nb), profile) for nb in notebooks}
    for notebook in notebooks if resume else ():  # results unchanged, so still full size; the record says resumed
        if "resume" in notebook_parameters(notebook):
            parameters[notebook]["resume"] = True
    needs = reproduce_needs()
    for notebook in needs:  # the scoring notebook reads the sets where this reproduction writes them
        if notebook in notebooks:
            parameters[notebook] = {"runs_dir": str(runs_dir.resolve()), **parameters.get(notebook, {})}
    check_reproduction(parameters)
    if SCORING_NOTEBOOK in notebooks and (strays := stray_sets(runs_dir)):
        raise InputError(f"{len(strays)} counterfactual set(s) under {runs_dir} that no notebook of the "
                         f"reproduction writes there ({', '.join(str(p) for p in strays[:3])}"
                         f"{', …' if len(strays) > 3 else ''}): {SCORING_NOTEBOOK} would score them into the table "
                         f"beside the protocol's. Move their folders out of {runs_dir} (side runs belong elsewhere: "
                         "`cfkit run NOTEBOOK --out DIR`), then run this again.")
    threads: dict[str, int] = {}
    start = time.perf_counter()

    def say(message: str) -> None:
        print(f"[{time.perf_counter() - start:5.0f} s] {message}", file=log, flush=True)

    ensure_mnist()
    for model in names():
        load(model)
    speed = {"start": host_speed()}
    say(f"MNIST and {len(names())} zoo checkpoints verified; {len(notebooks)} notebooks, {jobs} at a time; this "
        f"host convolves at {speed['start']:.0f} GFLOP/s on one thread")
    if any(runs_inception(nb, parameters[nb]) for nb in notebooks):
        extractor, reason = inception_extractor()  # fetched once here, not by two notebooks at once
        if extractor is None:
            say(f"no Inception-space FID/KID: {reason}")
        else:  # the reference features every method notebook needs, on all cores, before they start
            for target in dict.fromkeys(t for _, t in PAIRS):
                inception_references(extractor, target)
            say("Inception extractor verified and its reference features and statistics cached")
    seconds: dict[str, float] = {}
    phases: dict[str, dict[str, float]] = {}
    devices: dict[str, dict[str, list[str]]] = {}
    counter = iter(range(1, len(notebooks) + 1))

    def run_one(notebook: str) -> None:
        on = f" on {threads[notebook]} torch thread{'s' * (threads[notebook] > 1)}" if jobs > 1 else ""
        say(f"running {notebook} ({next(counter)}/{len(notebooks)}){on} ...")
        began = time.perf_counter()
        out_dir = runs_dir / notebook
        out_dir.mkdir(parents=True, exist_ok=True)
        with _SetWatcher(out_dir, notebook, start, log):
            if jobs == 1:
                run_notebook(notebook, parameters.get(notebook), out_dir=out_dir)
            else:
                _run_in_subprocess(notebook, parameters.get(notebook, {}), out_dir, threads[notebook], share)
        seconds[notebook] = round(time.perf_counter() - began, 1)
        phases[notebook] = _profile(notebook, out_dir, seconds[notebook])
        devices[notebook] = read_record(out_dir).get("devices", {}) if (out_dir / RECORD_FILE).is_file() else {}
        executed = out_dir / f"{notebook}.ipynb"  # papermill's output, copied for reading without running
        atomic_write_bytes(results_dir / EXECUTED_DIR / executed.name, executed.read_bytes())
        where = ", ".join(f"{name} on {'+'.join(found)}" for name, found in devices[notebook].items())
        say(f"{notebook} done in {seconds[notebook]:.0f} s" + (f" ({where})" if where else ""))

    pending = list(_launch_order(notebooks, results_dir) if jobs > 1 else notebooks)
    share = runs_dir / ".core_share"  # how many notebooks run now: their kernels split the cores by it
    runs_dir.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(jobs) as pool:
        running: dict = {}
        while pending or running:
            ready = [nb for nb in pending
                     if not any(need in notebooks and need not in seconds for need in needs.get(nb, ()))]
            launch = ready[: jobs - len(running)]
            sharing = len(running) + len(launch)
            write_share(share, sharing)  # kernels already running give up or take cores by it
            for notebook in launch:
                pending.remove(notebook)
                threads[notebook] = threads_per_job(sharing)
                running[pool.submit(run_one, notebook)] = notebook
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                running.pop(future)
                if future.exception() is not None:
                    pending.clear()  # start nothing new; let the others finish, then report
                    wait(running)
                    raise future.exception()
    share.unlink(missing_ok=True)
    scored = SCORING_NOTEBOOK in notebooks  # a piece without it must not collect an earlier run's table
    if scored:
        table = collect_table(runs_dir, results_dir=results_dir)
        if profile == "reference" and (RESULTS_DIR / "table.csv").is_file():
            say(f"the default table beside this one: {write_versus(RESULTS_DIR / 'table.csv', results_dir)}")
    else:  # a piece of a reproduction (--notebooks without 10_metrics): keep its sets, say how the table follows
        table = (f"no table yet: {SCORING_NOTEBOOK} has not scored the sets under {runs_dir}; run the rest with "
                 f"--notebooks ... {SCORING_NOTEBOOK} (the sets already made are kept)")
    total = round(time.perf_counter() - start, 1)
    speed["end"] = host_speed()
    cost = reproduction_cost(runs_dir, list(dict.fromkeys([*reproduce_order(), *notebooks])))  # all pieces
    atomic_write_json(results_dir / REPRODUCE_RECORD, {
        "seconds": total, "notebooks": seconds, "profile": phases, "devices": devices, "settings": profile,
        "full_size": full_size, "resumed": resume,
        "jobs": jobs,
        "classifier": classifier or DEFAULT_CLASSIFIER,
        "torch_threads": threads if jobs > 1 else None, "machine": machine(),
        "conv_gflops_one_thread": speed,
        "cost": cost,
        "cost_seconds": round(sum(v for c in cost.values() for k, v in c.items() if k != "devices"), 1),
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    })
    say(f"{'table, figures and ' if scored else ''}{REPRODUCE_RECORD} written to {results_dir}")
    return table
