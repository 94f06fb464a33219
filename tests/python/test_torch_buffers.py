"""A torch module trained over its own memory: gossamer.torch lays parameters and gradients out
over two flat tensors torch allocates on the module's device and hands them to the peer as its
buffers (gossamer.Buffers); no copy of the model exists, and what torch users do every day
(zero_grad to None, BatchNorm, autocast with a GradScaler) costs no copy either."""

import pytest

from conftest import run_peers
from gossamer_or_skip import gossamer, np

torch = pytest.importorskip("torch", reason="torch is not installed (Debian: python3-torch)")
import gossamer.torch as gt  # noqa: E402


def test_numpy_buffers_of_the_caller_are_trained_in_place():
    params = np.arange(6, dtype=np.float32)
    grads = np.zeros(6, dtype=np.float32)
    peer = gossamer.Peer(parameters=6, algorithm="none", steps=2, transport="inproc", optimizer="sgd",
                         lr=0.5, buffers=gossamer.Buffers.from_numpy(params, grads))
    assert peer.params.ctypes.data == params.ctypes.data  # the caller's memory, no copy
    assert peer.start()
    np.testing.assert_array_equal(params, np.arange(6))  # start() initialised nothing
    grads[:] = 2.0
    assert peer.step(loss=1.0, samples=1)
    np.testing.assert_array_equal(params, np.arange(6) - 1.0)  # the peer's SGD, in place
    peer.finish()


def test_bad_buffers_are_refused_with_a_sentence():
    with pytest.raises(gossamer.Error, match="float32 NumPy array"):
        gossamer.Buffers.from_numpy(np.zeros(4), np.zeros(4))
    with pytest.raises(gossamer.Error, match="params hold 4 values and grads 5"):
        gossamer.Buffers.from_numpy(np.zeros(4, np.float32), np.zeros(5, np.float32))
    four = gossamer.Buffers.from_numpy(np.zeros(4, np.float32), np.zeros(4, np.float32))
    with pytest.raises(gossamer.Error, match="the model has 5 parameters"):
        gossamer.Peer(parameters=5, steps=1, transport="inproc", buffers=four)
    with pytest.raises(gossamer.Error, match="must be a gossamer.Buffers"):
        gossamer.Peer(parameters=4, steps=1, transport="inproc", buffers=(1, 2))
    with pytest.raises(gossamer.Error, match="neither 'cpu' nor 'cuda:N'"):
        gossamer.Peer(parameters=4, steps=1, transport="inproc",
                      buffers=gossamer.Buffers(four.params, four.grads, 4, device="tpu:0"))
    if not torch.cuda.is_available():
        with pytest.raises(gossamer.Error, match="buffers on cuda:0: no usable GPU"):
            gossamer.Peer(parameters=4, steps=1, transport="inproc",
                          buffers=gossamer.Buffers(four.params, four.grads, 4, device="cuda:0"))


def test_a_cpu_module_is_trained_in_its_own_memory(watchdog):
    # allreduce-sgd over two modules: the peers' merges land in the modules' own tensors.
    torch.manual_seed(0)
    modules = [torch.nn.Linear(3, 2) for _ in range(2)]
    for rank, module in enumerate(modules):
        with torch.no_grad():
            module.weight.fill_(rank)
            module.bias.fill_(0)
    attached = [gt.attach(m) for m in modules]
    peers = gossamer.local_cluster(2, layout=attached[0].layout(), buffers=[a.buffers() for a in attached],
                                   algorithm="allreduce-sgd", steps=3, optimizer="sgd", lr=1.0)
    for peer, module, a in zip(peers, modules, attached):
        assert module.weight.data_ptr() == a.flat_params.data_ptr() == peer.params.ctypes.data
        assert module.weight.grad.data_ptr() == a.flat_grads.data_ptr() == peer.grads.ctypes.data
    addresses = [[p.data_ptr() for p in m.parameters()] + [p.grad.data_ptr() for p in m.parameters()]
                 for m in modules]

    def drive(peer, rank):
        module = modules[rank]
        assert peer.start()
        while True:
            module.zero_grad()
            # d/dW of sum(W x) with x = rank + 1 everywhere: rank + 1 in every entry.
            module(torch.full((1, 3), float(rank + 1))).sum().backward()
            if not peer.step(loss=0.0, samples=1):
                return peer.finish()

    run_peers(peers, drive)
    for rank, module in enumerate(modules):
        # Three steps of the averaged gradient (1 + 2) / 2 = 1.5 at rate 1, in the module itself.
        np.testing.assert_allclose(module.weight.detach().numpy(), np.full((2, 3), rank - 4.5))
        assert [p.data_ptr() for p in module.parameters()] + [p.grad.data_ptr() for p in module.parameters()] \
            == addresses[rank]
        assert attached[rank].copies == 0


