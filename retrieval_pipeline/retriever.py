"""The pipeline as a LangChain retriever and as an agent tool.

``PipelineRetriever`` returns LangChain ``Document`` objects (id = chunk id, metadata =
the chunk's provenance and scores), sync and async. ``make_retrieval_tool`` gives an
agent a structured tool (question, optional document scope) returning compact, cited
evidence sized for a context window, with the documents as the tool's artifact.

Access is fixed when the retriever is built (``principals``, ``tenant``): nothing the
model writes into a tool call can widen it; a tool call's ``doc_ids`` only narrows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import unquote, urlparse

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable
from langchain_core.tools import StructuredTool
from pydantic import BaseModel, ConfigDict, Field

from retrieval_pipeline.graph.context import DEFAULT_LIMIT, Context
from retrieval_pipeline.tools.store.records import page_label
from retrieval_pipeline.tools.tokens import TokenCounter, default_token_counter

TOOL_DESCRIPTION = (
    "Search the knowledge base. Returns numbered passages with their source; cite "
    "them as [n]. Ask one focused question per call; pass doc_ids to search only "
    "inside specific documents."
)


def citation_label(chunk: Mapping[str, Any]) -> str:
    """How a chunk is cited: ``manual.pdf p. 14``, ``pp. 14–15``, or just the source.

    The name is the source file's name (the document id for a record inside a
    file, such as a JSONL line); the pages are the chunk's ``page_start`` and
    ``page_end`` (PDF), absent for sources without pages.
    """
    uri = str(chunk.get("source_uri") or "")
    parsed = urlparse(uri)
    name = str(chunk.get("document_id") or uri)
    if parsed.scheme == "file" and not parsed.fragment and parsed.path:
        name = PurePosixPath(unquote(parsed.path)).name or name
    pages = page_label(chunk.get("page_start"), chunk.get("page_end"))
    return f"{name} {pages}" if pages else name


def chunk_to_document(chunk: Mapping[str, Any]) -> Document:
    """A pipeline chunk as a LangChain ``Document`` (text + provenance metadata)."""
    metadata = {key: value for key, value in chunk.items() if key != "text"}
    return Document(
        page_content=str(chunk.get("text", "")),
        metadata=metadata,
        id=str(chunk["chunk_id"]),
    )


class PipelineRetriever(BaseRetriever):
    """A LangChain retriever over the retrieval pipeline.

    Args:
        pipeline: a compiled pipeline (default: the environment-resolved ``graph``).
        limit: answer budget, chunks per query.
        principals: the caller's ACL principals (fixed for this retriever).
        tenant: the caller's tenant (fixed for this retriever).
        doc_ids: an optional document scope.
        context: stage toggles and budgets (a :class:`Context` or its fields as a dict).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    pipeline: Any = None
    limit: int = DEFAULT_LIMIT
    principals: list[str] = Field(default_factory=list)
    tenant: str | None = None
    doc_ids: list[str] | None = None
    context: Any = None

    def _graph(self) -> Runnable[Any, Any]:
        if self.pipeline is not None:
            return self.pipeline  # type: ignore[no-any-return]
        from retrieval_pipeline.graph.builder import graph

        return graph

    def _input(self, query: str, doc_ids: Sequence[str] | None) -> dict[str, Any]:
        return {
            "question": query,
            "limit": self.limit,
            "principals": list(self.principals),
            "tenant": self.tenant,
            "doc_ids": narrow_scope(self.doc_ids, doc_ids),
        }

    def _context(self) -> Context | None:
        if self.context is None or isinstance(self.context, Context):
            return self.context
        return Context(**dict(self.context))

    def run(
        self,
        query: str,
        *,
        doc_ids: Sequence[str] | None = None,
        callbacks: Any = None,
    ) -> dict[str, Any]:
        """The pipeline's whole output (``chunks`` and ``retrieval_debug``)."""
        result: dict[str, Any] = self._graph().invoke(
            self._input(query, doc_ids),
            config={"callbacks": callbacks},
            context=self._context(),
        )
        return result

    async def arun(
        self,
        query: str,
        *,
        doc_ids: Sequence[str] | None = None,
        callbacks: Any = None,
    ) -> dict[str, Any]:
        """Async :meth:`run`."""
        result: dict[str, Any] = await self._graph().ainvoke(
            self._input(query, doc_ids),
            config={"callbacks": callbacks},
            context=self._context(),
        )
        return result

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        output = self.run(query, callbacks=run_manager.get_child())
        return [chunk_to_document(c) for c in output["chunks"]]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        output = await self.arun(query, callbacks=run_manager.get_child())
        return [chunk_to_document(c) for c in output["chunks"]]


