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


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A real single-node Slurm (munged, slurmctld, slurmd) on localhost, for the whole session."""
    from tests.runs.executors.slurm_cluster import LocalSlurm, missing

    why = missing()
    if why:
        pytest.skip(f"no local Slurm cluster: {why}")
    cluster = LocalSlurm(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm_env(slurm_cluster, monkeypatch):
    """The runner's environment for that cluster (its SLURM_CONF)."""
    for key, value in slurm_cluster.env.items():
        monkeypatch.setenv(key, value)
    return slurm_cluster
