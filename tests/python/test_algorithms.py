"""Every built-in algorithm driven from Python: four peers whose data each determine only a
quarter of the model reach its optimum together (and, without an exchange, do not)."""

import pytest

from conftest import run_peers
from gossamer_or_skip import gossamer, np

PEERS, BLOCK = 4, 8
TARGET = np.random.default_rng(5).normal(size=PEERS * BLOCK).astype(np.float32)


def local_gradient(rank, params):
    """Peer `rank` sees only block `rank` of the target: the gradient of
    0.5 ||w_block - target_block||^2. The sum over peers has its minimum at the target."""
    g = np.zeros_like(params)
    block = slice(rank * BLOCK, (rank + 1) * BLOCK)
    g[block] = params[block] - TARGET[block]
    return g


# Periods short enough for a run of 300 steps (their defaults are tuned for thousands): a few tens
# of rounds, as the defaults give on a real run.
OPTIONS = {"easgd": {"tau": 2}, "eamsgd": {"tau": 2}, "diloco": {"h": 10},
           "streaming-diloco": {"h": 12}}


def train(algorithm, steps=300):
    peers = gossamer.local_cluster(
        PEERS, parameters=PEERS * BLOCK, algorithm=algorithm,
        algorithm_options=OPTIONS.get(algorithm, {}), steps=steps, optimizer="momentum",
        momentum=0.5, lr=0.3, lr_schedule="cosine", step_time=0.001, finish_timeout=30)

    def drive(peer, rank):
        assert peer.start()
        while True:
            def gradients():
                peer.grads[:] = local_gradient(rank, peer.params)
                return float(0.5 * np.sum(peer.grads ** 2))

            if not peer.step(gradients=gradients, samples=1):
                break
        final = peer.params.copy()
        result = peer.finish()
        return final, result

    return run_peers(peers, drive)


def relative_error(models):
    mean = np.mean(models, axis=0)
    return float(np.linalg.norm(mean - TARGET) / np.linalg.norm(TARGET))


ALGORITHMS = sorted(name for name in gossamer.algorithms() if name != "none")


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_algorithm_reaches_the_optimum_from_python(algorithm, watchdog):
    finals = train(algorithm)
    models = [model for model, _ in finals]
    for _, result in finals:
        assert result["steps"] == 300 and result["algorithm"] == algorithm
        assert result["bytes_sent"] > 0
        # Every wait on the others, over the loop and the finish: a fraction, never above 1.
        assert 0 <= result["comm_wait_fraction"] <= 1
        assert result["finish_seconds"] > 0
        assert result["peak_bytes"] >= 2 * 4 * PEERS * BLOCK  # params and grads at least
    # Each peer alone would reach 1/4 of the target (error 0.75 for their average).
    assert relative_error(models) < 0.1, algorithm


def test_without_an_exchange_the_peers_do_not_reach_it(watchdog):
    finals = train("none")
    models = [model for model, _ in finals]
    assert relative_error(models) > 0.7
    assert all(result["bytes_sent"] == 0 for _, result in finals)
