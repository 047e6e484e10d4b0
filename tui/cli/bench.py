"""`knee bench` (being built; see the issue that owns it)."""


def register(sub) -> None:
    p = sub.add_parser("bench", help="(not built yet)")
    p.set_defaults(func=run)


def run(args) -> int:
    from core.errors import KneeError

    raise KneeError("knee bench is not built yet")
