"""Fixtures of the gateway tests: a gateway served on loopback, closed after the test."""
from __future__ import annotations

import pytest

from rlvr.rollout.gateway.core import Gateway
from rlvr.rollout.gateway.server import serve
from rlvr.rollout.policy import SamplingParams


@pytest.fixture()
def served():
    """`served(policy, **sampling)`: a Gateway over `policy` served on 127.0.0.1 (its URL in `.base_url`)."""
    opened = []

    def make(policy, **sampling) -> Gateway:
        gw = Gateway(policy, SamplingParams(**sampling))
        server = serve(gw)
        gw.base_url = server.base_url
        opened.append((gw, server))
        return gw

    yield make
    for gw, server in opened:
        server.close()
        gw.close()
