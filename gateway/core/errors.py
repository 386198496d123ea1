"""OpenAI-shaped errors.

Over HTTP the body is `{"error": {"message", "type", "param", "code"}}`; inside an SSE
stream the `error` event is flat; over WebSocket it is nested with a `status`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["APIError", "UpstreamFailed", "UpstreamRejected", "UpstreamUnavailable", "context_length_exceeded",
           "invalid_request", "shutting_down"]


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


def context_length_exceeded(prompt_tokens: int, max_model_len: int, max_output: int, *,
                            at_least: bool = False) -> APIError:
    """`at_least`: `prompt_tokens` is a lower bound (the text's length), not the rendered count."""
    return APIError(
        f"This model's maximum context length is {max_model_len} tokens, but the request "
        f"needs {'at least ' if at_least else ''}{prompt_tokens} input tokens plus at least {max_output} output tokens.",
        status=400,
        code="context_length_exceeded",
        param="input",
    )


class UpstreamError(APIError):
    """A replica's failure: the client reads a stable `message`; `str()` is the `detail` (the
    replica's URL, what it said, the exception), which goes to the log with the request id."""

    def __init__(self, detail: str, *, message: str, status: int, code: str,
                 type: str = "server_error", retry_after: int | None = None) -> None:
        super().__init__(message, status=status, type=type, code=code, retry_after=retry_after)
        self.detail = detail

    def __str__(self) -> str:
        return self.detail


class UpstreamUnavailable(UpstreamError):
    """No replica could take the request (nothing was generated yet)."""

    def __init__(self, detail: str, *, timed_out: bool = False) -> None:
        super().__init__(detail, message="No model server could take the request; retry shortly."
                         if not timed_out else "The model server did not answer in time; retry shortly.",
                         status=503 if not timed_out else 504,
                         code="upstream_unavailable" if not timed_out else "upstream_timeout", retry_after=1)


class UpstreamFailed(UpstreamError):
    """A replica failed after the request was accepted (possibly mid-stream)."""

    def __init__(self, detail: str, *, status: int = 502, timed_out: bool = False) -> None:
        super().__init__(detail, message="The model server stopped sending tokens." if timed_out else
                         "The model server failed while generating.", status=504 if timed_out else status,
                         code="upstream_timeout" if timed_out else "upstream_error")


class UpstreamRejected(UpstreamFailed):
    """A replica answered 400 to the request: a bad request, told as one, with the replica's reason."""

    def __init__(self, detail: str, reason: str) -> None:
        super().__init__(detail, status=400)
        self.type, self.code = "invalid_request_error", "upstream_rejected"
        self.message = f"The model server rejected the request: {reason}"


def shutting_down() -> APIError:
    return APIError("The gateway is shutting down; retry on another instance.", status=503, type="server_error",
                    code="server_shutting_down")
