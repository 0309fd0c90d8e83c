"""Headless Chromium for the page's tests, driven over the DevTools protocol with `websockets`
(a dependency already): no WebDriver, no other package. A recording is its microphone
(Chromium's fake capture device reads a WAV file, once, in real time)."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
MISSING = (
    "no Chromium found (chromium, chromium-browser or google-chrome on PATH): "
    "install it with `apt-get install -y chromium` (make test and .ci/run do)"
)


def find_chromium() -> str | None:
    """The browser's executable, or None."""
    return next((path for name in NAMES if (path := shutil.which(name))), None)


class BrowserError(Exception):
    """The page threw, or what a test waited for did not come."""


class Browser:
    """One headless Chromium with one tab; `microphone` (a WAV file) is its audio input."""

    def __init__(self, executable: str, microphone: Path | None = None) -> None:
        self.profile = Path(tempfile.mkdtemp(prefix="as2d-chromium-"))
        args = [
            executable, "--headless=new", "--no-sandbox", "--disable-gpu",
            "--no-first-run", "--no-default-browser-check", "--mute-audio",
            f"--user-data-dir={self.profile}", "--remote-debugging-port=0",
            "--window-size=1000,900", "--autoplay-policy=no-user-gesture-required",
            "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
        ]  # fmt: skip
        if microphone is not None:  # %noloop: played once, then silence
            args.append(f"--use-file-for-fake-audio-capture={microphone}%noloop")
        self.process = subprocess.Popen(
            [*args, "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.ids = itertools.count(1)
        self.stack = ExitStack()
        self.ws = self._connect()

    def _connect(self) -> ClientConnection:
        """The tab's DevTools socket, once the browser has written its port."""
        port_file, deadline = self.profile / "DevToolsActivePort", time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text().strip():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise BrowserError("Chromium did not start")
            time.sleep(0.1)
        port = port_file.read_text().split()[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list") as response:
            tabs = [t for t in json.load(response) if t["type"] == "page"]
        return self.stack.enter_context(connect(tabs[0]["webSocketDebuggerUrl"], max_size=None))

    def close(self) -> None:
        self.stack.close()
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; its result (events that come meanwhile are dropped)."""
        number = next(self.ids)
        self.ws.send(json.dumps({"id": number, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv(timeout=120))
            if message.get("id") == number:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))

    def open(self, url: str) -> None:
        """Loads `url` and waits for the page's scripts to have run."""
        self.call("Page.navigate", url=url)
        self.wait("document.readyState === 'complete' && window.as2dPage !== undefined")

    def js(self, expression: str) -> Any:
        """The value of `expression` in the page (promises awaited)."""
        result = self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait(self, expression: str, timeout: float = 60.0) -> Any:
        """Polls `expression` until it is truthy; its value."""
        deadline = time.monotonic() + timeout
        while not (value := self.js(expression)):
            if time.monotonic() > deadline:
                raise BrowserError(f"waited {timeout:g} s for {expression}")
            time.sleep(0.1)
        return value

    def text(self, selector: str) -> str:
        return str(self.js(f"document.querySelector({json.dumps(selector)}).innerText"))

    def click(self, selector: str) -> None:
        self.js(f"document.querySelector({json.dumps(selector)}).click()")

    def choose_file(self, selector: str, path: Path) -> None:
        """What picking `path` in the file input does (its change event fires)."""
        root = self.call("DOM.getDocument")["root"]["nodeId"]
        node = self.call("DOM.querySelector", nodeId=root, selector=selector)["nodeId"]
        self.call("DOM.setFileInputFiles", nodeId=node, files=[str(path)])

    def screenshot(self, path: Path) -> None:
        """The page down to the end of its content, as a PNG at `path`."""
        import base64

        height = int(self.js("Math.ceil(document.body.lastElementChild.getBoundingClientRect()"
                             ".bottom + window.scrollY + 16)"))  # fmt: skip
        self.call("Emulation.setScrollbarsHidden", hidden=True)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=1000, height=min(height, 4000), deviceScaleFactor=1, mobile=False,
        )  # fmt: skip
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        self.call("Emulation.clearDeviceMetricsOverride")
