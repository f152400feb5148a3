"""Command line: ``python -m anisotropy {build,run,sweep,sync,clean,profiles,chapters,plan,calibrate,profile}``;
errors print as one paragraph."""

from __future__ import annotations

import argparse
import difflib
import json
import signal
import sys
from pathlib import Path

import yaml

from anisotropy import profiles
from anisotropy.book import checkout, runner, sweeps
from anisotropy.errors import UserError


def _read(key: str, text: str, shown: str | None = None):
    """One value as YAML (JSON is YAML too), numbers in any spelling Python's ``float()`` reads (``profiles.read_yaml``:
    the profiles' own reading); one line naming the parameter (and ``shown``, what the user typed) when it cannot be
    read."""
    try:
        return profiles.read_yaml(text)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise runner.RunnerError(f"parameter {key!r}: cannot read {shown or text!r} as a value ({problem}); write a "
                                 "number, a word, or a list in brackets such as [16, 32].") from None


def _parse_assignments(pairs: list[str], as_grid: bool = False) -> dict:
    """``k=v`` pairs, values read as YAML (``n=128``, ``lr=5e-2``, ``models=[gpt2, bert-base-uncased]``); a grid is
    the values separated by commas outside brackets (``seed=0,1,2``, ``lr=5e-2,1e-1``), and a grid of lists is lists
    separated by commas (``variants=[post_ln, pre_ln],[post_ln, pre_ln, gpt2]``)."""
    out = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise runner.RunnerError(f"Parameters are written name=value, got {pair!r}.")
        key, text = pair.split("=", 1)
        key = key.strip()
        out[key] = _read(key, f"[{text}]", text) if as_grid else _read(key, text)
    return out


def _print_chapters(name: str | None, profile: str) -> None:
    """``anisotropy chapters``: the chapters in the book's order; with a name, that chapter's parameters."""
    names = runner.chapters()
    if name is None:
        for chapter in names:
            print(f"{chapter:<34} {len(profiles.notebook_parameters(chapter))} parameters")
        print("a chapter's parameters: python -m anisotropy chapters NAME [--profile PROFILE]")
        return
    if name not in names:
        close = difflib.get_close_matches(name, names, n=1)
        raise runner.RunnerError(f"No chapter {name!r}" + (f"; did you mean {close[0]!r}?" if close else ".")
                                 + f" Chapters: {', '.join(names)}.")
    for row in profiles.parameter_table(name, profile):
        shown = "" if row[profile] == row["notebook"] else f"; under {profile}: {row[profile]!r}"
        allowed = f"; allowed: {row['allowed']}" if row["allowed"] else ""
        print(f"{row['name']} ({row['kind']}) = {row['notebook']!r}{shown}{allowed}")
        if row["meaning"]:
            print(f"    {row['meaning']}")


def _plan(profile: str, names: list[str]) -> int:
    """``anisotropy plan``: every chapter's parts under ``profile`` (``pages.budget.plan_table``), then what does not fit
    the runtime the profile assumes (``chapters.plans.problems``); 1 when something does not fit, else 0."""
    import pandas as pd

    # cost: the plans, the budget and the model table (~0.2 s) into each `python -m anisotropy` start; `plan` only
    from anisotropy.chapters import plans
    from anisotropy.pages import budget

    order = runner.chapters()
    unknown = [n for n in names if n not in order]
    if unknown:
        close = difflib.get_close_matches(unknown[0], order, n=1)
        raise runner.RunnerError(f"No chapter {unknown[0]!r}" + (f"; did you mean {close[0]!r}?" if close else ".")
                                 + f" Chapters: {', '.join(order)}.")
    profiles.check_profile(profile, names or order)
    chosen = names or order
    table = budget.plan_table(plans.profile_plans(profile, chosen), budget.runtime(profile))
    print(f"profile {profile!r} assumes {plans.runtime_words(profile)}. Times per part: the longest part's on a "
          f"{budget.FREE_GPU}; in all: every part's, one after another.")
    with pd.option_context("display.width", 250, "display.max_rows", None, "display.max_colwidth", 48):
        print(table.to_string(index=False))
    lines = [(name, line) for name in chosen for line in plans.problems(name, plans.parameters(name, profile), profile)]
    if not lines:
        print(f"every part of {len(chosen)} chapter(s) fits.")
        return 0
    print(f"{len(lines)} problem(s): these parts do not fit.")
    for name, line in lines:
        print(f"  - {name}: {line}")
    return 1


def _profile(args) -> None:
    """``anisotropy profile``: the table, one figure per measure and the verdicts in ``--out``, the verdicts printed."""
    # cost: pulls torch/transformers (~3 s) into every `python -m anisotropy` start; only `profile` measures
    from anisotropy.claims import model_verdicts
    from anisotropy.experiments import model_profile

    table = model_profile.profile_models(args.models, text=args.text, source=args.source, n=args.n,
                                         max_length=args.max_length, device=args.device, dtype=args.dtype,
                                         variant=args.variant, images=args.images, audio=args.audio)
    written = model_profile.write(table, args.out)
    block = model_verdicts.markdown(model_verdicts.verdicts(table))
    (Path(args.out) / "verdicts.md").write_text(block)
    print(block)
    print(f"wrote {', '.join(str(p) for p in [*written, Path(args.out) / 'verdicts.md'])}")


