"""Peer's keyword arguments are gossamer-peer's run-level settings (engine/peer_settings.h): the
same names, checks and help, the compression and norm-bound settings among them, and an unknown
keyword is refused naming the closest known one."""

import pytest

from conftest import run_peers
from gossamer_or_skip import gossamer, np


def test_the_keywords_come_from_the_settings_schema():
    options = gossamer.Peer.OPTIONS
    for name in ("compress", "error_feedback", "max_norm_ratio", "steps", "lr", "join_timeout",
                 "step_time", "secret", "algorithm_options"):
        assert name in options and options[name]
    assert "codec" in options["compress"]


def test_an_unknown_keyword_names_the_closest():
    with pytest.raises(TypeError, match="unknown option 'max_norm_ration'; did you mean 'max_norm_ratio'"):
        gossamer.Peer(parameters=4, steps=1, transport="inproc", max_norm_ration=2)
    with pytest.raises(TypeError, match="did you mean 'join_timeout'"):
        gossamer.local_cluster(2, parameters=4, steps=1, join_timout=3)


def test_bad_values_are_refused_by_the_settings_rules():
    with pytest.raises(gossamer.Error, match="error_feedback: 'maybe' is not one of: on, off"):
        gossamer.Peer(parameters=4, steps=1, transport="inproc", error_feedback="maybe")
    with pytest.raises(gossamer.Error, match="compress"):
        gossamer.Peer(parameters=4, steps=1, transport="inproc", compress="zip")
    with pytest.raises(gossamer.Error, match="max_norm_ratio: '-1' must be at least 0"):
        gossamer.Peer(parameters=4, steps=1, transport="inproc", max_norm_ratio=-1)


def test_a_cluster_trains_with_compression_and_a_norm_bound(watchdog):
    steps = 20
    peers = gossamer.local_cluster(2, parameters=16, algorithm="dpsgd", steps=steps,
                                   compress="int8", error_feedback=False, max_norm_ratio=1000.0,
                                   optimizer="sgd", lr=0.1)
    target = np.arange(16, dtype=np.float32)

    def drive(peer, rank):
        assert peer.start()
        while True:
            peer.grads[:] = peer.params - target
            if not peer.step(loss=0.0, samples=1):
                break
        error = float(np.abs(peer.params - target).max())
        return peer.finish(), error

    results = run_peers(peers, drive)
    assert [r["steps"] for r, _ in results] == [steps, steps]
    assert all(error < 0.5 * target.max() for _, error in results)
