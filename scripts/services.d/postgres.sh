#!/usr/bin/env bash
# PostgreSQL for the postgres backend tests: the shared server on 127.0.0.1:5432 (trust auth,
# user postgres). CI machines already run it; on a fresh machine this installs the Debian
# package and starts its cluster. Idempotent: does nothing when the server answers. The
# restart tests make their own private clusters with the same package's initdb/pg_ctl.
set -euo pipefail
HOST=127.0.0.1 PORT=5432

ready() { pg_isready -q -h "$HOST" -p "$PORT" 2>/dev/null; }

if command -v pg_isready >/dev/null && ready; then
  exit 0
fi
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "postgres: installing the PostgreSQL server package" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq postgresql >/dev/null
fi
V=$(ls /etc/postgresql | sort -V | tail -1)
CONF=/etc/postgresql/$V/main
# Loopback trust for the tests (this is a throwaway test machine's own cluster).
if ! grep -q "relaymq-tests" "$CONF/pg_hba.conf"; then
  sed -i '1i host all all 127.0.0.1/32 trust # relaymq-tests\nlocal all all trust # relaymq-tests' \
    "$CONF/pg_hba.conf"
fi
pg_ctlcluster --skip-systemctl-redirect "$V" main start 2>/dev/null || true
for _ in $(seq 1 100); do
  ready && exit 0
  sleep 0.1
done
echo "postgres: server on $HOST:$PORT did not come up" >&2
exit 1
