"""Opening the TUI: ``knee`` (optionally ``--plan FILE``) and ``knee --web``.

``--web`` serves the same app in a browser through textual-serve, bound to 127.0.0.1 only:
it runs one ``knee`` process per browser tab, so it is a demo tool, not a shared service.
"""

from __future__ import annotations

import os
import shlex
import sys

WEB_HOST = "127.0.0.1"
WEB_PORT = 8000


HEADLESS_HINT = (
    "knee: error: the TUI needs a terminal (stdin, stdout and stderr a TTY); without one use the "
    "headless commands: knee estimate, sweep, results, attach, deploy (knee --help), or knee --web"
)


def terminal_missing() -> bool:
    """True when the TUI has no terminal to run in. Textual reads keys from stdin and draws
    on stderr; with stdin not a TTY it reads end-of-file in a busy loop and never exits, and
    a redirected stdout (``knee > log``) says a script, not a person, is there. The web
    driver (``knee --web`` runs the app under textual-serve through pipes) needs none."""
    if os.environ.get("TEXTUAL_DRIVER"):
        return False
    return not all(_isatty(fd) for fd in (0, 1, 2))


def _isatty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:  # a closed descriptor
        return False


def run_app(args) -> int:
    if getattr(args, "web", False):
        return _serve_web(args)
    from tui.app import make_app

    app = make_app(plan_path=args.plan)  # a bad plan file is reported first
    if terminal_missing():
        print(HEADLESS_HINT, file=sys.stderr)
        return 2
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
