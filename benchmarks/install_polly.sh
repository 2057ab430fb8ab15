#!/usr/bin/env bash
# Install clang-19 with Polly (and the LLVM OpenMP runtime) from Debian's
# packages, for the "polly" and "polly-par" peers of benchmarks/polybench.
#
# Debian bookworm (12) has clang-19 / libpolly-19-dev / libomp-19-dev in its
# main suite (llvm-toolchain-19, 1:19.1.7-3~deb12u1).  Debian's clang-19 has
# Polly linked in: `clang-19 -mllvm -polly` works without loading a plugin.
# Polly's parallel code (-mllvm -polly-parallel) calls the GNU OpenMP runtime,
# so the shared objects are linked with gcc's libgomp (-lgomp).
#
# Usage: sudo bash benchmarks/install_polly.sh      (or as root)
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

PKGS="clang-19 libpolly-19-dev libomp-19-dev"

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q

if ! apt-cache show clang-19 >/dev/null 2>&1; then
    # Not in the configured suites (an old mirror snapshot): try backports.
    . /etc/os-release
    if [ "${VERSION_CODENAME:-}" = "bookworm" ]; then
        echo "clang-19 not found; enabling bookworm-backports" >&2
        echo "deb http://deb.debian.org/debian bookworm-backports main" |
            $SUDO tee /etc/apt/sources.list.d/bookworm-backports.list >/dev/null
        $SUDO apt-get update -q
    fi
fi

# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $PKGS

# Sanity check: Polly is built in, and OpenMP codegen links with gcc's libgomp.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/t.c" <<'CEOF'
void k(int n, double A[n][n], double B[n][n])
{
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      A[i][j] = 2.0 * B[j][i];
}
CEOF
clang-19 -O3 -march=native -mllvm -polly -mllvm -polly-parallel \
    -fPIC -shared -o "$tmp/t.so" "$tmp/t.c" -lgomp
echo "clang-19 with Polly is ready: $(command -v clang-19)"
