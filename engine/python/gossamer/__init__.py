"""gossamer from Python: decentralized, elastic training where you own the training loop.

A Peer holds the model's parameters in one flat float32 buffer and the gradients in a second one:
its own (``peer.params`` and ``peer.grads`` are NumPy views of them, no copies), or memory you own
on the host or a GPU (``gossamer.Buffers``; ``gossamer.torch`` hands over a ``torch.nn.Module``'s
parameters and gradients laid out over two flat tensors on the module's device).
Each step, compute the gradients into ``peer.grads`` and call ``peer.step``: the peer runs its
decentralized algorithm around them (exchanges, merges, the local update with its optimizer or
yours) exactly as gossamer's own training loop does, with the same membership, elasticity,
checkpoints and evaluation hooks::

    import gossamer
    peer = gossamer.Peer(parameters=n, algorithm="gosgd", steps=1000, min_peers=4,
                         listen="10.0.0.1:7000", seeds=["10.0.0.2:7000"], secret_file="secret")
    peer.params[:] = initial           # the same initial model on every peer (or let them agree)
    if peer.start():                   # waits for min_peers, sets the algorithm up
        while True:
            loss = my_gradients(peer.params, peer.grads, peer.shard)
            if not peer.step(loss=loss, samples=batch):
                break                  # the run is over (or a stop, leave or kill came)
    result = peer.finish()             # waits for the others, leaves; a dict of figures

The GIL is released while the peer waits on the network; the callables you pass (gradients,
update, evaluate) run on the thread that called step() or finish(), with the GIL held.
"""

from . import _gossamer

Error = _gossamer.Error
"""Raised for bad configuration and misuse (a ValueError): the message is the sentence."""

algorithms = _gossamer.algorithms
topologies = _gossamer.topologies
set_log_level = _gossamer.set_log_level

# Keyword options of Peer and local_cluster (name -> help), passed to the runtime's configuration.
# They are the run-level settings of gossamer-peer (engine/peer_settings.h) that Python takes,
# declared once there: compress, error_feedback and max_norm_ratio as much as lr or steps.
_OPTIONS = _gossamer.options()


def _check_options(options):
    for name in sorted(options):
        if name not in _OPTIONS:
            raise TypeError(
                "unknown option '%s'; did you mean '%s'?" % (name, _gossamer.closest_option(name))
            )


def _layout(parameters, layout):
    if (parameters is None) == (layout is None):
        raise TypeError("give the model as parameters=N (one flat tensor) or layout=[(name, shape), ...]")
    if layout is None:
        if not isinstance(parameters, int) or parameters <= 0:
            raise Error("parameters must be a positive int, not %r" % (parameters,))
        return [("params", [parameters])]
    out = []
    for entry in layout:
        name, shape = entry
        shape = [int(d) for d in shape] or [1]
        if any(d <= 0 for d in shape):
            raise Error("tensor %r has an empty shape %r" % (name, tuple(shape)))
        out.append((str(name), shape))
    if not out:
        raise Error("the layout holds no tensors")
    return out


class Buffers:
    """Parameter and gradient memory you own, for a Peer to train over without a copy: ``count``
    float32 values at each of the addresses ``params`` and ``grads`` (disjoint), in host memory
    (``device="cpu"``) or on a GPU (``"cuda:N"``, work ordered on ``stream``, a CUDA stream's
    address; 0: the default stream). The peer's merges and updates write into them, and its own
    GPU work is ordered after your stream's and yours after its own (events: no host waits).
    ``owner`` (any object: your tensors, say) is kept alive as long as the peer.
    ``Buffers.from_numpy(params, grads)`` takes two float32 NumPy arrays."""

    def __init__(self, params, grads, count, device="cpu", stream=0, owner=None):
        self.params, self.grads, self.count = int(params), int(grads), int(count)
        self.device, self.stream, self.owner = str(device), int(stream), owner

    @classmethod
    def from_numpy(cls, params, grads):
        import numpy as np

        for name, array in (("params", params), ("grads", grads)):
            if not isinstance(array, np.ndarray) or array.dtype != np.float32 or not array.flags.c_contiguous:
                raise Error("%s must be a C-contiguous float32 NumPy array" % name)
        if params.size != grads.size:
            raise Error("params hold %d values and grads %d" % (params.size, grads.size))
        return cls(params.ctypes.data, grads.ctypes.data, params.size, "cpu", 0, (params, grads))

    def _native(self):
        return (self.params, self.grads, self.count, self.device, self.stream)


