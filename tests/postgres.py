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


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """Start a server on a free localhost port; yields its URL (with a password), stops and deletes it after."""
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
    data, pwfile, port = root / "data", root / "pw", _free_port()
    pwfile.write_text(PASSWORD + "\n")
    if as_user:
        shutil.chown(root, "postgres")
        shutil.chown(pwfile, "postgres")
    run = lambda *cmd: subprocess.run([*as_user, *cmd], check=True, capture_output=True, text=True)  # noqa: E731
    try:
        run(str(bin_dir / "initdb"), "-D", str(data), "-U", USER, f"--pwfile={pwfile}", "--auth-host=scram-sha-256",
            "--auth-local=trust")
        run(str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(root / "log"), "-w", "-o",
            f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c max_connections=200", "start")
        yield f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    with postgres_server() as url:
        yield url
