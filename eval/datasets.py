"""BEIR-format data sets: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``.

Query ``metadata`` (which, in the multi-hop sets, holds the answers) is never loaded:
retrieval must not see it.

Splits (issue 18): every default is chosen on a ``dev`` split and reported on ``test``.

- ``dev``: ``qrels/dev.tsv`` where the set has one (NFCorpus), else ``qrels/train.tsv``
  (SciFact's 809 train claims), else carved from ``qrels/test.tsv`` (below).
- ``test``: ``qrels/test.tsv``, less the carved dev queries when the set has no dev or
  train judgements of its own (HotpotQA and MuSiQue slices).
- ``all``: the whole ``qrels/test.tsv`` (what reports before issue 18 used).

The carve is a fixed rule, not a file: a query is dev when the first 8 hex digits of
``sha256("dev-split:" + query id)`` are below a third of 2^32, so about a third of
the queries choose defaults and two thirds report them, the same on every machine.
A test file with fewer than ``MIN_CARVE`` judged queries (a toy set) is not carved:
its ``dev`` and ``test`` are the whole file, and its split source says so.
Query texts come from ``queries.jsonl`` and, for a split's own queries, from
``queries_<split>.jsonl`` when it exists (SciFact keeps its train claims there).
"""

from __future__ import annotations

import csv
import hashlib
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
    split: str = "test"
    split_source: str = "qrels/test.tsv"
    """Where the split's judgements come from, for the report (e.g. "qrels/train.tsv",
    "qrels/test.tsv, carved: 2/3 held out")."""
    title_entities: bool = False
    """Ingest each document's title as its entity (multi-hop sets: the graph that
    graph fusion follows). An explicit option, recorded in every report."""

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


SPLITS = ("dev", "test", "all")
DEV_SHARE = 1 / 3  # of a carved set's queries: the rest is held out
MIN_CARVE = 30  # judged queries a test file needs before a dev third is carved off


def carved_dev(query_id: str) -> bool:
    """The fixed rule: is this query in the dev part of a carved test file?"""
    digest = hashlib.sha256(f"dev-split:{query_id}".encode()).hexdigest()
    return int(digest[:8], 16) < DEV_SHARE * 2**32


def _split_source(root: Path, split: str) -> tuple[Path, str, bool | None]:
    """The qrels file of a split, its description, and which carved part it keeps.

    The third value is None when the split is a file of its own, True for the dev
    part of a carved test file, False for the held-out part.
    """
    qrels = root / "qrels"
    own = [f for f in ("dev", "train") if (qrels / f"{f}.tsv").exists()]
    if split == "dev":
        if own:
            return qrels / f"{own[0]}.tsv", f"qrels/{own[0]}.tsv", None
        return qrels / "test.tsv", "qrels/test.tsv, carved: the dev third", True
    if split == "test":
        if own:
            return qrels / "test.tsv", "qrels/test.tsv", None
        return (
            qrels / "test.tsv",
            "qrels/test.tsv, carved: the held-out two thirds",
            False,
        )
    if split == "all":
        note = "qrels/test.tsv" if own else "qrels/test.tsv (all: the dev third too)"
        return qrels / "test.tsv", note, None
    # Any other name is a qrels file of that name (train, say).
    return qrels / f"{split}.tsv", f"qrels/{split}.tsv", None


def load_beir(
    root: Path | str,
    *,
    split: str = "test",
    name: str | None = None,
    title_entities: bool = False,
) -> BeirDataset:
    """Load a BEIR-format folder; keep queries that have at least one relevant doc.

    ``split`` is ``dev``, ``test`` or ``all`` (see the module notes) or the name of
    any ``qrels/<split>.tsv``.
    """
    root = Path(root)
    corpus = root / "corpus.jsonl"
    queries_path = root / "queries.jsonl"
    qrels_path, source, carved = _split_source(root, split)
    for required in (corpus, queries_path, qrels_path):
        if not required.exists():
            raise RetrievalPipelineError(
                f"{required} is missing; a BEIR data set needs corpus.jsonl, "
                f"queries.jsonl and {qrels_path.relative_to(root)} (split "
                f"'{split}'; splits: {', '.join(SPLITS)} or a qrels file name)"
            )
    qrels = {
        qid: docs
        for qid, docs in load_qrels(qrels_path).items()
        if any(grade > 0 for grade in docs.values())
    }
    if carved is not None:
        if len(qrels) >= MIN_CARVE:
            qrels = {q: d for q, d in qrels.items() if carved_dev(q) == carved}
        else:
            source = f"qrels/test.tsv (fewer than {MIN_CARVE} queries: not carved)"
    queries: dict[str, str] = {}
    own_queries = root / f"queries_{qrels_path.stem}.jsonl"
    for path in (queries_path, own_queries):
        if not path.exists():
            continue
        with path.open(encoding="utf-8") as fh:
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
    return BeirDataset(
        name or root.name,
        root,
        corpus,
        queries,
        qrels,
        split=split,
        split_source=source,
        title_entities=title_entities,
    )


def load_query_ids(path: Path) -> list[str]:
    """Read a slice definition: one query id per line (``#`` comments allowed)."""
    ids = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            ids.append(line)
    return ids
