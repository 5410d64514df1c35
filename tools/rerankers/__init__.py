"""Cross-encoder reranker adapters."""
