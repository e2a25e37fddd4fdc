#!/usr/bin/env bash
# Make sure every server the tests need is running; start the ones the project owns.
# The CI machine already runs PostgreSQL (5432), Redis (6379) and RabbitMQ (5672).
set -euo pipefail
cd "$(dirname "$0")/.."
for part in scripts/services.d/*.sh; do
  [ -e "$part" ] || continue
  bash "$part"
done
