"""A fake judge: the only stand-in allowed (no LLM exists offline).

It implements LangChain's real ``BaseChatModel`` interface, including
``with_structured_output``, returning a scripted answer (or failing as scripted).
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable, RunnableLambda


class ScriptedJudge(BaseChatModel):
    """Returns ``answer`` (a dict validated into the schema) or raises ``error``."""

    answer: dict[str, Any] | None = None
    error: str | None = None
    calls: list[Any] = []

    @property
    def _llm_type(self) -> str:
        return "scripted-judge"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: Any = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content="{}"))])

    def with_structured_output(self, schema: Any, **kwargs: Any) -> Runnable[Any, Any]:
        def respond(messages: Any) -> Any:
            self.calls.append(messages)
            if self.error == "timeout":
                raise TimeoutError("judge timed out")
            if self.error == "malformed":
                return {"rewrite": "", "sub_queries": "not a list"}
            return schema.model_validate(self.answer)

        return RunnableLambda(respond)
