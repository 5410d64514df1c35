"""The retrieval pipeline as a LangGraph ``StateGraph``.

::

    START ─► understand_query ─► hybrid_retrieve (one Send per branch)
          ─► fuse_graph ─► rerank ─► assemble_context ─► END
    START ─► plain_retrieve ─► END   (every optional stage inactive)

Conditional edges skip inactive stages. ``build_pipeline(...)`` compiles a pipeline
over explicit resources; the module-level ``graph`` (for ``langgraph.json``, LangServe
and subgraph use) resolves its resources from the environment on first use.

Nodes (``nodes/``) and routers (:mod:`~retrieval_pipeline.graph.routing`) are plain
functions ``step(state, runtime, resources)``; this module only binds them to the
pipeline's resources and wires the edges.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from retrieval_pipeline.graph.context import Context
from retrieval_pipeline.graph.resources import PipelineResources, default_resources
from retrieval_pipeline.graph.routing import (
    branches,
    route_after_graph,
    route_after_retrieve,
    route_start,
)
from retrieval_pipeline.graph.state import PipelineInput, PipelineOutput, PipelineState
from retrieval_pipeline.nodes.assemble_context import assemble_context
from retrieval_pipeline.nodes.fuse_graph import fuse_graph
from retrieval_pipeline.nodes.hybrid_retrieve import hybrid_retrieve
from retrieval_pipeline.nodes.plain_retrieve import plain_retrieve
from retrieval_pipeline.nodes.rerank import rerank
from retrieval_pipeline.nodes.understand_query import understand_query

__all__ = ["build_pipeline", "graph"]

ResourceSource = PipelineResources | Callable[[], PipelineResources]
Step = Callable[[Any, Runtime[Any], PipelineResources], Any]
"""A node or router: ``step(state, runtime, resources)``."""


class _Resources:
    """The pipeline's resources, resolved once on first use, shared by every step.

    Importing the module-level ``graph`` touches no database and loads no model.
    """

    def __init__(self, source: ResourceSource) -> None:
        self._source = source
        self._resolved: PipelineResources | None = None

    def get(self) -> PipelineResources:
        if self._resolved is None:
            source = self._source
            self._resolved = (
                source if isinstance(source, PipelineResources) else source()
            )
        return self._resolved


class _WithResources:
    """A node or router, ``step(state, runtime, resources)``, bound to resources."""

    def __init__(self, step: Step, resources: _Resources) -> None:
        self.step = step
        self.resources = resources
        self.__name__ = step.__name__

    def __call__(self, state: Any, runtime: Runtime[Any]) -> Any:
        return self.step(state, runtime, self.resources.get())


def build_pipeline(
    resources: ResourceSource | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Compile the pipeline over ``resources`` (default: from the environment)."""
    shared = _Resources(resources or default_resources)

    def bind(step: Step) -> _WithResources:
        return _WithResources(step, shared)

    builder = StateGraph(
        PipelineState,
        context_schema=Context,
        input_schema=PipelineInput,
        output_schema=PipelineOutput,
    )
    for node in (
        understand_query,
        hybrid_retrieve,
        fuse_graph,
        rerank,
        assemble_context,
        plain_retrieve,
    ):
        builder.add_node(node.__name__, bind(node))
    builder.add_conditional_edges(
        START,
        bind(route_start),
        ["understand_query", "plain_retrieve", "hybrid_retrieve"],
    )
    builder.add_conditional_edges("understand_query", branches, ["hybrid_retrieve"])
    builder.add_conditional_edges(
        "hybrid_retrieve",
        bind(route_after_retrieve),
        ["fuse_graph", "rerank", "assemble_context"],
    )
    builder.add_conditional_edges(
        "fuse_graph", bind(route_after_graph), ["rerank", "assemble_context"]
    )
    builder.add_edge("rerank", "assemble_context")
    builder.add_edge("assemble_context", END)
    builder.add_edge("plain_retrieve", END)
    return builder.compile(name="retrieval_pipeline")


graph = build_pipeline()
"""The pipeline over environment-resolved resources (``langgraph.json`` points here)."""
