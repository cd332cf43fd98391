"""Faults a run meets while it works, each said in one line (errors.RunFault): a write that
fails (full disk, quota, read-only or failing storage), a feature store changed under the run, a
data-loading worker killed by the system, and a stop signal (SIGTERM: what SLURM, Kubernetes and
spot instances send first), on which the run checkpoints where it stands. The line names the
path and what the error means, the space needed where it is known, the last good checkpoint and
the command that continues the run; anything else is a bug and keeps its traceback."""

from __future__ import annotations

import errno
import os
import re
import shlex
import shutil
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePath

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.utilities.exceptions import SIGTERMException

from ..data.store import StoreChanged
from ..errors import RunFault, exception_chain
from .checkpoint_policy import newest_checkpoint

# errno -> what it means to the user (the errors a run's writes meet that are not bugs)
WRITE_ERRORS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EROFS: "the file system is read-only",
    errno.EIO: "an input/output error (a failing disk, or a network mount that went away)",
    errno.ESTALE: "a stale network file handle (the file was replaced on the server)",
    errno.EACCES: "permission denied",
}
# torch's messages for a worker that died without a Python exception
WORKER = re.compile(r"DataLoader worker \(pid(?:\(s\))? ([\d, ]+)\) (?:is killed by signal: ([^.]+)"
                    r"|exited unexpectedly(?: with exit code (-?\d+))?)")
SIGNALS = {
    "Killed": "SIGKILL, most often the system's out-of-memory killer (`dmesg | grep -i oom` says)",
    "Bus error": "SIGBUS: a memory-mapped file (the feature store) shrank or vanished under it",
    "Segmentation fault": "SIGSEGV",
}


def _mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


# Frames that write a file they were handed: (function name, the local that names the target).
_COPY_TARGETS = {"copyfile": "dst", "copy": "dst", "copy2": "dst", "move": "dst"}


def _path_in_traceback(err: BaseException) -> str | None:
    """The file a write without a file name failed on, read from the innermost frame that
    names one: a file object's flush or close (its `path` or `name`: a logger's metrics file),
    a Path's write_text, shutil's copy (its `dst`: a logger copying media into the run)."""
    frames = []
    tb = err.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        local = frame.f_locals
        if (target := local.get(_COPY_TARGETS.get(frame.f_code.co_name, ""))) is not None:
            return str(target)
        owner = local.get("self")
        if isinstance(owner, PurePath) and frame.f_code.co_name.startswith(("write", "open")):
            return str(owner)
        if callable(getattr(owner, "write", None)):  # a file object
            for attr in ("path", "name"):
                value = getattr(owner, attr, None)
                if isinstance(value, str | PurePath) and os.sep in str(value):
                    return str(value)
    return None


def _write_error(err: OSError) -> str:
    # a copy or move names its source and its target (filename2): the target is the write
    path = err.filename2 or err.filename or _path_in_traceback(err)
    what = WRITE_ERRORS[err.errno]
    line = f"could not write {path or 'a file of the run'}: {what} ({errno.errorcode[err.errno]})"
    needed = getattr(err, "needed_bytes", None)
    if err.errno in (errno.ENOSPC, errno.EDQUOT) and path:
        try:
            free = shutil.disk_usage(Path(path).parent).free
        except OSError:
            free = None
        if needed:
            line += f"; it needs about {_mib(needed)}"
        if free is not None:
            line += f", {_mib(free)} free there" if needed else f"; {_mib(free)} free there"
    return line


def _worker_death(match: re.Match) -> str:
    pid, signal_name, code = match.groups()
    return _worker_words(pid.strip(), signal_name.strip() if signal_name else None, code)


def _worker_words(pid: str, signal_name: str | None, code: str | None) -> str:
    if signal_name:
        why = SIGNALS.get(signal_name, f"signal {signal_name}")
        how = f"was killed by {why}"
    else:  # (torch's message when it found the worker gone before its signal handler did)
        how = ("exited unexpectedly" + (f" with exit code {code}" if code else "")
               + " (killed by the system, most often the out-of-memory killer: `dmesg | grep -i "
               "oom` says, or crashed)")
    return (f"a data-loading worker (pid {pid}) {how}; try fewer workers "
            "(data.num_workers=0 reads in the training process), a smaller data.batch_size, or "
            "more memory")


