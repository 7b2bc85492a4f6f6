"""A throw-away local PostgreSQL server for tests: the Debian package's binaries, a cluster in a temp dir.

Skips (with the reason) where PostgreSQL or its Python driver is not installed; `.ci/run` installs both.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

USER, PASSWORD = "autosync", "pg-s3cret-pw"  # the password the masking tests look for in every output


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if found:
        return Path(found[-1]).parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).parent if pg_ctl else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A running throw-away server: its `url`, and `stop()` / `start()` to take it away and bring it back
    (the same data, port and password) while a command uses it."""

    def __init__(self, bin_dir: Path, root: Path, port: int, as_user: list[str]):
        self.bin_dir, self.root, self.port, self.as_user = bin_dir, root, port, as_user
        self.url = f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{port}/postgres"

    def _pg_ctl(self, *args: str, check: bool = True) -> None:
        subprocess.run([*self.as_user, str(self.bin_dir / "pg_ctl"), "-D", str(self.root / "data"), *args],
                       check=check, capture_output=True, text=True)

    def start(self) -> None:
        self._pg_ctl("-l", str(self.root / "log"), "-w", "-o", f"-p {self.port} -k {self.root} "
                     "-c listen_addresses=127.0.0.1 -c max_connections=200", "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: 'fast' ends every session (their transactions rolled back), 'immediate' as a crash."""
        self._pg_ctl("-m", mode, "-w", "stop", check=False)


@contextlib.contextmanager
def postgres_cluster() -> Iterator[Server]:
    """Start a server on a free localhost port; yields it (`Server`), stops and deletes it after."""
    bin_dir = _bin_dir()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql; .ci/run installs it)")
    pytest.importorskip("psycopg", reason="the PostgreSQL driver is not installed (pip install 'autosync[postgres]')")
    as_user: list[str] = []
    if os.geteuid() == 0:  # the server refuses to run as root: run it as the package's postgres user
        if shutil.which("runuser") is None or subprocess.run(["id", "postgres"], capture_output=True).returncode:
            pytest.skip("running as root without a 'postgres' user to start the server as")
        as_user = ["runuser", "-u", "postgres", "--"]
    root = Path(tempfile.mkdtemp(prefix="autosync-pg-"))
    data, pwfile = root / "data", root / "pw"
    pwfile.write_text(PASSWORD + "\n")
    if as_user:
        shutil.chown(root, "postgres")
        shutil.chown(pwfile, "postgres")
    server = Server(bin_dir, root, _free_port(), as_user)
    try:
        subprocess.run([*as_user, str(bin_dir / "initdb"), "-D", str(data), "-U", USER, f"--pwfile={pwfile}",
                        "--auth-host=scram-sha-256", "--auth-local=trust"], check=True, capture_output=True, text=True)
        server.start()
        yield server
    finally:
        server.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """Start a server on a free localhost port; yields its URL (with a password), stops and deletes it after."""
    with postgres_cluster() as server:
        yield server.url


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    with postgres_server() as url:
        yield url


def storage_rows(url: str, query: str, timeout: float = 60) -> list[tuple]:
    """Rows of a query on a study storage (an SQLite file or a PostgreSQL database), [] while its tables do
    not exist yet: what the tests of several processes sharing one study read of it."""
    if url.startswith("sqlite"):
        import sqlite3

        try:
            with sqlite3.connect(url[len("sqlite:///"):], timeout=timeout) as con:
                return con.execute(query).fetchall()
        except sqlite3.OperationalError:
            return []
    import psycopg

    try:
        with psycopg.connect(url) as con:
            return con.execute(query).fetchall()
    except psycopg.errors.UndefinedTable:
        return []
