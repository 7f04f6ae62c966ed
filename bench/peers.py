"""The P5 peers, each with a fake in-process model and a trivial Python `sum`
tool. They import only when installed (tools/bench_env.sh); a missing one is
reported, not fatal. Each factory returns run(tool_iterations) -> final text."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

PROMPT = "Add the numbers, please."
Runner = Callable[[int], str]


def _sum(a: int, b: int) -> str:
    return f'{{"sum":{a + b}}}'


def _langchain_runner(make_agent: Callable[[Any, list[Any]], Any]) -> Runner:
    """A runner over a LangChain-family agent built by `make_agent(model, tools)`,
    one agent per tool-round count k (the fake model's script)."""
    from langchain_core.tools import tool

    model = _fake_chat_model()

    @tool
    def sum(a: int, b: int) -> str:
        """Add two integers."""
        return _sum(a, b)

    agents: dict[int, Any] = {}

    def run(k: int) -> str:
        agent = agents.get(k)
        if agent is None:
            agent = agents[k] = make_agent(model(k), [sum])
        out = agent.invoke({"messages": [{"role": "user", "content": PROMPT}]},
                           {"recursion_limit": 4 * k + 10})
        return str(out["messages"][-1].content)

    return run


def langgraph_react() -> Runner:
    from langgraph.prebuilt import create_react_agent

    return _langchain_runner(create_react_agent)


def langchain_agent() -> Runner:
    from langchain.agents import create_agent

    return _langchain_runner(lambda model, tools: create_agent(model=model, tools=tools))


def _fake_chat_model() -> Callable[[int], Any]:
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class FakeToolModel(BaseChatModel):
        tool_iterations: int = 1

        @property
        def _llm_type(self) -> str:
            return "bench-fake"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None,
                      **kwargs: Any) -> ChatResult:
            done = sum(1 for m in messages if isinstance(m, ToolMessage))
            if done < self.tool_iterations:
                msg = AIMessage(content="", tool_calls=[
                    {"name": "sum", "args": {"a": done, "b": 35}, "id": f"call_{done}"}])
            else:
                msg = AIMessage(content=f"The sum is {messages[-1].content}.")
            return ChatResult(generations=[ChatGeneration(message=msg)])

    return lambda k: FakeToolModel(tool_iterations=k)


def openai_agents() -> Runner:
    os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"  # never export traces anywhere
    from agents import Agent, RunConfig, function_tool, set_tracing_disabled
    from agents import Runner as AgentsRunner
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    set_tracing_disabled(True)

    class FakeModel(Model):
        def __init__(self, tool_iterations: int) -> None:
            self.k = tool_iterations

        async def get_response(self, system_instructions: Any, input: Any, *args: Any,
                               **kwargs: Any) -> ModelResponse:
            items = input if isinstance(input, list) else []
            outputs = [i for i in items if _item_type(i) == "function_call_output"]
            done = len(outputs)
            if done < self.k:
                out: Any = ResponseFunctionToolCall(
                    type="function_call", call_id=f"call_{done}", name="sum",
                    arguments=f'{{"a":{done},"b":35}}', id=f"fc_{done}", status="completed")
            else:
                last = outputs[-1] if outputs else {}
                text = last.get("output") if isinstance(last, dict) else ""
                out = ResponseOutputMessage(
                    id="msg", type="message", role="assistant", status="completed",
                    content=[ResponseOutputText(type="output_text", text=f"The sum is {text}.",
                                                annotations=[])])
            return ModelResponse(output=[out], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    @function_tool
    def sum(a: int, b: int) -> str:
        """Add two integers."""
        return _sum(a, b)

    config = RunConfig(tracing_disabled=True)
    agents: dict[int, Any] = {}
    loop = asyncio.new_event_loop()

    def run(k: int) -> str:
        agent = agents.get(k)
        if agent is None:
            agent = agents[k] = Agent(name="bench", model=FakeModel(k), tools=[sum])
        # One event loop for every run: Runner.run_sync would build a new one
        # per run, a fixed cost the per-iteration slope removes anyway.
        result = loop.run_until_complete(AgentsRunner.run(agent, PROMPT, run_config=config,
                                                          max_turns=2 * k + 5))
        return str(result.final_output)

    return run


def _item_type(item: Any) -> str | None:
    if isinstance(item, dict):
        value = item.get("type")
        return value if isinstance(value, str) else None
    value = getattr(item, "type", None)
    return value if isinstance(value, str) else None


PEERS: dict[str, tuple[Callable[[], Runner], str]] = {
    "langgraph create_react_agent": (langgraph_react, "langgraph"),
    "langchain create_agent": (langchain_agent, "langchain"),
    "openai-agents Runner": (openai_agents, "openai-agents"),
}
