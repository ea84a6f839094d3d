"""The ``cfkit`` command: ``data``, ``train``, ``calibrate``, ``faithfulness``, ``run``, ``table``, ``sweep``,
``reproduce``, ``docs`` and ``app``."""
from __future__ import annotations

import argparse
import sys
import time

from ..common.precision import PRECISIONS
from ..errors import CfkitError, ParameterError


def _cmd_data(args: argparse.Namespace) -> None:
    from ..data import ensure_mnist, verify_mnist

    raw = ensure_mnist()
    for name, digest in verify_mnist().items():
        print(f"{digest}  {raw / name}")
    if args.inception:
        from ..zoo.inception import EXTRACTOR_SHA256, ensure_inception

        print(f"{EXTRACTOR_SHA256}  {ensure_inception()}")


def _cmd_train(args: argparse.Namespace) -> None:
    from pathlib import Path

    from ..data import ensure_mnist
    from ..zoo import checkpoints

    targets = checkpoints.retrainable_names() if args.all else _expand_pair_families(args.names, args.pair)
    if args.all:
        curves = [checkpoints.get_spec(n) for n in checkpoints.names() if n not in targets]
        print("--all leaves the backbones shipped from their training curves to their own commands: "
              + "; ".join(f"`{spec.command}`" for spec in curves))
    if not targets:
        raise CfkitError("name a model to train (e.g. `cfkit train ae_9`, `cfkit train c3lt --pair 4 9`) or pass "
                         f"--all; models: {', '.join(checkpoints.names())}")
    ensure_mnist(verbose=False)
    for name in targets:
        checkpoints.get_spec(name)  # fail on an unknown name before any training starts
    classifier = None
    if args.classifier is not None:
        from ..zoo.classifiers import load_classifier

        classifier = load_classifier(args.classifier, args.classifier_state)
    elif args.classifier_state is not None:
        raise CfkitError("--classifier-state goes with --classifier package.module:factory.")
    started = time.perf_counter()
    for name in targets:
        left = None if args.minutes is None else max(0.0, args.minutes - (time.perf_counter() - started) / 60)
        entry = checkpoints.train(name, directory=args.out, epochs=args.epochs, classifier=classifier,
                                  classifier_spec=args.classifier, device=args.device, minutes=left,
                                  snapshot_dir=Path(args.snapshots) / name if args.snapshots else None,
                                  precision=args.precision)
        if entry.get("paused"):
            print(f"{name}: paused at step {entry['step']} of {entry['total']} ({entry['snapshot']}); run the same "
                  "command again to go on")
            return
        print(f"{name}: {entry['quality']} in {entry['seconds']} s -> {entry['file']} ({entry['sha256'][:12]}…)")


def _expand_pair_families(names: list[str], pair: list[int] | None) -> list[str]:
    """``c3lt --pair 4 9`` -> c3lt_4_9; a bare ``c3lt`` -> the three protocol pairs; other names unchanged."""
    from ..data import PAIRS
    from ..zoo.checkpoints import PAIR_FAMILIES, pair_name

    if pair is not None and not any(n in PAIR_FAMILIES for n in names):
        raise CfkitError(f"--pair goes with a pair family ({', '.join(PAIR_FAMILIES)}), e.g. `cfkit train c3lt --pair 4 9`.")
    if pair is not None:
        from ..common.validate import check_pair

        pair = list(check_pair(tuple(pair)))  # classes 0-9, distinct: said as such, not as an unknown model name
    expanded = []
    for name in names:
        if name in PAIR_FAMILIES:
            expanded += [pair_name(name, tuple(pair))] if pair is not None else [pair_name(name, p) for p in PAIRS]
        else:
            expanded.append(name)
    return expanded


def _cmd_run(args: argparse.Namespace) -> None:
    from .run import parse_cli_parameters, run_notebook

    parameters = parse_cli_parameters(args.parameter or [])
    if args.protocol:  # the full protocol's sizes (cfkit.running.reproduce.PROTOCOL), -p values over them
        from .reproduce import protocol_parameters

        parameters = protocol_parameters(args.notebook, parameters)
    output = run_notebook(args.notebook, parameters, out_dir=args.out)
    print(output)


