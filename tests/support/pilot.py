"""Shared pieces of the TUI tests (Pilot flows, snapshots, the Deploy screen on moto).

Import the fixtures into a test module to use them (pytest finds fixtures by module attribute):
``from support.pilot import demo_storage, offline, wait_until``.
"""

from __future__ import annotations

import asyncio

import pytest


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    # An unknown model id must fail fast from the cache, never wait on the network.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # The app follows the latest study of its workspace: never the developer's own .knee/.
    monkeypatch.setenv("KNEE_WORKSPACE", str(tmp_path / "workspace"))


@pytest.fixture(scope="module")
def demo_storage(tmp_path_factory):
    """A study store holding the deterministic demo sweep (tui.demo)."""
    from tui.demo import make_demo_study

    storage = tmp_path_factory.mktemp("store") / "knee.db"
    make_demo_study(storage)
    return str(storage)


async def wait_until(pilot, predicate, timeout: float = 30.0, what: str = "condition") -> None:
    """Let the app run until ``predicate()`` holds; fail with ``what`` after ``timeout`` s."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        if loop.time() > end:
            raise AssertionError(f"{what} not reached in time")
        await pilot.pause(0.05)
