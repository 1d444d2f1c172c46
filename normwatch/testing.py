"""Run a real normwatch server process, for integration tests and benchmarks, and find the
headless Chromium that drives the dashboard there.

>>> with running_server("sqlite:///t.db", Path("/tmp")) as server:  # doctest: +SKIP
...     httpx.get(f"{server.url}/healthz")

The database must already be migrated (`normwatch db upgrade`); the process is started
with ``--no-migrate`` so tests control the schema.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

__all__ = [
    "CHROMIUM_FLAGS",
    "ServerProcess",
    "chromium_path",
    "free_port",
    "running_server",
    "start_server",
    "wait_healthy",
]

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]
"""How the browser tests, the benchmarks and the screenshots launch Chromium."""


def chromium_path() -> str | None:
    """The Chromium to launch: ``NORMWATCH_CHROMIUM``, else the first of ``chromium``,
    ``chromium-browser`` and ``google-chrome`` on the PATH; None without one."""
    named = os.environ.get("NORMWATCH_CHROMIUM")
    if named:
        return named
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_healthy(
    url: str, process: subprocess.Popen[bytes], timeout: float = 60.0, path: str = "/healthz"
) -> bool:
    """Poll ``url`` + ``path`` until it answers 200; False if ``process`` exits or time runs
    out."""
    deadline = time.monotonic() + timeout
    # One client for every poll: each new one loads the CA bundle (about 20 ms of CPU),
    # which a starting server's own start-up would wait behind on a busy machine.
    with httpx.Client(timeout=1) as http:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                return False
            try:
                if http.get(f"{url}{path}").status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
    return False


@dataclass
class ServerProcess:
    """A ``normwatch serve`` process and where its output goes."""

    url: str
    database_url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


def start_server(
    database_url: str,
    log_dir: Path,
    *,
    port: int | None = None,
    workers: int | None = None,
    **env: str,
) -> ServerProcess:
    """Start ``python -m normwatch serve --no-migrate`` on ``port`` (default: a free one);
    wait until healthy.

    Passing the port of a server that was killed restarts "the same" server for a client
    that keeps its URL. ``workers`` is passed as ``--workers``; the first worker to answer
    makes the server healthy, the others may still be starting. Extra ``NORMWATCH_*``
    settings go in ``env``. Raises ``RuntimeError`` with the server's output when it exits
    or is not healthy within 60 s.
    """
    port = port or free_port()
    log_path = log_dir / f"server-{port}-{time.time_ns()}.log"
    environment = {
        **os.environ,
        "NORMWATCH_DATABASE_URL": database_url,
        "NORMWATCH_HOST": "127.0.0.1",
        "NORMWATCH_PORT": str(port),
        **env,
    }
    with log_path.open("wb") as log:
        command = [sys.executable, "-m", "normwatch", "serve", "--no-migrate"]
        if workers is not None:
            command += ["--workers", str(workers)]
        process = subprocess.Popen(
            command,
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = ServerProcess(f"http://127.0.0.1:{port}", database_url, process, log_path)
    if not wait_healthy(server.url, process):
        server.stop()
        raise RuntimeError(f"server did not become healthy:\n{server.log()}")
    return server


@contextmanager
def running_server(
    database_url: str,
    log_dir: Path,
    *,
    port: int | None = None,
    workers: int | None = None,
    **env: str,
) -> Iterator[ServerProcess]:
    """`start_server` as a context manager that stops the process on the way out."""
    server = start_server(database_url, log_dir, port=port, workers=workers, **env)
    try:
        yield server
    finally:
        server.stop()