def _cmd_sweep(args: argparse.Namespace) -> None:
    from .sweep import parse_sweep_args, run_sweep

    swept, fixed = parse_sweep_args(args.parameter, args.set)
    swept, fixed = _absolute_sweep_paths(swept, fixed)
    if args.protocol:  # every run at the full protocol's sizes, the swept and --set values over them
        from .reproduce import protocol_parameters

        fixed = {k: v for k, v in protocol_parameters(args.notebook, fixed).items() if k not in swept}
    result = run_sweep(args.notebook, swept, fixed, out=args.out, jobs=args.jobs, scheduler=args.scheduler,
                       metrics=args.metrics)
    print(result.summary())
    result.check()


def _absolute_sweep_paths(swept: dict, fixed: dict) -> tuple[dict, dict]:
    """The sweep's given paths absolute against this folder, as ``cfkit run`` makes them: its runs may execute
    elsewhere (a Dask worker), and every kernel runs in notebooks/."""
    from .run import absolute_paths

    swept = {key: [absolute_paths({key: value})[key] for value in values] for key, values in swept.items()}
    return swept, absolute_paths(fixed)


def _cmd_table(args: argparse.Namespace) -> None:
    if args.from_csv is not None:
        from ..scoring.table import figure_from_csv

        print(f"written to {figure_from_csv(args.from_csv)}")
        return
    from .report import collect_table

    print(collect_table(args.runs, write=not args.no_write))


def _cmd_calibrate(args: argparse.Namespace) -> None:
    from ..studies.calibration import calibrate, verdict

    print(verdict(calibrate(args.runs, jobs=args.jobs)))


def _cmd_rank_stability(args: argparse.Namespace) -> None:
    from ..studies.rank_stability import robust_summary, run_study, write_study

    study = run_study(args.runs, args.results, jobs=args.jobs)
    for path in write_study(study, args.results):
        print(f"written to {path}")
    print(robust_summary(study["pairwise"]))


def _cmd_reproduce(args: argparse.Namespace) -> None:
    from .reproduce import for_every_notebook, reproduce, reproduce_order
    from .run import absolute_paths, parse_cli_parameters

    start = time.perf_counter()  # the classifier's files are given relative to this folder, the kernels run elsewhere
    given = absolute_paths({"classifier": args.classifier, "classifier_state": args.classifier_state})
    values = absolute_paths(parse_cli_parameters(args.parameter or []))
    notebooks = None
    if args.notebooks:
        unknown = [nb for nb in args.notebooks if nb not in reproduce_order()]
        if unknown:
            raise ParameterError(f"--notebooks: {', '.join(unknown)} not in the reproduction; its notebooks are "
                                 f"{', '.join(reproduce_order())}.")
        notebooks = [nb for nb in reproduce_order() if nb in args.notebooks]  # the reproduction's order
    parameters = for_every_notebook(notebooks or reproduce_order(), values) if values else None
    print(reproduce(runs_dir=args.runs, results_dir=args.results, jobs=args.jobs, classifier=given["classifier"],
                    classifier_state=given["classifier_state"], parameters=parameters, notebooks=notebooks,
                    profile=args.profile, resume=args.resume))
    print(f"reproduce finished in {time.perf_counter() - start:.0f} s")


def _cmd_backbone(args: argparse.Namespace) -> None:
    from functools import partial

    from ..data import ensure_mnist
    from ..studies.curve import DenoiserCurveConfig, DenoiserCurveRun, GANCurveConfig, GANCurveRun
    from ..zoo.checkpoints import load

    if args.rescore_extra and args.name != "ldm_unet":
        raise ParameterError("--rescore-extra: only ldm_unet's curve has an extra measure (LDCE).")
    if args.precision != "float32" and args.name != "dcgan_reference":
        raise ParameterError("--precision: only dcgan_reference trains in bfloat16; ldm_unet trains in float32.")
    ensure_mnist(verbose=False)
    if args.name == "dcgan_reference":
        config = GANCurveConfig(max_epochs=100 if args.max_epochs is None else args.max_epochs,
                                samples=10_000 if args.samples is None else args.samples, precision=args.precision)
        run = GANCurveRun(args.dir, config, device=args.device, register_into=args.register_into)
    else:  # LDCE's denoiser, with LDCE itself scored on the faithfulness subset at every curve point
        from ..studies.faithfulness import ldce_with_denoiser

        config = DenoiserCurveConfig(max_epochs=64 if args.max_epochs is None else args.max_epochs,
                                     samples=500 if args.samples is None else args.samples)
        run = DenoiserCurveRun(args.dir, config, device=args.device, register_into=args.register_into,
                               extra=partial(ldce_with_denoiser, n_queries=args.ldce_queries))
    if args.rescore_extra:
        run.rescore_extra()
        if run.curve:
            run.figure()
        return
    done = run.run(load("features", device=run.device), minutes=args.minutes)
    if run.curve:
        run.figure()
    print(f"{run.name}: {run.epochs_done} epochs, {'converged' if done else 'not converged yet'}; curve in "
          f"{run.results_dir}")


