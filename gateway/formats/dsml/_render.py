"""DeepSeek-V3.2, V4 and V4.1 prompts: DeepSeek's own Python encoders, as the gateway renders them.

DeepSeek ships no chat template for V3.2 and V4 but a reference encoder (`encoding_dsv32.py`,
`encoding_dsv4.py` in the models' repositories; vLLM serves them as `tokenizers/deepseek_v32_encoding.py`,
`deepseek_v4_encoding.py` and `deepseek_v41_encoding.py`). This module writes the same text for the messages the gateway
renders (system, user, assistant with reasoning and calls, tool results); tests/formats compare it
with the vendored reference encoders on thousands of random conversations. The requests are shaped
as vLLM's `deepseek_v32` / `deepseek_v4` tokenizer wrappers shape them before encoding:

- V3.2: the request's tools go into a system message of their own in front; thinking is off unless
  asked for; earlier reasoning is dropped only when the conversation ends with a user message.
- V4: the tools join the first system message (or one in front); thinking is on unless switched
  off, with the "high" reasoning-effort preamble; tool results are `<tool_result>` blocks of a user
  turn (the encoder's `merge_tool_messages`), in the order of the calls.

- V4.1: V4's request shape and tool results, with V4.1's own markup: a `<｜System｜>` turn (the first
  message's, and each later system message's, which counts as a query: the assistant's turn opens
  after it), the numeric reasoning effort (`high`: 75), and DSML tags spelled with a space
  (`<｜DSML｜ calls>`, `<｜DSML｜ invoke …>`, `<｜DSML｜ parameter …>`). The tools join the first system
  message wherever it is, as vLLM's `deepseek_v41` wrapper places them.

For V3.2 and V4 every system or developer message joins one system prompt at the top (as DeepSeek-V3.1's
template does): those encoders write a later system message as bare text, with no turn around it. Arguments
that are not a JSON object (a client's own history) render as one string parameter `arguments`
where the encoders would raise.
"""

from __future__ import annotations

import json
from typing import Any

from transformers import PreTrainedTokenizerFast

from gateway.formats.hf.render import SafeTemplateEncoder

__all__ = ["DSML", "SYSTEM", "TAGS", "DsmlEncoder", "effort_level"]

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
USER, ASSISTANT = "<｜User｜>", "<｜Assistant｜>"
THINK, THINK_END = "<think>", "</think>"
SYSTEM = "<｜System｜>"  # V4.1's
DSML = "｜DSML｜"
# The calls section's, a call's and a parameter's tag names per version (after `<｜DSML｜`).
TAGS = {"v32": ("function_calls", "invoke", "parameter"), "v4": ("tool_calls", "invoke", "parameter"),
        "v41": (" calls", " invoke", " parameter")}

_V32_TOOLS = """## Tools
You have access to a set of tools you can use to answer the user's question.
You can invoke functions by writing a "<{dsml}function_calls>" block like the following as part of your reply to the user:
<{dsml}function_calls>
<{dsml}invoke name="$FUNCTION_NAME">
<{dsml}parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</{dsml}parameter>
...
</{dsml}invoke>
<{dsml}invoke name="$FUNCTION_NAME2">
...
</{dsml}invoke>
</{dsml}function_calls>
String and scalar parameters should be specified as is without any escaping or quotes, while lists and objects should use JSON format. The "string" attribute should be set to "true" for string type parameters and "false" for other types (numbers, booleans, arrays, objects).
If the thinking_mode is enabled, then after function results you should strongly consider outputting a thinking block. Here is an example:
<{dsml}function_calls>
...
</{dsml}function_calls>
<function_results>
...
</function_results>
{think}...thinking about results{think_end}
Here are the functions available in JSONSchema format:
<functions>
{schemas}
</functions>
"""

_V4_TOOLS = """## Tools

You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "<{dsml}{block}>" block like the following:

<{dsml}{block}>
<{dsml}{invoke} name="$TOOL_NAME">
<{dsml}{parameter} name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</{dsml}{parameter}>
...
</{dsml}{invoke}>
<{dsml}{invoke} name="$TOOL_NAME2">
...
</{dsml}{invoke}>
</{dsml}{block}>

String parameters should be specified as is and set `string="true"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string="false"`.

If thinking_mode is enabled (triggered by {think}), you MUST output your complete reasoning inside {think}...{think_end} BEFORE any tool calls or final response.

Otherwise, output directly after {think_end} with tool calls or final response.

### Available Tool Schemas

{schemas}

You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.
"""

