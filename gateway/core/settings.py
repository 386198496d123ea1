"""Gateway settings: one dataclass, filled from CLI flags or GATEWAY_* environment variables."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Settings"]


@dataclass
class Settings:
    model: str  # local dir or hub id: tokenizer, chat template, generation_config
    upstreams: list[str] = field(default_factory=list)
    tokenizer: str | None = None
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    upstream_api: str = "auto"  # auto | generate | completions
    chat_format: str = "auto"  # auto | harmony | hf
    reasoning_parser: str = "auto"  # auto | qwen3 | none
    tool_parser: str = "auto"  # auto | hermes | qwen3_coder | qwen3_xml | none (vLLM's names)
    health_interval: float = 5.0  # seconds between health checks of a routable replica
    health_backoff_max: float = 30.0  # cap of the retry backoff of a failing replica
    # Outlier detection (gateway/upstream/outlier.py), named after Envoy's.
    outlier_consecutive_failures: int = 5  # failed requests in a row that eject a replica (0: never)
    outlier_failure_percentage: float = 50.0  # failed share of an interval's requests that ejects (0: never)
    outlier_failure_request_volume: int = 20  # requests in an interval before the percentage counts
    outlier_interval: float = 10.0  # seconds: the failure-rate window and the ejection count's decay
    outlier_base_ejection_time: float = 10.0  # seconds out after an ejection, × the replica's ejection count
    outlier_max_ejection_time: float = 300.0
    outlier_max_ejection_percent: float = 50.0  # of the pool outlier detection may eject at once
    resolve_interval: float = 10.0  # seconds between DNS lookups of hostname upstreams (0: once)
    # Routing (gateway/upstream/router.py): prefix | session | least-loaded | round-robin.
    routing: str = "prefix"
    routing_load_factor: float = 1.25  # a replica over this × the mean load takes no more while others have room
    prefix_block_tokens: int = 16  # prompt chunk the prefix index keys; must divide the replicas' --block-size
    kv_events: list[str] = field(default_factory=list)  # `[UPSTREAM=]tcp://{host}:5557[,tcp://{host}:5558]`
    replica_metrics_interval: float = 1.0  # seconds between reads of each replica's /metrics (0: never)
    # Prefill/decode disaggregation (gateway/upstream/disaggregation.py), with `prefill=`/`decode=` upstreams.
    pd_min_new_tokens: int = 1024  # split a turn only when this many of its prompt tokens are new to its replica
    pd_prefill_timeout: float = 60.0  # seconds a prefill leg may take before the decode replica prefills alone
    drain_timeout: float = 30.0  # on SIGTERM, how long in-flight streams may run on
    max_body_bytes: int = 64 * 1024 * 1024
    max_image_bytes: int = 20 * 1024 * 1024  # per image (413 beyond)
    max_images: int = 32  # per request
    max_image_pixels: int = 8192 * 8192  # per image
    allow_image_urls: bool = False  # pass http(s) image URLs on for vLLM to fetch (never fetched here)
    log_level: str = "info"
    max_websocket_connections: int = 100
    websocket_lifetime: float = 3600.0  # seconds a WebSocket connection may stay open
    websocket_warning: float = 3300.0  # when `connection_expiring` warns of the end
    rollout_max_tokens: int = 20_000_000  # tokens all rollouts may hold (~13 bytes each); LRU beyond
    rollout_ttl: float = 3600.0  # seconds a rollout lives without a call or export
    tool_grammars: bool = True  # enforce custom tools' grammars on their input (vLLM structured outputs)
    return_tokens_as_token_ids: bool = False  # vLLM's flag: logprobs name tokens "token_id:N" unless asked not to
    responses_spec: str = "openai"  # openai | open-responses: whose names where the two specs differ
    reasoning_secret: str | None = None  # HMAC key of reasoning blobs; None: random per process
    upstream_idle_timeout: float = 300.0  # seconds a generation may go without a byte from its replica
    upstream_header_timeout: float = 30.0  # seconds a replica may take to accept a generation (headers)
    request_body_timeout: float = 30.0  # seconds a client may take to send its request body
    header_timeout: float = 10.0  # seconds a client may take to send a request's headers (slowloris)
    client_write_timeout: float = 60.0  # seconds a WebSocket send may wait on a client that does not read
    max_concurrent_requests: int | None = None  # model requests in flight, beyond which 429; None: no limit
    max_queued_requests: int = 0  # requests that wait for a slot at the limit (by tier and session) before 429s
    state_url: str | None = None  # redis://… | rediss://… | unix://…: state shared by processes; None: in process
    state_key_prefix: str = "gw:"  # namespaces the shared store's keys (several gateways on one Redis)
    # Remote MCP tools (`{"type": "mcp"}`), run by the gateway: only servers under these URL prefixes.
    mcp_allowed_urls: list[str] = field(default_factory=list)
    mcp_timeout: float = 30.0  # seconds one listing or call may take, connecting included
    mcp_max_output_bytes: int = 1 << 20  # a call's output the model may be shown; beyond, the call fails
    mcp_max_calls: int = 16  # MCP calls one response may make when its request sets no max_tool_calls
    # Who may use it (gateway/server/auth.py): none configured, the gateway is open.
    api_keys: list[str] = field(default_factory=list, repr=False)  # each its own tenant (its fingerprint)
    api_key_file: str | None = None  # `KEY [TENANT]` per line
    admin_key: str | None = field(default=None, repr=False)  # sees every tenant's state
    metrics_key: str | None = field(default=None, repr=False)  # /metrics needs it (or the admin key); None: open
    # Per-tenant limits (gateway/server/tenant_limits.py); None: no limit.
    tenant_max_concurrent_requests: int | None = None
    tenant_tokens_per_minute: int | None = None
    tenant_limits: str | None = None  # file: `TENANT concurrent=N tokens_per_minute=N` per line
    # Traces (gateway/server/tracing.py): OTLP export on when an endpoint is set (here or OTEL_*).
    otlp_traces_endpoint: str | None = None
    otlp_traces_capture_content: bool = False  # prompt and output text on spans (privacy: off)
    # The fleet's control plane (gateway/upstream/control.py): vLLM's RL and dev endpoints fanned out.
    server_dev_mode: bool = False  # serve them (as vLLM's VLLM_SERVER_DEV_MODE=1); admin key only with keys
    control_timeout: float = 300.0  # seconds a replica may take to answer one control call
    update_barrier_timeout: float = 120.0  # seconds a new generation waits for a paused fleet to resume
    cache_salt_by_weight_version: bool = False  # a generation without cache_salt gets its replica's weight version
    partial_rollouts: bool = False  # generate calls an abort pause cuts are resumed after /resume (when exact)

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model
