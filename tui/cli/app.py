"""Opening the TUI (being built under issue 6)."""


def run_app(args) -> int:
    from core.errors import KneeError

    raise KneeError("the TUI is not built yet; use the headless commands (knee --help)")
