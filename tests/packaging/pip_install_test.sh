#!/usr/bin/env bash
# `pip install .` as a user runs it without a package index: a fresh virtual environment (over
# Debian's python3, with its site packages for NumPy and torch), pip install --no-build-isolation
# --no-index of the source tree, reusing BUILD_DIR (GOSSAMER_BUILD_DIR); then, from a directory
# outside the repository and with PYTHONPATH unset, gossamer and gossamer.torch import from the
# environment's site-packages and a one-peer torch run trains. The source tree must be left as it
# was (no build/ or egg-info of setuptools in it). Exit 77 (a skip) without venv, pip or wheel.
#   tests/packaging/pip_install_test.sh SOURCE_DIR BUILD_DIR [PYTHON]
set -euo pipefail
[[ $# -ge 2 && $# -le 3 ]] || { echo "usage: pip_install_test.sh SOURCE_DIR BUILD_DIR [PYTHON]" >&2; exit 2; }
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
python=${3:-/usr/bin/python3}
skip() { echo "pip_install_test.sh: skipped: $*" >&2; exit 77; }
fail() { echo "pip_install_test.sh: FAILED: $*" >&2; exit 1; }

"$python" -c 'import ensurepip' 2>/dev/null || skip "$python has no venv/ensurepip (Debian: python3-venv)"
"$python" -c 'import pip' 2>/dev/null || skip "$python has no pip (Debian: python3-pip)"
"$python" -c 'import setuptools, wheel' 2>/dev/null || skip "$python has no setuptools or wheel (Debian: python3-setuptools, python3-wheel)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# What setuptools would leave in the tree if it built there: egg-info, build/lib.*, build/bdist.*.
state() { git -C "$src" status --porcelain --ignored 2>/dev/null | grep -v '^!! build' || true; }
before=$(state)
touch "$tmp/marker"

"$python" -m venv --system-site-packages "$tmp/venv"
unset PYTHONPATH
GOSSAMER_BUILD_DIR=$build "$tmp/venv/bin/python" -m pip install --no-build-isolation --no-index \
  --disable-pip-version-check --no-cache-dir "$src" || fail "pip install --no-build-isolation --no-index $src failed"

after=$(state)
[[ $before == "$after" ]] || fail "pip install left files in the source tree: $(diff <(echo "$before") <(echo "$after") | grep '^>' | tr '\n' ' ')"
left=$(find "$src" -maxdepth 3 -newer "$tmp/marker" \( -name '*.egg-info' -o -name 'bdist.*' -o -name 'lib.linux*' \) -print)
[[ -z $left ]] || fail "pip install left setuptools' build files in the source tree: $left"

mkdir "$tmp/elsewhere"
cd "$tmp/elsewhere"
"$tmp/venv/bin/python" - "$tmp/venv" <<'EOF'
import os, sys, sysconfig

import gossamer
import gossamer.torch

venv = os.path.realpath(sys.argv[1])
site = os.path.realpath(sysconfig.get_paths()["platlib"])
where = os.path.realpath(gossamer.__file__)
assert where.startswith(site + os.sep) and site.startswith(venv + os.sep), \
    "gossamer was imported from %s, not from the environment's %s" % (where, site)
assert os.path.realpath(gossamer.torch.__file__).startswith(site + os.sep), gossamer.torch.__file__
native = [f for f in os.listdir(os.path.dirname(where)) if f.startswith("_gossamer")]
assert native and native[0].endswith(sysconfig.get_config_var("EXT_SUFFIX")), native

# One peer fits y = 2x - 1 with a torch.nn.Linear through gossamer.torch.
import torch

torch.manual_seed(0)
model = torch.nn.Linear(1, 1)
peer = gossamer.torch.make_peer(model, algorithm="none", steps=300, transport="inproc")
opt = gossamer.torch.Optimizer(torch.optim.SGD(model.parameters(), lr=0.1), peer)
x = torch.linspace(-1, 1, 64).unsqueeze(1)
y = 2 * x - 1
assert peer.start()
while not peer.done:
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step(loss=loss, samples=len(x))
result = peer.finish()
w, b = model.weight.item(), model.bias.item()
assert result["steps"] == 300, result
assert abs(w - 2) < 1e-2 and abs(b + 1) < 1e-2, (w, b)
print("pip_install_test: gossamer from %s trained w=%.4f b=%.4f in %d steps" % (where, w, b, result["steps"]))
EOF
echo "pip_install_test.sh: passed"
