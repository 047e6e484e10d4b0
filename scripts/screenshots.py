"""Screenshots of every screen, from the same app factory the tests and the CLI use.

    .venv/bin/python scripts/screenshots.py [--out screenshots] [--size 120x36]

Writes ``<screen>.svg`` for each screen (the demo plan; a simulated sweep of it for Sweep,
Pareto and Deploy) and a PNG beside each where a converter is available (``rsvg-convert``
from librsvg, or the ``cairosvg`` package); without one it says so and keeps the SVGs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


async def _until(pilot, predicate, timeout: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        if loop.time() > end:
            raise RuntimeError("the screen did not finish loading")
        await pilot.pause(0.05)


async def shoot(out: Path, size: tuple[int, int], storage: str) -> list[Path]:
    from tui.app import make_app
    from tui.demo import DEMO_STUDY, demo_sweep_plan, settle

    written: list[Path] = []

    async def capture(name: str, steps, theme: str | None = None) -> None:
        app = make_app(demo_sweep_plan(), storage=storage, study=DEMO_STUDY)
        if theme:
            app.theme = theme
        async with app.run_test(size=size) as pilot:
            await settle(pilot)
            await steps(pilot)
            await settle(pilot)
            path = out / f"{name}.svg"
            app.save_screenshot(str(path))
            written.append(path)

    def goto(key: str, ready=None):
        async def steps(pilot) -> None:
            await pilot.press(key)
            await _until(pilot, lambda: pilot.app.sweep is not None and pilot.app.sweep.status == "done")
            if ready is not None:
                await _until(pilot, lambda: ready(pilot.app))

        return steps

    def pareto_ready(app) -> bool:
        return getattr(app.screen, "view", None) is not None

    async def deploy(pilot) -> None:
        await goto("f4", pareto_ready)(pilot)
        await pilot.press("d")
        await _until(pilot, lambda: getattr(pilot.app.screen, "plan", None) is not None)

    async def confirm(pilot) -> None:
        await deploy(pilot)
        await settle(pilot)
        await pilot.press("a")

    await capture("1-plan", goto("f1"))
    await capture("2-estimate", goto("f2", lambda app: getattr(app.screen, "view", None) is not None))
    await capture("3-sweep", goto("f3"))
    await capture("4-pareto", goto("f4", pareto_ready))
    await capture("5-deploy", deploy)
    await capture("6-deploy-confirm", confirm)
    await capture("7-estimate-light", goto("f2", lambda app: getattr(app.screen, "view", None) is not None),
                  theme="textual-light")
    await capture("8-recommend", goto("f6", lambda app: getattr(app.screen, "rec", None) is not None))
    return written


def _spaced(svg: Path) -> bytes:
    # Textual's SVG text relies on runs of spaces; SVG renderers collapse them unless the
    # document says xml:space="preserve" (without it, right-aligned cells shift left).
    data = svg.read_bytes()
    return data if b'xml:space="preserve"' in data else data.replace(b"<svg ", b'<svg xml:space="preserve" ', 1)


def to_png(svgs: list[Path]) -> str:
    """Convert with rsvg-convert or cairosvg; returns what was used (or why nothing)."""
    if shutil.which("rsvg-convert"):
        for svg in svgs:
            subprocess.run(["rsvg-convert", "-o", str(svg.with_suffix(".png"))], input=_spaced(svg), check=True)
        return "rsvg-convert"
    try:
        import cairosvg
    except ImportError:
        return "no converter (apt-get install librsvg2-bin, or pip install cairosvg); kept the SVGs"
    for svg in svgs:
        cairosvg.svg2png(bytestring=_spaced(svg), write_to=str(svg.with_suffix(".png")))
    return "cairosvg"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "screenshots"))
    ap.add_argument("--size", default="120x36", help="terminal size, COLSxROWS")
    a = ap.parse_args()
    cols, rows = (int(v) for v in a.size.lower().split("x"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    from tui.demo import make_demo_study

    with tempfile.TemporaryDirectory() as d:
        storage = str(Path(d) / "knee.db")
        make_demo_study(storage)
        svgs = asyncio.run(shoot(out, (cols, rows), storage))
    how = to_png(svgs)
    for svg in svgs:
        print(svg.relative_to(REPO) if svg.is_relative_to(REPO) else svg)
    print(f"PNG: {how}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