def _cmd_docs(args: argparse.Namespace) -> None:
    from ..interactive.gallery import build

    index = build(notebooks=args.notebooks, out=args.out)
    print(f"the gallery is built: open {index}")


def _cmd_app(args: argparse.Namespace) -> None:
    from ..interactive.app import serve

    serve(port=args.port, classifier=args.classifier, classifier_state=args.classifier_state, pair_dir=args.pair_dir)


def _positive_ints(text: str, option: str) -> list[int]:
    """A comma-separated list of counts, e.g. '50,200,1000'; anything else is a one-line error."""
    values = [part.strip() for part in text.split(",") if part.strip()]
    if not values or not all(v.isdigit() and int(v) > 0 for v in values):
        raise ParameterError(f"{option} takes comma-separated whole numbers above 0 (e.g. '50,200,1000'), got {text!r}.")
    return [int(v) for v in values]


def _cmd_faithfulness(args: argparse.Namespace) -> None:
    """The study's rows (or, with --train, a family's retraining and its curve) into a CSV."""
    from ..data import PAIRS, ensure_mnist
    from ..studies import faithfulness

    ensure_mnist(verbose=False)
    pairs = PAIRS if args.pairs is None else args.pairs
    if args.merge:
        rename = {path: suffix for path, suffix in args.suffix}
        print(f"written to {faithfulness.write_csv(faithfulness.merge(args.merge, rename), args.csv)}")
        return
    if args.floor:
        from ..methods.c3lt import C3LT

        rows = faithfulness.backbone_floor(C3LT.name if args.floor is True else args.floor, pairs, args.n_queries)
        print(f"written to {faithfulness.write_csv(rows, args.csv)}")
        return
    if args.denoiser_curve:
        settings = faithfulness.denoiser_settings(None if args.denoiser_curve is True else args.denoiser_curve)
        rows = faithfulness.run_study(settings, pairs, args.n_queries, device=args.device)
        print(f"written to {faithfulness.replace_settings(args.csv, rows)} (its other settings kept)")
        return
    if args.reference_generator:
        rows = faithfulness.reference_generator_rows(args.pairs, args.n_queries, device=args.device)
        print(f"written to {faithfulness.replace_settings(args.csv, rows)} (its other settings kept)")
        return
    if args.c3lt_ablation:
        pair = faithfulness.parse_pairs(pairs)[0] if args.pairs else (5, 6)
        rows = faithfulness.c3lt_ablation(pair, args.max_steps or 1000, args.n_queries)
        print(f"written to {faithfulness.write_csv(rows, args.csv)}")
        return
    if args.train:
        steps = _positive_ints(args.curve_steps, "--curve-steps")
        rows = faithfulness.train_with_curve(args.train, pairs, args.train_dir, steps, args.n_queries, args.device,
                                             max_steps=args.max_steps, check_quality=not args.no_gate)
    else:
        methods = None if args.methods is None else [m.strip() for m in args.methods.split(",") if m.strip()]
        budgets = _positive_ints(args.cem_budgets, "--cem-budgets")
        settings = faithfulness.study_settings(methods, cem_budgets=budgets, cem_patience=args.cem_patience,
                                               cem_settle=args.cem_settle)
        rows = faithfulness.run_study(settings, pairs, args.n_queries, device=args.device, csv_path=args.csv)
    print(f"written to {faithfulness.write_csv(rows, args.csv)}")


