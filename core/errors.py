"""Errors that reach the user.

``BadInput`` is anything the user can fix by changing what they typed or the files they
pointed at. The command line prints its message on one line and exits with code 2; the
TUI shows it inline. Its message names what is wrong and, where it helps, how to fix it.
"""


class KneeError(Exception):
    """Base of the errors knee reports to the user without a traceback."""

    exit_code = 1


class BadInput(KneeError):
    """The user's input is wrong (exit code 2)."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None):
        self.hint = hint
        super().__init__(f"{message} ({hint})" if hint else message)


class RunFailed(KneeError):
    """The work itself failed: a server crashed, every request errored (exit code 1)."""

    exit_code = 1


def _show(v) -> str:
    return repr(v) if isinstance(v, str) else str(v)


def _bounds(model, field: str) -> str | None:
    """The allowed range of a model's numeric field from its Field(ge=, gt=, le=, lt=)."""
    info = getattr(model, "model_fields", {}).get(field) if model is not None else None
    if info is None:
        return None
    lo = hi = None
    for m in info.metadata:
        for attr, side, strict in (("ge", "lo", False), ("gt", "lo", True), ("le", "hi", False), ("lt", "hi", True)):
            v = getattr(m, attr, None)
            if v is not None:
                if side == "lo":
                    lo = (v, strict)
                else:
                    hi = (v, strict)
    if lo and hi:
        return f"in {'(' if lo[1] else '['}{lo[0]:g}, {hi[0]:g}{')' if hi[1] else ']'}"
    if lo:
        if lo == (0, True):
            return "positive"
        return f"{'greater than' if lo[1] else 'at least'} {lo[0]:g}"
    if hi:
        return f"{'less than' if hi[1] else 'at most'} {hi[0]:g}"
    return None


def describe_validation(e, names: dict[str, str] | None = None, model=None) -> str:
    """One line from a pydantic ``ValidationError``: each failing field by the name the user
    typed (``names`` maps field paths like ``tp`` or ``input.mean`` to it), its allowed range
    and the value given -- never pydantic's multi-line dump with its URL."""
    names = names or {}
    parts = []
    for err in e.errors():
        loc = [str(x) for x in err.get("loc", ())]
        path = ".".join(loc)
        name = names.get(path) or (names.get(loc[0]) if loc else None) or path
        typ = err.get("type", "")
        ctx = err.get("ctx") or {}
        given = err.get("input")
        if typ in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
            rng = _bounds(model, loc[0]) if len(loc) == 1 else None
            if rng is None:
                rng = {
                    "greater_than": "greater than {gt}",
                    "greater_than_equal": "at least {ge}",
                    "less_than": "less than {lt}",
                    "less_than_equal": "at most {le}",
                }[typ].format(**ctx)
                rng = "positive" if rng == "greater than 0" else rng
            parts.append(f"{name} must be {rng}, got {_show(given)}")
        elif typ == "literal_error":
            parts.append(f"{name} must be one of {ctx.get('expected')}, got {_show(given)}")
        elif typ == "missing":
            parts.append(f"{name} is missing")
        elif typ == "extra_forbidden":
            parts.append(f"unknown setting {name}")
        else:
            msg = str(err.get("msg", "is invalid"))
            for prefix in ("Value error, ", "Assertion failed, "):
                if msg.startswith(prefix):
                    msg = msg[len(prefix) :]
            msg = msg[:1].lower() + msg[1:]
            if typ in ("value_error", "assertion_error") and not loc:
                parts.append(msg)
            else:
                parts.append(f"{name}: {msg}" + (f", got {_show(given)}" if not isinstance(given, dict) else ""))
    return "; ".join(parts).replace("\n", " ")


def bad_input_from(e, what: str = "", names: dict[str, str] | None = None, model=None, hint: str | None = None) -> BadInput:
    """:class:`BadInput` from a pydantic ``ValidationError`` (see :func:`describe_validation`)."""
    return BadInput(what + describe_validation(e, names, model), hint)
