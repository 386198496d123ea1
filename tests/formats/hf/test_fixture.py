"""The Qwen3 tokenizer fixture: real vocabulary, Qwen3's added-token ids, the Qwen3 template."""

from __future__ import annotations

import json
import subprocess
import sys

from gateway.ops.qwen_tokenizer import QWEN3_ADDED_TOKENS

QWEN3_IDS = {
    "<|endoftext|>": 151643,
    "<|im_start|>": 151644,
    "<|im_end|>": 151645,
    "<|video_pad|>": 151656,
    "<tool_call>": 151657,
    "</tool_call>": 151658,
    "<|fim_prefix|>": 151659,
    "<|file_sep|>": 151664,
    "<tool_response>": 151665,
    "</tool_response>": 151666,
    "<think>": 151667,
    "</think>": 151668,
}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]

# What Qwen3-8B's own chat template renders for this conversation (hand-checked).
EXPECTED_WITH_TOOLS = (
    "<|im_start|>system\nYou are terse.\n\n# Tools\n\n"
    "You may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    '{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", '
    '"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}\n'
    "</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
    "<|im_start|>user\nOld question<|im_end|>\n"
    "<|im_start|>assistant\nOld answer<|im_end|>\n"
    "<|im_start|>user\nWeather in Paris and Rome?<|im_end|>\n"
    "<|im_start|>assistant\n<think>\nTwo cities, two calls.\n</think>\n\n"
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_weather", "arguments": {"city":"Rome"}}\n</tool_call><|im_end|>\n'
    "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n"
    "<tool_response>\nrainy\n</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
)

MESSAGES_WITH_TOOLS = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Old question"},
    # Reasoning before the last real query is dropped.
    {"role": "assistant", "content": "Old answer", "reasoning_content": "old thoughts"},
    {"role": "user", "content": "Weather in Paris and Rome?"},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "\nTwo cities, two calls.\n",
        "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'}},
        ],
    },
    {"role": "tool", "content": "sunny"},
    {"role": "tool", "content": "rainy"},
]


def test_hello_world_and_added_token_ids(qwen_tokenizer):
    assert qwen_tokenizer.encode("Hello world") == [9707, 1879]
    assert len(qwen_tokenizer) == 151669
    for token, token_id in QWEN3_IDS.items():
        assert qwen_tokenizer.convert_tokens_to_ids(token) == token_id
    decoder = qwen_tokenizer.added_tokens_decoder
    assert [(decoder[151643 + i].content, decoder[151643 + i].special) for i in range(26)] == QWEN3_ADDED_TOKENS


def test_config_matches_qwen3(qwen_tokenizer_dir, qwen_tokenizer):
    assert qwen_tokenizer.eos_token == "<|im_end|>" and qwen_tokenizer.eos_token_id == 151645
    assert qwen_tokenizer.pad_token == "<|endoftext|>" and qwen_tokenizer.pad_token_id == 151643
    assert qwen_tokenizer.bos_token is None
    config = json.loads((qwen_tokenizer_dir / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "Qwen2Tokenizer"
    assert config["added_tokens_decoder"]["151667"]["special"] is False
    assert config["added_tokens_decoder"]["151645"]["special"] is True
    assert "generation_config.json" not in {p.name for p in qwen_tokenizer_dir.iterdir()}
    # Qwen's normalizer: NFC, so a decomposed "é" encodes like the composed one.
    assert qwen_tokenizer.encode("e\u0301") == qwen_tokenizer.encode("\u00e9")


def test_loads_offline_in_a_fresh_process(qwen_tokenizer_dir):
    code = (
        "import sys; from transformers import AutoTokenizer;"
        "t = AutoTokenizer.from_pretrained(sys.argv[1]);"
        "print(t.encode('Hello world'), t.convert_tokens_to_ids('</think>'))"
    )
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": ""}
    out = subprocess.run([sys.executable, "-c", code, str(qwen_tokenizer_dir)], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[9707, 1879] 151668"


def test_chat_template_renders_qwen3_text(qwen_tokenizer):
    text = qwen_tokenizer.apply_chat_template(
        MESSAGES_WITH_TOOLS, tools=TOOLS, tokenize=False, add_generation_prompt=True
    )
    assert text == EXPECTED_WITH_TOOLS


def test_chat_template_thinking_switch_and_plain_system(qwen_tokenizer):
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]
    off = qwen_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                             enable_thinking=False)
    assert off == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n" \
                  "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    # The final assistant turn after the query always gets a think block, even an empty one.
    done = qwen_tokenizer.apply_chat_template(messages + [{"role": "assistant", "content": "\nA"}], tokenize=False)
    assert done.endswith("<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nA<|im_end|>\n")


def test_template_tokens_match_qwen3_markup(qwen_tokenizer):
    ids = qwen_tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], tokenize=True, add_generation_prompt=True, return_dict=False
    )
    assert ids == [151644, 872, 198, 13048, 151645, 198, 151644, 77091, 198]
