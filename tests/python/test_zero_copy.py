"""Parameters and gradients shared with NumPy and torch without copies; bad input refused; the
GIL released while a peer waits on the others."""

import threading

import pytest

from conftest import run_peers
from gossamer_or_skip import gossamer, np


def test_numpy_views_are_the_peers_buffers():
    peer = gossamer.Peer(parameters=10, algorithm="none", steps=3, transport="inproc", optimizer="sgd", lr=0.5)
    params, grads = peer.params, peer.grads
    assert params.dtype == np.float32 and params.shape == (10,) and grads.shape == (10,)
    assert not params.flags.owndata and params.flags.writeable
    assert np.shares_memory(params, peer.params)  # every access is a view of the same buffer
    params[:] = np.arange(10, dtype=np.float32)
    assert peer.start()
    peer.grads[:] = 2.0
    assert peer.step(loss=1.0, samples=4)
    # The peer's optimizer read the gradients written through NumPy and updated the same params.
    np.testing.assert_array_equal(params, np.arange(10, dtype=np.float32) - 1.0)
    assert peer.step(update=lambda: params.__imul__(0))  # the caller's optimizer
    assert not params.any()
    result = peer.finish()
    assert result["steps"] == 2 and result["samples"] == 4


def test_torch_optimizer_wrapped_steps_through_the_views():
    torch = pytest.importorskip("torch", reason="torch is not installed (Debian: python3-torch)")
    import gossamer.torch as gt

    torch.manual_seed(0)
    module = torch.nn.Linear(4, 1)
    reference = torch.nn.Linear(4, 1)
    reference.load_state_dict(module.state_dict())
    peer = gt.make_peer(module, algorithm="none", steps=5, transport="inproc")
    opt = gt.Optimizer(torch.optim.Adam(module.parameters(), lr=0.1), peer)
    ref_opt = torch.optim.Adam(reference.parameters(), lr=0.1)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    assert peer.start()
    for _ in range(5):
        for m, o in ((module, opt), (reference, ref_opt)):
            o.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(m(x), y)
            loss.backward()
        assert opt.step(loss=loss, samples=8)
        ref_opt.step()
    assert not opt.step(loss=0.0)  # the run is over
    # Adam through the wrapper and on its own: the same params, and still the peer's buffer.
    for a, b in zip(module.parameters(), reference.parameters()):
        torch.testing.assert_close(a, b)
    np.testing.assert_array_equal(peer.params, torch.nn.utils.parameters_to_vector(module.parameters()).detach().numpy())
    assert peer.finish()["steps"] == 5


def test_bad_input_is_refused_with_a_sentence():
    with pytest.raises(TypeError, match="unknown option.*bogus"):
        gossamer.Peer(parameters=4, steps=1, bogus=1)
    with pytest.raises(gossamer.Error, match="steps=N"):
        gossamer.Peer(parameters=4, transport="inproc")
    with pytest.raises(gossamer.Error, match="cluster secret"):
        gossamer.Peer(parameters=4, steps=1)
    with pytest.raises(gossamer.Error, match="positive int"):
        gossamer.Peer(parameters=0, steps=1, transport="inproc")
    with pytest.raises(gossamer.Error, match="empty shape"):
        gossamer.Peer(layout=[("w", (3, 0))], steps=1, transport="inproc")
    with pytest.raises(gossamer.Error, match="gosgd"):  # the known names are listed
        gossamer.Peer(parameters=4, steps=1, transport="inproc", algorithm="nonesuch")
    with pytest.raises(gossamer.Error, match="steps must be at least 1"):
        gossamer.Peer(parameters=4, steps=0, transport="inproc")
    peer = gossamer.Peer(parameters=4, steps=2, transport="inproc", algorithm="none",
                         evaluate=lambda params, samples: (1, 2), eval_every=1)
    with pytest.raises(gossamer.Error, match="before start"):
        peer.step()
    assert peer.start()
    with pytest.raises(gossamer.Error, match="evaluate must return \\(correct, samples, loss_sum\\)"):
        peer.step()
    with pytest.raises(ZeroDivisionError):  # the caller's own exception comes through
        peer.step(gradients=lambda: 1 / 0)


def test_the_gil_is_released_while_a_peer_waits_for_the_others(watchdog):
    # allreduce-sgd: peer 0's step waits until peer 1 steps. Peer 1 is driven from this thread,
    # which must get to run Python code while peer 0 waits.
    peers = gossamer.local_cluster(2, parameters=8, algorithm="allreduce-sgd", steps=1, comm_timeout=60)
    inside = threading.Event()
    outcome = {}

    def first():
        assert peers[0].start()

        def gradients():
            inside.set()
            return 0.0

        outcome["stepped"] = peers[0].step(gradients=gradients)
        outcome["result"] = peers[0].finish()

    thread = threading.Thread(target=first)
    thread.start()
    assert peers[1].start()
    assert inside.wait(30)
    spins = sum(1 for _ in range(100000))  # Python runs while peer 0 waits in its step
    assert spins == 100000 and thread.is_alive()
    assert peers[1].step()
    peers[1].finish()
    thread.join()
    assert outcome["stepped"] and outcome["result"]["steps"] == 1