_V4_HIGH_EFFORT = (
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root cause, "
    "rigorously stress-testing your logic against all potential paths, edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n"
)
_V4_MAX_EFFORT = (
    "Reasoning Effort: Beyond maximum — exhaustive, relentless, and uncompromising.\n"
    "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: exhaustively decompose "
    "the problem into its most fundamental components, trace every causal chain to its root, and resolve the "
    "underlying cause rather than any surface symptom.\n"
    "Do not stop reasoning until you have independently verified the solution from multiple angles and are certain "
    "that no assumption remains unchecked and no error remains undiscovered.\n\n"
)
_V4_EFFORTS = {"low": "", "high": _V4_HIGH_EFFORT, "max": _V4_MAX_EFFORT}  # the encoder's preamble per level
_V41_EFFORT = "Reasoning Effort: {budget} (range 1-100, the higher the value, the more thorough the reasoning)\n\n"
_V41_BUDGETS = {"low": 50, "high": 75, "xhigh": 75, "max": 100}  # the encoder's levels; 75 its default
_FORMAT = "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n{schema}"


def effort_level(version: str, effort: str | None) -> str | int | None:
    """The level a request's reasoning effort renders at, as vLLM's `deepseek_v4` / `deepseek_v41`
    wrappers map it (None: the version's default, "high" / 75). V4 writes "low" (low, minimal,
    medium: no preamble), "high" or "max"; V4.1 a budget, 50 (low, minimal), 75 or 100 (max) —
    where vLLM refuses "medium" for V4.1, the gateway renders V4.1's default. V3.2 has none."""
    if version == "v4":
        level = "max" if effort == "max" else "low" if effort in ("low", "minimal", "medium") else "high"
        return None if level == "high" else level
    if version == "v41":
        budget = _V41_BUDGETS.get("low" if effort == "minimal" else effort or "high", 75)
        return None if budget == 75 else budget
    return None


def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, version: str,
           thinking: bool | None, effort: str | int | None = None) -> str:
    """The prompt text for `hf_messages`' messages and tools, ending with the generation prompt.
    `thinking`: None for the version's default (V3.2 off, V4 and V4.1 on); `effort`: an
    `effort_level` (None: the default)."""
    if version == "v41":
        budget = 75 if effort is None else int(effort)
        return _V41([_for_encoder(m) for m in messages], tools, thinking is not False, budget).text()
    messages = _one_system_prompt(messages)
    if version == "v32":
        return _V32(messages, tools, bool(thinking)).text()
    return _V4(messages, tools, thinking is not False, _V4_EFFORTS[str(effort or "high")]).text()


