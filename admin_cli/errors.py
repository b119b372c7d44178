"""Exit codes of the `mcp-quota` CLI and the one error type its commands raise.

Scripts rely on these numbers; they are documented in docs/cli.md and must not change.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """What a script can learn from the CLI's exit status."""

    OK = 0
    UNEXPECTED = 1
    USAGE = 2
    NOT_FOUND = 3
    AUTH = 4
    CONFLICT = 5
    UNAVAILABLE = 6


_BY_STATUS: dict[int, ExitCode] = {
    400: ExitCode.USAGE,
    413: ExitCode.USAGE,
    401: ExitCode.AUTH,
    403: ExitCode.AUTH,
    404: ExitCode.NOT_FOUND,
    409: ExitCode.CONFLICT,
    # A throttled admin call is a transient refusal, like a 503: retry later.
    429: ExitCode.UNAVAILABLE,
}


def exit_code_for_status(status: int) -> ExitCode:
    """The exit code for an HTTP error status (or the status a service error maps to)."""
    if status >= 500:
        return ExitCode.UNAVAILABLE
    return _BY_STATUS.get(status, ExitCode.UNEXPECTED)


class CliError(Exception):
    """A command failed in a way the user can act on: a message and an exit code."""

    def __init__(self, message: str, exit_code: ExitCode) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
