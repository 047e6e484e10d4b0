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