def _one_system_prompt(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    systems = [m["content"] for m in messages if m["role"] == "system"]
    rest = [_for_encoder(m) for m in messages if m["role"] != "system"]
    return ([{"role": "system", "content": "\n\n".join(systems)}] if systems else []) + rest


def _for_encoder(message: dict[str, Any]) -> dict[str, Any]:
    if "reasoning_content" not in message:
        return message
    message = dict(message)
    message["reasoning"] = message.pop("reasoning_content")
    return message


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return json.dumps(value, ensure_ascii=True)


def _schemas(tools: list[dict[str, Any]]) -> str:
    return "\n".join(_json(tool["function"]) for tool in tools)


def _tools_text(version: str, tools: list[dict[str, Any]]) -> str:
    block, invoke, parameter = TAGS[version]
    return _V4_TOOLS.format(dsml=DSML, block=block, invoke=invoke, parameter=parameter, think=THINK,
                            think_end=THINK_END, schemas=_schemas(tools))


def _calls(calls: list[dict[str, Any]], version: str) -> str:
    block, invoke, parameter = TAGS[version]
    invokes = [f'<{DSML}{invoke} name="{call["function"]["name"]}">\n'
               f'{_parameters(call["function"]["arguments"], parameter, version)}\n</{DSML}{invoke}>'
               for call in calls]
    return f"\n\n<{DSML}{block}>\n" + "\n".join(invokes) + f"\n</{DSML}{block}>"


def _parameters(arguments: Any, tag: str, version: str) -> str:
    if isinstance(arguments, str):
        parsed = _loads(arguments)
        if version == "v41" and isinstance(parsed, str):  # V4.1's encoder also reads a JSON string twice
            parsed = _loads(parsed)
        arguments = parsed if isinstance(parsed, dict) else {"arguments": arguments}
    return "\n".join(
        f'<{DSML}{tag} name="{key}" string="{"true" if isinstance(value, str) else "false"}">'
        f"{value if isinstance(value, str) else _json(value)}</{DSML}{tag}>"
        for key, value in arguments.items())


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _last_user(messages: list[dict[str, Any]]) -> int:
    return next((i for i in range(len(messages) - 1, -1, -1) if messages[i]["role"] in ("user", "developer")), -1)


def _without_earlier_reasoning(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The encoders' thinking mode drops the reasoning of assistant turns before the last query."""
    last = _last_user(messages)
    return [m if m["role"] != "assistant" or i >= last else {k: v for k, v in m.items() if k != "reasoning"}
            for i, m in enumerate(messages)]


class _V32:
    """`encoding_dsv32.encode_messages` behind vLLM's `deepseek_v32` wrapper."""

    def __init__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], thinking: bool) -> None:
        if tools:
            messages = [{"role": "system", "tools": tools}, *messages]
        self.thinking = thinking
        if thinking and messages and messages[-1]["role"] == "user":
            messages = _without_earlier_reasoning(messages)
        self.messages = messages
        self.last_user = _last_user(messages)

    def text(self) -> str:
        return BOS + "".join(self._message(i) for i in range(len(self.messages)))

    def _message(self, index: int) -> str:
        message = self.messages[index]
        role, content = message["role"], message.get("content")
        if role == "system":
            text = content or ""
            if message.get("tools"):
                text += "\n\n" + _V32_TOOLS.format(dsml=DSML, think=THINK, think_end=THINK_END,
                                                   schemas=_schemas(message["tools"]))
            return text
        if role == "user":
            return f"{USER}{content}{ASSISTANT}" + self._think_token(index == self.last_user)
        if role == "tool":
            return self._tool(index)
        calls = message.get("tool_calls")
        reasoning = ""
        if self.thinking and index > self.last_user:
            reasoning = (message.get("reasoning") or "") + THINK_END
        return reasoning + (content or "") + (_calls(calls, "v32") if calls else "") + EOS

    def _think_token(self, opens: bool) -> str:
        return THINK if opens and self.thinking else THINK_END

    def _tool(self, index: int) -> str:
        start = index - 1
        while start >= 0 and self.messages[start]["role"] == "tool":
            start -= 1
        order = index - start
        following = self.messages[index + 1]["role"] if index + 1 < len(self.messages) else None
        calls = self.messages[start].get("tool_calls") if start >= 0 else None
        last = order == len(calls) if calls and len(calls) >= order else following != "tool"
        text = ("\n\n<function_results>" if order == 1 else "") + f"\n<result>{self.messages[index]['content']}</result>"
        if last:
            text += "\n</function_results>\n\n" + self._think_token(index >= self.last_user)
        return text


class _Encoding:
    """What V4's and V4.1's encoders write alike: a message's body (system text and tools, a user
    turn's parts, an assistant turn with its reasoning and calls) and the assistant turn opened
    after the last query. A version says what heads its messages and which messages a turn answers."""

    version: str
    messages: list[dict[str, Any]]
    thinking: bool
    drop: bool  # earlier turns' reasoning is dropped (the request has no tools)
    last_user: int

    def text(self) -> str:
        return BOS + "".join(self._message(i) for i in range(len(self.messages)))

    def _message(self, index: int) -> str:
        message = self.messages[index]
        text = self._head(message["role"], index) + self._body(message, index)
        following = self.messages[index + 1]["role"] if index + 1 < len(self.messages) else None
        if following not in (None, "assistant") or not self._answered(message["role"], index):
            return text
        opens = self.thinking and (not self.drop or index >= self.last_user)
        return text + ASSISTANT + (THINK if opens else THINK_END)

    def _body(self, message: dict[str, Any], index: int) -> str:
        role, content = message["role"], message.get("content")
        if role == "system":
            return (content or "") + ("\n\n" + _tools_text(self.version, message["tools"]) if message.get("tools") else "")
        if role == "user":
            return USER + "\n\n".join(message["parts"])
        calls = message.get("tool_calls")
        text = ""
        if self.thinking and (not self.drop or index > self.last_user):
            text = (message.get("reasoning") or "") + THINK_END
        return text + (content or "") + (_calls(calls, self.version) if calls else "") + EOS

    def _head(self, role: str, index: int) -> str:
        """What the version writes before a message's body."""
        raise NotImplementedError

    def _answered(self, role: str, index: int) -> bool:
        """Whether an assistant turn follows this message when the next one is not written yet."""
        raise NotImplementedError


