"""gossamer for PyTorch: a torch.nn.Module trained by decentralized peers, on the CPU or a GPU.

``attach(module)`` lays the module's parameters and gradients out over two flat float32 tensors
that torch allocates on the module's device (its current values copied in once; from then on
there is one copy of each tensor, and ``loss.backward()`` accumulates straight into the flat
gradient tensor); ``make_peer`` hands them to a gossamer.Peer as its buffers, so the peer's
merges write into the module's own parameters. ``Optimizer(torch_optimizer, peer)`` wraps any
``torch.optim`` optimizer over those parameters so that ``opt.step()`` is the local step plus
the algorithm's exchange::

    import gossamer, gossamer.torch
    model = Net().cuda()                   # or on the CPU
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

On a GPU the peer's work is ordered after torch's current stream, and torch's after the peer's,
with CUDA events: no synchronisation is needed, and none is made. What torch users do every day
works: ``zero_grad()`` setting the gradients to None (the views come back, zeroed, at the next
forward: no copy), ``torch.autocast`` with a ``GradScaler`` (``scaler.step(opt, loss=..,
samples=..)``; parameters stay float32, and a parameter of another type is refused by name).
Floating-point module buffers (BatchNorm's running statistics) are laid out after the parameters
and averaged with them by the algorithms that average models (``buffers="average"``, the
default); with ``buffers="local"`` each peer keeps its own. Integer buffers
(``num_batches_tracked``) stay local. Averaged buffers have zero gradients: the peer's own
optimizer with weight decay would shrink them, so give such a run a torch optimizer (Optimizer).
"""

import torch

import gossamer


def _check_module(module):
    params = list(module.named_parameters())
    if not params:
        raise gossamer.Error("the module has no parameters")
    device = params[0][1].device
    for name, p in params:
        if p.dtype != torch.float32:
            raise gossamer.Error(
                "parameter %s is %s; gossamer's buffers are float32 (module.float(); "
                "torch.autocast keeps float32 parameters)" % (name, p.dtype)
            )
        if p.device != device:
            raise gossamer.Error(
                "parameter %s is on %s and %s on %s: gossamer.torch lays a module out on one device"
                % (name, p.device, params[0][0], device)
            )
    return params, device


def _averaged_buffers(module, buffers):
    if buffers not in ("average", "local"):
        raise gossamer.Error("buffers must be 'average' or 'local', not %r" % (buffers,))
    if buffers == "local":
        return []
    return [(name, b) for name, b in module.named_buffers() if b.dtype == torch.float32]


def _layout(params, stats):
    """The (name, shape) list of the flat buffer: the parameters, then the averaged buffers."""
    return [(name, tuple(p.shape)) for name, p in params] + [
        ("buffer." + name, tuple(b.shape) or (1,)) for name, b in stats
    ]


def _device_name(device):
    if device.type == "cpu":
        return "cpu"
    if device.type == "cuda":
        return "cuda:%d" % (device.index if device.index is not None else torch.cuda.current_device())
    raise gossamer.Error("gossamer.torch lays out modules on the CPU or CUDA, not on %s" % device)


def _current_stream(device):
    return torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0


class Attached:
    """The module's parameters (and averaged buffers) and gradients as views of two flat tensors
    on the module's device: ``flat_params`` and ``flat_grads``."""

    def __init__(self, module, buffers="average"):
        params, self.device = _check_module(module)
        self.module = module
        stats = _averaged_buffers(module, buffers)
        total = sum(p.numel() for _, p in params) + sum(b.numel() for _, b in stats)
        self.flat_params = torch.empty(total, dtype=torch.float32, device=self.device)
        self.flat_grads = torch.zeros(total, dtype=torch.float32, device=self.device)
        self.copies = 0  # tensors copied back into the flat buffers after being replaced
        # (parameter, offset, count, address of its value, address of its gradient)
        self._slots = []
        # (owning module, buffer name, offset, count, address)
        self._stats = []
        self._layout = _layout(params, stats)
        offset = 0
        with torch.no_grad():
            for _, p in params:
                n = p.numel()
                value = self.flat_params[offset:offset + n].view_as(p)
                value.copy_(p)
                p.data = value
                p.grad = self.flat_grads[offset:offset + n].view_as(p)
                self._slots.append((p, offset, n, value.data_ptr(), p.grad.data_ptr()))
                offset += n
            for name, b in stats:
                n = b.numel()
                owner, _, attribute = name.rpartition(".")
                holder = module.get_submodule(owner) if owner else module
                view = self.flat_params[offset:offset + n].view_as(b)
                view.copy_(b)
                holder._buffers[attribute] = view
                self._stats.append((holder, attribute, offset, n, view.data_ptr()))
                offset += n
        self._hook = module.register_forward_pre_hook(self._before_forward)

    def layout(self):
        """The (name, shape) list of the flat buffer: parameters, then averaged buffers."""
        return list(self._layout)

    def buffers(self):
        """The flat tensors as the buffers of a gossamer.Peer (keeping this object alive)."""
        return gossamer.Buffers(self.flat_params.data_ptr(), self.flat_grads.data_ptr(),
                                self.flat_params.numel(), _device_name(self.device),
                                _current_stream(self.device), owner=self)

    def stream(self):
        """torch's current stream on the module's device (0 on the CPU)."""
        return _current_stream(self.device)

    def _before_forward(self, module, inputs):
        # zero_grad(set_to_none=True) left None: the views come back, zeroed, before autograd
        # would allocate fresh gradients (one fill of the flat buffer, no copy).
        if any(p.grad is None for p, *_ in self._slots):
            self.flat_grads.zero_()
            for p, offset, n, _, grad_at in self._slots:
                if p.grad is None:
                    p.grad = self.flat_grads[offset:offset + n].view_as(p)

    def ensure(self):
        """Puts back views that something replaced (module.to(), a gradient autograd made when
        no forward ran since zero_grad, a buffer reassigned), copying their values in (counted in
        ``copies``). A few pointer comparisons when nothing did."""
        for p, offset, n, value_at, grad_at in self._slots:
            if p.data_ptr() != value_at:
                with torch.no_grad():
                    value = self.flat_params[offset:offset + n].view_as(p)
                    value.copy_(p.data)
                    p.data = value
                self.copies += 1
            g = p.grad
            if g is None or g.data_ptr() != grad_at:
                view = self.flat_grads[offset:offset + n].view_as(p)
                with torch.no_grad():
                    if g is None:
                        view.zero_()
                    else:
                        view.copy_(g)
                        self.copies += 1
                p.grad = view
        for holder, attribute, offset, n, at in self._stats:
            b = holder._buffers[attribute]
            if b.data_ptr() != at:
                view = self.flat_params[offset:offset + n].view_as(b)
                with torch.no_grad():
                    view.copy_(b)
                holder._buffers[attribute] = view
                self.copies += 1

    def zero_grad(self):
        self.flat_grads.zero_()
        self.ensure()

    def detach(self):
        """Stops watching the module's forward (the layout stays)."""
        self._hook.remove()


