"""A real S3 API for the tests: moto's standalone server, a process of its own on a free port.

The tests that use it fail (never skip) when it cannot start: moto[server] comes with
`pip install -e '.[dev]'`. Each test takes a bucket of its own, so one server serves a whole
test session. What the server holds is read back over plain HTTP (moto checks no signature),
not through the code under test.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

REGION = "us-east-1"
# moto accepts any credentials; set so that no client goes looking for real ones
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


class S3Server:
    """moto's server, started by `start` and stopped by `stop`."""

    def __init__(self, process: subprocess.Popen[bytes], endpoint: str, log: Path) -> None:
        self.process = process
        self.endpoint = endpoint
        self.log = log

    @classmethod
    def start(cls, folder: Path) -> S3Server:
        """Start the server on a free port; fails, saying why, when it cannot."""
        if importlib.util.find_spec("moto") is None:
            raise RuntimeError("moto is not installed: pip install -e '.[dev]' (moto[server])")
        problems = []
        for attempt in range(3):  # a free port can be taken between the probe and the bind
            port = _free_port()
            log = folder / f"moto-{port}.log"
            with log.open("wb") as output:
                process = subprocess.Popen(
                    [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, **CREDENTIALS},
                )
            server = cls(process, f"http://127.0.0.1:{port}", log)
            if server._wait_ready():
                return server
            server.stop()
            problems.append(f"attempt {attempt + 1}: {log.read_text(errors='replace')[-2000:]}")
        raise RuntimeError("moto's S3 server did not start:\n" + "\n".join(problems))

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self.endpoint + "/", timeout=2):
                    return True
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        return False

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    # -- buckets and what they hold, through boto3 (moto's own client) -----------------------

    def client(self) -> Any:
        import boto3  # moto depends on it

        # a session of its own: boto3's default one would keep the environment of the test
        # that made it (AWS_PROFILE, say) for every test after it
        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )

    def new_bucket(self) -> str:
        name = f"ket-test-{uuid.uuid4().hex[:16]}"
        self.client().create_bucket(Bucket=name)
        return name

    def url(self, bucket: str, prefix: str = "ket", endpoint: str | None = None) -> str:
        """The KET_STORAGE_URL of `bucket`/`prefix` on this server (or at `endpoint`)."""
        path = f"/{prefix}" if prefix else ""
        query = urlencode({"endpoint_url": endpoint or self.endpoint, "region": REGION})
        return f"s3://{bucket}{path}?{query}"

    def objects(self, bucket: str, prefix: str = "") -> dict[str, bytes]:
        """Every object of the bucket whose name starts with `prefix`, by name."""
        client = self.client()
        listing = client.list_objects_v2(Bucket=bucket, Prefix=prefix)
        names = [item["Key"] for item in listing.get("Contents", [])]
        return {name: client.get_object(Bucket=bucket, Key=name)["Body"].read() for name in names}

    def put_object(self, bucket: str, name: str, data: bytes) -> None:
        self.client().put_object(Bucket=bucket, Key=name, Body=data)

    def multipart_uploads(self, bucket: str) -> list[str]:
        """The names of the multipart uploads begun and neither completed nor aborted."""
        listing = self.client().list_multipart_uploads(Bucket=bucket)
        return [item["Key"] for item in listing.get("Uploads", [])]

    def requests(self, bucket: str) -> list[str]:
        """The request lines ("PUT /bucket/name ...") the server logged for `bucket`."""
        lines = self.log.read_text(errors="replace").splitlines()
        return [line.split('"')[1] for line in lines if f" /{bucket}" in line and '"' in line]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port
