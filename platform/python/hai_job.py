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

The job is requeued and later restarted with $HAI_RESTART_COUNT incremented. The platform gives
it a deadline to save and exit, from how long its checkpoints take to write (within the admin's
bounds); ``hai_job.suspend_deadline()`` says when that is, and a job that misses it is killed.

Completed checkpoints, so that the platform knows what suspending the job costs (its victims are
the jobs that lose least) and how long to give it::

    hai_job.report_checkpoint(step, nbytes, write_s)   # haiscale.checkpoint does it by itself

Training metrics, for `hai metrics` and hai-web's plots::

    hai_job.report(step, loss=loss.item(), lr=sched.get_last_lr()[0])

(one JSON line in $HAI_METRICS_FILE; its format: platform/client/include/platform/job_metrics.h).

Step telemetry, for `hai top`, `hai show` and the platform's straggler detection::

    hai_job.record_steps()      # once; haiscale and the hfreduce backend call it themselves

records every training step in $HAI_STEPS_FILE: its wall time, the time in collectives (the
hfreduce backend's), waiting for data (torch's DataLoader, or `with hai_job.phase("data"):`) and
writing checkpoints (haiscale.checkpoint, or `with hai_job.phase("ckpt"):`). A step ends at each
optimizer.step() (torch's global optimizer hook), or where the code calls hai_job.step_done().
"""

import contextlib
import json
import math
import os
import re
import signal
import sys
import threading
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


def suspend_deadline():
    """When the platform kills this job if it has not exited (seconds since the epoch), once it
    was asked to suspend; None before that, or outside HAI-Platform."""
    flag = os.environ.get("HAI_SUSPEND_FLAG")
    if not flag or not (_signalled or os.path.exists(flag)):
        return None
    try:
        with open(flag) as f:
            return float(json.load(f)["deadline"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # an agent that did not write it, or the flag is being written


_steps_fd = None


def report_checkpoint(step, nbytes, write_s):
    """Tell the platform this rank completed the checkpoint of `step`: `nbytes` it wrote in
    `write_s` seconds (one line in $HAI_STEPS_FILE; nothing outside HAI-Platform). A bad argument
    raises ValueError and nothing is written."""
    global _steps_fd
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be an integer >= 0, not {step!r}")
    for name, value in (("nbytes", nbytes), ("write_s", write_s)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a finite number >= 0, not {value!r}")
    path = os.environ.get("HAI_STEPS_FILE")
    if not path:
        return
    record = {"step": step, "time": round(time.time(), 3)}
    if os.environ.get("HAI_RUN", "").isdigit():
        record["run"] = int(os.environ["HAI_RUN"])
    record.update(ckpt_step=step, ckpt_bytes=float(nbytes), ckpt_write_s=round(float(write_s), 6))
    with _recorder_lock:
        if _steps_fd is None:
            _steps_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        line = (json.dumps(record) + "\n").encode()
        if os.write(_steps_fd, line) != len(line):  # one write: a reader never sees half of it
            raise OSError(f"short write to {path}")


_slot_id = 0


def checkpoint_slot(nbytes=0, timeout_s=None):
    """Waits until the platform lets this job write a periodic checkpoint of about `nbytes` (0: as
    its last one), and returns the seconds waited. The platform spreads the checkpoints of running
    jobs so that their writes stay within what storage sustains (hai-server's
    checkpoint_write_gbps); every rank of a job that asks is let through together. It waits at
    most `timeout_s` (default: the platform's bound, $HAI_CKPT_MAX_DELAY_S, and 5 s more), then
    goes ahead. Returns at once, asking nothing, outside HAI-Platform, where the platform does not
    stagger checkpoints ($HAI_CKPT_MAX_DELAY_S is 0), and once the job is asked to suspend (a
    suspension's save always goes first)."""
    global _slot_id
    ask, grant = os.environ.get("HAI_CKPT_SLOT_FILE"), os.environ.get("HAI_CKPT_GRANT_FILE")
    bound = float(os.environ.get("HAI_CKPT_MAX_DELAY_S", "60"))
    if not ask or not grant or bound <= 0 or should_suspend():
        return 0.0
    if timeout_s is None:
        timeout_s = bound + 5
    _slot_id += 1
    began = time.monotonic()
    part = ask + ".part"
    with open(part, "w") as f:
        json.dump({"id": _slot_id, "bytes": float(nbytes)}, f)
    os.replace(part, ask)  # the agent reads it whole
    while time.monotonic() - began < timeout_s and not should_suspend():
        try:
            with open(grant) as f:
                if int(json.load(f)["id"]) >= _slot_id:
                    break
        except (OSError, ValueError, KeyError, TypeError):
            pass  # not granted yet (or the grant being replaced)
        time.sleep(0.02)
    return time.monotonic() - began


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


# ---- step telemetry --------------------------------------------------------------------------

_PHASES = ("data", "ckpt")
_PEER_KINDS = ("link", "read")
_PEER = re.compile(r"[A-Za-z0-9_.:/-]{1,40}")
_MAX_PEERS = 16


class _StepRecorder:
    """Writes one line per step to $HAI_STEPS_FILE: {"step", "time", "run", "step_s", "compute_s",
    "comm_s", "collectives", "data_s", "ckpt_s"}; compute_s is what the others leave of step_s.
    Peer clocks (add_peer_clock) add, per peer with traffic that step, "{kind}_bytes:{peer}",
    "{kind}_wait_s:{peer}" and "{kind}_move_s:{peer}"."""

    def __init__(self, path):
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        self.run = int(os.environ["HAI_RUN"]) if os.environ.get("HAI_RUN", "").isdigit() else None
        self.lock = threading.Lock()
        self.comm_clock = None
        self.comm_at = (0, 0.0)
        self.peer_clocks = {}  # kind -> (clock, its last reading)
        self.phases = dict.fromkeys(_PHASES, 0.0)
        self.step = 0
        self.began = time.perf_counter()

    def set_comm_clock(self, clock):
        with self.lock:
            self.comm_clock = clock
            self.comm_at = tuple(clock())

    def add_peer_clock(self, kind, clock):
        with self.lock:
            self.peer_clocks[kind] = (clock, dict(clock()))

    def _peer_times(self):
        """Per kind and peer, what its clock moved since the last step, flattened into the record's
        keys: {kind}_bytes:{peer}, {kind}_wait_s:{peer}, {kind}_move_s:{peer} (peers with traffic)."""
        out = {}
        for kind, (clock, last) in list(self.peer_clocks.items()):
            now = dict(clock())
            self.peer_clocks[kind] = (clock, now)
            moved = []
            for peer, (count, nbytes, wait_s, move_s) in now.items():
                was = last.get(peer, (0, 0, 0.0, 0.0))
                if count != was[0] and _PEER.fullmatch(peer):
                    moved.append((wait_s - was[2] + move_s - was[3], peer, nbytes - was[1],
                                  wait_s - was[2], move_s - was[3]))
            # The busiest peers only: a line stays far below the 16 KiB a reader takes.
            for _, peer, nbytes, wait_s, move_s in sorted(moved, reverse=True)[:_MAX_PEERS]:
                out[f"{kind}_bytes:{peer}"] = nbytes
                out[f"{kind}_wait_s:{peer}"] = round(wait_s, 6)
                out[f"{kind}_move_s:{peer}"] = round(move_s, 6)
        return out

    def add(self, phase, seconds):
        with self.lock:
            self.phases[phase] += seconds

    def done(self, step=None):
        now = time.perf_counter()
        with self.lock:
            step_s = now - self.began
            self.began = now
            self.step = self.step + 1 if step is None else step
            record = {"step": self.step, "time": round(time.time(), 3)}
            if self.run is not None:
                record["run"] = self.run
            comm_s, collectives = 0.0, 0
            if self.comm_clock is not None:
                ops, seconds = self.comm_clock()
                collectives, comm_s = ops - self.comm_at[0], seconds - self.comm_at[1]
                self.comm_at = (ops, seconds)
            data_s, ckpt_s = self.phases["data"], self.phases["ckpt"]
            self.phases = dict.fromkeys(_PHASES, 0.0)
            peers = self._peer_times()
        record.update(step_s=round(step_s, 6),
                      compute_s=round(max(0.0, step_s - comm_s - data_s - ckpt_s), 6),
                      comm_s=round(comm_s, 6), collectives=collectives,
                      data_s=round(data_s, 6), ckpt_s=round(ckpt_s, 6))
        record.update(peers)
        line = (json.dumps(record) + "\n").encode()
        if os.write(self.fd, line) != len(line):  # one write: a reader never sees half of it
            raise OSError(f"short write to {self.path}")


_recorder = None
_recorder_lock = threading.Lock()
_peer_clocks = {}  # kind -> clock, kept for a recorder that starts later
_optimizer = None  # the optimizer whose steps end steps (the first seen)
_hook = None  # torch's handle of the optimizer hook


def record_steps(optimizer_hook=True, data_loader=True):
    """Record every training step in $HAI_STEPS_FILE (HAI-Platform sets it); returns whether it
    records (False outside the platform, where it does nothing). Idempotent.

    optimizer_hook: a step ends at each step() of the first optimizer that steps (torch's global
    optimizer hook); without it, call step_done() at the end of each step. data_loader: time spent
    in torch DataLoader iterators' __next__ counts as data loading."""
    global _recorder, _hook
    path = os.environ.get("HAI_STEPS_FILE")
    if not path:
        return False
    with _recorder_lock:
        if _recorder is not None:
            return True
        _recorder = _StepRecorder(path)
        for kind, clock in _peer_clocks.items():  # given before recording began
            _recorder.add_peer_clock(kind, clock)
    try:
        import torch  # noqa: F401 (only when the job uses torch)
    except ImportError:
        return True
    if optimizer_hook:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        def _after_step(optimizer, args, kwargs):
            global _optimizer
            if _optimizer is None:
                _optimizer = optimizer
            if optimizer is _optimizer:
                step_done()

        _hook = register_optimizer_step_post_hook(_after_step)
    if data_loader:
        from torch.utils.data import dataloader

        base = dataloader._BaseDataLoaderIter
        if not getattr(base.__next__, "_hai_timed", False):
            untimed = base.__next__

            def __next__(self):
                began = time.perf_counter()
                try:
                    return untimed(self)
                finally:
                    add_phase_time("data", time.perf_counter() - began)

            __next__._hai_timed = True
            base.__next__ = __next__
    return True


def _stop_recording():
    """Undo record_steps (tests): no more records, the optimizer hook removed."""
    global _recorder, _hook, _optimizer
    with _recorder_lock:
        if _hook is not None:
            _hook.remove()
        if _recorder is not None:
            os.close(_recorder.fd)
        _recorder, _hook, _optimizer = None, None, None


def set_comm_clock(clock):
    """clock() -> (collectives, seconds) so far in this process (haiscale's hfreduce backend gives
    its own); each step records the difference."""
    if _recorder is not None:
        _recorder.set_comm_clock(clock)


def add_peer_clock(kind, clock):
    """clock() -> {peer: (count, bytes, wait_s, move_s)} so far in this process; each step records
    what moved, per peer with traffic. kind "link": HFReduce's tree edges, by neighbouring node
    (haiscale gives its own); "read": storage reads, by the fs3 storage target that served them."""
    if kind not in _PEER_KINDS:
        raise ValueError(f"kind must be one of {_PEER_KINDS}, not {kind!r}")
    with _recorder_lock:
        _peer_clocks[kind] = clock
        if _recorder is not None:
            _recorder.add_peer_clock(kind, clock)


def add_phase_time(phase, seconds):
    """Count `seconds` of the current step as `phase` ("data" or "ckpt")."""
    if phase not in _PHASES:
        raise ValueError(f"phase must be one of {_PHASES}, not {phase!r}")
    if _recorder is not None:
        _recorder.add(phase, seconds)


@contextlib.contextmanager
def phase(name):
    """with hai_job.phase("data"): batch = next(it)  -- the time inside counts as that phase."""
    if name not in _PHASES:
        raise ValueError(f"phase must be one of {_PHASES}, not {name!r}")
    began = time.perf_counter()
    try:
        yield
    finally:
        add_phase_time(name, time.perf_counter() - began)


def step_done(step=None):
    """End the current step (record_steps' optimizer hook calls it); `step` numbers it (default:
    one more than the last)."""
    if _recorder is not None:
        if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
            raise ValueError(f"step must be an integer >= 0, not {step!r}")
        _recorder.done(step)
