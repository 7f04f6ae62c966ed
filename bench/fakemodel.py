"""The in-process model every P5 contender talks to: it asks for `sum` until
the conversation holds `tool_iterations` tool answers, then answers in text.
spearpy gets it as a Backend; the floor loops call `reply` directly."""

from __future__ import annotations

from typing import Any

from spearpy.backends.base import CompletionRequest
from spearpy.chat.protocol import CompletionResult


def count_tool_messages(messages: list[dict[str, Any]]) -> int:
    return sum(1 for m in messages if m.get("role") == "tool")


def reply(messages: list[dict[str, Any]], tool_iterations: int) -> dict[str, Any]:
    """A chat-completion body, as an OpenAI-compatible server would send it."""
    done = count_tool_messages(messages)
    if done < tool_iterations:
        message: dict[str, Any] = {
            "role": "assistant", "content": None,
            "tool_calls": [{"id": f"call_{done}", "type": "function", "function": {
                # The bytes json.dumps({"a": done, "b": 35}) gives, written as the
                # Agents SDK peer's fake model writes its arguments: encoding is
                # the model's work (1.3 us, which was billed to every contender's
                # iteration here, ~10 % of spearpy's).
                "name": "sum", "arguments": f'{{"a": {done}, "b": 35}}'}}]}
        finish = "tool_calls"
    else:
        message = {"role": "assistant", "content": f"The sum is {messages[-1]['content']}."}
        finish = "stop"
    return {"id": "chatcmpl-bench", "object": "chat.completion", "created": 1700000000,
            "model": "bench", "choices": [{"index": 0, "message": message,
                                           "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


def answer(model: str, message: dict[str, Any]) -> CompletionResult:
    """An in-process model's result: `message` in a minimal chat-completion body."""
    body = {"id": "chatcmpl-bench", "object": "chat.completion", "model": "bench",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
    return CompletionResult("inprocess", model, body=body)


class InProcessBackend:
    """A spearpy Backend with no HTTP: the scripted model as a function call."""

    name = "inprocess"
    default_model = "bench"

    def __init__(self, tool_iterations: int) -> None:
        self.tool_iterations = tool_iterations

    def complete(self, request: CompletionRequest) -> CompletionResult:
        return CompletionResult(self.name, request.model,
                                body=reply(request.messages, self.tool_iterations))

    def close(self) -> None:
        pass
