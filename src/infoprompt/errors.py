"""User-facing error type: anything the user can fix (bad path, bad row, unknown name) raises this."""


class UserError(Exception):
    """An error caused by the user's input; the CLI prints it as one line and exits with status 2."""
