"""gossamer for PyTorch: a torch.nn.Module trained by decentralized peers.

``attach(module, peer)`` lays the module's parameters and gradients out as views of the peer's
two flat buffers (the module's current values are copied in once; from then on there is one copy
of each tensor, and ``loss.backward()`` accumulates straight into the peer's gradient buffer).
``Optimizer(torch_optimizer, peer)`` wraps any ``torch.optim`` optimizer over those parameters so
that ``opt.step()`` is the local step plus the algorithm's exchange::

    import gossamer, gossamer.torch
    model = Net()
    peer = gossamer.torch.make_peer(model, algorithm="gosgd", steps=steps, min_peers=4, ...)
    opt = gossamer.torch.Optimizer(torch.optim.SGD(model.parameters(), lr=0.05), peer)
    peer.start()
    for x, y in batches:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        if not opt.step(loss=loss, samples=len(y)):
            break
    peer.finish()

The module must be on the CPU with float32 parameters (the flat buffers are host memory).
"""

import torch

import gossamer


def layout_of(module):
    """The (name, shape) list of the module's parameters, in parameters() order."""
    return [(name, tuple(p.shape)) for name, p in module.named_parameters()]


def _check_module(module):
    params = list(module.named_parameters())
    if not params:
        raise gossamer.Error("the module has no parameters")
    for name, p in params:
        if p.dtype != torch.float32:
            raise gossamer.Error(
                "parameter %s is %s; gossamer's buffers are float32 (module.float())" % (name, p.dtype)
            )
        if p.device.type != "cpu":
            raise gossamer.Error(
                "parameter %s is on %s; gossamer.torch lays out CPU modules (module.cpu())"
                % (name, p.device)
            )
    return params


class Attached:
    """The module's parameters and gradients as views of the peer's flat buffers."""

    def __init__(self, module, peer):
        params = _check_module(module)
        self.module = module
        self.peer = peer
        self.flat_params = torch.from_numpy(peer.params)
        self.flat_grads = torch.from_numpy(peer.grads)
        total = sum(p.numel() for _, p in params)
        if total != self.flat_params.numel():
            raise gossamer.Error(
                "the module has %d parameters but the peer's buffer holds %d" % (total, self.flat_params.numel())
            )
        # (parameter, offset, count, address of its value, address of its gradient)
        self._slots = []
        offset = 0
        with torch.no_grad():
            for _, p in params:
                n = p.numel()
                value = self.flat_params[offset:offset + n].view_as(p)
                value.copy_(p)
                p.data = value
                grad = self.flat_grads[offset:offset + n].view_as(p)
                grad.zero_()
                p.grad = grad
                self._slots.append((p, offset, n, value.data_ptr(), grad.data_ptr()))
                offset += n

    def ensure(self):
        """Puts back views that something replaced (zero_grad(set_to_none=True), a grad made by
        autograd after it), keeping their values. A few pointer comparisons when nothing did."""
        for p, offset, n, value_at, grad_at in self._slots:
            if p.data_ptr() != value_at:
                with torch.no_grad():
                    value = self.flat_params[offset:offset + n].view_as(p)
                    value.copy_(p.data)
                    p.data = value
            g = p.grad
            if g is None or g.data_ptr() != grad_at:
                view = self.flat_grads[offset:offset + n].view_as(p)
                with torch.no_grad():
                    if g is None:
                        view.zero_()
                    else:
                        view.copy_(g)
                p.grad = view

    def zero_grad(self):
        self.flat_grads.zero_()
        self.ensure()


def attach(module, peer):
    """Lays ``module``'s parameters and gradients out over ``peer``'s flat buffers (copying the
    module's values in) and returns the Attached views."""
    return Attached(module, peer)


def make_peer(module, *, evaluate=None, **options):
    """A gossamer.Peer whose layout is ``module``'s, with the module attached to it
    (``peer.attached``).

    ``evaluate(module, samples)`` (optional) evaluates the module as it stands on the first
    ``samples`` test samples (0: all) and returns (correct, samples, loss_sum). The peer calls it
    for its own model, and for the consensus with other values loaded into the module for the
    length of the call.
    """
    _check_module(module)
    holder = {}

    def evaluation(params, samples):
        flat = holder["attached"].flat_params
        values = torch.from_numpy(params)
        with torch.no_grad():
            if values.data_ptr() == flat.data_ptr():
                return evaluate(module, samples)
            saved = flat.clone()
            try:
                flat.copy_(values)
                return evaluate(module, samples)
            finally:
                flat.copy_(saved)

    peer = gossamer.Peer(layout=layout_of(module), evaluate=evaluation if evaluate else None,
                         **options)
    peer.attached = holder["attached"] = attach(module, peer)
    return peer


class Optimizer:
    """Wraps a torch.optim optimizer over an attached module's parameters: step() is the local
    step (this optimizer's) plus the peer's algorithm around it. Everything else (param_groups,
    state, state_dict, the learning rate) is the wrapped optimizer's."""

    def __init__(self, optimizer, peer, attached=None):
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise gossamer.Error("Optimizer wraps a torch.optim.Optimizer, not %s" % type(optimizer).__name__)
        self.optimizer = optimizer
        self.peer = peer
        self.attached = attached if attached is not None else getattr(peer, "attached", None)
        if self.attached is None:
            raise gossamer.Error("the peer has no module attached: use gossamer.torch.make_peer or attach")
        flat = self.attached.flat_params
        begin, end = flat.data_ptr(), flat.data_ptr() + flat.numel() * 4
        for group in optimizer.param_groups:
            for p in group["params"]:
                if not begin <= p.data_ptr() < end:
                    raise gossamer.Error(
                        "the optimizer holds a parameter outside the peer's buffer: make it over "
                        "the attached module's parameters (after attach)"
                    )

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @property
    def state(self):
        return self.optimizer.state

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, state):
        self.optimizer.load_state_dict(state)

    def zero_grad(self, set_to_none=False):
        """Zeroes the flat gradient buffer in place (the views stay; set_to_none is ignored)."""
        self.attached.zero_grad()

    def step(self, closure=None, *, loss=None, samples=0):
        """One step: False (nothing done) once the run is over.

        Without a closure the gradients are already in place (loss.backward()); ``loss`` (a float
        or a tensor) and ``samples`` are the batch's, for the figures. With a closure (zero_grad,
        forward, backward, return the loss, as torch's optimizers take it) the peer calls it when
        the algorithm asks for the gradients.
        """
        self.attached.ensure()
        gradients = None
        if closure is not None:
            def gradients():
                with torch.enable_grad():
                    value = closure()
                self.attached.ensure()
                return float(value)
        value = 0.0 if loss is None else float(loss)
        return self.peer.step(value, samples, gradients=gradients, update=self.optimizer.step)
