"""A throwaway PostgreSQL cluster for the multi-box tests and bench/multibox.py.

``Cluster.start()`` runs initdb into a fresh temporary directory and ``pg_ctl start`` with the
server listening on 127.0.0.1 only, on a free port, its unix socket inside that directory
(nothing else on the machine can reach it, and nothing on the network). PostgreSQL refuses to
run as root, so as root the server runs as the unprivileged ``postgres`` user (``runuser``),
and the directory is handed to it. ``stop()`` / ``start()`` again simulate an outage;
``destroy()`` stops it and removes the directory.

``find_bin()`` looks on PATH, then in Debian's /usr/lib/postgresql/<version>/bin (Debian puts
initdb there, not on PATH). ``why_not()`` says why no cluster can be had (the tests skip with
that reason, printed by pytest's -rs). ``scripts/test.sh`` installs PostgreSQL when missing.

Authentication is ``trust`` for the local superuser ``knee``: the cluster lives minutes, in a
directory only its owner can read, on the loopback interface.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

USER = "knee"  # the cluster's superuser (the role the tests connect as)


def find_bin() -> Path | None:
    """The directory holding initdb/pg_ctl, or None."""
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).parent
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: _version(p.parent.parent.name))
    return found[-1].parent if found else None


def _version(name: str) -> float:
    try:
        return float(name)
    except ValueError:
        return 0.0


def _run_as() -> list[str]:
    """The command prefix that runs the server as a non-root user (none when not root)."""
    if os.geteuid() != 0:
        return []
    return [shutil.which("runuser") or "/usr/sbin/runuser", "-u", "postgres", "--"]


def why_not() -> str | None:
    """Why no cluster can be started here; None when one can."""
    if importlib.util.find_spec("psycopg") is None:
        return 'the PostgreSQL driver is not installed in the venv (pip install -e ".[test,postgres]"; scripts/test.sh does)'
    if find_bin() is None:
        return "PostgreSQL is not installed (no initdb on PATH or in /usr/lib/postgresql/*/bin; apt-get install -y postgresql, scripts/test.sh does as root)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' user to run the server as (PostgreSQL refuses root)"
        if not (shutil.which("runuser") or Path("/usr/sbin/runuser").exists()):
            return "running as root without runuser to start the server as the postgres user"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """One throwaway cluster: ``url(db)`` gives a SQLAlchemy URL for a database in it."""

    def __init__(self) -> None:
        self.bin = find_bin()
        if self.bin is None:
            raise RuntimeError(why_not() or "no PostgreSQL")
        # Not pytest's tmp_path: under root that is mode 700 and the postgres user cannot enter it.
        self.dir = Path(tempfile.mkdtemp(prefix="knee-pg-"))
        self.data, self.sock, self.log = self.dir / "data", self.dir / "sock", self.dir / "server.log"
        self.sock.mkdir()
        self.port = _free_port()
        self.prefix = _run_as()
        if self.prefix:
            pw = pwd.getpwnam("postgres")
            for p in (self.dir, self.sock):
                os.chown(p, pw.pw_uid, pw.pw_gid)
        self._pg(["initdb", "-D", str(self.data), "-U", USER, "--auth=trust", "-E", "UTF8", "--no-sync"], timeout=120)

    def _pg(self, argv: list[str], timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
        cmd = [*self.prefix, str(self.bin / argv[0]), *argv[1:]]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=self.dir)
        if check and r.returncode != 0:
            tail = self.log.read_text()[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{' '.join(argv[:2])} failed ({r.returncode}): {r.stderr.strip() or r.stdout.strip()}\n{tail}")
        return r

    def start(self) -> "Cluster":
        # Loopback only, socket in our directory; fsync off: the data is thrown away anyway.
        opts = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.sock} -c fsync=off -c max_connections=200"
        self._pg(["pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", opts, "-w", "-t", "60", "start"], timeout=90)
        return self

    def stop(self, mode: str = "fast") -> None:
        self._pg(["pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop"], timeout=90, check=False)

    def running(self) -> bool:
        return self._pg(["pg_ctl", "-D", str(self.data), "status"], check=False).returncode == 0

    def url(self, db: str = "postgres") -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{db}"  # SQLAlchemy 2.1: psycopg 3 by default

    def create_db(self, name: str) -> str:
        """A new empty database; its SQLAlchemy URL."""
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user=USER, dbname="postgres", autocommit=True) as con:
            con.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def destroy(self) -> None:
        if self.data.exists():
            self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)
