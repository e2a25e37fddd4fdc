#!/usr/bin/env bash
# The Django integration's tests, in a virtualenv of their own: Django 6 needs Python >= 3.12
# and the project's own venv may be 3.11. Installs relaymq (editable), Django and pytest there.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python313.sh
VENV=.venv-django
if [ ! -f "$VENV/.installed" ] || [ pyproject.toml -nt "$VENV/.installed" ] \
  || [ scripts/django-tests.sh -nt "$VENV/.installed" ]; then
  if ! PY=$(find_python313); then
    echo "django tests: Django 6 needs Python >= 3.12 and no 3.13 was found" >&2
    exit 1
  fi
  rm -rf "$VENV"
  PYENV_VERSION=3.13.0 "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e '.[postgres]' 'django>=6,<7' \
    'pytest>=8' 'pytest-timeout>=2.3' 'psycopg[binary]>=3.1'
  touch "$VENV/.installed"
fi
# Twice: Django's database (and relaymq's backend in it) on SQLite, then on PostgreSQL, so a
# task enqueued in transaction.atomic() is shown to commit and roll back with the data on both.
for db in sqlite postgres; do
  echo "django tests on $db"
  RELAYMQ_DJANGO_DB=$db "$VENV/bin/python" -m pytest -q -p no:cacheprovider \
    -c tests_django/pytest.ini tests_django "$@"
done
