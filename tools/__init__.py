"""Everything the nodes call: the PostgreSQL store, embedders, token counting."""