class Peer:
    """One peer of a decentralized training run whose loop you own (see the module's doc).

    The model is given as ``parameters=N`` (one flat tensor of N floats) or as
    ``layout=[(name, shape), ...]`` (named tensors back to back; every peer must give the same).
    ``evaluate(params, samples)``, when given, evaluates a flat float32 array of params on the
    first ``samples`` test samples (0: all) and returns ``(correct, samples, loss_sum)``; it
    serves the periodic evaluations (eval_every), the final one and the consensus.
    ``steps_per_epoch`` (0: the whole run) counts epochs in the figures. ``buffers``
    (``gossamer.Buffers``) gives memory of yours to train over, its values the initial model
    (default: the peer's own, zeroed); ``evaluate`` then gets the address (an int) when the
    params are your GPU memory. The other keyword options are listed in
    ``gossamer.Peer.OPTIONS``.
    """

    OPTIONS = _OPTIONS

    def __init__(self, parameters=None, *, layout=None, evaluate=None, steps_per_epoch=0,
                 buffers=None, _native=None, **options):
        self._buffers = buffers  # keeps the owner of the memory alive
        if _native is not None:
            self._peer = _native
        else:
            _check_options(options)
            if "steps" not in options:
                raise Error("a peer needs the number of steps of its run: steps=N")
            transport = options.get("transport", "tcp")
            if transport != "inproc" and not options.get("secret") and not options.get("secret_file"):
                raise Error(
                    "a networked peer needs the cluster secret: secret=... or secret_file=... "
                    "(the same on every peer)"
                )
            self._peer = _gossamer._Peer(dict(options), _layout(parameters, layout), evaluate,
                                         int(steps_per_epoch), _native_buffers(buffers))
        self._done = False

    # ---- the model ----
    @property
    def params(self):
        """The flat float32 parameters: a NumPy view (writes go to the peer, no copy); an error
        when they are your GPU memory (Buffers)."""
        return self._peer.params

    @property
    def grads(self):
        """The flat float32 gradients: a NumPy view the step reads."""
        return self._peer.grads

    # ---- the loop ----
    def start(self):
        """Waits for min_peers members and sets the algorithm up; False when this peer joined no
        one within join_timeout (finish() says why)."""
        return self._peer.start()

    def step(self, loss=0.0, samples=0, *, gradients=None, update=None, stream=None):
        """One step around your gradients: False (nothing done) once the run is over.

        ``loss``/``samples``: the loss and size of the mini-batch whose gradients ``grads`` holds.
        ``gradients()``, instead, computes them when the algorithm asks (after it sent what it
        sends first) and returns the loss. ``update()`` applies your optimizer to ``params``
        with ``grads`` (default: the peer's optimizer). ``stream``: the CUDA stream your work
        is on from now on, when it is not the one your Buffers named.
        """
        if self._done:
            return False
        stepped = self._peer.step(float(loss), int(samples), gradients, update,
                                  None if stream is None else int(stream))
        self._done = not stepped
        return stepped

    @property
    def done(self):
        """True once step() returned False: the run is over."""
        return self._done

    def finish(self):
        """Waits until every member finished, lets the algorithm finish, leaves; returns the
        figures (steps, wall_seconds, test_accuracy, bytes_sent, metrics, consensus, ...)."""
        return self._peer.finish()

    # ---- from any thread ----
    def stop(self):
        """Training ends at the next step boundary (the whole cluster stopping together)."""
        self._peer.request_stop()

    def leave(self):
        """This peer leaves at its next step boundary while the others go on."""
        self._peer.request_leave()

    def kill(self):
        """Stops at once without telling anyone, as kill -9 would look from outside."""
        self._peer.kill()

    @property
    def id(self):
        return self._peer.id

    @property
    def endpoint(self):
        """HOST:PORT where others reach this peer (a seed for them)."""
        return self._peer.endpoint

    @property
    def shard(self):
        """(index, count): this peer's part of the training data; changes with the members."""
        return self._peer.shard

    def members(self):
        """The current membership view: dicts of peer, address, state."""
        return self._peer.members()

    def events(self):
        """Membership events since the last call: dicts of kind (joined, left, failed,
        rejoined), peer, address, epoch."""
        return self._peer.events()

    def status(self):
        """step, total_steps, loss, bytes_sent/received, comm_wait_seconds, compute_seconds,
        train_seconds, training, finished."""
        return self._peer.status()


def _native_buffers(buffers):
    if buffers is None:
        return None
    if not isinstance(buffers, Buffers):
        raise Error("buffers must be a gossamer.Buffers, not %s" % type(buffers).__name__)
    return buffers._native()


def local_cluster(count, parameters=None, *, layout=None, evaluate=None, steps_per_epoch=0,
                  buffers=None, **options):
    """``count`` peers in this process, joined by seeds over the in-process transport (or tcp on
    127.0.0.1 with transport="tcp"), sharing one fresh secret; min_peers defaults to count.
    Drive each from a thread of its own (start, step, finish): the GIL is released while they
    wait on each other. ``evaluate`` may be one callable for all or a list of one per peer;
    ``buffers`` a list of one gossamer.Buffers per peer."""
    _check_options(options)
    if count < 1:
        raise Error("a local cluster needs at least one peer")
    if "steps" not in options:
        raise Error("a peer needs the number of steps of its run: steps=N")
    options.setdefault("min_peers", count)
    options.setdefault("transport", "inproc")
    configs = _gossamer._LocalConfigs(dict(options))
    shapes = _layout(parameters, layout)
    evaluations = evaluate if isinstance(evaluate, (list, tuple)) else [evaluate] * count
    if len(evaluations) != count:
        raise Error("evaluate holds %d callables for %d peers" % (len(evaluations), count))
    memory = [None] * count if buffers is None else list(buffers)
    if len(memory) != count:
        raise Error("buffers holds %d entries for %d peers" % (len(memory), count))
    peers = []
    for index in range(count):
        seed = peers[0].endpoint if peers else None
        native = configs.make(index, seed, shapes, evaluations[index], int(steps_per_epoch),
                              _native_buffers(memory[index]))
        configs.listening(native.endpoint, index)
        peers.append(Peer(_native=native, buffers=memory[index]))
    return peers
