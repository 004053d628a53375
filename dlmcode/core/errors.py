"""User-facing errors. The CLI prints each as one line on stderr and exits non-zero."""


class DlmcodeError(Exception):
    """An error the user can cause and fix; its message is the whole report."""

    exit_code = 1


class UsageError(DlmcodeError):
    """Bad option, span or value: exit 2 like any usage error."""

    exit_code = 2


class InputError(DlmcodeError):
    """A file that cannot be read as text: missing, a directory, binary, empty."""


class ModelError(DlmcodeError):
    """A model that cannot be found, loaded or run here."""
