"""`serve --dashboard` in headless Chromium, live: the page is open while Jobs are submitted;
one appears, is admitted and, selected, is drawn in the domains its Workload's status names;
another stays pending and shows the reason written on it and where it came nearest. The
browser is driven over the DevTools protocol (aiohttp's websocket client), so the page keeps
its one event stream the whole time.

TOPOGATE_SAVE_SCREENSHOT=1 also copies the screenshot to docs/images/dashboard.png (the one
docs/deploy.md shows)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests import test_e2e
from tests.cluster import eventually
from tests.kit import written_domains
from tests.test_e2e import BLOCK, HOST, RACK, Pool, Serve, condition, job, submit
from tests.test_topologyview import CHROMIUM, _needs_chromium, _png_pixels
from topogate.testing.controlplane import free_port

pytestmark = pytest.mark.cluster

cluster = test_e2e.cluster
pool = test_e2e.pool
serve = test_e2e.serve

ROOT = Path(__file__).resolve().parent.parent
SCREENSHOT = ROOT / "docs" / "images" / "dashboard.png"


class Page:
    """One Chromium tab over the DevTools protocol: evaluate script, take a screenshot."""

    def __init__(self, socket: aiohttp.ClientWebSocketResponse) -> None:
        self.socket = socket
        self.ids = itertools.count(1)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        number = next(self.ids)
        await self.socket.send_json({"id": number, "method": method, "params": params})
        async with asyncio.timeout(30):
            while True:
                message = await self.socket.receive_json()
                if message.get("id") == number:
                    assert "error" not in message, message
                    result: dict[str, Any] = message["result"]
                    return result

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    async def until(self, expression: str, seconds: float = 60.0) -> Any:
        """Poll ``expression`` in the page until it is truthy; fail with its last value."""
        deadline = time.monotonic() + seconds
        value = None
        while time.monotonic() < deadline:
            value = await self.evaluate(expression)
            if value:
                return value
            await asyncio.sleep(0.3)
        raise AssertionError(f"{expression} stayed {value!r} for {seconds} s")

    async def screenshot(self) -> bytes:
        shot = await self.call("Page.captureScreenshot", format="png")
        return base64.b64decode(shot["data"])


@contextlib.contextmanager
def chromium(url: str, profile: Path) -> Iterator[str]:
    """Headless Chromium showing ``url``; yields its DevTools port (stopped on exit)."""
    process = subprocess.Popen(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            "--window-size=1400,1100",
            url,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        active = profile / "DevToolsActivePort"  # Chromium writes its port here
        deadline = time.monotonic() + 30
        while not (active.exists() and active.read_text().strip()):
            assert process.poll() is None and time.monotonic() < deadline, "Chromium did not start"
            time.sleep(0.1)
        yield active.read_text().split()[0]
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@contextlib.asynccontextmanager
async def devtools(port: str) -> AsyncIterator[Page]:
    """The first tab of the Chromium listening on ``port``, over its websocket."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        targets = await (await session.get(f"http://127.0.0.1:{port}/json/list")).json()
        tab = next(t for t in targets if t["type"] == "page")
        async with session.ws_connect(tab["webSocketDebuggerUrl"], max_msg_size=0) as socket:
            yield Page(socket)