def layout_of(module, buffers="average"):
    """The (name, shape) list of the module's flat buffer: parameters() order, then the
    averaged buffers (``buffer.<name>``)."""
    params, _ = _check_module(module)
    return _layout(params, _averaged_buffers(module, buffers))


def attach(module, buffers="average"):
    """Lays ``module``'s parameters (and averaged buffers) and gradients out over two flat tensors
    on its device, copying its values in; returns the Attached views, whose ``buffers()`` a
    gossamer.Peer or gossamer.local_cluster takes."""
    return Attached(module, buffers)


def make_peer(module, *, evaluate=None, buffers="average", **options):
    """A gossamer.Peer over ``module``'s own parameters and gradients (attach), with the module
    attached to it (``peer.attached``).

    ``evaluate(module, samples)`` (optional) evaluates the module as it stands on the first
    ``samples`` test samples (0: all) and returns (correct, samples, loss_sum). The peer calls it
    for its own model, and for the consensus with other values loaded into the module for the
    length of the call.
    """
    attached = attach(module, buffers)
    peer = gossamer.Peer(layout=attached.layout(), buffers=attached.buffers(),
                         evaluate=evaluation(attached, evaluate) if evaluate else None, **options)
    peer.attached = attached
    return peer


def evaluation(attached, evaluate):
    """The peer's ``evaluate(params, samples)`` for a module attached with ``attached``: its own
    params (their address, or a view of them) evaluate the module as it stands; other params
    (the consensus's, a host array) are loaded into it for the length of the call."""
    flat = attached.flat_params

    def run(params, samples):
        with torch.no_grad():
            if isinstance(params, int):
                if params != flat.data_ptr():
                    raise gossamer.Error("evaluate was given device memory that is not the module's")
                return evaluate(attached.module, samples)
            values = torch.from_numpy(params)
            if values.data_ptr() == flat.data_ptr():
                return evaluate(attached.module, samples)
            saved = flat.clone()
            try:
                flat.copy_(values)
                return evaluate(attached.module, samples)
            finally:
                flat.copy_(saved)

    return run


class Optimizer:
    """Wraps a torch.optim optimizer over an attached module's parameters: step() is the local
    step (this optimizer's) plus the peer's algorithm around it. Everything else (param_groups,
    state, state_dict, the learning rate) is the wrapped optimizer's, so a GradScaler takes it
    as it takes the optimizer."""

    def __init__(self, optimizer, peer, attached=None):
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise gossamer.Error("Optimizer wraps a torch.optim.Optimizer, not %s" % type(optimizer).__name__)
        self.optimizer = optimizer
        self.peer = peer
        self.attached = attached if attached is not None else getattr(peer, "attached", None)
        if self.attached is None:
            raise gossamer.Error("the peer has no module attached: use gossamer.torch.make_peer")
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

    def zero_grad(self, set_to_none=True):
        """Zeroes the flat gradient buffer in place: one fill, the views stay (set_to_none is
        accepted for torch's signature; None gradients would only come back at the next forward)."""
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
        return self.peer.step(self._loss_value(loss), samples, gradients=gradients,
                              update=self.optimizer.step, stream=self.attached.stream())

    def _loss_value(self, loss):
        """The loss as a float for the figures. A GPU loss is copied to the host asynchronously
        and the previous step's is reported, which is done by now: reading this step's would make
        the host wait for its backward pass every step (the figures lag by one step)."""
        if loss is None:
            return 0.0
        if not isinstance(loss, torch.Tensor) or loss.device.type != "cuda":
            return float(loss)
        host = torch.empty((), dtype=loss.dtype, pin_memory=True)
        host.copy_(loss.detach().reshape(()), non_blocking=True)
        done = torch.cuda.Event()
        done.record()
        previous, self._pending_loss = getattr(self, "_pending_loss", None), (host, done)
        host, done = previous or self._pending_loss
        done.synchronize()
        return float(host)
