"""A plain GET for the servers knee launches on 127.0.0.1 (readiness, /metrics).

The standard library, not httpx: importing httpx imports its optional command-line tool,
which pulls in rich (a UI library core must not load), whenever rich is installed, as it is
beside the TUI. Proxies from the environment are ignored: these servers are always local.
"""

from __future__ import annotations

import urllib.error
import urllib.request

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class LocalHTTPError(OSError):
    """The server could not be reached or did not answer in time."""


def get(url: str, headers: dict[str, str] | None = None, timeout_s: float = 2.0) -> tuple[int, str]:
    """(status, body) of ``GET url``; an HTTP error status is returned, not raised."""
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with _OPENER.open(req, timeout=timeout_s) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace") if e.fp else ""
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        raise LocalHTTPError(str(getattr(e, "reason", e))) from None
