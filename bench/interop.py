"""langchain-postgres import: reusing stored vectors against re-embedding, and quality.

Writes the first N SciFact documents into a real `PGVector` collection with
langchain-postgres itself (LangChain's HuggingFace embeddings of all-MiniLM-L6-v2, as a
user would have), then imports it into a fresh pipeline store twice in the same process:
with the stored vectors reused (the model matches) and with every row re-embedded
(`--embedding-model` naming another model). Reports wall time and embedding calls of
each, the time of an unchanged re-import, and nDCG@10 over the SciFact test queries whose
relevant documents are all in the slice, for the imported data through the hybrid
retrieve and through the collection's own `PGVector.similarity_search` in the same run.

    python bench/interop.py [--docs 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SCIFACT = REPO.parent / "shared" / "data" / "scifact"
RESULTS = REPO / "bench" / "results" / "interop.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=1000)
    args = parser.parse_args()
    os.environ["RETRIEVAL_PIPELINE_HOME"] = tempfile.mkdtemp(prefix="rp-bench-interop-")
    os.environ.pop("DATABASE_URL", None)
    from langchain_postgres import PGVector

    from retrieval_pipeline.eval.datasets import load_beir
    from retrieval_pipeline.eval.metrics import ndcg_at_k
    from retrieval_pipeline.ingest.job import Ingestor
    from retrieval_pipeline.ingest.langchain_postgres import (
        LangchainSource,
        import_langchain_postgres,
    )
    from retrieval_pipeline.tools.embeddings import resolve_embedder
    from retrieval_pipeline.tools.retrieve import Retriever
    from retrieval_pipeline.tools.store import EmbeddedPostgres, Store

    dataset = load_beir(SCIFACT, name="scifact")
    corpus = {}
    with dataset.corpus_path.open(encoding="utf-8") as fh:
        for line in fh:
            record = json.loads(line)
            corpus[str(record["_id"])] = record
    # Every judged document, filled up to --docs with the rest in id order.
    judged = sorted({d for rel in dataset.qrels.values() for d in rel if d in corpus})
    others = [d for d in sorted(corpus) if d not in set(judged)]
    doc_ids = judged + others[: max(0, args.docs - len(judged))]
    queries = dict(dataset.queries)
    embedder = resolve_embedder("local")
    server = EmbeddedPostgres(
        Path(os.environ["RETRIEVAL_PIPELINE_HOME"]), keep_running=True
    )
    url = server.start()
    results: dict[str, Any] = {
        "benchmark": "interop",
        "date": time.strftime("%Y-%m-%d"),
        "documents": len(doc_ids),
        "queries": len(queries),
    }
    try:
        vs = PGVector(
            embeddings=embedder.embeddings,
            collection_name="scifact",
            connection=url.replace("postgresql://", "postgresql+psycopg://", 1),
            use_jsonb=True,
            collection_metadata={"embedding_model": embedder.model},
        )
        started = time.perf_counter()
        texts = []
        for d in doc_ids:
            texts.append(f"{corpus[d]['title']}\n{corpus[d]['text']}".strip())
        vs.add_texts(
            texts,
            metadatas=[
                {"title": corpus[d]["title"], "source": f"scifact:{d}"} for d in doc_ids
            ],
            ids=doc_ids,
        )
        results["langchain_write_s"] = time.perf_counter() - started
        source = LangchainSource(url, collection="scifact")
        runs: dict[str, dict[str, Any]] = {}
        for name, model in (("reuse", None), ("re-embed", "another-model")):
            with Store(url) as store:
                with store.connection() as conn:
                    conn.execute(
                        "TRUNCATE documents, chunks, chunk_terms, term_stats,"
                        " corpus_stats, entities, mentions, relations CASCADE"
                    )
                ingestor = Ingestor(store, embedder)
                started = time.perf_counter()
                summary = import_langchain_postgres(
                    ingestor, source, embedding_model=model
                )
                elapsed = time.perf_counter() - started
                runs[name] = {
                    "seconds": elapsed,
                    "embed_seconds": summary.embed_seconds,
                    "documents": summary.documents,
                    "chunks": summary.chunks,
                    "embeddings_reused": summary.embeddings_reused,
                }
                if name == "reuse":
                    started = time.perf_counter()
                    again = import_langchain_postgres(ingestor, source)
                    runs[name]["unchanged_reimport_s"] = time.perf_counter() - started
                    runs[name]["unchanged_skipped"] = again.skipped
                    retriever = Retriever(store, embedder)
                    ours, theirs = [], []
                    for q, text in sorted(queries.items()):
                        ranked = []
                        for chunk in retriever.retrieve(text, limit=10):
                            if chunk.document_id not in ranked:
                                ranked.append(chunk.document_id)
                        ours.append(ndcg_at_k(ranked, dataset.qrels[q], 10))
                        hits = vs.similarity_search(text, k=10)
                        theirs.append(
                            ndcg_at_k([h.id for h in hits], dataset.qrels[q], 10)
                        )
                    results["ndcg@10"] = {
                        "pipeline hybrid on imported rows": statistics.mean(ours),
                        "PGVector.similarity_search": statistics.mean(theirs),
                    }
            print(name, json.dumps(runs[name]), file=sys.stderr)
        results["import"] = runs
        vs.delete_collection()
    finally:
        server.stop()
    RESULTS.write_text(json.dumps(results, indent=2))
    sys.path.insert(0, str(REPO / "bench"))
    from report import write_benchmarks_md

    print(write_benchmarks_md())
    return 0


if __name__ == "__main__":
    sys.exit(main())
