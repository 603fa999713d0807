"""start_twin's wait for the twin's ready line (gpufleet_twin.process)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from gpufleet_twin import process


def child(monkeypatch: pytest.MonkeyPatch, code: str) -> None:
    """start_twin starts ``python -c code`` instead of a twin."""
    popen = subprocess.Popen

    def start(command, **kwargs):
        return popen([sys.executable, "-c", code], **kwargs)

    monkeypatch.setattr(process.subprocess, "Popen", start)


def test_a_twin_that_never_says_it_is_ready_is_given_up_on_after_startup_timeout(monkeypatch, tmp_path):
    child(monkeypatch, "import time; time.sleep(60)")
    outcome: list[BaseException] = []

    def start() -> None:
        try:
            process.start_twin(workdir=tmp_path, startup_timeout=1)
        except RuntimeError as err:
            outcome.append(err)

    began = time.monotonic()
    waiting = threading.Thread(target=start, daemon=True)
    waiting.start()
    waiting.join(timeout=30)
    assert not waiting.is_alive(), "start_twin kept waiting past its startup_timeout"
    assert outcome and "did not start within 1 s" in str(outcome[0])
    assert time.monotonic() - began < 30


def test_a_twin_that_says_it_is_ready_late_but_within_startup_timeout_is_used(monkeypatch, tmp_path):
    (tmp_path / "kubeconfig.twin.json").write_text('{"api": "https://127.0.0.1:1", "token": "t"}')
    child(monkeypatch, "import time; time.sleep(1.5); print('ready', flush=True); time.sleep(60)")
    twin = process.start_twin(workdir=tmp_path, startup_timeout=5)
    try:
        assert twin.process.poll() is None
        assert twin.api_url == "https://127.0.0.1:1"
    finally:
        twin.process.kill()
        twin.process.wait(timeout=10)
