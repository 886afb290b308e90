"""User-facing errors: the CLI prints these as one line and exits non-zero."""


class CtxlmError(Exception):
    """A problem the user can fix (bad input, missing data, wrong option).

    The message must name the file, line or option involved and say what to do.
    """


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is (as Ctrl-C raises KeyboardInterrupt), so that it ends in one line."""


def said(stop: BaseException) -> BaseException:
    """`stop` (a KeyboardInterrupt) marked as already told to the user, so the command adds no line of its own."""
    stop.said = True
    return stop


class InvalidValue(CtxlmError, ValueError):
    """An argument outside what `checks.RULES` allows (also a ValueError, as Python's own checks raise)."""
