"""haiscale.checkpoint: atomic checkpoints in a directory, and the bridge to the platform's
suspend protocol.

    from haiscale import checkpoint
    checkpoint.save(ckpt_dir, step, {"model": model.state_dict(), "opt": opt.state_dict()})
    step, state = checkpoint.load(ckpt_dir)          # the latest; (0, None) when there is none

Layout: `<dir>/step-00000120/` holds `state.pt` (a full checkpoint, written by rank 0) or
`rank-00000.pt` ... (sharded: each rank its own state, e.g. FSDP shards and their optimizer
state) and `meta.json`; `<dir>/latest` names the newest complete one. A checkpoint is written
into `<dir>/.tmp-step-.../`, every file fsynced, and only when every rank succeeded is the
directory renamed into place and `latest` replaced (write, fsync, rename, fsync the directory) —
a crash mid-save leaves the previous checkpoint as the latest, never a half one. A rank that
fails to write makes every rank raise. The newest `keep` checkpoints are kept. (A crash between
the rename and the update of `latest` leaves a complete newer checkpoint that `latest` does not
name: it was never acknowledged, and a later save of that step replaces it.)

Sharded state (FSDP2, DTensors) through torch.distributed.checkpoint, resharded on load (saved at
one world size, loaded at another), on local disk or on fs3 by its native client:

    model_state, optim_state = get_state_dict(model, opt)       # torch.distributed.checkpoint.state_dict
    checkpoint.save_dcp("fs3:///ckpt/run1", step, {"model": model_state, "optim": optim_state})
    future = checkpoint.save_dcp(..., async_save=True)         # training goes on while it writes
    step = checkpoint.load_dcp("fs3:///ckpt/run1", state)       # into `state`, in place

On HAI-Platform (`Job`): on the suspend signal, every rank learns it at the same step (a MAX
allreduce of the local flag), saves, and exits so the job is requeued; on restart, `resume()`
returns the latest checkpoint:

    job = checkpoint.Job(sharded=True)               # directory: $HAI_CHECKPOINT_DIR
    step, state = job.resume()
    while step < total:
        train_one_step(); step += 1
        if job.should_suspend():                      # collective: call on every rank each step
            job.suspend(step, make_state())           # saves, then exits the process (code 0)
"""

import copy
import json
import os
import shutil
import threading
import time

import torch
import torch.distributed as dist

_LATEST = "latest"


_NO_GROUP = object()  # a save by one writer: no collectives


def _dist(group):
    if group is not _NO_GROUP and dist.is_available() and dist.is_initialized():
        return dist.get_rank(group), dist.get_world_size(group)
    return 0, 1


