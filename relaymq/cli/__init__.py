"""The ``relaymq`` command: ``main(argv) -> int``. Every option has a RELAYMQ_* twin.

Exit codes: 0 ok, 1 an error (a job or module not found...), 2 a usage or configuration error,
3 a backend that cannot be reached, 130 interrupted."""

from __future__ import annotations

import sys

import click

from relaymq.cli.app import cli


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code instead of exiting (tests call this)."""
    try:
        cli.main(args=argv, prog_name="relaymq", standalone_mode=False)
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.UsageError as e:  # one line, not the usage block
        click.echo(f"Error: {e.format_message()}", err=True)
        return 2
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
