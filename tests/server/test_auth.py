"""API keys: every model and state endpoint refuses a request without a valid key, in its
API's own error shape, before anything reaches a replica; the probes stay open.

The gateway runs with a key file (two tenants, one with two keys), a bare `--api-key`, an
admin key and a metrics key; each endpoint is called without a key, with a wrong one,
and with a right one, through raw HTTP, the openai SDK, the anthropic SDK and WebSocket.
"""

from __future__ import annotations

import hashlib
import logging

import anthropic
import httpx
import openai
import orjson
import pytest
from websockets.asyncio.client import connect

from gateway.core.settings import Settings
from gateway.server.app import create_app
from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import IM_END, ids
from tests.support.stack import fake_stack
from tests.support.waiting import async_wait_for

MODEL = "tiny-qwen3"
ALICE, ALICE_ROTATED, BOB, SOLO = "sk-alice-1", "sk-alice-2", "sk-bob-1", "sk-solo-1"
ADMIN, METRICS = "sk-admin", "sk-metrics"
GENERATE = "/inference/v1/generate"

OPENAI_MISSING = {"error": {"message": "Missing API key: send it as 'Authorization: Bearer KEY' or 'x-api-key: KEY'.",
                            "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}}
OPENAI_WRONG = {"error": {"message": "Incorrect API key provided.", "type": "invalid_request_error", "param": None,
                          "code": "invalid_api_key"}}
ANTHROPIC_WRONG = {"type": "error", "error": {"type": "authentication_error",
                                              "message": "Incorrect API key provided."}}

RESPONSES = {"model": MODEL, "input": "hi"}
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
MESSAGES = {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}

# method, path, body, the status a right key gets (the gateway answers, whatever it is)
ENDPOINTS = [
    ("POST", "/v1/responses", RESPONSES, 200),
    ("POST", "/v1/responses", {**RESPONSES, "stream": True}, 200),
    ("POST", "/v1/chat/completions", CHAT, 200),
    ("POST", "/v1/chat/completions", {**CHAT, "stream": True}, 200),
    ("POST", "/v1/messages", MESSAGES, 200),
    ("POST", "/v1/messages", {**MESSAGES, "stream": True}, 200),
    ("POST", "/v1/messages/count_tokens", MESSAGES, 200),
    ("GET", "/v1/models", None, 200),
    ("GET", "/v1/rollouts", None, 200),
    ("GET", "/v1/rollouts/ep-1", None, 404),
    ("DELETE", "/v1/rollouts/ep-1", None, 404),
    ("GET", "/v1/nowhere", None, 404),  # routes are not told apart before the key is checked
]


@pytest.fixture(scope="module")
def stack(qwen_tokenizer_dir, tmp_path_factory):
    keys = tmp_path_factory.mktemp("keys") / "keys"
    keys.write_text(f"# key tenant\n{ALICE} alice\n{ALICE_ROTATED} alice  # rotated in\n\n{BOB} bob\n")
    with fake_stack(qwen_tokenizer_dir, served_model_name=MODEL, api_keys=[SOLO], api_key_file=str(keys),
                    admin_key=ADMIN, metrics_key=METRICS) as stack:
        yield stack


def call(url: str, method: str, path: str, body: dict | None, headers: dict | None = None) -> httpx.Response:
    return httpx.request(method, url + path, json=body, headers=headers, timeout=30)


@pytest.mark.parametrize(("method", "path", "body", "status"), ENDPOINTS)
def test_every_endpoint_needs_a_valid_key(stack, fake, tokenizer, method, path, body, status):
    anthropic_shape = path.startswith("/v1/messages")
    for headers in (None, {"Authorization": "Bearer sk-wrong"}, {"x-api-key": "sk-wrong"},
                    {"Authorization": f"Basic {ALICE}"}, {"Authorization": "Bearer"}):
        refused = call(stack.url, method, path, body, headers)
        assert refused.status_code == 401, (headers, refused.text)
        assert refused.headers["www-authenticate"] == "Bearer"
        wrong = headers is not None and "sk-wrong" in str(headers.values())
        if anthropic_shape:
            assert refused.json()["type"] == "error"
            assert refused.json()["error"]["type"] == "authentication_error"
            assert refused.json() == ANTHROPIC_WRONG or not wrong
        else:
            assert refused.json() == (OPENAI_WRONG if wrong else OPENAI_MISSING)
    assert fake.requests == []  # nothing reached a replica
    for headers in ({"Authorization": f"Bearer {ALICE}"}, {"x-api-key": BOB}, {"authorization": f"bearer {SOLO}"},
                    {"Authorization": f"Bearer {ADMIN}"}, {"x-api-key": ALICE_ROTATED}):
        fake.queue(Script(ids(tokenizer, "Hello.") + [IM_END]))
        answered = call(stack.url, method, path, body, headers)
        assert answered.status_code == status, (headers, answered.text)


def test_probes_stay_open_and_metrics_need_their_key(stack):
    for path in ("/health", "/ready", "/live"):
        assert httpx.get(stack.url + path).status_code == 200
    assert httpx.get(stack.url + "/metrics").json() == OPENAI_MISSING
    assert httpx.get(stack.url + "/metrics", headers={"Authorization": f"Bearer {ALICE}"}).status_code == 401
    for key in (METRICS, ADMIN):
        scraped = httpx.get(stack.url + "/metrics", headers={"Authorization": f"Bearer {key}"})
        assert scraped.status_code == 200 and "gateway_auth_refused_requests" in scraped.text


def tenants_logged(caplog) -> list[tuple[str, str | None]]:
    return [(r.fields["api"], r.fields.get("tenant")) for r in caplog.records if r.name == "gateway.access"]


def test_the_openai_sdk_with_a_key(stack, fake, tokenizer, caplog):
    fake.queue(Script(ids(tokenizer, "Hello.") + [IM_END]), Script(ids(tokenizer, "Hi.") + [IM_END]))
    client = openai.OpenAI(base_url=stack.url + "/v1", api_key=ALICE, max_retries=0)
    with caplog.at_level(logging.INFO, logger="gateway.access"):
        assert client.responses.create(model=MODEL, input="hi").output_text == "Hello."
        assert client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}]
                                              ).choices[0].message.content == "Hi."
    assert tenants_logged(caplog) == [("responses_http", "alice"), ("chat", "alice")]  # whose requests they were
    with pytest.raises(openai.AuthenticationError) as refused:
        openai.OpenAI(base_url=stack.url + "/v1", api_key="sk-wrong", max_retries=0).models.list()
    assert refused.value.code == "invalid_api_key" and refused.value.status_code == 401
    assert len(fake.requests) == 2