def test_zero_grad_to_none_costs_no_copy():
    # torch 2's default: gradients set to None every step. The views come back at the next forward
    # (one fill of the flat buffer); the training matches plain torch's to the last bit.
    torch.manual_seed(1)
    module, reference = torch.nn.Linear(5, 3), torch.nn.Linear(5, 3)
    reference.load_state_dict(module.state_dict())
    peer = gt.make_peer(module, algorithm="none", steps=4, transport="inproc")
    opt = gt.Optimizer(torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9), peer)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    grads_at = [p.grad.data_ptr() for p in module.parameters()]
    x, y = torch.randn(16, 5), torch.randn(16, 3)
    assert peer.start()
    for step in range(4):
        opt.optimizer.zero_grad(set_to_none=True)
        module.zero_grad(set_to_none=True)
        assert all(p.grad is None for p in module.parameters())
        loss = torch.nn.functional.mse_loss(module(x), y)
        assert [p.grad.data_ptr() for p in module.parameters()] == grads_at  # back before backward
        loss.backward()
        ref_opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(reference(x), y).backward()
        assert opt.step(loss=loss, samples=16)
        ref_opt.step()
    assert peer.attached.copies == 0
    for a, b in zip(module.parameters(), reference.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    peer.finish()


def batchnorm_net():
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                               torch.nn.Linear(8, 2))


@pytest.mark.parametrize("buffers", ["average", "local"])
def test_batchnorm_statistics_are_averaged_with_the_parameters_or_kept(watchdog, buffers):
    torch.manual_seed(2)
    modules = [batchnorm_net() for _ in range(2)]
    modules[1].load_state_dict(modules[0].state_dict())
    attached = [gt.attach(m, buffers=buffers) for m in modules]
    names = [name for name, _ in attached[0].layout()]
    assert ("buffer.1.running_mean" in names) == (buffers == "average")
    assert "buffer.1.num_batches_tracked" not in names  # integers stay local
    # sparknet averages the models every step (tau 1): statistics too, when laid out with them.
    peers = gossamer.local_cluster(2, layout=attached[0].layout(), buffers=[a.buffers() for a in attached],
                                   algorithm="sparknet", algorithm_options={"tau": 1}, steps=3,
                                   optimizer="sgd", lr=0.1)
    stats_at = [m[1].running_mean.data_ptr() for m in modules]

    def drive(peer, rank):
        module = modules[rank]
        assert peer.start()
        for _ in range(3):  # no forward after the last step: it would move the statistics again
            module.zero_grad()
            x = torch.full((8, 4), float(rank * 10)) + torch.randn(8, 4)  # the peers' data differ
            module(x).sum().backward()
            assert peer.step(loss=0.0, samples=8)
        assert not peer.step()
        return peer.finish()

    run_peers(peers, drive)
    a, b = (m[1].running_mean for m in modules)
    assert a.abs().sum() > 0  # the statistics moved
    if buffers == "average":
        torch.testing.assert_close(a, b)
        assert [m[1].running_mean.data_ptr() for m in modules] == stats_at
    else:
        assert not torch.allclose(a, b)
    assert all(x.copies == 0 for x in attached)


def test_autocast_with_a_grad_scaler_keeps_float32_parameters():
    torch.manual_seed(3)
    module = torch.nn.Linear(6, 2)
    peer = gt.make_peer(module, algorithm="none", steps=3, transport="inproc")
    opt = gt.Optimizer(torch.optim.SGD(module.parameters(), lr=0.1), peer)
    # On the CPU the scaler is disabled (torch scales on CUDA only) and steps through to opt.step.
    scaler = torch.cuda.amp.GradScaler(enabled=torch.cuda.is_available())
    x, y = torch.randn(8, 6), torch.randint(0, 2, (8,))
    before = module.weight.detach().clone()
    assert peer.start()
    for _ in range(3):
        opt.zero_grad()
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(module(x), y)
        assert module.weight.dtype == torch.float32
        scaler.scale(loss).backward()
        scaler.step(opt, loss=loss, samples=8)
        scaler.update()
    assert peer.status()["step"] == 3
    assert not torch.equal(before, module.weight.detach())
    assert peer.attached.copies == 0
    peer.finish()


def test_bad_modules_are_refused_naming_the_parameter():
    with pytest.raises(gossamer.Error, match="parameter weight is torch.float64"):
        gt.attach(torch.nn.Linear(2, 2).double())
    half = torch.nn.Linear(2, 2)
    half.bias.data = half.bias.data.half()
    with pytest.raises(gossamer.Error, match="parameter bias is torch.float16"):
        gt.make_peer(half, steps=1, transport="inproc")
    with pytest.raises(gossamer.Error, match="no parameters"):
        gt.attach(torch.nn.ReLU())
    with pytest.raises(gossamer.Error, match="'average' or 'local'"):
        gt.attach(torch.nn.Linear(2, 2), buffers="shared")
    other = gt.make_peer(torch.nn.Linear(2, 2), steps=1, transport="inproc")
    with pytest.raises(gossamer.Error, match="outside the peer's buffer"):
        gt.Optimizer(torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1), other)
    with pytest.raises(gossamer.Error, match="torch.optim.Optimizer"):
        gt.Optimizer(object(), other)
