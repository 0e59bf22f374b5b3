"""A real `broker dev` for the suite: the binary built from this repository, on 127.0.0.1 with random ports.

The binary is $AIRLOCK_BROKER, or built with `go build` from the repository into a temporary
directory. Nothing is skipped: without a broker (or Go to build one) the suite fails.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "sdk" / "python"))

# A hang guard for the broker's start (it prints its addresses within milliseconds): not a timing assertion.
START_GUARD = 120


def _broker_binary(tmp: Path) -> str:
    given = os.environ.get("AIRLOCK_BROKER")
    if given:
        if not os.access(given, os.X_OK):
            pytest.fail(f"AIRLOCK_BROKER={given} is not an executable")
        return given
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else None)
    if not go:
        pytest.fail("no broker: set AIRLOCK_BROKER to a `broker` binary, or install Go to build ./cmd/broker")
    out = tmp / "broker"
    subprocess.run([go, "build", "-o", str(out), "./cmd/broker"], cwd=REPO, check=True)
    return str(out)


class DevBroker:
    def __init__(self, binary: str, data_dir: Path):
        self.binary = binary
        self.data_dir = data_dir
        self.proc = subprocess.Popen(
            [binary, "dev", "--sandbox-listen", "127.0.0.1:0", "--control-listen", "127.0.0.1:0",
             "--proxy-listen", "127.0.0.1:0", "--data-dir", str(data_dir)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={"PATH": os.environ.get("PATH", "")})
        self.stderr: list = []
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()
        lines: "queue.Queue[str | None]" = queue.Queue()

        def read() -> None:
            for line in self.proc.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=read, daemon=True).start()
        fields = {}
        while True:
            try:
                line = lines.get(timeout=START_GUARD)
            except queue.Empty:
                self.stop()
                pytest.fail("broker dev printed nothing (hang guard)")
            if line is None:
                pytest.fail("broker dev exited: " + "".join(self.stderr))
            words = line.split()
            if line.startswith("  sandbox plane"):
                fields["sandbox"] = words[2]
            elif line.startswith("  control plane"):
                fields["control"] = words[2]
            elif line.startswith("  admin token"):
                fields["admin"] = words[2]
            elif line.startswith("Ctrl-C stops the broker."):
                break
        self.sandbox, self.control, self.admin = fields["sandbox"], fields["control"], fields["admin"]
        # The demo API's key, which only the broker holds: the canary of this suite.
        self.demo_key = (data_dir / "demo.key").read_text().strip()
        assert self.demo_key.startswith("demo-")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("broker")
    data = tmp / "data"
    data.mkdir()
    b = DevBroker(_broker_binary(tmp), data)
    yield b
    b.stop()


@pytest.fixture()
def client(broker):
    from airlock import Airlock

    with Airlock(broker.control, broker.admin, sandbox_addr=broker.sandbox) as c:
        yield c
