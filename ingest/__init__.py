"""Ingestion: loaders, the structural chunker, entities and the ingest job."""