def build_parser() -> argparse.ArgumentParser:
    from ..zoo import checkpoints

    parser = argparse.ArgumentParser(prog="cfkit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("data", help="get MNIST into data/MNIST/raw and print the files' SHA-256")
    p.add_argument("--inception", action="store_true",
                   help="also fetch and verify the Inception extractor for Inception-space FID/KID")
    p.set_defaults(func=_cmd_data)

    p = sub.add_parser("train", help="retrain zoo models from their seeds and update the manifest")
    p.add_argument("names", nargs="*", help="models to train, e.g. classifier ae_9")
    p.add_argument("--all", action="store_true",
                   help="train every model of the zoo but the backbones shipped from their training curves "
                        "(`cfkit backbone NAME` retrains those)")
    p.add_argument("--epochs", type=int, default=None, help="override the spec's epochs")
    p.add_argument("--precision", choices=PRECISIONS, default="float32",
                   help="C3LT's maps and the encoders: the references' float32, or bfloat16 autocast (about 2x "
                        "faster on a CPU with avx512_bf16; recorded in the manifest's command)")
    p.add_argument("--pair", type=int, nargs=2, metavar=("QUERY", "TARGET"), default=None,
                   help="with c3lt or expgan: the one pair to train (default: the protocol's three)")
    p.add_argument("--classifier", default=None,
                   help="with c3lt or expgan: train against this classifier (a .pt2 or TorchScript file, or "
                        "package.module:factory with --classifier-state) instead of the shipped one; needs --out")
    p.add_argument("--classifier-state", default=None, help="the state dict of a package.module:factory classifier")
    p.add_argument("--out", default=None, help="folder for the trained models and their manifest (default: the "
                                               "shipped zoo, data/checkpoints)")
    p.add_argument("--device", default="cpu", help="cpu or cuda: where to train (the quality figure is measured on "
                                                   "the CPU; the manifest records the device)")
    p.add_argument("--minutes", type=float, default=None,
                   help="train in pieces: pause after about this many minutes with the state saved; the same command "
                        "again goes on (C3LT's maps and the encoders; hours-long runs on a CPU)")
    p.add_argument("--snapshots", default=None,
                   help="folder of the resumable states (default runs/train/<name>): given alone, the training saves them "
                        "every 5 minutes and a run killed midway goes on from there when started again")
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser("run", help="run a notebook headless with papermill")
    p.add_argument("notebook", help="e.g. 10_metrics or notebooks/10_metrics.ipynb")
    p.add_argument("-p", "--parameter", nargs=2, action="append", metavar=("NAME", "VALUE"),
                   help="set a parameter (value parsed as a Python literal, else a string)")
    p.add_argument("--out", default=None, help="output folder (default runs/<notebook>)")
    p.add_argument("--protocol", action="store_true",
                   help="run at the full protocol's sizes, as `make reproduce` does (every query, Inception, …), "
                        "instead of the notebook's small interactive defaults; -p values still win")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("sweep", help="run a notebook over a grid of parameter values in parallel; "
                                     "gather a CSV and a plot")
    p.add_argument("notebook", help="e.g. 06_ldce or notebooks/06_ldce.ipynb")
    p.add_argument("-p", "--parameter", nargs="+", action="append", metavar=("NAME", "VALUE"),
                   help="a swept parameter and its values; several -p sweep their cartesian product")
    p.add_argument("--set", nargs=2, action="append", metavar=("NAME", "VALUE"), default=[],
                   help="a parameter fixed for every run")
    p.add_argument("--protocol", action="store_true",
                   help="every run at the full protocol's sizes (as `make reproduce`), not the notebook's small defaults")
    p.add_argument("-j", "--jobs", type=int, default=1,
                   help="runs at once on this machine (default 1; with --scheduler the cluster decides)")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="submit the runs to the Dask cluster at this scheduler, e.g. tcp://10.0.0.5:8786")
    p.add_argument("--out", default=None, help="sweep folder (default runs/sweeps/<notebook>)")
    p.add_argument("--metrics", nargs="+", default=None, metavar="PATTERN",
                   help="glob patterns of the recorded numbers to keep, e.g. 'ldce/mean/*' (default all); the plot "
                        "shows them all when at most four, else the */mean/validity and */mean/im1 ones")
    p.set_defaults(func=_cmd_sweep)

    p = sub.add_parser("table", help="gather recorded numbers from runs/ into results/table.{csv,md}")
    p.add_argument("--runs", default=None, help="runs folder (default runs/)")
    p.add_argument("--no-write", action="store_true", help="print only")
    p.add_argument("--from-csv", default=None, metavar="CSV",
                   help="instead: redraw table.png beside this table.csv (e.g. results/table.csv) without runs/")
    p.set_defaults(func=_cmd_table)

    p = sub.add_parser("calibrate", help="the IM1/IM2 autoencoder calibration study: results/im_calibration.json")
    p.add_argument("--runs", default=None, help="runs folder holding the 01_adversarial and 10_metrics sets")
    p.add_argument("-j", "--jobs", type=int, default=2, help="autoencoders trained at once (default 2)")
    p.set_defaults(func=_cmd_calibrate)

    p = sub.add_parser("rank-stability", help="every two methods' IM1/IM2 order under every autoencoder setting the "
                                              "calibration study admits: results/rank_stability.csv")
    p.add_argument("--runs", default=None, help="runs folder holding the table's sets (default runs/)")
    p.add_argument("--results", default=None, help="results folder (default results/)")
    p.add_argument("-j", "--jobs", type=int, default=2, help="autoencoders retrained at once (default 2)")
    p.set_defaults(func=_cmd_rank_stability)

    p = sub.add_parser("faithfulness", help="every method at the kit's and the reference settings on the study "
                                            "subset, with budget curves: a CSV (notebook 12 shows it)")
    p.add_argument("--methods", default=None, help="comma-separated methods (default all six)")
    p.add_argument("--pairs", default=None, help="e.g. '4->9,3->8' (default the protocol's three)")
    p.add_argument("-n", "--n-queries", type=int, default=100, help="study queries per pair (default 100)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (the reference CEM needs hours on 2 CPU cores)")
    p.add_argument("--cem-patience", type=int, default=0, help="CEM early stopping for the curve points (0: none)")
    p.add_argument("--cem-settle", default="batch", choices=("batch", "image"),
                   help="with --cem-patience: a round waits for its slowest image (batch) or each settled image "
                        "leaves the working batch (image)")
    p.add_argument("--cem-budgets", default="50,200,1000", help="CEM iterations a round of the curve points")
    p.add_argument("--train", default=None, choices=checkpoints.SHIPPED_PAIR_FAMILIES,
                   help="instead: retrain this family's pairs into --train-dir and score snapshots along the way")
    p.add_argument("--train-dir", default="runs/faithfulness/checkpoints", help="where --train writes checkpoints")
    p.add_argument("--floor", nargs="?", const=True, default=None, metavar="METHOD",
                   help="instead: a backbone's floor per pair, its reconstruction of real target digits: C3LT's "
                        "G(E(x)) (no METHOD) or, naming it, LDCE's VAE D(E(x))")
    p.add_argument("--denoiser-curve", nargs="?", const=True, default=None, metavar="DIR",
                   help="instead: LDCE at the table's setting with every snapshot of its denoiser's training curve "
                        "(DIR, default runs/backbones/ldm_unet: `cfkit backbone ldm_unet`), settings denoiser@<epoch>; "
                        "they replace those settings' rows in --csv, the other rows kept")
    p.add_argument("--reference-generator", action="store_true",
                   help="instead: C3LT at its reference schedule on the C3LT code's generator and per-pair encoders, "
                        "with that generator's floor, on the pairs that have them (default every protocol pair that "
                        "does; a mean row once all three do); they replace those settings' rows in --csv")
    p.add_argument("--c3lt-ablation", action="store_true",
                   help="instead: retrain one pair's C3LT maps (default 5->6, --max-steps default 1000) with each loss "
                        "term off or up and a wider map, and score each")
    p.add_argument("--curve-steps", default="225,1000,3000,6000", help="with --train: snapshot steps")
    p.add_argument("--max-steps", type=int, default=None, help="with --train: stop early (smoke runs)")
    p.add_argument("--no-gate", action="store_true",
                   help="with --train: register a model that misses its quality threshold (to study it)")
    p.add_argument("--merge", nargs="+", default=None, metavar="CSV",
                   help="instead: merge these study CSVs into --csv (a mean row where a setting has only pairs)")
    p.add_argument("--suffix", nargs=2, action="append", default=[], metavar=("CSV", "SUFFIX"),
                   help="with --merge: append SUFFIX to the settings of CSV (e.g. ' (GPU)')")
    p.add_argument("--csv", default="results/faithfulness.csv", help="output CSV")
    p.set_defaults(func=_cmd_faithfulness)

    p = sub.add_parser("backbone", help="train a backbone in pieces until its FID curve converges (resumable: run "
                                        "it again to go on): C3LT's reference DCGAN, or LDCE's denoiser")
    p.add_argument("name", choices=("dcgan_reference", "ldm_unet"), help="the backbone to train")
    p.add_argument("--dir", default=None, help="training folder (default runs/backbones/<name>)")
    p.add_argument("--minutes", type=float, default=None, help="stop after the epoch that passes this budget")
    p.add_argument("--max-epochs", type=int, default=None,
                   help="the longest run (default: the C3LT code's 100 epochs for the DCGAN, 64 for the denoiser)")
    p.add_argument("--samples", type=int, default=None,
                   help="samples scored at each curve point (default 10000; the denoiser: 500 a class)")
    p.add_argument("--ldce-queries", type=int, default=100,
                   help="ldm_unet: LDCE on this many study queries a pair at each curve point (default 100)")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--precision", choices=PRECISIONS, default="float32",
                   help="dcgan_reference: the C3LT code's float32, or bfloat16 autocast (2x faster on a CPU with "
                        "avx512_bf16); a run resumes only with the precision it started with")
    p.add_argument("--register-into", default=None, metavar="DIR",
                   help="once converged, register the model into this zoo folder (data/checkpoints ships it)")
    p.add_argument("--rescore-extra", action="store_true",
                   help="ldm_unet: measure LDCE again on every curve point's saved snapshot (after its measure "
                        "changed), then stop")
    p.set_defaults(func=_cmd_backbone)

    p = sub.add_parser("reproduce", help="run every notebook at full size and write results/")
    p.add_argument("-j", "--jobs", type=int, default=1,
                   help="notebooks to run at once, each on cores/jobs torch threads (default 1)")
    p.add_argument("--classifier", default=None,
                   help="explain another classifier (a torch.export .pt2 file, a TorchScript file, or "
                        "package.module:factory with --classifier-state); needs --runs and --results; leaves out the "
                        "per-pair methods and any method that cannot explain it, with the reason")
    p.add_argument("--classifier-state", default=None, help="the state dict of a package.module:factory classifier")
    p.add_argument("-p", "--parameter", nargs=2, action="append", metavar=("NAME", "VALUE"),
                   help="a parameter for every notebook that has it, over the protocol's (e.g. -p n_queries 5 for a "
                        "quick look); needs --runs and --results; every value is checked before the first notebook")
    p.add_argument("--profile", choices=("default", "reference"), default="default",
                   help="reference: every method at its paper's / public code's setting (CEM 9 x 1000, LDCE 500 DDIM "
                        "steps, ...) and Inception on every counterfactual, into runs/reference and results/reference")
    p.add_argument("--notebooks", nargs="+", default=None, metavar="NOTEBOOK",
                   help="only these notebooks of the reproduction, in its order (e.g. 01_adversarial 10_metrics)")
    p.add_argument("--resume", action="store_true",
                   help="reuse each pair's set that the same method, settings, code and weights saved (a reproduction "
                        "of hours goes on where it stopped); reproduce.json then says resumed")
    p.add_argument("--runs", default=None, help="runs folder (default runs/)")
    p.add_argument("--results", default=None, help="results folder (default results/)")
    p.set_defaults(func=_cmd_reproduce)

    p = sub.add_parser("app", help="serve the live explorer (Voilà, no code shown) on 127.0.0.1 and print its "
                                   "address; Ctrl-C stops it")
    p.add_argument("--port", type=int, default=None, help="port on 127.0.0.1 (default: a free one)")
    p.add_argument("--classifier", default=None,
                   help="explain another classifier: a zoo name, a .pt2 or TorchScript file, or package.module:factory with "
                        "--classifier-state (per-pair methods are then greyed out unless --pair-dir has theirs)")
    p.add_argument("--classifier-state", default=None, help="the state dict of a package.module:factory classifier")
    p.add_argument("--pair-dir", default=None,
                   help="folder of per-pair models (cfkit train c3lt --pair Q T [--classifier ...] --out DIR)")
    p.set_defaults(func=_cmd_app)

    p = sub.add_parser("docs", help="render the notebooks as executed by the last `make reproduce`, the table and "
                                    "the figures of results/ into a static HTML site (needs the docs extra)")
    p.add_argument("--notebooks", default=None,
                   help="folder of executed notebooks (default results/notebooks, written by `make reproduce`)")
    p.add_argument("--out", default=None, help="output folder (default docs/_build/html)")
    p.set_defaults(func=_cmd_docs)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except CfkitError as exc:
        print(f"cfkit: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
