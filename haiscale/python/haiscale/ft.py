"""haiscale.ft: data-parallel training that goes on when a replica group is lost.

A job is R replica groups that hold the same model (a group is one process, or several with DDP,
FSDP, TP or PP inside it) and average their gradients every step over HFReduce. Each step asks
the quorum service (hai-server on HAI-Platform, or an ``hfreduce-store``) which groups take
part: losing a group costs at most the step in flight, and a new or returning group joins at a
step boundary, receiving the current parameters and optimizer state from a live group (not from
a checkpoint), after which every group holds bit-identical state::

    ft = haiscale.ft.Manager(model, optimizer, batch_size=32)     # per group
    while ft.step < total_steps:
        ft.start_step()                                  # quorum; re-form; heal a late joiner
        for i in ft.batch_indices():                     # this group's samples of this step
            ...                                          # forward / backward
        if ft.sync_gradients():                          # average over the live groups
            optimizer.step()                             # only when every group can commit
        optimizer.zero_grad()

Guarantees:
- A step commits (``sync_gradients()`` is True, ``ft.step`` advances) only with the gradients of
  every group of its quorum; a step whose collective failed is dropped by the groups that saw it
  fail (they re-form at the next ``start_step()``); a group that committed a step another did not
  is ahead, and the one behind takes its state at the next quorum. So every group's state after
  a heal is that of a group that committed every step, bit for bit.
- Data: the job's samples are one stream; step k's quorum of n groups takes the next n x
  batch_size samples, group rank r the r-th slice (``batch_indices()``). The position advances
  only when a step commits and travels with the state to a joining group, so each sample is used
  by exactly one committed step per pass: none dropped, none doubled, whatever groups come and go.
- Below ``min_replicas`` live groups no quorum forms: ``start_step()`` raises after
  ``quorum_timeout`` and the job falls back to the platform's requeue from its checkpoint.
- A hung group (SIGSTOP) is treated as lost: the others go on after ``join_timeout`` (between
  steps) or the collective ``timeout`` (inside one).

Configuration comes from arguments, else the environment HAI-Platform gives a job's ranks:
HAI_FT_STORE (the quorum service's address), HAI_JOB_ID, HAI_REPLICA_GROUP (the group's name in
the quorum: HAI_REPLICA_ID, with ".n" for its n-th replacement, so that a replacement is never
taken for a group it replaces that still runs cut off from the platform), HAI_REPLICAS,
HAI_MIN_REPLICAS; `hai submit --replicas R --min-replicas M` sets them all. HAI_FT_STORE may list
several servers (hai-server's replicas; one serves at a time); each quorum names every server the
service knows, and the Manager adds those it was not given, so that its group follows a failover
to a replica started after the group was.
"""

import datetime
import io
import os
import time

import torch
import torch.distributed as dist

from haiscale import _backend
from haiscale.errors import HaiScaleError, QuorumTooSmall


def _env(name, default=None, kind=str):
    value = os.environ.get(name)
    if value is None or value == "":
        if default is None:
            raise ValueError(f"haiscale.ft: {name} is not set and no value was given")
        return default
    return kind(value)


