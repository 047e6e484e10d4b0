"""`knee attach`: follow a running sweep (its events from the study store). Ctrl-C detaches
the view only; the sweep goes on in its own process. A paused sweep shows its ``paused`` and
``continued`` events; its runner stays alive (and its heartbeat fresh) while it waits."""

from __future__ import annotations

import sys

from core.errors import BadInput


def register(sub) -> None:
    p = sub.add_parser("attach", help="follow a running sweep (Ctrl-C detaches; the sweep goes on)")
    p.add_argument("--study", help="study name (default: the latest)")
    p.add_argument("--from-start", action="store_true", help="replay the study's events from its start")
    p.add_argument("--workspace", help="directory of the study store (default .knee)")
    p.add_argument("--storage", help="study store path or SQLAlchemy URL")
    p.set_defaults(func=run)


def run(args) -> int:
    from core.results.follow import StudyFollower
    from core.results.store import StudyStore, default_storage
    from core.sweep.lease import worker_status
    from tui.cli.progress import ProgressPrinter
    from tui.cli.results import resume_command, worker_lines

    store = StudyStore(args.storage or default_storage(args.workspace), create=False)
    study = args.study or store.latest_study()
    if not study:
        raise BadInput("the study store is empty", "start one with knee sweep --detach")
    if store.study(study) is None:
        raise BadInput(f"no study named {study!r}", "see knee results --list")
    printer = ProgressPrinter(store=store, study=study)
    after = 0
    if not args.from_start:
        # Start from the study's latest study_started event, so the header is shown.
        starts = store.events(study, kinds=["study_started"])
        after = starts[-1].seq - 1 if starts else 0
    # The one study follower (the TUI's Sweep screen uses it too); the row every 2 s is
    # plenty for a terminal, and a lifecycle event re-reads it at once.
    follower = StudyFollower(store, study, after=after, row_every_s=2.0)
    st = follower.refresh()
    state = st.status
    if st.status == "running" and st.requested == "pause":
        state = f"paused; go on with: knee sweep --continue --study {study}"
    elif st.note:
        state = f"interrupted: {st.note}"  # killed without a word: the row still says running
    try:
        # Inside the try: a Ctrl-C from the moment this line is shown detaches the view.
        print(f"knee: attached to {study!r} ({state}); Ctrl-C detaches, the sweep goes on", file=sys.stderr)
        workers = worker_status(store, study)  # a study several workers share (knee sweep --join)
        printer.show_workers = bool(workers)
        for line in worker_lines(workers):
            print(line, file=sys.stderr)
        last = None
        # Ends after the event that ends the study's last run, or once no runner works on
        # it and every event is read (a detached runner not started yet is waited for).
        for last in follower.events(poll_s=0.1):
            printer.handle(last.kind, last.data)
        if last is not None and follower.ends_run(last):
            return 0 if last.kind == "study_done" else 130
        st = follower.state
        if st.status in ("done", "imported"):
            return 0
        why = st.note or f"status {st.status}"
        print(f"knee: no runner is working on {study!r} ({st.status}: {why}); resume with: {resume_command(study, args)}", file=sys.stderr)
        return 130 if st.status == "interrupted" else 1
    except KeyboardInterrupt:
        print(f"\nknee: detached; the sweep goes on (knee attach --study {study})", file=sys.stderr)
        return 0