def test_the_anthropic_sdk_with_x_api_key(stack, fake, tokenizer):
    fake.queue(Script(ids(tokenizer, "Hello there") + [IM_END]))
    client = anthropic.Anthropic(base_url=stack.url, api_key=BOB, max_retries=0)
    message = client.messages.create(model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}])
    assert message.content[0].text == "Hello there"
    with pytest.raises(anthropic.AuthenticationError) as refused:
        anthropic.Anthropic(base_url=stack.url, api_key="sk-wrong", max_retries=0).messages.create(
            model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}])
    assert refused.value.status_code == 401
    assert refused.value.body == ANTHROPIC_WRONG
    assert len(fake.requests) == 1


async def test_a_websocket_without_a_valid_key_gets_an_error_event_then_1008(stack, fake, tokenizer):
    url = stack.url.replace("http://", "ws://") + "/v1/responses"
    for headers, expected in (({}, OPENAI_MISSING), ({"Authorization": "Bearer sk-wrong"}, OPENAI_WRONG)):
        async with connect(url, additional_headers=headers) as ws:
            event = orjson.loads(await ws.recv())
            assert event == {"type": "error", "status": 401, "error": expected["error"]}
            await ws.wait_closed()
            assert ws.close_code == 1008 and ws.close_reason == "invalid_api_key"
    fake.queue(Script(ids(tokenizer, "Hello.") + [IM_END]))
    async with connect(url, additional_headers={"Authorization": f"Bearer {ALICE}"}) as ws:
        await ws.send(orjson.dumps({"type": "response.create", **RESPONSES}).decode())
        while (event := orjson.loads(await ws.recv()))["type"] != "response.completed":
            assert event["type"] != "error", event
    assert len(fake.requests) == 1


