"""Opening the TUI: ``knee`` (optionally ``--plan FILE``) and ``knee --web``.

``--web`` serves the same app in a browser through textual-serve, bound to 127.0.0.1 only:
it runs one ``knee`` process per browser tab, so it is a demo tool, not a shared service.
"""

from __future__ import annotations

import shlex
import sys

WEB_HOST = "127.0.0.1"
WEB_PORT = 8000


def run_app(args) -> int:
    if getattr(args, "web", False):
        return _serve_web(args)
    from tui.app import make_app

    app = make_app(plan_path=args.plan)
    app.run()
    return int(app.return_code or 0)


def _serve_web(args) -> int:
    from textual_serve.server import Server

    command = f"{shlex.quote(sys.executable)} -m tui"
    if args.plan:
        command += f" --plan {shlex.quote(args.plan)}"
    print(f"knee: serving the TUI on http://{WEB_HOST}:{WEB_PORT} (Ctrl+C to stop)", file=sys.stderr)
    Server(command, host=WEB_HOST, port=WEB_PORT, title="knee").serve()
    return 0
