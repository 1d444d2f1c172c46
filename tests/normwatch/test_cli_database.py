"""The commands that work on a server's database find it, or say what to set and make nothing.

Each runs the real ``normwatch`` command in a subprocess, in an empty working directory.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.helpers.databases import migrated_sqlite

TOKEN = re.compile(r"nw_[A-Za-z0-9_-]{40,}")


def normwatch_in(
    cwd: Path, *args: str, database_url: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``normwatch ARGS`` run in ``cwd``, with NORMWATCH_DATABASE_URL only if given."""
    env = {k: v for k, v in os.environ.items() if k != "NORMWATCH_DATABASE_URL"}
    if database_url is not None:
        env["NORMWATCH_DATABASE_URL"] = database_url
    return subprocess.run(
        [sys.executable, "-m", "normwatch", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "args",
    [
        ("token", "create", "--project", "marin", "--scope", "admin"),
        ("token", "list"),
        ("token", "revoke", "1"),
        ("token", "rotate", "1"),
        ("aliases", "show", "--project", "marin"),
        ("aliases", "set", "--project", "marin"),
        ("db", "upgrade"),
        ("db", "downgrade", "base"),
        ("db", "compact"),
        ("db", "retention", "--days", "30"),
        ("db", "distribute"),
    ],
    ids=" ".join,
)
def test_without_a_database_configured_says_what_to_set_and_makes_nothing(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    done = normwatch_in(tmp_path, *args)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "error: no database is configured and there is no normwatch.db here (the SQLite file "
        "`normwatch serve` makes when nothing is set). Set NORMWATCH_DATABASE_URL, in the "
        "environment or in .env, to the database your server uses, for example\n"
        "  export NORMWATCH_DATABASE_URL="
        "postgresql+psycopg://normwatch:secret@db.internal/normwatch\n"
        f"  export NORMWATCH_DATABASE_URL=sqlite:///{tmp_path.resolve()}/normwatch-demo.db"
        "    # the file `normwatch demo` serves, started here\n"
    )
    assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_configured_sqlite_file_is_created_only_by_db_upgrade(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    missing = normwatch_in(tmp_path, "token", "create", "--project", "marin", database_url=url)
    assert (missing.returncode, missing.stdout) == (2, "")
    assert missing.stderr == (
        f"error: there is no database at {tmp_path / 'cli.db'} (NORMWATCH_DATABASE_URL={url}): "
        "`normwatch db upgrade` creates it, or set NORMWATCH_DATABASE_URL to the database "
        "your server uses\n"
    )
    assert list(tmp_path.iterdir()) == []

    (tmp_path / "empty.db").touch()
    empty = normwatch_in(
        tmp_path, "token", "list", database_url=f"sqlite:///{tmp_path / 'empty.db'}"
    )
    assert (empty.returncode, empty.stdout) == (2, "")
    assert empty.stderr.endswith("has no normwatch tables: run `normwatch db upgrade` first\n")

    up = normwatch_in(tmp_path, "db", "upgrade", database_url=url)
    assert up.returncode == 0, up.stderr
    created = normwatch_in(tmp_path, "token", "create", "--project", "marin", database_url=url)
    assert created.returncode == 0, created.stderr
    assert TOKEN.fullmatch(created.stdout.strip())


def test_dot_env_and_the_default_file_count_as_configured(tmp_path: Path) -> None:
    url = migrated_sqlite(tmp_path / "from-env.db")
    (tmp_path / ".env").write_text(f"NORMWATCH_DATABASE_URL={url}\n")
    via_env = normwatch_in(tmp_path, "token", "create", "--project", "marin")
    assert via_env.returncode == 0, via_env.stderr
    assert TOKEN.fullmatch(via_env.stdout.strip())

    # Where `normwatch serve` made ./normwatch.db (nothing set), the other commands use it.
    served = tmp_path / "served"
    served.mkdir()
    migrated_sqlite(served / "normwatch.db")
    default = normwatch_in(served, "token", "create", "--project", "marin")
    assert default.returncode == 0, default.stderr
    listed = normwatch_in(served, "token", "list")
    assert listed.returncode == 0 and "marin" in listed.stdout
    assert sorted(p.name for p in served.iterdir() if not p.name.endswith(("-wal", "-shm"))) == [
        "normwatch.db"
    ]


def test_postgres_is_used_when_reachable_and_named_when_not(pg_url: str, tmp_path: Path) -> None:
    project = f"cli-{uuid.uuid4().hex[:8]}"
    done = normwatch_in(tmp_path, "token", "create", "--project", project, database_url=pg_url)
    assert done.returncode == 0, done.stderr
    assert TOKEN.fullmatch(done.stdout.strip())

    gone = pg_url.rsplit("/", 1)[0] + "/normwatch_no_such_database"
    refused = normwatch_in(tmp_path, "token", "list", database_url=gone)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr.startswith(f"error: cannot reach the database at {gone}: ")
    assert 'database "normwatch_no_such_database" does not exist' in refused.stderr
    assert list(tmp_path.iterdir()) == []
