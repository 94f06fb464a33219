"""Fashion-MNIST from the IDX files of Debian's dataset-fashion-mnist, as NumPy arrays."""

import gzip
import os

import numpy as np

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"


def _read(path, magic, header):
    if not os.path.exists(path):
        raise SystemExit(
            "Fashion-MNIST file %s not found: install the Debian package "
            "(apt-get install dataset-fashion-mnist) or pass --data-dir" % path
        )
    with gzip.open(path, "rb") as f:
        data = f.read()
    if int.from_bytes(data[0:4], "big") != magic:
        raise SystemExit("%s is not an IDX file of the expected kind" % path)
    return np.frombuffer(data, dtype=np.uint8, offset=header)


def load(split, data_dir=DEFAULT_DIR):
    """(images, labels) of 'train' or 'test': float32 [n, 1, 28, 28] in [0, 1], int64 [n]."""
    prefix = "train" if split == "train" else "t10k"
    images = _read(os.path.join(data_dir, prefix + "-images-idx3-ubyte.gz"), 0x803, 16)
    labels = _read(os.path.join(data_dir, prefix + "-labels-idx1-ubyte.gz"), 0x801, 8)
    images = images.reshape(-1, 1, 28, 28).astype(np.float32) / 255.0
    if len(images) != len(labels):
        raise SystemExit("Fashion-MNIST %s: %d images but %d labels" % (split, len(images), len(labels)))
    return images, labels.astype(np.int64)
