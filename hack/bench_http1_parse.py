"""CPU per response of topogate.kube.http1's connection reading an API server's answer, with no
socket: the response's bytes handed to the protocol as one read (a status patch's answer:
Go's headers and about 2.5 KB of JSON, by Content-Length and chunked) and as 1 KiB reads (a
list's page). Measures the parsing and bookkeeping alone, the part httptools replaced.

    .venv/bin/python hack/bench_http1_parse.py [--responses 20000] [--rounds 5]

Prints the best round's microseconds per response for each shape.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from topogate.kube.http1 import _Connection

HEAD = (
    "HTTP/1.1 200 OK\r\nAudit-Id: 2b7c1b6e-8f7e-4d1e-a7c2-1f1f6c7d9e01\r\n"
    "Cache-Control: no-cache, private\r\nContent-Type: application/json\r\n"
    "X-Kubernetes-Pf-Flowschema-Uid: 6d0a4f2e-41a3-4b8e-9d7e-2f1c0a9b8c7d\r\n"
    "X-Kubernetes-Pf-Prioritylevel-Uid: 0c6f7d3e-5b1a-4f0e-8e2d-9a8b7c6d5e4f\r\n"
    "Date: Fri, 27 Nov 2026 08:00:00 GMT\r\n"
)


class _Transport:
    def write(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        pass


def _responses() -> dict[str, list[bytes]]:
    body = json.dumps({"metadata": {"name": "w", "labels": {f"k{i}": "v" * 40 for i in range(50)}}})
    raw = body.encode()
    framed = f"{HEAD}Content-Length: {len(raw)}\r\n\r\n".encode() + raw
    chunked = f"{HEAD}Transfer-Encoding: chunked\r\n\r\n".encode() + b"%x\r\n%s\r\n0\r\n\r\n" % (
        len(raw),
        raw,
    )
    page = json.dumps({"items": [json.loads(body)] * 40}).encode()  # about 100 KB
    paged = f"{HEAD}Content-Length: {len(page)}\r\n\r\n".encode() + page
    return {
        f"Content-Length, {len(raw)} B, one read": [framed],
        f"chunked, {len(raw)} B, one read": [chunked],
        f"Content-Length, {len(page)} B, 1 KiB reads": [
            paged[i : i + 1024] for i in range(0, len(paged), 1024)
        ],
    }


async def _round(reads: list[bytes], responses: int) -> float:
    connection = _Connection()
    connection.connection_made(_Transport())  # type: ignore[arg-type]
    started = time.process_time()
    for _ in range(responses):
        answer = connection.send(b"")
        for read in reads:
            connection.data_received(read)
        answer.result()
    return (time.process_time() - started) / responses * 1e6


async def _main(responses: int, rounds: int) -> None:
    for name, reads in _responses().items():
        count = max(responses // len(reads), 200)
        best = min([await _round(reads, count) for _ in range(rounds)])
        print(f"{name:42} {best:7.1f} us per response")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--responses", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(_main(args.responses, args.rounds))


if __name__ == "__main__":
    main()