def _interrupt(signum, frame):
    """SIGTERM (a pre-empted job, ``kill``) unwinds like Ctrl-C: papermill shuts its kernel down on the way out."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="anisotropy", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    # The flags carry the names of the parameters they set (runner.execute, runner.build); --force is the old name of
    # --recompute, kept so that existing commands still work.
    recompute_help = ("execute again and recompute every stored result the chapter reads (not training; "
                      "old name: --force)")
    rerun_help = "execute again, reading the results store as usual"
    p = sub.add_parser("build", help="execute every chapter under a profile and render the book")
    p.add_argument("--profile", default="local")
    p.add_argument("--recompute", "--force", action="store_true", dest="recompute", help=recompute_help)
    p.add_argument("--rerun", action="store_true", help=rerun_help)
    p.add_argument("-j", "--jobs", type=int, default=None, metavar="N",
                   help="chapters executed at once, independent ones only (default: the cores; 1: one after another)")
    p.add_argument("--no-html", action="store_true",
                   help="execute every chapter, but do not render the HTML (e.g. a test that reads the notebooks)")

    p = sub.add_parser("run", help="execute one chapter into book/executed/",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=(
                           "examples:\n"
                           "  python -m anisotropy run appendix_b_isotropic --profile smoke\n"
                           "  python -m anisotropy run appendix_b_isotropic -p n_pairs=2e4 -p dims=[16,64,256]"))
    p.add_argument("name")
    p.add_argument("--profile", default="local")
    p.add_argument("-p", "--param", action="append", metavar="NAME=VALUE")
    p.add_argument("--recompute", "--force", action="store_true", dest="recompute", help=recompute_help)
    p.add_argument("--rerun", action="store_true", help=rerun_help)

    p = sub.add_parser("clean", help="remove stored results, trained runs and notebooks no current code reaches")
    p.add_argument("--dry-run", action="store_true", help="only list what would be removed")

    p = sub.add_parser("sweep", help="run one chapter over a grid of parameters (cartesian product)",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=(
                           "examples:\n"
                           "  python -m anisotropy sweep appendix_b_isotropic -p n_pairs=1e4,4e4 -p seed=0,1\n"
                           "  python -m anisotropy sweep p1_s4_untrained_block --profile smoke "
                           "-p variants=[post_ln,pre_ln],[post_ln,pre_ln,gpt2]\n"
                           "numbers in any spelling (5e-2, 0.05, 1E3); a point's list in brackets; points separated "
                           "by commas outside brackets"))
    p.add_argument("name")
    p.add_argument("--profile", default="local")
    p.add_argument("-p", "--param", action="append", metavar="NAME=V1,V2,...", required=True)
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="a running Dask scheduler, e.g. tcp://host:8786 (default: $DASK_SCHEDULER_ADDRESS, else a "
                        "LocalCluster on this machine)")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="worker processes of the LocalCluster (default: the cores; 1: the points one after another, "
                        "in this process)")

    p = sub.add_parser("sync", help="write notebooks/*.ipynb from their MyST sources")
    p.add_argument("--check", action="store_true", help="only report pairs that are out of sync (exit 1 if any)")

    sub.add_parser("profiles", help="list the profiles")

    p = sub.add_parser("chapters", help="list the chapters, or one chapter's parameters",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=(
                           "examples:\n  python -m anisotropy chapters\n"
                           "  python -m anisotropy chapters appendix_b_isotropic --profile smoke"))
    p.add_argument("name", nargs="?", help="a chapter: show its parameters (kind, what they allow, values)")
    p.add_argument("--profile", default="local", help="whose values to show beside the notebook's (default: local)")

    p = sub.add_parser("plan", help="what each chapter asks of the runtime a profile assumes, part by part",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=(
                           "a part: what one session runs before the chapter can resume (a checkpoint's measurement, "
                           "a training run);\nexits 1 naming every part that does not fit\nexamples:\n"
                           "  python -m anisotropy plan --profile paper\n"
                           "  python -m anisotropy plan --profile paper beyond_sharp_without_anisotropy"))
    p.add_argument("names", nargs="*", metavar="CHAPTER", help="chapters to plan (default: all)")
    p.add_argument("--profile", default="paper", help="whose parameters and runtime (default: paper)")

    p = sub.add_parser("calibrate", help="measure this machine (matrix products, memory, the suites' updates)")
    p.add_argument("--profile", default="local", help="whose suite recipes to time (default: local)")
    p.add_argument("--out", default=None, metavar="FILE", help="also write the calibration as JSON")

    p = sub.add_parser("profile", help="measure any model's layer-wise geometry (text, images or speech; both "
                                       "papers' measures)",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=(
                           "MODEL: a registry name, a Hub id (owner/name@revision), a save_pretrained folder or a "
                           ".gguf file: the registry's models, and any text, image or speech model that transformers' "
                           "AutoModel loads with its tokenizer, image processor or feature extractor\nexamples:\n"
                           "  python -m anisotropy profile smollm2-135m gemma3-270m --n 64\n"
                           "  python -m anisotropy profile ./my-checkpoint --text notes.txt --out profile-out\n"
                           "  python -m anisotropy profile ./my-vit --images photos/\n"
                           "  python -m anisotropy profile ./my-wav2vec2 --audio clips/"))
    p.add_argument("models", nargs="+", metavar="MODEL")
    data = p.add_mutually_exclusive_group()
    data.add_argument("--text", metavar="FILE", help="one example per line (per paragraph if it has blank lines)")
    data.add_argument("--images", metavar="DIR", help="a folder of images (.png, .jpg, ...) for an image model")
    data.add_argument("--audio", metavar="DIR", help="a folder of audio files (.wav, .flac, ...) for a speech model")
    data.add_argument("--source", default="prose", help="a named data source (default: prose)")
    p.add_argument("--n", type=int, default=None,
                   help="examples (default: 256 of a source, every one of a file or folder)")
    p.add_argument("--max-length", type=int, default=128, help="tokens per example at most (default: 128)")
    p.add_argument("--device", default="auto", help="cpu, cuda, or auto (default)")
    p.add_argument("--dtype", default=None, choices=("float32", "float16", "bfloat16"),
                   help="the weights' dtype on the device (default: as loaded, float32)")
    p.add_argument("--variant", default="pretrained", choices=("pretrained", "untrained", "tiny"),
                   help="a registry model's random weights at true size (untrained) or toy size (tiny) instead")
    p.add_argument("--out", default="profile-out", metavar="DIR", help="where the table, figures and verdicts go")

    args = parser.parse_args(argv)
    try:
        previous = signal.signal(signal.SIGTERM, _interrupt)
    except ValueError:  # not the main thread: leave signals alone
        previous = None
    try:
        if args.command == "build":
            if args.recompute:
                print("--recompute: every chapter is executed again and recomputes the results it reads from the store")
            runner.build(args.profile, rerun=args.rerun, recompute=args.recompute, jobs=args.jobs,
                         html=not args.no_html)
        elif args.command == "run":
            if args.recompute:
                print(f"--recompute: {args.name} recomputes every result it reads from the store")
            outcome = runner.execute(args.name, args.profile, _parse_assignments(args.param), rerun=args.rerun,
                                     recompute=args.recompute)
            if outcome.error:
                raise runner.ChapterFailed(outcome.error)
            print(f"{args.name}: {'reused' if outcome.reused else f'{outcome.seconds:.1f} s'} -> {outcome.path}")
        elif args.command == "sweep":
            table = sweeps.sweep(args.name, args.profile, _parse_assignments(args.param, as_grid=True),
                                 address=args.scheduler, workers=args.workers)
            print(f"sweep table: {table}")
        elif args.command == "sync":
            changed = checkout.sync(check=args.check)
            verb = "out of sync" if args.check else "written"
            print(f"{len(changed)} notebook(s) {verb}" + (f": {', '.join(changed)}" if changed else ""))
            return 1 if (args.check and changed) else 0
        elif args.command == "clean":
            removed, size = checkout.clean(dry_run=args.dry_run)
            for path in removed:
                print(path)
            verb = "would free" if args.dry_run else "freed"
            print(f"{len(removed)} stale item(s); {verb} {size / 2**20:.1f} MiB")
        elif args.command == "calibrate":
            # cost: pulls torch (~2.5 s) into every `python -m anisotropy` start; only `calibrate` needs it
            from anisotropy.book import machine

            cal = machine.calibrate(args.profile)
            print(machine.describe(cal))
            ref = machine.reference()
            if ref and ref.get("calibration"):
                est = machine.estimate_build(cal, ref)
                print(f"speed index {est['speed_index']:.2f} against the reference build's machine ({ref['commit']}); "
                      f"a fresh `make book` here: about {est['cpu_seconds'] / 60:.0f} CPU-minutes, "
                      f"{est['wall_seconds'] / 60:.0f} minutes of wall time")
            if args.out:
                Path(args.out).write_text(json.dumps(cal, indent=1) + "\n")
        elif args.command == "profiles":
            for name in profiles.names():
                print(f"{name:<9} {profiles.load(name).get('description', '')}")
        elif args.command == "chapters":
            _print_chapters(args.name, args.profile)
        elif args.command == "plan":
            return _plan(args.profile, args.names)
        elif args.command == "profile":
            _profile(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        name = str(exc) or "SIGINT"
        print(f"interrupted ({name}): finished notebooks and results are kept; run the same command again to resume "
              "where it stopped.", file=sys.stderr)
        return 128 + (signal.SIGTERM if name == "SIGTERM" else signal.SIGINT)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return 0


if __name__ == "__main__":
    sys.exit(main())
