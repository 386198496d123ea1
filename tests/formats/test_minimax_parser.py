"""MiniMax-M2 tool calls: MiniMax's control-token ids in, reasoning / text / tool-call items out, values
kept verbatim and typed by the tool's schema as vLLM's `minimax_m2` parser types them, streamed per parameter."""

from __future__ import annotations

from gateway.core.conversation import Item, Tool
from gateway.formats.base import ItemDelta, ItemDone, ItemStarted
from tests.support import family_render
from tests.support.family_contract import AGENT_CALLS, READ, Case, OutputContract
from tests.support.minimax import KNOWN_IDS

EOS = KNOWN_IDS["[e~["]
MARKUP = {token: KNOWN_IDS[token] for token in ("<think>", "</think>", "<minimax:tool_call>", "</minimax:tool_call>",
                                                "[e~[", "]~b]")}

SHELL = Tool("shell", "Run a command.", {"type": "object", "properties": {
    "command": {"type": "array", "items": {"type": "string"}}, "workdir": {"type": "string"},
    "timeout_ms": {"type": "integer"}, "login": {"type": "boolean"}}})
TOOLS = [SHELL, READ]


def invoke(name: str, *params: tuple[str, str]) -> str:
    return (f'<invoke name="{name}">\n' + "".join(f'<parameter name="{k}">{v}</parameter>\n' for k, v in params)
            + "</invoke>\n")


def block(*invokes: str) -> str:
    """As MiniMax writes (and its template renders) a call turn's calls: after a newline."""
    return "\n<minimax:tool_call>\n" + "".join(invokes) + "</minimax:tool_call>"


def parse_items(fmt, ids: list[int]) -> list[Item]:
    return family_render.turn_items(fmt, ids, TOOLS)


AGENT_TURN = ("\nThe tests first, in 東京's repo 🗼.\n</think>\n\nRunning them." + block(
    invoke("shell", ("command", '["pytest", "-q"]'), ("workdir", "/srv/app"), ("timeout_ms", "60000")),
    invoke("read_file", ("path", "pyproject.toml"))) + "[e~[")
AGENT_ITEMS = [("reasoning", None, "The tests first, in 東京's repo 🗼."), ("text", None, "Running them."),
               *AGENT_CALLS]


def test_block_markers_spelled_in_text_pieces_are_text(minimax_format, minimax_tokenizer):
    spelled = '<minimax:tool_call>\n<invoke name="shell">\n</invoke>\n</minimax:tool_call>'
    pieces = minimax_tokenizer._encode_without_added_tokens(spelled)
    assert not set(pieces) & set(KNOWN_IDS.values())
    assert CONTRACT.parse(minimax_format, [KNOWN_IDS["</think>"], *pieces]) == [("text", None, spelled)]


MALFORMED = [
    (block(invoke("no_such_tool", ("a", "b"))),
     [("text", None, '<invoke name="no_such_tool">\n<parameter name="a">b</parameter>\n</invoke>')]),
    ("<minimax:tool_call>" + invoke("read_file", ("path", "a")),  # no block end: the call stands
     [("tool_call", "read_file", '{"path": "a"}')]),
    ('<minimax:tool_call><invoke name="shell"><parameter name="workdir">/t',  # cut mid-value
     [("tool_call", "shell", '{"workdir": "/t"}')]),
    (('<minimax:tool_call><invoke name="shell"><parameter name="workdir">/a<parameter name="login">1</invoke>'
     "</minimax:tool_call>"), [("tool_call", "shell", '{"workdir": "/a", "login": true}')]),  # missing closes
    ('<minimax:tool_call><invoke name="she', [("text", None, '<invoke name="she')]),
    ("<minimax:tool_call>junk</minimax:tool_call>after", [("text", None, "after")]),  # junk in a block is dropped
    ("a</minimax:tool_call>b", [("text", None, "a</minimax:tool_call>b")]),  # a close out of a block: text
    ("done</think>more</think>", [("text", None, "done</think>more</think>")]),
]


FRAGMENTS = [*MARKUP, "<", "</", 'invoke name="', "shell", '">', "</invoke>", '<parameter name="workdir">',
             "</parameter>", "\n", " ", "5", "é", "東京", "x", "[1", "]"]


TYPED = [
    # (parameters as written, the call's arguments)
    ((("timeout_ms", "5"),), '{"timeout_ms": 5}'),
    ((("workdir", "5"),), '{"workdir": "5"}'),  # a string parameter stays text
    ((("command", '["a", "b c"]'),), '{"command": ["a", "b c"]}'),
    ((("login", "true"),), '{"login": true}'),
    ((("timeout_ms", "soon"),), '{"timeout_ms": "soon"}'),  # unparsable: its text
    ((("other", "[1, 2]"),), '{"other": "[1, 2]"}'),  # undeclared: verbatim text, as vLLM keeps it
    ((("workdir", " a\n"),), '{"workdir": " a\\n"}'),  # whitespace inside the tags is the value's
]
CASES = [
    Case("</think>" + block(invoke("shell", ("workdir", "/a b"), ("timeout_ms", "5"))),
         [("tool_call", "shell", '{"workdir": "/a b", "timeout_ms": 5}')], events=[
             ItemStarted(0, "tool_call", name="shell"), ItemDelta(0, "{"), ItemDelta(0, '"workdir": "/a b"'),
             ItemDelta(0, ', "timeout_ms": 5'), ItemDelta(0, "}"), ItemDone(0, '{"workdir": "/a b", "timeout_ms": 5}')],
         about="one-parameter-at-a-time"),
    Case("Read it." + block(invoke("read_file", ("path", "a"))),  # a call straight from reasoning ends it
         [("reasoning", None, "Read it."), ("tool_call", "read_file", '{"path": "a"}')], about="call-ends-reasoning"),
    *(Case("</think>" + block(invoke("shell", *params)), [("tool_call", "shell", arguments)], about=f"typed-{n}")
      for n, (params, arguments) in enumerate(TYPED)),
]

# The contract every family's parser keeps (tests/formats/test_family_contract.py checks it).
CONTRACT = OutputContract(
    "minimax", format="minimax_format", tokenizer="minimax_tokenizer", markup=MARKUP, tools=TOOLS,
    agent_turn=AGENT_TURN, agent_items=AGENT_ITEMS, malformed=MALFORMED, fragments=FRAGMENTS,
    split_turn=("</think>ok <" + block(invoke("shell", ("command", '["a"]'), ("workdir", "é/東京 x"))) + "[e~["),
    split_items=[("text", None, "ok <"), ("tool_call", "shell", '{"command": ["a"], "workdir": "é/東京 x"}')],
    prefix="</think>",
    examples=400,
    seed=17,
    stops=[EOS],
    cases=CASES,
)
