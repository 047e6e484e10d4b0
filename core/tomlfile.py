"""Reading a user's TOML file (plan, sweep file, catalog override) with errors that say which
file is wrong and why, on one line."""

from __future__ import annotations

import tomllib
from pathlib import Path

from core.errors import BadInput


def read_toml(path: str | Path, what: str, hint: str | None = None) -> dict:
    """Parse ``path``; ``what`` names the file for the user ("plan file", "sweep file")."""
    p = Path(path)
    try:
        return tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise BadInput(f"{what} {p} does not exist", hint) from None
    except IsADirectoryError:
        raise BadInput(f"{what} {p} is a directory, not a TOML file", hint) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise BadInput(f"{what} {p} is not valid TOML: {e}", hint) from None
