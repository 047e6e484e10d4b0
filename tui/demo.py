"""A deterministic simulated study, and helpers to drive the app headless.

The tests, ``scripts/screenshots.py`` and ``bench/tui_load.py`` all need a realistic study
without a GPU: this runs the real sweep runner in-process on the simulator (virtual time,
seeded, under a second), so every screen shows what a user would see after a sim sweep.
"""

from __future__ import annotations

from pathlib import Path

from core.spec.plan import Plan, demo_plan

DEMO_STUDY = "demo-sweep"
# A small grid around the estimator's suggestion for the demo plan: two TP layouts, two
# batch caps, three loads. Some points miss the E2E SLO, so the frontier and the SLO line
# both have something to show.
DEMO_SERVER_ARGS = "tensor_parallel_size=[1,2];max_num_seqs=[64,128]"
DEMO_CLIENT_ARGS = "max_concurrency=[16,64,128];num_prompts=200"


def demo_sweep_plan() -> Plan:
    return demo_plan().model_copy(update={"server_args": DEMO_SERVER_ARGS, "client_args": DEMO_CLIENT_ARGS})


def make_demo_study(storage: str | Path, name: str = DEMO_STUDY, plan: Plan | None = None) -> str:
    """Run the demo plan's sweep on the simulator into ``storage``; returns the study name."""
    from core.results.store import StudyStore
    from core.sweep import create_study
    from core.sweep.runner import Runner
    from tui.data.sweep_control import spec_from_plan

    store = StudyStore(str(storage))
    try:
        if store.study(name) is None:
            create_study(store, spec_from_plan(plan or demo_sweep_plan()), name=name)
            Runner(store, name, install_signals=False).run()
    finally:
        store.close()
    return name


async def settle(pilot, *, cursor_blink: bool = False) -> None:
    """Wait until the app's workers are done and the screen has redrawn; stop cursors
    blinking so screenshots are the same every time."""
    import asyncio

    from textual.widgets import Input

    app = pilot.app

    def unfinished() -> list:
        # The sweep follower runs until the app ends; everything else finishes.
        return [w for w in app.workers if w.group != "follow" and not w.is_finished]

    for round_ in range(20):
        # A worker may be cancelled (replaced by an exclusive one) while waited on: not an
        # error here; the next round waits for its replacement, which a handler started.
        if finite := unfinished():
            await asyncio.gather(*(w.wait() for w in finite), return_exceptions=True)
        await pilot.pause()
        if round_ >= 2 and not unfinished():
            break
    for inp in app.screen.query(Input):
        inp.cursor_blink = cursor_blink
    await pilot.pause()