async def test_the_openai_sdk_websocket_mode_with_a_key(stack, fake, tokenizer, caplog):
    fake.queue(Script(ids(tokenizer, "Hello.") + [IM_END]))
    client = openai.AsyncOpenAI(base_url=stack.url + "/v1", api_key=BOB, max_retries=0)
    with caplog.at_level(logging.INFO, logger="gateway.access"):
        async with client.responses.connect() as conn:
            await conn.response.create(model=MODEL, input="hi")
            async for event in conn:
                if event.type == "response.completed":
                    assert event.response.output_text == "Hello."
                    break
                assert event.type != "error", event
        await async_wait_for(lambda: tenants_logged(caplog) == [("responses_ws", "bob")])


def test_keys_are_never_logged_only_their_fingerprints(qwen_tokenizer_dir, tmp_path, caplog):
    keys = tmp_path / "keys"
    keys.write_text(f"{ALICE} alice\n")
    with caplog.at_level(logging.DEBUG):
        create_app(Settings(model=str(qwen_tokenizer_dir), upstreams=["http://127.0.0.1:9"], api_keys=[SOLO],
                            api_key_file=str(keys), admin_key=ADMIN, metrics_key=METRICS, host="0.0.0.0"))
    text = caplog.text
    assert all(key not in text for key in (ALICE, SOLO, ADMIN, METRICS))
    solo = hashlib.sha256(SOLO.encode()).hexdigest()[:12]
    assert f"API key {solo}: tenant {solo}" in text  # a bare key's tenant is its fingerprint
    assert "tenant alice" in text and "tenant admin (admin)" in text
    assert "no API key is configured" not in text
    assert all(key not in repr(Settings(model="m", api_keys=[SOLO], admin_key=ADMIN)) for key in (SOLO, ADMIN))


@pytest.mark.parametrize(("host", "warned"), [("0.0.0.0", True), ("10.1.2.3", True), ("127.0.0.1", False),
                                              ("localhost", False), ("::1", False)])
def test_an_open_gateway_on_a_non_loopback_address_warns(qwen_tokenizer_dir, caplog, host, warned):
    with caplog.at_level(logging.WARNING):
        create_app(Settings(model=str(qwen_tokenizer_dir), upstreams=["http://127.0.0.1:9"], host=host))
    assert ("no API key is configured" in caplog.text) is warned


@pytest.mark.parametrize("line", ["k1 alice extra", "k1 al:ice", "k1 " + "a" * 65])
def test_a_malformed_key_file_is_refused_at_start(qwen_tokenizer_dir, tmp_path, line):
    keys = tmp_path / "keys"
    keys.write_text(f"k0 fine\n{line}\n")
    with pytest.raises(ValueError, match=r"keys:2: expected 'KEY' or 'KEY TENANT'"):
        create_app(Settings(model=str(qwen_tokenizer_dir), upstreams=["http://127.0.0.1:9"],
                            api_key_file=str(keys)))
    keys.write_text("# only a comment\n\n")
    with pytest.raises(ValueError, match="holds no API key"):  # an empty Secret must not open the gateway
        create_app(Settings(model=str(qwen_tokenizer_dir), upstreams=["http://127.0.0.1:9"],
                            api_key_file=str(keys)))
    with pytest.raises(ValueError, match="cannot read"):
        create_app(Settings(model=str(qwen_tokenizer_dir), upstreams=["http://127.0.0.1:9"],
                            api_key_file=str(tmp_path / "absent")))


def test_keys_from_the_environment_and_flags(monkeypatch):
    from gateway.ops._flags import build_parser, settings_from_args

    monkeypatch.setenv("GATEWAY_API_KEY", "sk-env")
    monkeypatch.setenv("GATEWAY_API_KEYS", "sk-a, sk-b,")
    monkeypatch.setenv("GATEWAY_API_KEY_FILE", "/run/secrets/keys")
    monkeypatch.setenv("GATEWAY_ADMIN_KEY", "sk-root")
    args = build_parser().parse_args(["serve", "--upstream", "http://u", "--model", "m", "--api-key", "sk-flag",
                                      "--metrics-key", "sk-scrape", "--tenant-tokens-per-minute", "1000"])
    settings = settings_from_args(args, model="m", upstreams=["http://u"])
    assert settings.api_keys == ["sk-env", "sk-a", "sk-b", "sk-flag"]
    assert (settings.api_key_file, settings.admin_key, settings.metrics_key) == (
        "/run/secrets/keys", "sk-root", "sk-scrape")
    assert (settings.tenant_tokens_per_minute, settings.tenant_max_concurrent_requests) == (1000, None)
