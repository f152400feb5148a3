"""hub: what a failure while one model loads becomes (issue 28, items 4, 8 and 9), without any Hub: ``load_fn`` stubs
raise what transformers, hf-xet and huggingface_hub raise, and the endpoint is a socket on 127.0.0.1."""

from __future__ import annotations

import socket

import pytest

from anisotropy import hub

# ---- item 9: "offline" is probed again ------------------------------------------------------------------------------


def test_reachable_probes_again_after_a_failure(monkeypatch):
    with socket.socket() as probe:  # a free port on loopback: nothing listens there yet
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    assert hub.reachable(timeout=1.0) is False
    with socket.socket() as server:  # the network comes back
        server.bind(("127.0.0.1", port))
        server.listen()
        assert hub.reachable(timeout=1.0) is True
    assert hub.reachable(timeout=1.0) is True  # a success is remembered
