"""An example agent: the pipeline as a subgraph, then an answer with citations.

::

    START ─► prepare ─► retrieve (the pipeline, a subgraph) ─► answer ─► END

``prepare`` takes the question from ``question`` or the last human message (so the
graph works as a chat in LangGraph Studio). ``answer`` asks any LangChain chat model
to answer from the numbered evidence only and binds every ``[n]`` it cites to the
chunk id and source URI. Without a model, or when the model fails, the agent returns
the evidence itself with its citations and says why no answer was written.

The agent has its own context type (:class:`AgentContext`); the pipeline subgraph
falls back to its own defaults for a foreign context, so both work together.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, NotRequired

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from typing_extensions import TypedDict

from retrieval_pipeline.errors import InvalidQueryError
from retrieval_pipeline.graph.state import RetrievalDebug, Scope
from retrieval_pipeline.retriever import citation_label, format_evidence
from retrieval_pipeline.tools.store.records import ChunkOutput

NO_MODEL = (
    "No chat model is configured (set OPENAI_API_KEY or OPENAI_BASE_URL, or pass "
    "model= to build_agent); returning the retrieved evidence instead."
)
NO_EVIDENCE = "I found no passage that answers this question."
SYSTEM_PROMPT = (
    "Answer the question using only the numbered evidence passages. Cite every claim "
    "with the passage number in square brackets, like [1] or [2][3]. If the evidence "
    "does not contain the answer, say so plainly instead of guessing."
)
EVIDENCE_TOKENS = 4_000
_CITATION = re.compile(r"\[(\d{1,3})\]")


@dataclass
class AgentContext:
    """The agent's own run context (a different type from the pipeline's Context)."""

    answer_style: str = "concise"
    evidence_tokens: int = EVIDENCE_TOKENS


class AgentInput(Scope):
    """A question (or chat messages), with the caller's scope."""

    question: NotRequired[str]
    messages: NotRequired[list[AnyMessage]]


class AgentAnswer(TypedDict):
    """What the agent writes: the answer, its citations, the pipeline's debug block."""

    answer: str
    citations: list[dict[str, Any]]
    retrieval_debug: RetrievalDebug


class AgentOutput(AgentAnswer):
    """The answer, its citations, the conversation and the pipeline's debug block."""

    messages: list[AnyMessage]


class AgentState(Scope, AgentAnswer):
    """Parent state; ``question`` and the scope feed the pipeline subgraph's input."""

    messages: Annotated[list[AnyMessage], add_messages]
    question: str
    chunks: list[ChunkOutput]


def _citation(number: int, chunk: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "marker": f"[{number}]",
        "chunk_id": chunk["chunk_id"],
        "document_id": chunk.get("document_id"),
        "source_uri": chunk.get("source_uri"),
        "heading_path": chunk.get("heading_path", []),
        "title": chunk.get("title"),
        "page_start": chunk.get("page_start"),
        "page_end": chunk.get("page_end"),
        "label": citation_label(chunk),  # "manual.pdf p. 14"
    }


def bind_citations(
    answer: str, evidence: Sequence[Mapping[str, Any]]
) -> tuple[list[dict[str, Any]], list[str]]:
    """Citations for every valid ``[n]`` in ``answer``; also the invalid markers."""
    cited: list[dict[str, Any]] = []
    invalid: list[str] = []
    seen: set[int] = set()
    for match in _CITATION.finditer(answer):
        number = int(match.group(1))
        if not 1 <= number <= len(evidence):
            invalid.append(match.group(0))
        elif number not in seen:
            seen.add(number)
            cited.append(_citation(number, evidence[number - 1]))
    return cited, invalid


