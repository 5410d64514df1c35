"""PostgreSQL + pgvector storage: embedded server, migrations, channel SQL."""

from retrieval_pipeline.tools.store.embedded import EmbeddedPostgres
from retrieval_pipeline.tools.store.store import AccessScope, Store, open_store

__all__ = ["AccessScope", "EmbeddedPostgres", "Store", "open_store"]
