"""Alembic environment for the coordinator's schema.

There is no alembic.ini: ``services.storage.migrate.alembic_config`` builds the config in code.
Online runs reuse the caller's connection (``config.attributes["connection"]``) so the upgrade
happens inside the caller's transaction; a URL in ``sqlalchemy.url`` also works (alembic CLI).
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from services.storage.models import metadata

config = context.config
target_metadata = metadata


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things in place; batch mode recreates the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )


def run_offline() -> None:
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("alembic: neither a connection nor sqlalchemy.url was given")
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            _configure(conn)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
