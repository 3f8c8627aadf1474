"""Alembic environment, configured in code (no alembic.ini needed).

``promoter.store.db.upgrade`` hands it the connection to migrate on
(``config.attributes["connection"]``), the one holding the migration lock; with none
given (Alembic's own command line) it opens one of its own, with no lock. It does not
decide when to migrate or check the schema's revision.
"""

from __future__ import annotations

from alembic import context

from promoter.store.db import make_engine
from promoter.store.tables import Base

config = context.config
target_metadata = Base.metadata


def run_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(
            connection=connection, target_metadata=target_metadata, render_as_batch=True
        )
        with context.begin_transaction():
            context.run_migrations()
        return
    url = config.get_main_option("sqlalchemy.url") or ""
    engine = make_engine(url)
    with engine.connect() as conn:
        context.configure(connection=conn, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
