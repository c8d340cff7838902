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
"""

import os
import signal
import sys

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
