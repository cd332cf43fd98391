"""Mistakes a user can fix (a bad config, a missing or unreadable file) and faults a run meets
while it works (a full disk, a file that vanished, a killed worker): the command-line entry
points print their one message, without a traceback (HYDRA_FULL_ERROR=1 shows it), and exit with
status 2 (a mistake) or 75 (a fault: EX_TEMPFAIL, the run can continue once it is fixed).
Standard library only, so every layer may raise them."""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
from collections.abc import Callable, Iterator


class UserError(ValueError):
    """A problem with the user's config or files; the message names the key or file and the fix."""


class RunFault(RuntimeError):
    """A run stopped by its surroundings, not by a bug: the message names what happened (the
    path, the error's meaning, the space needed), the last good checkpoint and the command that
    continues the run."""


FAULT_EXIT = 75  # EX_TEMPFAIL (sysexits.h): a scheduler may retry once the cause is fixed


def exception_chain(err: BaseException | None) -> Iterator[BaseException]:
    """`err`, then what caused it (raise ... from, or raised while handling), to the first."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


def show_traceback() -> bool:
    """Whether the user asked for tracebacks (Hydra's own switch)."""
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


def report_user_errors(main: Callable) -> Callable:
    """Wrap a command's main(): a UserError or a FileNotFoundError (a path the user gave) is
    printed as one line (plus its list) and exits with status 2, a RunFault likewise with
    status 75; anything else is a bug and keeps its traceback."""

    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except (UserError, FileNotFoundError, RunFault) as err:
            if show_traceback():
                raise
            logging.getLogger(main.__module__).debug("stopped", exc_info=True)
            print(f"error: {err}", file=sys.stderr)
            raise SystemExit(FAULT_EXIT if isinstance(err, RunFault) else 2) from None

    return wrapper


class ArgumentParser(argparse.ArgumentParser):
    """argparse for the scripts: a usage mistake (an unknown flag, a missing or bad argument) is
    one line on stderr and exit status 2, like every other user error, not argparse's usage
    block."""

    def error(self, message: str):
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)
