"""`knee estimate` (being built; see the issue that owns it)."""


def register(sub) -> None:
    p = sub.add_parser("estimate", help="(not built yet)")
    p.set_defaults(func=run)


def run(args) -> int:
    from core.errors import KneeError

    raise KneeError("knee estimate is not built yet")