class _V4(_Encoding):
    """`encoding_dsv4.encode_messages` behind vLLM's `deepseek_v4` wrapper."""

    version = "v4"

    def __init__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], thinking: bool,
                 preamble: str) -> None:
        self.preamble = preamble
        if tools:
            if messages and messages[0]["role"] == "system":
                messages = [{**messages[0], "tools": tools}, *messages[1:]]
            else:
                messages = [{"role": "system", "tools": tools}, *messages]
        self.thinking = thinking
        self.drop = not tools  # the encoder keeps all reasoning when the request has tools
        messages = _merge_tool_results(messages)
        if thinking and self.drop:
            messages = _without_earlier_reasoning(messages)
        self.messages = messages
        self.last_user = _last_user(messages)

    def _head(self, role: str, index: int) -> str:
        return self.preamble if index == 0 and self.thinking else ""

    def _answered(self, role: str, index: int) -> bool:
        return role in ("user", "system")


class _V41(_Encoding):
    """`deepseek_v41_encoding.encode_messages` behind vLLM's `deepseek_v41` wrapper: system messages stay
    where they are, and one after the first is a query of its own (`find_last_user_index`)."""

    version = "v41"

    def __init__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], thinking: bool,
                 budget: int) -> None:
        self.budget = budget
        if tools:
            first = next((i for i, m in enumerate(messages) if m["role"] == "system"), None)
            if first is None:
                messages = [{"role": "system", "content": "", "tools": tools}, *messages]
            else:
                messages = [*messages[:first], {**messages[first], "tools": tools}, *messages[first + 1:]]
        self.thinking = thinking
        self.drop = not tools
        messages = _merge_tool_results(messages)
        self.last_user = _last_query(messages)
        if thinking and self.drop:
            messages = [m if m["role"] != "assistant" or i >= self.last_user
                        else {k: v for k, v in m.items() if k != "reasoning"} for i, m in enumerate(messages)]
        self.messages = messages

    def _head(self, role: str, index: int) -> str:
        if index > 0:
            return SYSTEM if role == "system" else ""
        text = SYSTEM if self.thinking or role == "system" else ""
        return text + (_V41_EFFORT.format(budget=self.budget) if self.thinking else "")

    def _answered(self, role: str, index: int) -> bool:
        return role == "user" or (role == "system" and index > 0)


def _last_query(messages: list[dict[str, Any]]) -> int:
    """V4.1's last query: the last user message, or system message after the first."""
    return next((i for i in range(len(messages) - 1, -1, -1)
                 if messages[i]["role"] == "user" or (messages[i]["role"] == "system" and i > 0)), -1)


def _merge_tool_results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """V4 has no tool role: results are `<tool_result>` blocks of a user turn, in the calls' order, and
    the user's text after them joins the same turn (`merge_tool_messages`, `sort_tool_results_by_call_order`)."""
    merged: list[dict[str, Any]] = []
    order: dict[str, int] = {}
    for message in messages:
        role = message["role"]
        if role == "assistant" and message.get("tool_calls"):
            order = {call["id"]: i for i, call in enumerate(message["tool_calls"]) if call.get("id")}
        if role not in ("tool", "user"):
            merged.append(message)
            continue
        if role == "tool":
            part = (order.get(message.get("tool_call_id") or "", 0), f"<tool_result>{message['content']}</tool_result>")
        else:
            part = (None, message["content"] or "")
        if merged and merged[-1]["role"] == "user":
            merged[-1]["blocks"].append(part)
        else:
            merged.append({"role": "user", "blocks": [part]})
    for message in merged:
        if message["role"] == "user":
            message["parts"] = _sorted_results(message.pop("blocks"))
    return merged


def _sorted_results(blocks: list[tuple[int | None, str]]) -> list[str]:
    """Tool results sorted by their call's position (stable), each in a result's place; text stays."""
    results = iter(sorted((b for b in blocks if b[0] is not None), key=lambda b: b[0]))
    return [next(results)[1] if key is not None else text for key, text in blocks]


class DsmlEncoder(SafeTemplateEncoder):
    """`SafeTemplateEncoder` writing DeepSeek's encoder text instead of a chat template's: content is
    kept from becoming markup the same way (escaped before, split at the added tokens after)."""

    def __init__(self, tokenizer: PreTrainedTokenizerFast, version: str, thinking: bool | None,
                 effort: str | int | None = None) -> None:
        super().__init__(tokenizer, {})
        self._version, self._thinking, self._effort = version, thinking, effort

    def _render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        return render(messages, tools or [], version=self._version, thinking=self._thinking, effort=self._effort)
