"""Storage tests run against SQLite (a temp file) and a real PostgreSQL server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from services.storage import Storage


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """An empty database: a fresh SQLite file, or a fresh database on the test PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('sqlite') / 'coordinator.db'}"
    url: str = request.getfixturevalue("postgres_db_url")
    return url


@pytest.fixture
def storage(db_url: str) -> Iterator[Storage]:
    s = Storage(db_url)
    s.open()
    try:
        yield s
    finally:
        s.close()
