"""Query understanding through one structured call to a LangChain chat model.

The judge returns a :class:`QueryUnderstanding`: the rewrite actually run, up to three
sub-queries, advisory filters, an ambiguity flag and a freshness intent. Any chat model
supporting ``with_structured_output`` works; the default resolves from the environment
(``OPENAI_API_KEY``, or ``OPENAI_BASE_URL`` for an OpenAI-compatible server such as
vLLM or Ollama). No model means the stage is inactive.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, ValidationError, field_validator

from retrieval_pipeline.graph.context import MAX_SUB_QUERIES
from retrieval_pipeline.tools.deadline import DeadlineExceeded, call_with_deadline

JUDGE_MODEL_ENV = "RETRIEVAL_PIPELINE_JUDGE_MODEL"
DEFAULT_JUDGE_MODEL = "gpt-4o-mini"

SYSTEM_PROMPT = """You turn a user's question into a better search request for a \
hybrid (keyword + vector) retriever over a document collection. Return:
- rewrite: the single best search query. Keep every rare identifier, error code, \
version, name and quoted phrase exactly as written. Do not answer the question.
- sub_queries: up to 3 short queries, one per distinct facet, only when the question \
needs several pieces of evidence; otherwise an empty list.
- filters: advisory scope hints only when the question states them (a path prefix, \
entity types, words of a document title).
- is_ambiguous: true when the question could mean clearly different things.
- freshness: "recent" when the user wants the latest state, "historical" when they ask \
about the past, otherwise null."""


class AdvisoryFilters(BaseModel):
    """Soft scope hints: they boost, never exclude."""

    path_prefix: str | None = None
    entity_types: list[str] = Field(default_factory=list)
    doc_title_contains: str | None = None


class QueryUnderstanding(BaseModel):
    """The judge's structured output."""

    rewrite: str = Field(description="the query to run; the question itself if fine")
    sub_queries: list[str] = Field(default_factory=list, max_length=MAX_SUB_QUERIES)
    filters: AdvisoryFilters = Field(default_factory=AdvisoryFilters)
    is_ambiguous: bool = False
    freshness: Literal["recent", "historical"] | None = None

    @field_validator("rewrite")
    @classmethod
    def _non_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("rewrite must not be empty")
        return value.strip()

    @field_validator("sub_queries")
    @classmethod
    def _clean_sub_queries(cls, value: list[str]) -> list[str]:
        seen: dict[str, None] = {}
        for query in value:
            if query.strip():
                seen.setdefault(query.strip(), None)
        return list(seen)[:MAX_SUB_QUERIES]


class JudgeError(Exception):
    """The judge failed or answered malformed output; the raw question is used."""


def understand(
    model: Any, question: str, *, deadline_s: float | None = None
) -> QueryUnderstanding:
    """Make the single structured judge call; raise :class:`JudgeError` on failure.

    With ``deadline_s`` the call must answer within that many seconds, else the
    error says it timed out (retries and Retry-After waits count against it).
    """
    try:
        structured = model.with_structured_output(QueryUnderstanding)
    except (NotImplementedError, AttributeError) as exc:
        raise JudgeError(
            f"model has no structured output: {type(exc).__name__}"
        ) from None
    messages = [("system", SYSTEM_PROMPT), ("human", question)]
    try:
        if deadline_s is None:
            result = structured.invoke(messages)
        else:
            result = call_with_deadline(lambda: structured.invoke(messages), deadline_s)
    except DeadlineExceeded:
        raise JudgeError(f"judge timed out after {deadline_s:g}s") from None
    except ValidationError as exc:
        raise JudgeError(
            f"malformed judge output ({exc.error_count()} errors)"
        ) from None
    except Exception as exc:  # noqa: BLE001 - any provider error means "fall back"
        raise JudgeError(f"judge call failed: {type(exc).__name__}") from None
    if isinstance(result, dict):
        try:
            result = QueryUnderstanding.model_validate(result)
        except ValidationError as exc:
            raise JudgeError(
                f"malformed judge output ({exc.error_count()} errors)"
            ) from None
    if not isinstance(result, QueryUnderstanding):
        raise JudgeError(f"malformed judge output (got {type(result).__name__})")
    return result


def resolve_judge(*, timeout_s: float = 10.0) -> Any | None:
    """Return the environment's judge model, or None (the stage is then inactive).

    ``RETRIEVAL_PIPELINE_JUDGE_MODEL=none`` turns the judge off even with an OpenAI
    key or base URL set (a deployment that uses OpenAI for embeddings only).
    """
    if os.environ.get(JUDGE_MODEL_ENV, "").strip().lower() in ("none", "off"):
        return None
    key = os.environ.get("OPENAI_API_KEY")
    base_url = os.environ.get("OPENAI_BASE_URL")
    if not key and not base_url:
        return None
    try:
        from langchain_openai import ChatOpenAI
    except ImportError:
        return None
    return ChatOpenAI(
        model=os.environ.get(JUDGE_MODEL_ENV, DEFAULT_JUDGE_MODEL),
        base_url=base_url,
        # Local OpenAI-compatible servers ignore the key; SecretStr hides it in reprs.
        api_key=SecretStr(key or "not-needed"),
        temperature=0,
        timeout=timeout_s,
        max_retries=1,
    )