def dashboard_state(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/dashboard/state", timeout=10) as answer:
        state: dict[str, Any] = json.load(answer)
        return state


def expected_paths(pool: Pool, workload: dict[str, Any]) -> set[str]:
    """block/rack/host of every domain the Workload's admission names (hosts here)."""
    assignment = workload["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
    labels = pool.node_labels()
    paths = set()
    for domain in written_domains(assignment):
        host = domain["values"][-1]
        paths.add(f"{labels[host][BLOCK]}/{labels[host][RACK]}/{host}")
    assert assignment["levels"][-1] == HOST
    return paths


def test_the_dashboard_shows_a_job_arrive_get_admitted_and_where(
    serve: Serve, pool: Pool, tmp_path: Path
) -> None:
    _needs_chromium()
    port = free_port()
    serve.start("--dashboard", f"--metrics-port={port}")
    pool.nodes({("b0", "r0"): 3, ("b0", "r1"): 2, ("b1", "r2"): 2})
    eventually(
        lambda: any(t["flavor"] == pool.name for t in dashboard_state(port)["topologies"]), 30
    )
    shot = tmp_path / "dashboard.png"

    async def browse(devtools_port: str) -> bytes:
        async with devtools(devtools_port) as page:
            picture = f".picture[data-flavor='{pool.name}']"
            await page.until(f'document.querySelector("{picture}") !== null')
            # Every domain of the pool drawn: 2 blocks, 3 racks, 7 hosts.
            drawn = await page.evaluate(f'document.querySelectorAll("{picture} g.domain").length')
            assert drawn == 2 + 3 + 7
            before = await page.evaluate("Number(document.body.dataset.updates)")
            # Submitted while the page is open: it appears and is admitted, live.
            required = {"kueue.x-k8s.io/podset-required-topology": RACK}
            await asyncio.to_thread(submit, pool, job("train", 3, annotations=required))
            workload = await asyncio.to_thread(
                eventually,
                lambda: (w := pool.workload_of("train")) and condition(w, "Admitted") and w,
                60,
            )
            key = f"{pool.namespace}/{workload['metadata']['name']}"
            row = f"document.querySelector(\"tr[data-key='{key}']\")"
            await page.until(f"{row} && {row}.dataset.state === 'Admitted'")
            assert await page.evaluate("Number(document.body.dataset.updates)") > before
            await page.evaluate(f"{row}.click()")
            assigned = await page.evaluate(
                f'Array.from(document.querySelectorAll("{picture} g.domain.assigned"))'
                ".map(g => g.dataset.path).sort()"
            )
            assert set(assigned) == expected_paths(pool, workload) and len(assigned) == 3
            assert await page.evaluate(
                f"document.querySelector(\"{picture} g.domain[data-path='b0/r0']\")"
                ".classList.contains('contains')"
            )
            # A job no rack can hold stays pending: the reason written on its Workload, and
            # the rack it came nearest to (two of its four pods would fit in r1 or r2).
            await asyncio.to_thread(submit, pool, job("big", 4, annotations=required))
            pending = await asyncio.to_thread(
                eventually,
                lambda: (
                    (w := pool.workload_of("big"))
                    and (c := condition(w, "QuotaReserved"))
                    and c["status"] == "False"
                    and w
                ),
                60,
            )
            big = f"document.querySelector(\"tr[data-key='{pool.namespace}/{pending['metadata']['name']}']\")"
            await page.until(f"{big} && {big}.dataset.state === 'Pending'")
            await page.evaluate(f"{big}.click()")
            message = condition(pending, "QuotaReserved")["message"]
            await page.until(
                f"document.querySelector('#detail .reason').textContent === {json.dumps(message)}"
            )
            nearest = await page.evaluate(
                f'Array.from(document.querySelectorAll("{picture} g.domain.nearest"))'
                ".map(g => g.dataset.path)"
            )
            assert nearest == ["b0/r1"], nearest  # 2 fit there and in b1/r2: the first by path
            assert "room for 2 of its 4 pods" in await page.evaluate(
                "document.querySelector('#detail .nearest').textContent"
            )
            # The admitted one selected again for the picture the docs show.
            await page.evaluate(f"{row}.click()")
            return await page.screenshot()

    with chromium(f"http://127.0.0.1:{port}/dashboard", tmp_path / "profile") as devtools_port:
        shot.write_bytes(asyncio.run(browse(devtools_port)))
    pixels = _png_pixels(shot)
    colours = Counter(map(tuple, pixels[..., :3].reshape(-1, 3).tolist()))
    assert colours[(0xFE, 0xF3, 0xC7)] > 500  # the assigned hosts' fill was painted
    assert colours[(0x25, 0x63, 0xEB)] > 50  # GPUs held by the admitted Workload
    if os.environ.get("TOPOGATE_SAVE_SCREENSHOT"):
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, SCREENSHOT)
