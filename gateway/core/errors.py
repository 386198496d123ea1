"""OpenAI-shaped errors.

Over HTTP the body is `{"error": {"message", "type", "param", "code"}}`; inside an SSE
stream the `error` event is flat; over WebSocket it is nested with a `status`.
"""

from __future__ import annotations

from typing import Any


class APIError(Exception):
    """An error the client should see, with an HTTP status and an OpenAI error type."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type
        self.code = code
        self.param = param
        self.retry_after = retry_after  # seconds, sent as Retry-After (Codex waits exactly that long)

    def error_object(self) -> dict[str, Any]:
        return {"message": self.message, "type": self.type, "param": self.param, "code": self.code}

    def http_body(self) -> dict[str, Any]:
        return {"error": self.error_object()}

    def headers(self) -> dict[str, str]:
        return {"retry-after": str(self.retry_after)} if self.retry_after is not None else {}


def invalid_request(message: str, *, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(message, status=400, param=param, code=code)


def context_length_exceeded(prompt_tokens: int, max_model_len: int, max_output: int) -> APIError:
    return APIError(
        f"This model's maximum context length is {max_model_len} tokens, but the request "
        f"needs {prompt_tokens} input tokens plus at least {max_output} output tokens.",
        status=400,
        code="context_length_exceeded",
        param="input",
    )


class UpstreamUnavailable(APIError):
    """No replica could take the request (nothing was generated yet)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status=503, type="server_error", code="upstream_unavailable", retry_after=1)


class UpstreamFailed(APIError):
    """A replica failed after the request was accepted (possibly mid-stream)."""

    def __init__(self, message: str, *, status: int = 502) -> None:
        super().__init__(message, status=status, type="server_error", code="upstream_error")


def shutting_down() -> APIError:
    return APIError("The gateway is shutting down; retry on another instance.", status=503, type="server_error",
                    code="server_shutting_down")