class Manager:
    """One replica group's side of fault-tolerant data parallelism (see the module's docstring).

    model, optimizer: this rank's (with FSDP inside the group, its shards).
    group: the process group inside the replica group (None: a group of one process, or the
      default group when torch.distributed is initialized).
    batch_size: samples per group and step (for batch_indices()).
    join_timeout: how long the others wait at a step boundary for a group that has not asked
      (while it heartbeats: a group whose process is gone or frozen is not waited for after
      heartbeat_timeout; group rank 0 heartbeats every tenth of it from a thread of its own).
    timeout: how long a collective between groups may take before the group counts as lost.
    state_fn / load_state_fn: extra state to hand a joining group (e.g. an LR scheduler's).
    """

    def __init__(self, model, optimizer, *, batch_size=1, replica_id=None, replicas=None,
                 min_replicas=None, store_address=None, job=None, group=None,
                 join_timeout=5.0, heartbeat_timeout=1.0, timeout=30.0, quorum_timeout=300.0,
                 state_fn=None, load_state_fn=None):
        self.model = model
        self.optimizer = optimizer
        self.batch_size = batch_size
        if replica_id is None:
            replica_id = os.environ.get("HAI_REPLICA_GROUP") or _env("HAI_REPLICA_ID")
        self.replica_id = str(replica_id)
        self.replicas = int(replicas if replicas is not None else _env("HAI_REPLICAS", kind=int))
        self.min_replicas = int(min_replicas if min_replicas is not None
                                else _env("HAI_MIN_REPLICAS", 1, int))
        self.store_address = store_address or _env("HAI_FT_STORE")
        self.job = str(job if job is not None else _env("HAI_JOB_ID", "job"))
        if group is None and dist.is_available() and dist.is_initialized():
            group = dist.group.WORLD
        self.group = group
        self.group_rank = dist.get_rank(group) if group is not None else 0
        self.group_size = dist.get_world_size(group) if group is not None else 1
        self.join_timeout = join_timeout
        self.heartbeat_timeout = heartbeat_timeout
        self.timeout = timeout
        self.quorum_timeout = quorum_timeout
        self.state_fn = state_fn
        self.load_state_fn = load_state_fn
        self.step = 0        # committed optimizer steps
        self.samples = 0     # samples consumed by committed steps
        self.quorum = None   # the last quorum (a dict: id, members, replica_rank, ...)
        self.healed_at = []  # steps at which this group received another's state
        self._pg = None
        self._pg_quorum = None
        self._reform = False
        self._heartbeat = None
        self._heartbeat_ms = max(10, int(heartbeat_timeout * 100))
        if self.group_rank == 0 and heartbeat_timeout > 0:
            self._heartbeat = _backend._C.QuorumHeartbeat(
                self.store_address, self.job, self.replica_id, self._heartbeat_ms)

    # ---- per step -------------------------------------------------------------------------

    def start_step(self):
        """Joins this step's quorum, re-forms the groups' process group if it changed, and heals
        any member that is behind. Returns the number of groups taking part."""
        deadline = time.monotonic() + self.quorum_timeout
        late = 0  # failed attempts that ended past the deadline
        error = None
        while True:
            q = self._ask_quorum()  # raises when fewer than min_replicas groups ask in time
            self.quorum = q
            self._learn_stores(q)
            ok = True
            try:
                # (The prefix, not the id: ids restart when the service does, prefixes never
                # repeat.)
                if self._pg is None or self._pg_quorum != q["store_prefix"]:
                    self._close_pg(abort=True)
                    self._pg = _backend.new_process_group(
                        self.store_address, q["replica_rank"], q["replica_world"],
                        timeout=datetime.timedelta(seconds=self.timeout),
                        prefix=f"{q['store_prefix']}.g{self.group_rank}")
                    self._pg_quorum = q["store_prefix"]
                if q["healing"]:
                    self._heal(q)
            except RuntimeError as e:
                error = e
                ok = False  # a member was lost while re-forming or healing: ask again
            if self._group_agrees(ok):
                self._reform = False
                return q["replica_world"]
            # Past the deadline the quorum is asked once more (so that too few groups is
            # reported as such); failing again after that gives up.
            if time.monotonic() > deadline:
                late += 1
                if late > 1:
                    raise RuntimeError(
                        "haiscale.ft: the replica groups' process group could not be formed "
                        f"within quorum_timeout ({self.quorum_timeout} s): "
                        f"{error or 'another rank of this group failed'}") from error
            self._reform = True
            self._close_pg(abort=True)

    def batch_indices(self):
        """This group's sample indices in the job's stream for the step started last (its slice
        of the next participants x batch_size samples)."""
        first = self.samples + self.quorum["replica_rank"] * self.batch_size
        return range(first, first + self.batch_size)

    def sync_gradients(self):
        """Averages this rank's gradients over the step's groups. True when the step may commit
        (every rank of every group of the quorum contributed); then ``step`` and the data
        position advance. False when a group was lost during the step: don't step the optimizer."""
        ok = True
        world = self.quorum["replica_world"]
        if world > 1:
            try:
                self._allreduce_gradients(world)
            except RuntimeError:
                ok = False
        ok = self._group_agrees(ok)
        if ok:
            self.step += 1
            self.samples += world * self.batch_size
        else:
            self._reform = True
            self._close_pg(abort=True)
        return ok

    # ---- state ------------------------------------------------------------------------------

    def state_dict(self):
        """What a joining group takes (and what a checkpoint should hold): this rank's own; with
        haiscale.fsdp inside the group, its shards (each group rank heals its counterpart)."""
        model = (self.model.sharded_state_dict() if hasattr(self.model, "sharded_state_dict")
                 else self.model.state_dict())
        state = {"step": self.step, "samples": self.samples,
                 "model": model, "optimizer": self.optimizer.state_dict()}
        if self.state_fn is not None:
            state["user"] = self.state_fn()
        return state

    def load_state_dict(self, state):
        if hasattr(self.model, "load_sharded_state_dict"):
            self.model.load_sharded_state_dict(state["model"])
        else:
            self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step = state["step"]
        self.samples = state["samples"]
        if self.load_state_fn is not None and "user" in state:
            self.load_state_fn(state["user"])

    def shutdown(self):
        if self._heartbeat is not None:
            self._heartbeat.stop()
            self._heartbeat = None
        self._close_pg(abort=False)

    # ---- internals --------------------------------------------------------------------------

    def _ask_quorum(self):
        """Group rank 0 asks the service; the group's other ranks get its answer."""
        q = None
        if self.group_rank == 0:
            deadline = time.monotonic() + self.quorum_timeout
            while True:
                try:
                    q = _backend._C.join_quorum(
                        self.store_address, self.job, self.replica_id, self.step,
                        self.min_replicas, self.replicas, self._reform,
                        int(self.join_timeout * 1000), int(self.quorum_timeout * 1000),
                        int(self.heartbeat_timeout * 1000))
                    break
                except QuorumTooSmall:
                    raise  # too few groups asked in time: final
                except HaiScaleError:
                    # The service went away mid-round (hai-server's leader failing over: the
                    # next one serves).
                    if time.monotonic() > deadline:
                        raise
                    self._reform = True
                    time.sleep(0.2)
        if self.group is not None and self.group_size > 1:
            box = [q]
            dist.broadcast_object_list(box, src=dist.get_global_rank(self.group, 0),
                                       group=self.group)
            q = box[0]
        return q

    def _learn_stores(self, q):
        """Adds the quorum service's servers this group was not given (a hai-server replica
        started after the group was) to those it tries, so that it follows a failover to one."""
        known = [a.strip() for a in self.store_address.split(",") if a.strip()]
        new = [a for a in q.get("stores", []) if a not in known]
        if not new:
            return
        self.store_address = ",".join(known + new)
        if self._heartbeat is not None:
            self._heartbeat.stop()
            self._heartbeat = _backend._C.QuorumHeartbeat(
                self.store_address, self.job, self.replica_id, self._heartbeat_ms)

    def _group_agrees(self, ok):
        """Whether every rank of this replica group saw `ok` (one answer for the whole group)."""
        if self.group is None or self.group_size == 1:
            return ok
        flag = torch.tensor([1 if ok else 0], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=self.group)
        return bool(flag.item())

    def _allreduce_gradients(self, world):
        grads = []
        for p in self.model.parameters():
            if not p.requires_grad:
                continue
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad)
        for dtype in sorted({g.dtype for g in grads}, key=str):
            same = [g for g in grads if g.dtype == dtype]
            flat = torch.cat([g.reshape(-1) for g in same])
            # The group's own method: the group is not in torch's registry (dist.all_reduce
            # would turn a failure into a ValueError about that when a default group exists).
            self._pg.allreduce([flat]).wait()
            flat /= world
            offset = 0
            for g in same:
                g.copy_(flat[offset:offset + g.numel()].view_as(g))
                offset += g.numel()

    def _heal(self, q):
        """Every member takes part: the source broadcasts its serialized state; those behind
        load it (bit for bit); those already current only pass it on."""
        source = q["recover_from"]
        mine = q["replica_rank"]
        if mine == source:
            buf = io.BytesIO()
            torch.save(self.state_dict(), buf)
            payload = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
            size = torch.tensor([payload.numel()], dtype=torch.int64)
        else:
            size = torch.zeros(1, dtype=torch.int64)
        self._pg.broadcast(size, source).wait()
        if mine != source:
            payload = torch.empty(int(size.item()), dtype=torch.uint8)
        self._pg.broadcast(payload, source).wait()
        if self.step < q["max_step"]:
            state = torch.load(io.BytesIO(payload.numpy().tobytes()), weights_only=False)
            self.load_state_dict(state)
            self.healed_at.append(self.step)

    def _close_pg(self, abort):
        if self._pg is None:
            return
        try:
            if abort:
                self._pg.abort()
            else:
                self._pg.shutdown()
        except RuntimeError:
            pass
        self._pg = None
        self._pg_quorum = None

