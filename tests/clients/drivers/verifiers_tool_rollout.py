"""One verifiers (0.3.1) ToolEnv rollout through the gateway, run by the RL clients' own
python (scripts/install-rl-clients.sh): prints the rollout's output as JSON.

    python verifiers_tool_rollout.py GATEWAY_URL MODEL CLIENT_TYPE
"""

import asyncio
import json
import os
import sys

import verifiers as vf
from datasets import Dataset
from verifiers.legacy.clients import resolve_client


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return a + b


async def rollout(url: str, model: str, client_type: str) -> dict:
    dataset = Dataset.from_list([{"question": "What is 2+3? Use the add tool.", "answer": "5"}])
    env = vf.ToolEnv(tools=[add], dataset=dataset, eval_dataset=dataset, max_turns=4)
    config = vf.ClientConfig(client_type=client_type, api_base_url=url + "/v1", api_key_var="GATEWAY_API_KEY",
                             max_retries=0, timeout=120)
    # prime-rl's orchestrator asks for the ids this way: logprobs and vLLM's return_token_ids
    sampling = {"max_tokens": 64, "temperature": 1.0, "logprobs": True, "extra_body": {"return_token_ids": True}}
    [example] = env._get_eval_inputs(1, 1)
    state = await env.rollout(example, resolve_client(config), model, sampling)
    return {"trajectory": [{"tokens": dict(step["tokens"])} for step in state["trajectory"]],
            "completion": [message.model_dump() if hasattr(message, "model_dump") else message
                           for message in state["completion"]]}


def main() -> None:
    url, model, client_type = sys.argv[1:4]
    os.environ.setdefault("GATEWAY_API_KEY", "unused")
    print(json.dumps([asyncio.run(rollout(url, model, client_type))], default=str))


if __name__ == "__main__":
    main()
