#!/usr/bin/env bash
# Start the MongoDB-protocol test server (mongoeco, SQLite engine) on 127.0.0.1:27017.
# The CI machine has no mongod, and no registry we may use ships one (see
# /work/shared/services.md section 1). mongoeco needs Python >= 3.13, so it gets its own
# virtualenv (.venv-mongo); the project itself stays on its own Python.
# Idempotent: makes the virtualenv if missing; starts no server when one answers on the port.
set -euo pipefail
cd "$(dirname "$0")/../.."

PORT="${RELAYMQ_MONGO_PORT:-27017}"
VENV=.venv-mongo
STATE=.venv-mongo/run            # data file and log live here (.venv-*/ is .gitignored)
MONGOECO='mongoeco[wire]==4.11.0'

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

source "$(dirname "$0")/../python313.sh"

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import mongoeco.wire' 2>/dev/null; then
  if ! PY=$(find_python313); then
    echo "mongodb: mongoeco needs Python >= 3.13 and none was found (tried pyenv 3.13.0," \
         "python3.13, python3.14, python3). Install one (e.g. 'pyenv install 3.13.0')." >&2
    exit 1
  fi
  echo "mongodb: creating $VENV with $PY"
  rm -rf "$VENV"
  PYENV_VERSION=3.13.0 "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$MONGOECO"
fi

# The restart tests start private servers from this virtualenv, so it is made even when a
# server already answers on the port.
if port_open "$PORT"; then
  echo "mongodb: something already listens on 127.0.0.1:$PORT; using it"
  exit 0
fi

mkdir -p "$STATE"
LOG="$STATE/server-$PORT.log"
: > "$LOG"
# Nothing serves this file now, and every test makes and drops its own database: start empty.
rm -f "$STATE/data-$PORT.db" "$STATE/data-$PORT.db-wal" "$STATE/data-$PORT.db-shm"
# setsid: the server outlives this script and the make run that started it.
setsid "$VENV/bin/python" tests/support/mongoeco_server.py "$PORT" "$STATE/data-$PORT.db" \
  > "$LOG" 2>&1 < /dev/null &
PID=$!
echo "$PID" > "$STATE/server-$PORT.pid"

deadline=$((SECONDS + 60))
until grep -q READY "$LOG"; do
  if ! kill -0 "$PID" 2>/dev/null; then
    echo "mongodb: mongoeco exited before it was ready; its log:" >&2
    cat "$LOG" >&2
    exit 1
  fi
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "mongodb: mongoeco not ready after 60 s; its log:" >&2
    cat "$LOG" >&2
    exit 1
  fi
  sleep 0.1
done
echo "mongodb: mongoeco (pid $PID) ready on 127.0.0.1:$PORT, data in $STATE/data-$PORT.db"
