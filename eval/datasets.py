"""BEIR-format data sets: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``.

Query ``metadata`` (which, in the multi-hop sets, holds the answers) is never loaded:
retrieval must not see it.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from retrieval_pipeline.errors import RetrievalPipelineError

Qrels = dict[str, dict[str, int]]


@dataclass(frozen=True)
class BeirDataset:
    """A BEIR data set restricted to the queries judged in one qrels split."""

    name: str
    root: Path
    corpus_path: Path
    queries: dict[str, str]  # query id -> text, only queries with judgements
    qrels: Qrels  # query id -> {document id -> graded relevance}

    @property
    def tenant(self) -> str:
        """The tenant this data set is ingested under (keeps sets and stats apart)."""
        return f"eval:{self.name}"


def load_qrels(path: Path) -> Qrels:
    """Read a TREC/BEIR qrels TSV (with or without a header row)."""
    qrels: Qrels = {}
    with path.open(encoding="utf-8", newline="") as fh:
        for row in csv.reader(fh, delimiter="\t"):
            if not row or row[0] in ("query-id", "query_id", "qid"):
                continue
            if len(row) == 4:  # TREC: qid iter docid rel
                row = [row[0], row[2], row[3]]
            if len(row) != 3:
                raise RetrievalPipelineError(f"{path}: bad qrels row {row!r}")
            qid, docid, grade = row
            qrels.setdefault(qid, {})[docid] = int(grade)
    return qrels


def load_beir(
    root: Path | str, *, split: str = "test", name: str | None = None
) -> BeirDataset:
    """Load a BEIR-format folder; keep queries that have at least one relevant doc."""
    root = Path(root)
    corpus = root / "corpus.jsonl"
    queries_path = root / "queries.jsonl"
    qrels_path = root / "qrels" / f"{split}.tsv"
    for required in (corpus, queries_path, qrels_path):
        if not required.exists():
            raise RetrievalPipelineError(
                f"{required} is missing; a BEIR data set needs corpus.jsonl, "
                f"queries.jsonl and qrels/{split}.tsv"
            )
    qrels = {
        qid: docs
        for qid, docs in load_qrels(qrels_path).items()
        if any(grade > 0 for grade in docs.values())
    }
    queries: dict[str, str] = {}
    with queries_path.open(encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            record = json.loads(line)
            qid = str(record["_id"])
            if qid in qrels:
                queries[qid] = str(record["text"])
    missing = set(qrels) - set(queries)
    if missing:
        raise RetrievalPipelineError(
            f"{qrels_path}: {len(missing)} judged queries have no text in queries.jsonl"
        )
    return BeirDataset(name or root.name, root, corpus, queries, qrels)


def load_query_ids(path: Path) -> list[str]:
    """Read a slice definition: one query id per line (``#`` comments allowed)."""
    ids = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            ids.append(line)
    return ids