def _barrier_all_ok(ok, group, what):
    """Every rank learns whether every rank succeeded (a MIN allreduce); raises if one failed."""
    if group is _NO_GROUP or not (dist.is_available() and dist.is_initialized()):
        if not ok:
            raise RuntimeError(f"haiscale.checkpoint: {what} failed")
        return
    flag = torch.tensor([1 if ok else 0], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
    if not flag.item():
        raise RuntimeError(f"haiscale.checkpoint: {what} failed on at least one rank; nothing was committed")


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(path, write):
    part = path + ".part"
    with open(part, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(part, path)


def _name(step):
    return f"step-{step:08d}"


def save(directory, step, state, group=None, sharded=False, keep=2, collective=True):
    """Saves `state` (anything torch.save takes) as the checkpoint of `step`. Full: rank 0
    writes the state it is given (e.g. `fsdp.full_state_dict()`, the same on every rank);
    sharded: every rank writes its own. Collective when torch.distributed is initialized, unless
    `collective` is False (one writer of a full state, e.g. one replica group of haiscale.ft).
    Returns the checkpoint's path. Under HAI-Platform its time counts as the step's checkpoint
    phase (hai_job's step telemetry), and the completed checkpoint is reported (its bytes and
    write time: what a suspension costs the job, and the deadline it is given)."""
    began = time.perf_counter()
    try:
        final, nbytes = _save(directory, step, state, group, sharded, keep, collective)
    finally:
        _count_checkpoint_time(time.perf_counter() - began)
    _report_checkpoint(step, nbytes, time.perf_counter() - began)
    return final


def _count_checkpoint_time(seconds):
    try:
        import hai_job
    except ImportError:
        return
    hai_job.add_phase_time("ckpt", seconds)


def _report_checkpoint(step, nbytes, seconds):
    """Tells HAI-Platform this rank completed `step`'s checkpoint: `nbytes` written in
    `seconds`."""
    try:
        import hai_job
    except ImportError:
        return
    hai_job.report_checkpoint(step, nbytes, seconds)


def _save(directory, step, state, group, sharded, keep, collective):
    if not directory:
        raise ValueError("haiscale.checkpoint: no checkpoint directory given")
    if step < 0:
        raise ValueError(f"haiscale.checkpoint: step must be >= 0, got {step}")
    if not collective:
        if sharded:
            raise ValueError("haiscale.checkpoint: a sharded checkpoint is written by every rank")
        group = _NO_GROUP
    rank, world = _dist(group)
    final = os.path.join(directory, _name(step))
    tmp = os.path.join(directory, ".tmp-" + _name(step))
    error = None
    mine = None  # the file this rank writes
    if rank == 0:
        try:
            os.makedirs(directory, exist_ok=True)
            shutil.rmtree(tmp, ignore_errors=True)  # left by a crash mid-save
            os.makedirs(tmp)
        except OSError as e:
            error = e
    _barrier_all_ok(error is None, group, f"creating {tmp}: {error}")
    try:
        if sharded:
            mine = f"rank-{rank:05d}.pt"
        elif rank == 0:
            mine = "state.pt"
        if mine is not None:
            _write_file(os.path.join(tmp, mine), lambda f: torch.save(state, f))
    except Exception as e:  # noqa: BLE001 -- every rank must learn of it before anyone commits
        error = e
    _barrier_all_ok(error is None, group, f"writing checkpoint {step} under {tmp}: {error}")
    if rank == 0:
        try:
            meta = {"step": step, "world_size": world, "sharded": sharded, "format": 1}
            _write_file(os.path.join(tmp, "meta.json"), lambda f: f.write(json.dumps(meta).encode()))
            _fsync_dir(tmp)
            if os.path.exists(final):  # saved again at the same step: replace it
                old = os.path.join(directory, ".old-" + _name(step))
                shutil.rmtree(old, ignore_errors=True)
                os.rename(final, old)
                os.rename(tmp, final)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.rename(tmp, final)
            _fsync_dir(directory)
            _write_file(os.path.join(directory, _LATEST), lambda f: f.write((_name(step) + "\n").encode()))
            _fsync_dir(directory)
            for old in list_checkpoints(directory)[:-keep] if keep > 0 else []:
                if old != step:
                    shutil.rmtree(os.path.join(directory, _name(old)), ignore_errors=True)
        except OSError as e:
            error = e
    _barrier_all_ok(error is None, group, f"committing checkpoint {step} in {directory}: {error}")
    return final, os.path.getsize(os.path.join(final, mine)) if mine is not None else 0


def _host_copy(obj):
    """A snapshot of `obj` that later training cannot change: tensors cloned to host memory,
    containers rebuilt, anything else deep-copied."""
    if torch.is_tensor(obj):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        items = [(k, _host_copy(v)) for k, v in obj.items()]
        try:
            return type(obj)(items)  # dict, OrderedDict (a state_dict)
        except TypeError:
            return dict(items)
    if isinstance(obj, list):
        return [_host_copy(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_host_copy(v) for v in obj)
    return copy.deepcopy(obj)


class AsyncCheckpointer:
    """Checkpoints written while training goes on: ``save()`` copies the state to host memory (the
    only stall) and a thread of its own writes it with ``save()``'s guarantees (atomic, fsynced,
    ``latest`` replaced last). One writer of a full state, no collectives: e.g. the first replica
    group of a haiscale.ft job (any live group holds the whole state)::

        saver = checkpoint.AsyncCheckpointer(ckpt_dir)
        if ft.quorum["replica_rank"] == 0 and ft.step % 100 == 0:
            saver.save(ft.step, ft.state_dict())
        ...
        saver.close()                                   # waits for the last write

    One write at a time: a ``save()`` while the previous is still being written waits for it. A
    failed write raises from the next ``save()``, ``wait()`` or ``close()``: never ignored.
    """

    def __init__(self, directory, keep=2):
        if not directory:
            raise ValueError("haiscale.checkpoint: no checkpoint directory given")
        self.directory = directory
        self.keep = keep
        self._thread = None
        self._error = None
        self.last_saved = None  # the step of the last checkpoint written

    def save(self, step, state):
        """Snapshots `state` and starts writing it as the checkpoint of `step`; returns once the
        snapshot is taken. Raises the previous write's error, if it failed. Only that stall counts
        as the step's checkpoint phase (hai_job's step telemetry), not the write behind it."""
        began = time.perf_counter()
        try:
            self.wait()
            snapshot = _host_copy(state)
        finally:
            _count_checkpoint_time(time.perf_counter() - began)

        def write():
            try:
                began_write = time.perf_counter()
                _, nbytes = _save(self.directory, step, snapshot, None, False, self.keep, False)
                self.last_saved = step
                _report_checkpoint(step, nbytes, time.perf_counter() - began_write)
            except BaseException as e:  # noqa: BLE001 -- handed to the training thread
                self._error = e

        self._thread = threading.Thread(target=write, name=f"checkpoint-{step}", daemon=True)
        self._thread.start()

    def wait(self):
        """Waits for the write in progress; raises if it (or an earlier one) failed."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError(f"haiscale.checkpoint: an asynchronous checkpoint failed: {error}") from error

    def close(self):
        self.wait()


def list_checkpoints(directory):
    """Steps of the complete checkpoints in the directory, oldest first."""
    if not os.path.isdir(directory):
        return []
    steps = []
    for entry in os.listdir(directory):
        if entry.startswith("step-") and os.path.exists(os.path.join(directory, entry, "meta.json")):
            try:
                steps.append(int(entry[len("step-"):]))
            except ValueError:
                pass
    return sorted(steps)


def latest_step(directory):
    """The step of the latest checkpoint, or None."""
    try:
        with open(os.path.join(directory, _LATEST)) as f:
            name = f.read().strip()
    except FileNotFoundError:
        return None
    if not name.startswith("step-") or not os.path.exists(os.path.join(directory, name, "meta.json")):
        raise RuntimeError(f"haiscale.checkpoint: {directory}/latest names {name!r}, "
                           "which is not a complete checkpoint")
    return int(name[len("step-"):])


def load(directory, group=None, map_location="cpu", step=None):
    """Returns (step, state) of the latest checkpoint (or of `step`), this rank's own state when
    sharded; (0, None) when the directory holds none."""
    rank, world = _dist(group)
    if step is None:
        step = latest_step(directory) if directory else None
        if step is None:
            return 0, None
    path = os.path.join(directory, _name(step))
    with open(os.path.join(path, "meta.json")) as f:
        meta = json.load(f)
    if meta["sharded"]:
        if meta["world_size"] != world:
            raise RuntimeError(f"haiscale.checkpoint: {path} is sharded over {meta['world_size']} ranks, this job has "
                               f"{world}; save a full checkpoint to change the number of ranks")
        file = os.path.join(path, f"rank-{rank:05d}.pt")
    else:
        file = os.path.join(path, "state.pt")
    return meta["step"], torch.load(file, map_location=map_location, weights_only=False)


# ---- sharded checkpoints through torch.distributed.checkpoint (DCP) -----------------------------

def _is_fs3(directory):
    return os.fspath(directory).startswith("fs3://")


class _Dir:
    """The few file operations save_dcp/load_dcp need, on a local (or mounted) directory or on fs3
    through its native client (a path given as fs3:///...)."""

    def __init__(self, directory, fs=None):
        from . import dcp as _dcp

        self.fs3 = _is_fs3(directory)
        self.root = _dcp._fs3_path(directory) if self.fs3 else os.fspath(directory)
        self.client = _dcp._connect(fs) if self.fs3 else None

    def join(self, *names):
        return "/".join([self.root.rstrip("/"), *names])

    def target(self, *names):  # what DCP's writer and reader take
        return ("fs3://" if self.fs3 else "") + self.join(*names)

    def read_latest(self):
        try:
            if self.fs3:
                f = self.client.open(self.join(_LATEST))
                text = self.client.read(f).decode()
            else:
                with open(self.join(_LATEST)) as f:
                    text = f.read()
        except FileNotFoundError:
            return None
        name = text.strip()
        if not name.startswith("step-") or not self.exists(self.join(name, ".metadata")):
            raise RuntimeError(f"haiscale.checkpoint: {self.root}/latest names {name!r}, "
                               "which is not a complete checkpoint")
        return int(name[len("step-"):])

    def exists(self, path):
        return self.client.exists(path) if self.fs3 else os.path.exists(path)

    def commit_latest(self, step):
        """`latest` names step's checkpoint: written under another name, then renamed."""
        text = (_name(step) + "\n").encode()
        part = self.join(_LATEST + ".part")
        if self.fs3:
            self.client.write_file(part, text)  # durable when written
            self.client.rename(part, self.join(_LATEST))
        else:
            _write_file(self.join(_LATEST), lambda f: f.write(text))
            _fsync_dir(self.root)

    def steps(self):
        names = self.client.listdir(self.root) if self.fs3 else (
            os.listdir(self.root) if os.path.isdir(self.root) else [])
        out = []
        for name in names:
            if name.startswith("step-") and name[5:].isdigit() and \
                    self.exists(self.join(name, ".metadata")):
                out.append(int(name[5:]))
        return sorted(out)

    def remove(self, step):
        if self.fs3:
            self.client.rmtree(self.join(_name(step)))
        else:
            shutil.rmtree(self.join(_name(step)), ignore_errors=True)


def _dcp_writer(d, step, thread_count):
    if d.fs3:
        from .dcp import Fs3StorageWriter

        return Fs3StorageWriter(d.target(_name(step)), fs=d.client, thread_count=thread_count)
    from torch.distributed.checkpoint import FileSystemWriter

    return FileSystemWriter(d.target(_name(step)), thread_count=thread_count)


def _wait_for_slot(nbytes):
    """A periodic checkpoint waits for the platform's go (staggered checkpoints; see
    hai_job.checkpoint_slot); nothing outside HAI-Platform."""
    try:
        import hai_job
    except ImportError:
        return 0.0
    return hai_job.checkpoint_slot(nbytes)


def save_dcp(directory, step, state_dict, keep=2, async_save=False, fs=None, thread_count=4,
             slot=True):
    """Saves a sharded state dict (FSDP2's or DTensors', as torch.distributed.checkpoint's
    get_state_dict gives them) with torch.distributed.checkpoint as the checkpoint of `step` in
    `directory`: a local or mounted path, or an fs3 path (``fs3:///ckpt/run1``) written by fs3's
    native client (haiscale.dcp, no FUSE). Every rank writes its own shards; load_dcp loads them
    at any world size. Collective: every rank calls it. `<dir>/step-NNNNNNNN/` is DCP's layout
    (its `.metadata` written last), and `latest` names it once the whole checkpoint is written;
    the newest `keep` stay. Returns the checkpoint's step; with `async_save`, a
    concurrent.futures.Future that is done once it is written and named latest (training goes on
    once the state is staged: dcp.async_save). Under HAI-Platform each rank reports it (its bytes
    and write time) when it is written, and with `slot` first waits for the platform's go
    (staggered checkpoints: hai_job.checkpoint_slot; a suspension's save does not wait)."""
    import torch.distributed.checkpoint as dcp

    d = _Dir(directory, fs)
    if slot:
        _wait_for_slot(sum(t.numel() * t.element_size() for t in _local_tensors(state_dict)))
    rank, _ = _dist(None)
    if rank == 0:
        if d.fs3:
            d.client.makedirs(d.root)
        else:
            os.makedirs(d.root, exist_ok=True)
    began = time.perf_counter()
    writer = _dcp_writer(d, step, thread_count)

    def committed():
        seconds = time.perf_counter() - began
        if rank == 0:
            d.commit_latest(step)
            for old in d.steps()[:-keep] if keep > 0 else []:
                if old != step:
                    d.remove(old)
        nbytes = sum(t.numel() * t.element_size() for t in _local_tensors(state_dict))
        _report_checkpoint(step, nbytes, seconds)
        return step

    if not async_save:
        try:
            dcp.save(state_dict, storage_writer=writer)
        finally:
            _count_checkpoint_time(time.perf_counter() - began)
        return committed()
    import concurrent.futures

    stall = time.perf_counter()
    written = dcp.async_save(state_dict, storage_writer=writer)
    _count_checkpoint_time(time.perf_counter() - stall)
    done = concurrent.futures.Future()

    def finish(f):
        try:
            f.result()
            done.set_result(committed())
        except BaseException as e:  # noqa: BLE001 -- handed to whoever waits on `done`
            done.set_exception(e)

    written.add_done_callback(finish)
    return done


def _local_tensors(state):
    """The tensors of a (nested) state dict, a DTensor's local shard for a DTensor."""
    if isinstance(state, dict):
        for v in state.values():
            yield from _local_tensors(v)
    elif isinstance(state, (list, tuple)):
        for v in state:
            yield from _local_tensors(v)
    elif torch.is_tensor(state):
        yield state.to_local() if hasattr(state, "to_local") else state


def load_dcp(directory, state_dict, step=None, fs=None):
    """Loads the checkpoint of `step` (the latest when None) of `directory` into `state_dict` in
    place (its tensors and DTensors say what this rank holds: DCP reshards what was saved at
    another world size). Returns the step loaded, or None when there is no checkpoint (the state
    dict is left as it was). Collective: every rank calls it."""
    import torch.distributed.checkpoint as dcp

    d = _Dir(directory, fs)
    step = d.read_latest() if step is None else step
    if step is None:
        return None
    if d.fs3:
        from .dcp import Fs3StorageReader

        reader = Fs3StorageReader(d.target(_name(step)), fs=d.client)
    else:
        from torch.distributed.checkpoint import FileSystemReader

        reader = FileSystemReader(d.target(_name(step)))
    dcp.load(state_dict, storage_reader=reader)
    return step


class Job:
    """The training loop's side of HAI-Platform's suspend protocol (see the module's docstring)."""

    def __init__(self, directory=None, group=None, sharded=False, keep=2):
        import hai_job

        self._hai_job = hai_job
        self.directory = directory or hai_job.checkpoint_dir()
        if not self.directory:
            raise ValueError("haiscale.checkpoint.Job: no directory given and $HAI_CHECKPOINT_DIR is not set")
        self.group = group
        self.sharded = sharded
        self.keep = keep
        hai_job.install_suspend_handler()

    @property
    def restart_count(self):
        return self._hai_job.restart_count()

    def resume(self, map_location="cpu"):
        return load(self.directory, self.group, map_location)

    def save(self, step, state):
        """A periodic checkpoint: it waits for the platform's go first (staggered checkpoints)."""
        _wait_for_slot(0)
        return save(self.directory, step, state, self.group, self.sharded, self.keep)

    def should_suspend(self):
        """Whether the platform asked any rank to suspend: collective, call on every rank at the
        same point of every step so that all ranks stop at the same step."""
        local = self._hai_job.should_suspend()
        if not (dist.is_available() and dist.is_initialized()):
            return local
        flag = torch.tensor([1 if local else 0], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.group)
        return bool(flag.item())

    def suspend(self, step, state):
        """Saves the checkpoint, then ends the process: the platform records the run as
        suspended and requeues the job."""
        self.save(step, state)
        print(f"haiscale: checkpointed step {step} to {self.directory}; suspending", flush=True)
        self._hai_job.suspend_now()
