"""`knee results` (being built; see the issue that owns it)."""


def register(sub) -> None:
    p = sub.add_parser("results", help="(not built yet)")
    p.set_defaults(func=run)


def run(args) -> int:
    from core.errors import KneeError

    raise KneeError("knee results is not built yet")