def narrow_scope(
    fixed: Sequence[str] | None, requested: Sequence[str] | None
) -> list[str] | None:
    """A requested document scope intersected with the fixed one (never wider)."""
    if requested is None:
        return list(fixed) if fixed is not None else None
    if fixed is None:
        return list(requested)
    allowed = set(fixed)
    return [doc for doc in requested if doc in allowed]


def format_evidence(
    chunks: Sequence[Mapping[str, Any]],
    *,
    max_tokens: int | None = None,
    counter: TokenCounter | None = None,
) -> tuple[str, list[Mapping[str, Any]]]:
    """Numbered, cited passages within ``max_tokens``; returns (text, cited chunks).

    Whole passages only: the first passage that does not fit ends the list.
    """
    counter = counter or default_token_counter()
    blocks: list[str] = []
    cited: list[Mapping[str, Any]] = []
    used = 0
    for chunk in chunks:
        number = len(blocks) + 1
        heading = " > ".join(chunk.get("heading_path") or [])
        source = chunk.get("source_uri") or chunk.get("document_id")
        header = f"[{number}] {chunk.get('title') or chunk.get('document_id')}"
        if heading:
            header += f" § {heading}"
        pages = page_label(chunk.get("page_start"), chunk.get("page_end"))
        if pages:
            source = f"{source} {pages}"
        block = f"{header}\nsource: {source}\n{chunk.get('text', '').strip()}"
        cost = counter.count(block)
        if max_tokens is not None and used + cost > max_tokens:
            break
        blocks.append(block)
        cited.append(chunk)
        used += cost
    return "\n\n".join(blocks), cited


class RetrievalToolInput(BaseModel):
    """Arguments an agent passes to the retrieval tool."""

    question: str = Field(description="A focused, self-contained search question.")
    doc_ids: list[str] | None = Field(
        default=None,
        description="Optional: search only inside these documents (their ids).",
    )


def make_retrieval_tool(
    retriever: PipelineRetriever | None = None,
    *,
    name: str = "search_knowledge_base",
    description: str = TOOL_DESCRIPTION,
    max_tokens: int = 2_000,
) -> StructuredTool:
    """A structured tool an agent can call; content is cited evidence, artifact docs.

    ``max_tokens`` bounds the evidence text (whole passages, strongest first).
    """
    retriever = retriever or PipelineRetriever()
    counter = default_token_counter()

    def render(output: dict[str, Any]) -> tuple[str, list[Document]]:
        text, cited = format_evidence(
            output["chunks"], max_tokens=max_tokens, counter=counter
        )
        if not cited:
            return "No passages found for this question.", []
        return text, [chunk_to_document(c) for c in cited]

    def search(
        question: str, doc_ids: list[str] | None = None
    ) -> tuple[str, list[Document]]:
        return render(retriever.run(question, doc_ids=doc_ids))

    async def asearch(
        question: str, doc_ids: list[str] | None = None
    ) -> tuple[str, list[Document]]:
        return render(await retriever.arun(question, doc_ids=doc_ids))

    return StructuredTool.from_function(
        func=search,
        coroutine=asearch,
        name=name,
        description=description,
        args_schema=RetrievalToolInput,
        response_format="content_and_artifact",
    )
