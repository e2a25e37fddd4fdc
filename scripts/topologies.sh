#!/usr/bin/env bash
# The servers of the production-topology tests (tests/topologies), from Debian's packages:
# PgBouncer, PostgreSQL's server binaries (a primary and its streaming replica), redis-server
# (which also runs the sentinels), rabbitmq-server (a three-node cluster) and openssl (the TLS
# test's certificates). The tests start
# and stop their own private instances; this only installs what is missing. Without root (or
# passwordless sudo) it says so: CI then fails in those tests, a local run skips them.
set -euo pipefail
want=()
command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || want+=(pgbouncer)
ls /usr/lib/postgresql/*/bin/pg_basebackup >/dev/null 2>&1 || want+=(postgresql)
command -v redis-server >/dev/null 2>&1 || want+=(redis-server)
command -v rabbitmq-server >/dev/null 2>&1 || [ -x /usr/sbin/rabbitmq-server ] || want+=(rabbitmq-server)
command -v openssl >/dev/null 2>&1 || want+=(openssl)  # the TLS Sentinel test's certificates
[ ${#want[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ]; then SUDO=""
elif sudo -n true 2>/dev/null; then SUDO="sudo -n"
else
  echo "topologies: ${want[*]} missing and apt needs root: sudo apt-get install ${want[*]}" >&2
  exit 0
fi
echo "topologies: installing ${want[*]} with apt"
export DEBIAN_FRONTEND=noninteractive
# The packages' own services stay stopped (the tests start private instances): a policy-rc.d
# that refuses every start, for the length of the install, unless the machine has one already.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
  $SUDO chmod +x "$policy"
  trap '$SUDO rm -f "$policy"' EXIT
fi
$SUDO apt-get install -y -q "${want[@]}" >/dev/null 2>&1 \
  || { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q "${want[@]}" >/dev/null; }