def build_agent(
    pipeline: Any = None, model: Any = None, *, resolve_model: bool = True
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Compile the agent around ``pipeline`` (default: the environment's ``graph``).

    Args:
        pipeline: a compiled retrieval pipeline, added as a subgraph node.
        model: any LangChain chat model; None resolves one from the environment
            (``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``) unless ``resolve_model`` is
            False, and with none the agent returns cited evidence without an answer.
        resolve_model: whether a None ``model`` is resolved from the environment.
    """
    if pipeline is None:
        from retrieval_pipeline.graph.builder import graph as pipeline
    resolved: list[Any] = [model]
    looked_up = [model is not None or not resolve_model]

    def chat_model() -> Any:
        if not looked_up[0]:
            from retrieval_pipeline.tools.judge import resolve_judge

            resolved[0] = resolve_judge()
            looked_up[0] = True
        return resolved[0]

    def prepare(state: AgentState) -> dict[str, Any]:
        question = (state.get("question") or "").strip()
        if not question:
            humans = [
                m for m in state.get("messages", []) if isinstance(m, HumanMessage)
            ]
            question = str(humans[-1].content).strip() if humans else ""
        if not question:
            raise InvalidQueryError(
                "the agent needs a question: pass 'question' or a human message"
            )
        update: dict[str, Any] = {"question": question}
        if not state.get("messages"):
            update["messages"] = [HumanMessage(question)]
        return update

    answer_node: Any = _make_answer(chat_model)
    builder = StateGraph(
        AgentState,
        context_schema=AgentContext,
        input_schema=AgentInput,
        output_schema=AgentOutput,
    )
    builder.add_node("prepare", prepare)
    builder.add_node("retrieve", pipeline)
    builder.add_node("answer", answer_node)
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "retrieve")
    builder.add_edge("retrieve", "answer")
    builder.add_edge("answer", END)
    return builder.compile(name="retrieval_agent")


def _make_answer(
    chat_model: Callable[[], Any],
) -> Callable[[AgentState, Runtime[Any]], dict[str, Any]]:
    def answer(state: AgentState, runtime: Runtime[Any]) -> dict[str, Any]:
        ctx = runtime.context if isinstance(runtime.context, AgentContext) else None
        budget = ctx.evidence_tokens if ctx else EVIDENCE_TOKENS
        evidence_text, evidence = format_evidence(state["chunks"], max_tokens=budget)
        if not evidence:
            return _reply(NO_EVIDENCE, [], state)
        model = chat_model()
        if model is None:
            return _evidence_only(NO_MODEL, evidence_text, evidence, state)
        style = ctx.answer_style if ctx else "concise"
        try:
            reply = model.invoke(
                [
                    SystemMessage(f"{SYSTEM_PROMPT} Style: {style}."),
                    HumanMessage(
                        f"Question: {state['question']}\n\nEvidence:\n{evidence_text}"
                    ),
                ]
            )
        except Exception as exc:  # any provider failure degrades to the evidence
            reason = f"the chat model failed ({type(exc).__name__}: {exc})"
            return _evidence_only(
                f"{reason}; returning the retrieved evidence instead.",
                evidence_text,
                evidence,
                state,
            )
        text = str(reply.content).strip()
        citations, invalid = bind_citations(text, evidence)
        update = _reply(text, citations, state)
        if invalid:
            update["retrieval_debug"] = {
                **state.get("retrieval_debug", {}),
                "invalid_citations": invalid,
            }
        return update

    return answer


def _evidence_only(
    note: str,
    evidence_text: str,
    evidence: Sequence[Mapping[str, Any]],
    state: AgentState,
) -> dict[str, Any]:
    citations = [_citation(i, c) for i, c in enumerate(evidence, start=1)]
    return _reply(f"{note}\n\n{evidence_text}", citations, state)


def _reply(
    text: str, citations: list[dict[str, Any]], state: AgentState
) -> dict[str, Any]:
    return {
        "answer": text,
        "citations": citations,
        "messages": [AIMessage(text, additional_kwargs={"citations": citations})],
        "retrieval_debug": state.get("retrieval_debug", {}),
    }


agent = build_agent()
"""The agent over the environment's pipeline and chat model (``langgraph.json``)."""
