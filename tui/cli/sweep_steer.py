"""The `knee sweep` paths that do not start a runner of their own: --pause/--stop (a request
in the study store, from any terminal or machine that shares it) and --join (this process is
one worker of a study several share)."""

from __future__ import annotations

import json
import sys

from core.errors import BadInput
from tui.cli.progress import ProgressPrinter
from tui.cli.sweep_spec import build_spec_from_args


def study_arg(args, flag: str, value) -> str | None:
    named = value if isinstance(value, str) else None
    if named and args.study and named != args.study:
        raise BadInput(f"{flag} {named} and --study {args.study} name different studies", "name one")
    return named or args.study


def control(args, storage: str) -> int:
    """--pause / --stop: one request in the store (--continue goes through run(), which also
    resumes a study whose runner is gone)."""
    from core.results.store import StudyStore
    from tui.data.sweep_control import SweepControl

    flag, value = ("--pause", args.pause) if args.pause else ("--stop", args.stop)
    store = StudyStore(storage, create=False)
    name = study_arg(args, flag, value) or store.latest_study()
    if not name:
        raise BadInput("the study store is empty", "start a sweep with knee sweep --detach")
    ctl = SweepControl(store=store)
    where = (f" --storage {args.storage}" if args.storage else "") + (f" --workspace {args.workspace}" if args.workspace else "")
    if flag == "--pause":
        asked = ctl.pause(name)
        msg = f"pausing {name!r} after the load point in flight (its server stays up)" if asked else f"{name!r} is already paused or pausing"
        msg += f"; go on with: knee sweep --continue --study {name}{where}"
    else:
        ctl.check_runner(name, "stop")
        ctl.stop(name)
        msg = f"stopping {name!r}; resume with: knee sweep --resume --study {name}{where}"
    print(f"knee: {msg}", file=sys.stderr)
    if args.json:
        json.dump({"study": name, "requested": ctl.requested(name)}, sys.stdout)
        sys.stdout.write("\n")
    return 0


def join(args, storage: str) -> int:
    """--join: this process is one worker of a study shared by several (core/sweep/workers.py)."""
    from core.results.store import StudyStore
    from core.sweep.runner import _summary_dict
    from core.sweep.workers import JoinedRunner, join_study

    if not args.study:
        raise BadInput("--join needs --study NAME: the study every worker shares")
    for flag, on in (
        ("--resume/--continue", args.resume),
        ("--detach", args.detach),
        ("--dry-run", args.dry_run),
        ("--output-json", args.output_json),
    ):
        if on:
            raise BadInput(f"--join and {flag} do not mix", "a worker runs in its own terminal; export the study with knee results --export")
    spec, notices = build_spec_from_args(args)
    store = StudyStore(storage)
    spec, created = join_study(store, spec, args.study, allow_mixed_hardware=args.allow_mixed_hardware)
    name = args.study
    for n in notices if created else []:
        print(f"knee: {n}", file=sys.stderr)
    print(f"knee: {'created' if created else 'joined'} study {name!r} as a worker", file=sys.stderr)
    printer = ProgressPrinter(store=store, study=name)
    summary = JoinedRunner(store, name, spec=spec, on_event=None if args.quiet else printer.handle, workspace=args.workspace).run()
    if args.json:
        json.dump(
            {"study": name, "storage": storage, "created": created, "interrupted": summary.interrupted, **_summary_dict(summary)},
            sys.stdout,
            indent=2,
            default=str,
        )
        sys.stdout.write("\n")
    return 130 if summary.interrupted else 0
