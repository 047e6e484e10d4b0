"""knee's engine: everything below the user interface.

Nothing in this package imports Textual, Rich or ``tui``; tests/test_architecture.py
enforces it, so the headless commands stay fast and the engine stays reusable.
"""

import sys
import types

__version__ = "0.1.0"


def _keep_httpx_cli_out() -> None:
    # httpx's package __init__ imports its optional command-line tool (``httpx._main``, which
    # pulls in rich, click and pygments: ~100 ms and UI libraries core must not load) whenever
    # those packages happen to be installed. core never uses that CLI, so an empty module is
    # registered in its place before httpx is first imported.
    if "httpx" in sys.modules or "httpx._main" in sys.modules:
        return
    stub = types.ModuleType("httpx._main")
    stub.main = lambda: None  # type: ignore[attr-defined]
    sys.modules["httpx._main"] = stub


_keep_httpx_cli_out()
