"""Debian's real Chromium, headless, driven over its DevTools protocol with `websockets`.

    async with headless_chromium(tmp_path) as page:
        await page.open(url + "/status")
        rows = await page.evaluate("document.querySelectorAll('tr').length")
        assert page.console_errors == []
        await page.screenshot(path)

No browser download and no driver: the `chromium` package (scripts/bootstrap.sh installs it)
started with a fresh profile and the flags that keep it off the network (this machine reaches
nothing, and a Chromium that tries resolves Google's hosts at every start), `--remote-debugging-port=0`
and the port it picked read from its profile's DevToolsActivePort. `console_errors` collects
what a person would see in the console as errors: console.error calls, uncaught exceptions,
and the browser's own error log (a resource that failed to load, a CSP refusal).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import os
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import websockets

from tests.support.waiting import DEADLINE, PROCESS_START

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--mute-audio", "--hide-scrollbars",
         "--remote-allow-origins=*")


def chromium_path() -> str | None:
    """$GATEWAY_CHROMIUM, else Debian's `chromium` on the PATH."""
    return os.environ.get("GATEWAY_CHROMIUM") or shutil.which("chromium")


class Page:
    """One tab: commands by id, events gathered as they come."""

    def __init__(self, socket: Any) -> None:
        self.socket = socket
        self.console_errors: list[str] = []
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future] = {}
        self._events: dict[str, asyncio.Event] = {}
        self._reader = asyncio.create_task(self._read())

    async def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        number = next(self._ids)
        answer = self._waiting[number] = asyncio.get_running_loop().create_future()
        await self.socket.send(orjson.dumps({"id": number, "method": method, "params": params or {}}).decode())
        message = await asyncio.wait_for(answer, DEADLINE)
        if "error" in message:
            raise RuntimeError(f"{method}: {message['error']}")
        return message["result"]

    async def open(self, url: str) -> None:
        """Navigate and wait for the load event."""
        loaded = self._events["Page.loadEventFired"] = asyncio.Event()
        await self.send("Page.navigate", {"url": url})
        await asyncio.wait_for(loaded.wait(), DEADLINE)

    async def evaluate(self, expression: str) -> Any:
        result = await self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                      "awaitPromise": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def screenshot(self, path: Path) -> bytes:
        data = base64.b64decode((await self.send("Page.captureScreenshot", {"format": "png"}))["data"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return data

    async def _read(self) -> None:
        async for raw in self.socket:
            message = orjson.loads(raw)
            if "id" in message:
                if (future := self._waiting.pop(message["id"], None)) is not None and not future.done():
                    future.set_result(message)
                continue
            method, params = message.get("method", ""), message.get("params", {})
            self._note_error(method, params)
            if (event := self._events.get(method)) is not None:
                event.set()

    def _note_error(self, method: str, params: dict[str, Any]) -> None:
        if method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
            self.console_errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params["args"]))
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.console_errors.append(details.get("exception", {}).get("description") or details["text"])
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            entry = params["entry"]
            self.console_errors.append(f"{entry['source']}: {entry['text']} {entry.get('url', '')}".strip())


@contextlib.asynccontextmanager
async def headless_chromium(profile: Path, *, width: int = 1440, height: int = 1000) -> AsyncIterator[Page]:
    """A Chromium with a fresh profile under `profile`, and its one tab with the console, the
    runtime and the page domains on; stopped at exit."""
    binary = chromium_path()
    assert binary, "no chromium (apt-get install chromium, or set GATEWAY_CHROMIUM)"
    profile.mkdir(parents=True, exist_ok=True)
    (profile / "DevToolsActivePort").unlink(missing_ok=True)  # a profile used before: its port is stale
    command = [binary, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
               f"--window-size={width},{height}", "about:blank"]
    log = (profile / "chromium.log").open("wb")
    process = await asyncio.create_subprocess_exec(*command, stdout=log, stderr=subprocess.STDOUT,
                                                   start_new_session=True)
    try:
        port = await _devtools_port(profile / "DevToolsActivePort", process)
        async with httpx.AsyncClient() as client:
            targets = (await client.get(f"http://127.0.0.1:{port}/json/list")).json()
        [target] = [t for t in targets if t["type"] == "page"]
        async with websockets.connect(target["webSocketDebuggerUrl"], max_size=64 << 20) as socket:
            page = Page(socket)
            for domain in ("Page", "Runtime", "Log"):
                await page.send(f"{domain}.enable")
            try:
                yield page
            finally:
                page._reader.cancel()
    finally:  # the browser and its renderers: the process group it leads
        os.killpg(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
        log.close()


async def _devtools_port(path: Path, process: asyncio.subprocess.Process) -> int:
    """The port Chromium chose, from the file it writes once DevTools listens."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + PROCESS_START
    while not (path.exists() and path.read_text().strip()):
        assert process.returncode is None, f"chromium exited with {process.returncode}: see {path.parent}/chromium.log"
        assert loop.time() < deadline, "chromium did not open its DevTools port"
        await asyncio.sleep(0.1)
    return int(path.read_text().split()[0])
