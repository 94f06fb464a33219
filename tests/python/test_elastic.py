"""Membership from Python: a peer killed mid-run; the others see it fail, take over its data and
finish."""

from conftest import run_peers
from gossamer_or_skip import gossamer, np


def test_a_peer_killed_mid_run_leaves_and_the_others_finish(watchdog):
    peers = gossamer.local_cluster(3, parameters=16, algorithm="gosgd", steps=600, step_time=0.005,
                                   optimizer="sgd", lr=0.1, finish_timeout=30)
    victim = peers[2].id

    def drive(peer, rank):
        assert peer.start()
        assert peer.shard == (rank, 3)
        shards = set()
        while True:
            peer.grads[:] = peer.params - rank  # each pulls toward its own rank
            if not peer.step(loss=1.0, samples=1):
                break
            if rank == 2 and peer.status()["step"] == 20:
                peer.kill()
            shards.add(peer.shard[1])
        members = peer.members()
        return peer.finish(), shards, peer.events(), members

    results = run_peers(peers, drive)
    assert results[2][0]["steps"] == 20
    for rank in (0, 1):
        result, shards, events, members = results[rank]
        assert result["steps"] == 600
        assert 2 in shards  # the data was split over the two survivors
        assert any(e["kind"] == "failed" and e["peer"] == victim for e in events)
        assert {m["peer"] for m in members} == {peers[0].id, peers[1].id}
    # The survivors' models mix with each other: between the ranks' pulls 0 and 1.
    assert np.all(np.abs(peers[0].params - peers[1].params) < 1.0)