def _died_handing_over(err: BaseException) -> str | None:
    """A worker killed while it hands a batch over (its tensors go through a socket): the
    training process's read fails with a broken connection, not with torch's worker message.
    The loader iterator in the traceback knows which of its workers died, and of what."""
    if not isinstance(err, (ConnectionError, EOFError)):
        return None
    tb = err.__traceback__
    while tb is not None:
        for w in getattr(tb.tb_frame.f_locals.get("self"), "_workers", None) or []:
            code = getattr(w, "exitcode", None)
            if code:  # None: alive; 0: finished normally
                name = signal.strsignal(-code) if code < 0 else None
                return _worker_words(str(w.pid), name, None if name else str(code))
        tb = tb.tb_next
    return None


def describe(err: BaseException) -> str | None:
    """What happened, in words, or None when `err` is no fault of the surroundings (a bug)."""
    for e in exception_chain(err):
        if isinstance(e, StoreChanged):
            # raised in a DataLoader worker, it comes back with the worker's traceback as its
            # text: its own message is the last line
            own = str(e).strip().splitlines()[-1].split("StoreChanged: ", 1)[-1]
            return f"{own}; the next run rebuilds the store (or resumes its copy)"
        if isinstance(e, OSError) and e.errno in WRITE_ERRORS and not isinstance(e, FileNotFoundError):
            return _write_error(e)
        if isinstance(e, RuntimeError) and (m := WORKER.search(str(e))):
            return _worker_death(m)
        if (died := _died_handing_over(e)) is not None:
            return died
    return None


def last_good(out: Path) -> str:
    """The checkpoint a resume continues from, in words."""
    try:
        path, ckpt = newest_checkpoint(out)
    except FileNotFoundError:
        return "none yet (the run stopped before its first checkpoint)"
    return f"{path} (epoch {ckpt.get('epoch')}, step {ckpt.get('global_step')})"


def resume_command(out: Path, overrides: list[str]) -> str:
    """The command that continues this run: its own overrides (a resume checks the config
    against the checkpoint's) and resume=<its dir>."""
    kept = [o for o in overrides if not o.lstrip("+~").startswith("resume=")]
    return shlex.join(["python", "train.py", *kept, f"resume={out}"])


def _hydra_overrides() -> tuple[str, list[str]] | None:
    """(config name, command-line overrides) of the Hydra app running, None outside one."""
    from hydra.core.hydra_config import HydraConfig

    try:
        hydra = HydraConfig.get()
    except ValueError:  # called without Hydra (tests, a notebook)
        return None
    return hydra.job.config_name, list(hydra.overrides.task)


def grid_command() -> str:
    """The command that continues a comparison grid: its own (its cells resume)."""
    app = _hydra_overrides()
    if app is None:
        return "the same scripts/compare.py command"
    return shlex.join(["python", "scripts/compare.py", *app[1]])


def continue_command(out: Path) -> str:
    """The command that continues: train.py's with resume=<run>, or, for a run that is a cell of
    a comparison grid (scripts/compare.py), the grid's own command (its cells resume)."""
    app = _hydra_overrides()
    if app is None:  # no overrides to repeat
        return resume_command(out, [])
    if app[0] == "compare":
        return grid_command()
    return resume_command(out, app[1])


class CheckpointOnStop(Callback):
    """On SIGTERM Lightning ends its loops with SIGTERMException, a SystemExit of status 0 that a
    scheduler would take for success. This writes last.ckpt where training stands (between two
    steps: what a resume continues from exactly), then reported_faults says so and exits 75.
    During validation nothing is written: the last checkpoint before it stands."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                     exception: BaseException) -> None:
        if isinstance(exception, SIGTERMException) and trainer.training and not trainer.sanity_checking:
            trainer.save_checkpoint(self.path)


@contextmanager
def reported_faults(out: Path) -> Iterator[None]:
    """Inside: a fault of the surroundings (or SIGTERM) leaves as a RunFault whose one line says
    what happened, the last good checkpoint and how to continue; anything else passes unchanged."""
    try:
        yield
    except SIGTERMException as err:
        raise _fault(out, "SIGTERM received (a scheduler's stop, a pre-emption or `kill`)",
                     "continue with") from err
    except Exception as err:  # noqa: BLE001  (classified below; the rest re-raised as it was)
        what = describe(err)
        if what is None:
            raise
        raise _fault(out, what, "once it is fixed, continue with") from err


def _fault(out: Path, what: str, then: str) -> RunFault:
    good = last_good(out)
    how = (f"{then}: {continue_command(out)}" if not good.startswith("none")
           else "then run the same command again")
    return RunFault(f"run stopped: {what}. Last good checkpoint: {good}; {how}")
