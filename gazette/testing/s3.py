"""moto's standalone S3 server as a real subprocess on loopback, for tests of `s3://` stores.

A real HTTP server (not moto's in-process mock) because brokers, consumers and Spark may run in
other processes and must reach the same buckets. moto and boto3 are test dependencies, not
gazette-py's: nothing here imports them, and a missing one fails with how to install it.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
import urllib.error
import urllib.request

from gazette.keyspace.procutil import free_port

MOTO_START_TIMEOUT_S = 30.0
MOTO_STOP_TIMEOUT_S = 10.0
MOTO_START_ATTEMPTS = 3  # a port picked free may be taken before moto binds it
MOTO_INSTALL_HINT = (
    "moto's S3 server is not installed: `pip install 'gazette-py[dev]'` (or `pip install 'moto[server]'`)"
)
BOTO3_INSTALL_HINT = "boto3 is not installed: `pip install 'gazette-py[s3]'`"
# What boto3 and the s3:// store need to talk to moto, and nothing from the user's own AWS setup.
DUMMY_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
# Unset, with AWS_CONFIG_FILE and AWS_SHARED_CREDENTIALS_FILE pointed at /dev/null.
UNSET_AWS_ENV = ("AWS_PROFILE", "AWS_SESSION_TOKEN")

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def require_moto() -> None:
    """Raises ModuleNotFoundError, saying how to install it, unless moto's server can run."""
    for module in ("moto", "flask"):  # moto.server needs moto's [server] extra (Flask)
        if importlib.util.find_spec(module) is None:
            raise ModuleNotFoundError(MOTO_INSTALL_HINT, name=module)


class MotoServer:
    """One `python -m moto.server` process on a loopback port; restartable on the same port (its
    buckets are then gone: moto keeps them in memory)."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> MotoServer:
        """Starts the server and returns once it answers HTTP (RuntimeError if it exits or is silent
        for MOTO_START_TIMEOUT_S)."""
        require_moto()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + MOTO_START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto server on port {self.port} exited with {self.proc.returncode}")
            try:
                with _NO_PROXY.open(self.endpoint + "/moto-api/", timeout=1):
                    return self
            except urllib.error.HTTPError:
                return self  # it answered HTTP
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"moto server on port {self.port} did not answer within {MOTO_START_TIMEOUT_S}s"
                    ) from None
                time.sleep(0.05)

    def make_bucket(self, bucket: str) -> None:
        make_bucket(self.endpoint, bucket)

    def stop(self) -> None:
        """Stops the server (SIGTERM, then SIGKILL after MOTO_STOP_TIMEOUT_S); idempotent."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=MOTO_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> MotoServer:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_moto_server(port: int | None = None) -> MotoServer:
    """A started MotoServer, on `port` or a free one (tried again on a port race when picked here)."""
    for _ in range(MOTO_START_ATTEMPTS):
        server = MotoServer(port)
        try:
            return server.start()
        except RuntimeError:
            if port is not None:
                raise
    raise RuntimeError(f"could not start a moto server in {MOTO_START_ATTEMPTS} attempts")


def make_bucket(endpoint: str, bucket: str, region: str = "us-east-1") -> None:
    """Creates `bucket` on the S3 server at `endpoint` (boto3, with the environment's credentials)."""
    try:
        import boto3
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(BOTO3_INSTALL_HINT, name="boto3") from exc
    boto3.client("s3", endpoint_url=endpoint, region_name=region).create_bucket(Bucket=bucket)


def s3_store_url(endpoint: str, bucket: str, prefix: str = "prefix/", region: str = "us-east-1") -> str:
    """The `s3://` store URL of `prefix` in `bucket` on the server at `endpoint`."""
    return f"s3://{bucket}/{prefix}?endpoint={endpoint}&region={region}"
