"""`knee attach`: follow a running sweep (its events from the study store). Ctrl-C detaches
the view only; the sweep goes on in its own process. A paused sweep shows its ``paused`` and
``continued`` events; its runner stays alive (and its heartbeat fresh) while it waits."""

from __future__ import annotations

import sys
import time

from core.errors import BadInput


def register(sub) -> None:
    p = sub.add_parser("attach", help="follow a running sweep (Ctrl-C detaches; the sweep goes on)")
    p.add_argument("--study", help="study name (default: the latest)")
    p.add_argument("--from-start", action="store_true", help="replay the study's events from its start")
    p.add_argument("--workspace", help="directory of the study store (default .knee)")
    p.add_argument("--storage", help="study store path or SQLAlchemy URL")
    p.set_defaults(func=run)


def run(args) -> int:
    from core.results.store import StudyStore, default_storage, runner_gone, study_status
    from core.sweep import runner_alive
    from core.sweep.lease import worker_status
    from tui.cli.results import resume_command, worker_lines
    from tui.cli.sweep import ProgressPrinter

    store = StudyStore(args.storage or default_storage(args.workspace), create=False)
    study = args.study or store.latest_study()
    if not study:
        raise BadInput("the study store is empty", "start one with knee sweep --detach")
    row = store.study(study)
    if row is None:
        raise BadInput(f"no study named {study!r}", "see knee results --list")
    printer = ProgressPrinter(store=store, study=study)
    after = 0
    if not args.from_start:
        # Start from the study's latest study_started event, so the header is shown.
        starts = store.events(study, kinds=["study_started"])
        after = starts[-1].seq - 1 if starts else 0
    state = study_status(row)
    if state == "running" and store.requested_state(study) == "pause":
        state = f"paused; go on with: knee sweep --continue --study {study}"
    elif state == "interrupted" and row["status"] == "running":
        state = f"interrupted: {runner_gone(row)}"  # killed without a word: the row still says running
    last_check = -1e9  # the first quiet moment checks the runner: a dead one is told at once
    try:
        # Inside the try: a Ctrl-C from the moment this line is shown detaches the view.
        print(f"knee: attached to {study!r} ({state}); Ctrl-C detaches, the sweep goes on", file=sys.stderr)
        workers = worker_status(store, study)  # a study several workers share (knee sweep --join)
        printer.show_workers = bool(workers)
        for line in worker_lines(workers):
            print(line, file=sys.stderr)
        while True:
            batch = store.events(study, after=after)
            for ev in batch:
                after = ev.seq
                printer.handle(ev.kind, ev.data)
                if ev.kind in ("study_done", "study_interrupted") and not store.events(study, after=after, kinds=["study_started"]):
                    return 0 if ev.kind == "study_done" else 130
            if not batch:
                if time.monotonic() - last_check > 2.0:
                    last_check = time.monotonic()
                    row = store.study(study) or {}
                    if row.get("status") == "created" and time.time() - (row.get("created_at") or 0) < 60:
                        continue  # a detached runner that has not claimed the study yet
                    if row.get("status") != "running" or not runner_alive(row):
                        status = study_status(row)
                        if status in ("done", "imported"):
                            return 0
                        why = runner_gone(row) or f"status {status}"
                        print(f"knee: no runner is working on {study!r} ({status}: {why}); resume with: {resume_command(study, args)}", file=sys.stderr)
                        return 130 if status == "interrupted" else 1
                time.sleep(0.1)
    except KeyboardInterrupt:
        print(f"\nknee: detached; the sweep goes on (knee attach --study {study})", file=sys.stderr)
        return 0
