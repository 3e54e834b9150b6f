"""Session fixtures: the real test network (PLC directory, Knot DNS, TLS hosts) on loopback."""

from __future__ import annotations

import functools
import os
from collections.abc import AsyncIterator, Iterator

import httpx._transports.default
import pytest

from atwhois.resolver import Config, Resolver
from devnet.atwhois import Daemon, running_daemon
from devnet.network import DevnetState, running_devnet
from devnet.redis_cluster import RedisCluster
from tests.support.http import TOKEN
from tests.support.webhook_receiver import Receiver

# `httpx.get` makes a client each call, and each client an SSL context that loads certifi's
# bundle: 73 ms a call, and the tests poll and loop with `httpx.get` thousands of times (a
# minute and more of `make test`). One context per set of arguments serves them all: a
# context is made to be shared, and none of them is changed after it is made.
_transports = httpx._transports.default
_transports.create_ssl_context = functools.lru_cache(maxsize=16)(_transports.create_ssl_context)


@pytest.fixture(scope="session")
def devnet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevnetState]:
    """The test network, started once per session and stopped by the PID it recorded."""
    with running_devnet(tmp_path_factory.mktemp("devnet")) as state:
        yield state


@pytest.fixture(scope="session")
def devnet_config(devnet: DevnetState) -> Config:
    return devnet.config()


@pytest.fixture(scope="session")
def devnet_env(devnet: DevnetState) -> dict[str, str]:
    """The environment for the `atwhois` executable, pointed at the test network."""
    return {**os.environ, **devnet.env()}


@pytest.fixture(scope="module")
def daemon(devnet: DevnetState, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """`atwhois serve` on the test network, its cache in memory, refreshes with `TOKEN`
    (one per test module that asks for it)."""
    log = tmp_path_factory.mktemp("daemon") / "serve.log"
    with running_daemon(devnet.env(), log, "--cache", "memory:", "--refresh-token", TOKEN) as d:
        yield d


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """A Redis Cluster of 3 masters and 3 replicas on loopback, shared by the session's
    tests (each with a key prefix of its own); a test that kills a node starts its own."""
    with RedisCluster(tmp_path_factory.mktemp("redis-cluster")) as cluster:
        yield cluster


@pytest.fixture
async def resolver(devnet_config: Config) -> AsyncIterator[Resolver]:
    """A resolver pointed at the test network."""
    async with Resolver(devnet_config) as resolver:
        yield resolver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A webhook endpoint on loopback (`tests.support.webhook_receiver`)."""
    state = Receiver()
    yield state
    state.server.shutdown()


# Tests that need real servers are marked `network`, so that `pytest -m "not network"` is
# the offline selection (issue 56): those using the test network (`devnet`, and all that
# rests on it), those of the real Redis and PostgreSQL (their parameter says which), and the
# modules that start servers of their own (the test network's processes, stand-in upstreams).
_NETWORK_FIXTURES = {"devnet", "redis_cluster"}
_SERVER_STORES = ("redis", "postgres")
_OWN_SERVERS = {
    "test_devnet_lifecycle.py",
    "test_network_world.py",
    "test_hostile_mirror.py",
    "test_redis_cluster.py",  # a cluster of six redis-servers, some tests their own
    "test_cluster_fleet.py",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parameters = item.name.partition("[")[2].lower()
        if (
            _NETWORK_FIXTURES & set(getattr(item, "fixturenames", ()))
            or any(server in parameters for server in _SERVER_STORES)
            or item.path.name in _OWN_SERVERS
        ):
            item.add_marker(pytest.mark.network)
