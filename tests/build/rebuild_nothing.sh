#!/usr/bin/env bash
# An unchanged tree rebuilds nothing: `cargo build` twice in a row, the second must compile
# and run no build script, both with the branch's ref loose and after `git pack-refs` moved
# it into packed-refs (what `git gc` does). A build script that watched a path that does not
# exist relinked the binary on every build. Run by .ci/run after the tests; uses the normal
# target directory (nothing else may be building).
#
# usage: tests/build/rebuild_nothing.sh [cargo build args...]   (default: --workspace)
set -euo pipefail
cd "$(dirname "$0")/../.."
ARGS=("$@")
[ ${#ARGS[@]} -gt 0 ] || ARGS=(--workspace)

quiet_second_build() { # what
  cargo build "${ARGS[@]}" >/dev/null 2>&1
  local out
  out=$(cargo build -v "${ARGS[@]}" 2>&1)
  if grep -E '^\s*(Compiling|Running .*build-script)' <<<"$out"; then
    echo "FAIL: an unchanged tree rebuilt the above ($1)" >&2
    return 1
  fi
  echo "ok: the second build compiled nothing ($1)"
}

quiet_second_build "as checked out"
if git rev-parse --git-dir >/dev/null 2>&1; then
  git pack-refs --all
  quiet_second_build "refs packed"
else
  if [ "${CI:-}" = "true" ]; then
    echo "FAIL: not a git checkout, the packed-refs case cannot be checked" >&2
    exit 1
  fi
  echo "SKIP: not a git checkout, the packed-refs case is not checked"
fi
