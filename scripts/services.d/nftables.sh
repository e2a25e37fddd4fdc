#!/usr/bin/env bash
# Make sure Debian's nftables (`nft`) is there for the partition tests (tests/hosts): they make
# packet loss and silent drops with it, in network namespaces of their own (the kernel has no
# netem). Installs the package with apt when it is missing. Without root (or passwordless sudo)
# it says so: CI then fails in the partition tests, a local run skips them with the reason.
set -euo pipefail
command -v nft >/dev/null && exit 0
if [ "$(id -u)" = 0 ]; then SUDO=""
elif sudo -n true 2>/dev/null; then SUDO="sudo -n"
else
  echo "nftables: nft is missing and apt needs root: sudo apt-get install nftables" >&2
  exit 0
fi
echo "nftables: installing Debian's nftables with apt"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get install -y -q nftables >/dev/null 2>&1 \
  || { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q nftables >/dev/null; }
nft --version
