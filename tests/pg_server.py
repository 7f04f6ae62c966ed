"""A real PostgreSQL server for the tests, started from Debian's binaries.

`running()` runs `initdb` into a fresh directory and `pg_ctl start` on a free
127.0.0.1 port (and a unix socket in that directory), yields its URL
and stops and removes the server after. Root cannot run postgres:
as root, the server runs as the `postgres` user the Debian package creates.
tools/setup.sh --toolchains installs the package (`postgresql`).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SUPERUSER = "spearpy"
START_TIMEOUT_S = 60


def binaries() -> Path | None:
    """Debian's newest PostgreSQL bin directory, None when not installed."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parent.parent.name) if
                   Path(p).parent.parent.name.isdigit() else 0)
    return Path(found[-1]).parent if found else None


def unavailable() -> str | None:
    """Why the server cannot run here (a loud skip reason), None when it can."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return ("POSTGRESQL TESTS SKIPPED: psycopg is not installed "
                "(pip install -e '.[postgres]' or tools/setup.sh --toolchains)")
    if binaries() is None:
        return ("POSTGRESQL TESTS SKIPPED: no /usr/lib/postgresql/*/bin/initdb; install "
                "Debian's postgresql package (tools/setup.sh --toolchains)")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "POSTGRESQL TESTS SKIPPED: running as root and there is no postgres user"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def running() -> Iterator[str]:
    bin_dir = binaries()
    assert bin_dir is not None, unavailable()
    root = Path(tempfile.mkdtemp(prefix="spearpy-pg-"))
    data = root / "data"
    as_user: list[str] = []
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(root, user.pw_uid, user.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    port = _free_port()

    def run(*args: str) -> None:
        done = subprocess.run([*as_user, *args], capture_output=True, text=True,
                              timeout=START_TIMEOUT_S, check=False)
        assert done.returncode == 0, f"{args[0]} failed: {done.stdout}\n{done.stderr}"

    try:
        run(str(bin_dir / "initdb"), "-D", str(data), "-U", SUPERUSER, "--auth=trust",
            "-E", "UTF8", "--no-sync")
        # fsync off: the tests never cut the power, and the machine is shared.
        run(str(bin_dir / "pg_ctl"), "start", "-w", "-t", str(START_TIMEOUT_S), "-D", str(data),
            "-l", str(root / "log"),
            "-o", f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off")
        try:
            yield f"postgresql://{SUPERUSER}@127.0.0.1:{port}/postgres"
        finally:
            run(str(bin_dir / "pg_ctl"), "stop", "-m", "immediate", "-D", str(data))
    finally:
        shutil.rmtree(root, ignore_errors=True)
