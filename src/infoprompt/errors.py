"""User-facing error type: anything the user can fix (bad path, bad row, unknown name) raises this."""


class UserError(ValueError):
    """An error caused by the user's input; the CLI prints it as one line and exits with status 2.

    A ``ValueError``: the Python API refuses a bad value as Python code expects, so ``except ValueError`` catches it.
    """

    def __str__(self) -> str:
        # The message may quote the user's text (a key, a cell), line breaks included; it stays one line.
        return super().__str__().replace("\r", "\\r").replace("\n", "\\n")
