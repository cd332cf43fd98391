"""Mistakes a user can fix (a bad config, a missing or unreadable file): the command-line entry
points print their one message and exit with status 2, without a traceback. Standard library
only, so every layer may raise them."""

from __future__ import annotations

import argparse
import functools
import logging
import sys
from collections.abc import Callable


class UserError(ValueError):
    """A problem with the user's config or files; the message names the key or file and the fix."""


def report_user_errors(main: Callable) -> Callable:
    """Wrap a command's main(): a UserError or a FileNotFoundError (a path the user gave) is
    printed as one line (plus its list) and exits with status 2; anything else is a bug and
    keeps its traceback."""

    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except (UserError, FileNotFoundError) as err:
            logging.getLogger(main.__module__).debug("user error", exc_info=True)
            print(f"error: {err}", file=sys.stderr)
            raise SystemExit(2) from None

    return wrapper


class ArgumentParser(argparse.ArgumentParser):
    """argparse for the scripts: a usage mistake (an unknown flag, a missing or bad argument) is
    one line on stderr and exit status 2, like every other user error, not argparse's usage
    block."""

    def error(self, message: str):
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)
