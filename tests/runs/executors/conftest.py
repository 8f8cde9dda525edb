"""One real loopback Ray head for the Ray executor's tests, started once and stopped at the end."""

from __future__ import annotations

import pytest

from tests.runs.executors.ray_head import LoopbackHead


@pytest.fixture(scope="session")
def ray_head(tmp_path_factory):
    head = LoopbackHead(root=tmp_path_factory.mktemp("ray"))
    try:
        head.start()
        yield head
    finally:
        head.stop()
    assert not head.processes(), "a Ray process of the test head survived"


@pytest.fixture
def ray_env(ray_head, monkeypatch):
    """The runner's environment for this head: explicit token auth with the head's own token."""
    for key, value in ray_head.client_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    return ray_head
