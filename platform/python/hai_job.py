"""The job side of HAI-Platform's suspend protocol, for Python training code.

When the scheduler needs a job's nodes for a higher-priority job, the node agent sends the job's
process group SIGUSR1 and creates the file named by $HAI_SUSPEND_FLAG, then waits a grace period
before killing it. A job that wants to keep its progress::

    import hai_job
    hai_job.install_suspend_handler()            # once, at start
    step = load_checkpoint(hai_job.checkpoint_dir())
    while step < total:
        train(step); step += 1
        if hai_job.should_suspend():             # asked to make room
            save_checkpoint(hai_job.checkpoint_dir(), step)
            hai_job.suspend_now()                # "I have checkpointed, suspend me now"

The job is requeued and later restarted with $HAI_RESTART_COUNT incremented.

Training metrics, for `hai metrics` and hai-web's plots::

    hai_job.report(step, loss=loss.item(), lr=sched.get_last_lr()[0])

(one JSON line in $HAI_METRICS_FILE; its format: platform/client/include/platform/job_metrics.h).
"""

import json
import math
import os
import re
import signal
import sys
import time

_signalled = False


def _on_signal(signum, frame):
    global _signalled
    _signalled = True


def install_suspend_handler():
    """Catch SIGUSR1 so that should_suspend() reports it (jobs start with it ignored)."""
    signal.signal(signal.SIGUSR1, _on_signal)


def should_suspend():
    """True once the platform asked this job to suspend (signal received or flag present)."""
    if _signalled:
        return True
    flag = os.environ.get("HAI_SUSPEND_FLAG")
    return bool(flag) and os.path.exists(flag)


def restart_count():
    """How many times the job was started before this run (0 on its first run)."""
    return int(os.environ.get("HAI_RESTART_COUNT", "0"))


def checkpoint_dir():
    """Where the job keeps checkpoints across runs ("" outside HAI-Platform)."""
    return os.environ.get("HAI_CHECKPOINT_DIR", "")


def suspend_now():
    """End the process after a checkpoint: recorded as suspended (not failed) and requeued."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


_METRIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:/-]{0,63}")
_metrics_fd = None


def report(step, **metrics):
    """Record this rank's metrics for `step`: report(120, loss=2.31, tokens_per_s=5.1e4).

    Values are numbers (a one-element tensor too); a non-finite one (a diverged loss) is kept as
    "not finite". Outside HAI-Platform ($HAI_METRICS_FILE unset) it does nothing. A bad step or
    name raises ValueError, a value that is not a number TypeError, and nothing is written.
    """
    global _metrics_fd
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be an integer >= 0, not {step!r}")
    record = {"step": step, "time": round(time.time(), 3)}
    if os.environ.get("HAI_RUN", "").isdigit():
        record["run"] = int(os.environ["HAI_RUN"])
    for name, value in metrics.items():
        if not _METRIC_NAME.fullmatch(name) or name in ("step", "time", "run"):
            raise ValueError(f"metric name {name!r} is not 1 to 64 of [A-Za-z0-9_.:/-] "
                             "beginning with a letter or _ (nor step, time or run)")
        try:
            if isinstance(value, (str, bytes)):
                raise TypeError
            number = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"metric {name!r} is not a number: {value!r}") from None
        record[name] = number if math.isfinite(number) else None
    path = os.environ.get("HAI_METRICS_FILE")
    if not path:
        return
    if _metrics_fd is None:
        _metrics_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    line = (json.dumps(record, allow_nan=False) + "\n").encode()
    # One write of the whole line (O_APPEND): a reader never sees half of it.
    if os.write(_metrics_fd, line) != len(line):
        raise OSError(f"short write to {path}")
