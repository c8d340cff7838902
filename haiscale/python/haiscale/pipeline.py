"""haiscale.pipeline: pipeline parallelism with micro-batches over send/recv.

    from haiscale.pipeline import PipeDream, partition, make_subgroups

    dp, pp, tp = make_subgroups(pp_size=4)                        # data, pipeline, tensor groups
    stage = partition(gpt.as_sequential(), dist.get_rank(pp), 4)  # this rank's layers
    model = PipeDream(stage, chunks=8, process_group=pp)          # 1F1B over 8 micro-batches
    loss, _ = model.forward_backward(tokens, criterion=gpt.criterion, labels=(targets,))
    opt.step()                                                    # loss: on the last stage, else None

Schedules (all train to the same gradients as one process on the whole batch):
- `GPipe`: every micro-batch forward, then every backward (activations of all micro-batches live).
- `PipeDream`: 1F1B -- after a warm-up of (stages - stage - 1) forwards, one forward and one
  backward alternate, so a stage holds at most `stages` micro-batches' activations.
- `Interleaved1F1B`: each rank holds `num_model_chunks` virtual stages (layers
  r, r + P, r + 2P, ... of a model cut into P x chunks pieces, see `partition`), Megatron-LM's
  schedule; the pipeline bubble shrinks by the number of chunks.

Activations and gradients travel as point-to-point messages of the process group (a small header
with dtypes and shapes, then the tensors), sends asynchronous, one tag per virtual stage and
direction, so no schedule can deadlock on message order. `checkpoint` recomputes activations in
backward: "never", "always", or "except_last" (all micro-batches but the last).

Data parallelism composes: wrap each stage (chunk) in `haiscale.ddp.DistributedDataParallel` over
the data group; the schedule runs every micro-batch but the last of each chunk under `no_sync()`,
so gradients are reduced once per step, overlapping the last backward.
"""

import collections
import contextlib
import itertools

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.checkpoint import checkpoint as _checkpoint

_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.int16,
           torch.int8, torch.uint8, torch.bool]
_HEADER = 64

Groups = collections.namedtuple("Groups", ["dp", "pp", "tp"])


def make_subgroups(pp_size=1, tp_size=1, dp_size=None):
    """Splits the world into data x pipeline x tensor groups and returns this rank's three groups
    (`Groups(dp, pp, tp)`). Ranks are laid out with tensor groups innermost (consecutive ranks,
    normally one node: tensor parallelism talks the most), data groups next and pipeline groups
    outermost (stages exchange only activations): rank = (pp_i * dp + dp_i) * tp + tp_i.
    Every rank must call it, with the same sizes."""
    world = dist.get_world_size()
    if dp_size is None:
        if world % (pp_size * tp_size):
            raise ValueError(f"haiscale: world size {world} is not divisible by pp_size {pp_size} x tp_size {tp_size}")
        dp_size = world // (pp_size * tp_size)
    if dp_size * pp_size * tp_size != world:
        raise ValueError(f"haiscale: dp {dp_size} x pp {pp_size} x tp {tp_size} != world size {world}")
    rank = dist.get_rank()

    sizes = {"pp": pp_size, "dp": dp_size, "tp": tp_size}
    mine = {}
    # Every rank creates every group, in the same order (new_group is collective): for each axis,
    # one group per position along the other two axes.
    for axis in ("tp", "dp", "pp"):
        others = [a for a in ("pp", "dp", "tp") if a != axis]
        for fixed in itertools.product(*(range(sizes[a]) for a in others)):
            ranks = []
            for i in range(sizes[axis]):
                at = dict(zip(others, fixed), **{axis: i})
                ranks.append((at["pp"] * dp_size + at["dp"]) * tp_size + at["tp"])
            g = dist.new_group(ranks)
            if rank in ranks:
                mine[axis] = g
    return Groups(mine["dp"], mine["pp"], mine["tp"])


def partition(module, rank, world_size, balance=None, num_model_chunks=1):
    """This rank's part of a sequential model cut into `world_size * num_model_chunks` consecutive
    pieces (`balance`: the number of layers of each piece; by default as even as possible).
    With one chunk, returns an nn.Sequential; with several, a list of them: the pieces
    rank, rank + world_size, ... (virtual stages of an interleaved schedule)."""
    layers = list(module.children()) if isinstance(module, nn.Sequential) else list(module)
    pieces = world_size * num_model_chunks
    if balance is None:
        if len(layers) < pieces:
            raise ValueError(f"haiscale.pipeline: {len(layers)} layers cannot fill {pieces} pipeline stages")
        base, extra = divmod(len(layers), pieces)
        balance = [base + (1 if i < extra else 0) for i in range(pieces)]
    balance = list(balance)
    if len(balance) != pieces:
        raise ValueError(f"haiscale.pipeline: balance has {len(balance)} entries for {pieces} stages")
    if any(b < 1 for b in balance) or sum(balance) != len(layers):
        raise ValueError(f"haiscale.pipeline: balance {balance} must be positive and sum to the "
                         f"{len(layers)} layers")
    if not 0 <= rank < world_size:
        raise ValueError(f"haiscale.pipeline: rank {rank} outside 0..{world_size - 1}")
    starts = [sum(balance[:i]) for i in range(pieces)]
    chunks = [nn.Sequential(*layers[starts[v]:starts[v] + balance[v]])
              for v in range(rank, pieces, world_size)]
    return chunks[0] if num_model_chunks == 1 else chunks


# ---- point-to-point messages ------------------------------------------------------------------


class _Channel:
    """Tensors (or tuples of them) between ranks of a group, with their shapes in a header."""

    def __init__(self, group, device):
        self.group = group
        self.device = device
        self.rank = dist.get_rank(group)
        self.pending = []  # (work, tensors kept alive until sent)
        self.local = collections.defaultdict(collections.deque)

    def _global(self, r):
        return dist.get_global_rank(self.group, r) if self.group is not None else r

    def send(self, tensors, dst, tag):
        if dst == self.rank:
            self.local[tag].append([t.detach().clone() for t in tensors])
            return
        header = [len(tensors)]
        for t in tensors:
            header += [_DTYPES.index(t.dtype), int(t.requires_grad), t.dim(), *t.shape]
        if len(header) > _HEADER:
            raise ValueError("haiscale.pipeline: too many or too high-dimensional tensors between stages")
        h = torch.tensor(header + [0] * (_HEADER - len(header)), dtype=torch.int64, device=self.device)
        payload = [h] + [t.detach().contiguous() for t in tensors]
        for t in payload:
            self.pending.append((dist.isend(t, dst=self._global(dst), group=self.group, tag=tag), t))

    def recv(self, src, tag):
        if src == self.rank:
            return self.local[tag].popleft()
        h = torch.empty(_HEADER, dtype=torch.int64, device=self.device)
        dist.irecv(h, src=self._global(src), group=self.group, tag=tag).wait()
        h = h.tolist()
        n, i, out = h[0], 1, []
        for _ in range(n):
            dtype, requires_grad, ndim = _DTYPES[h[i]], bool(h[i + 1]), h[i + 2]
            shape = h[i + 3:i + 3 + ndim]
            i += 3 + ndim
            t = torch.empty(shape, dtype=dtype, device=self.device)
            dist.irecv(t, src=self._global(src), group=self.group, tag=tag).wait()
            out.append(t.requires_grad_(requires_grad))
        return out

    def flush(self):
        for work, _ in self.pending:
            work.wait()
        self.pending.clear()


def _as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _split(tensors, chunks, batch_dim):
    """Micro-batches: a list (one per micro-batch) of tuples of tensors."""
    parts = []
    for t in tensors:
        if t.shape[batch_dim] % chunks:
            raise ValueError(f"haiscale.pipeline: a batch of {t.shape[batch_dim]} does not split into "
                             f"{chunks} equal micro-batches")
        parts.append(t.chunk(chunks, dim=batch_dim))
    return [tuple(p[m] for p in parts) for m in range(chunks)]


# ---- the schedules ----------------------------------------------------------------------------


class _Pipeline(nn.Module):
    """Runs a list of (forward | backward, model chunk, micro-batch) actions; subclasses order them."""

    CHECKPOINT_MODES = ("never", "always", "except_last")

    def __init__(self, modules, chunks, process_group=None, checkpoint="never", batch_dim=0, device=None):
        super().__init__()
        if not dist.is_initialized():
            raise RuntimeError("haiscale.pipeline: call torch.distributed.init_process_group first")
        if checkpoint not in self.CHECKPOINT_MODES:
            raise ValueError(f"haiscale.pipeline: checkpoint must be one of {self.CHECKPOINT_MODES}, "
                             f"got {checkpoint!r}")
        if chunks < 1:
            raise ValueError("haiscale.pipeline: chunks (micro-batches) must be at least 1")
        self.chunks_modules = nn.ModuleList(modules)
        self.chunks = chunks
        self.group = process_group
        self.checkpoint = checkpoint
        self.batch_dim = batch_dim
        self.stage = dist.get_rank(process_group)
        self.stages = dist.get_world_size(process_group)
        self.virtual = len(modules)
        if device is None:
            p = next(iter(self.chunks_modules.parameters()), None)
            device = p.device if p is not None else torch.device("cpu")
        self.device = torch.device(device)

    @property
    def module(self):
        return self.chunks_modules[0] if self.virtual == 1 else self.chunks_modules

    def forward(self, *args, **kwargs):
        raise RuntimeError("haiscale.pipeline: call forward_backward(*inputs, criterion=..., labels=...), "
                           "which runs the whole schedule")

    def schedule(self):
        raise NotImplementedError

    def _vstage(self, c):
        return c * self.stages + self.stage

    def forward_backward(self, *inputs, criterion=None, labels=(), return_outputs=False):
        """Runs the schedule on one batch. `inputs` matter on the first stage, `labels` (a tuple
        of tensors) and `criterion(output, *labels)` on the last; the batch is cut into `chunks`
        micro-batches along `batch_dim`, and the loss is the mean of the micro-batches' losses
        (so gradients equal those of the whole batch when the criterion averages).
        Returns (loss, outputs): on the last stage the mean loss (detached) and, with
        `return_outputs`, the outputs concatenated; elsewhere (None, None)."""
        last_v = self.stages * self.virtual - 1
        holds_first = self.stage == 0
        holds_last = self.stage == self.stages - 1
        if holds_last and criterion is None:
            raise ValueError("haiscale.pipeline: the last stage needs a criterion")
        mb_inputs = _split(_as_tuple(inputs), self.chunks, self.batch_dim) if holds_first else None
        mb_labels = _split(_as_tuple(labels), self.chunks, self.batch_dim) if holds_last and labels else None
        channel = _Channel(self.group, self.device)
        saved = {}  # (chunk, mb) -> (inputs, outputs or loss)
        losses, outputs = [], []
        remaining = collections.Counter()  # backward passes left per chunk (for no_sync)
        actions = self.schedule()
        for kind, c, _ in actions:
            if kind == "B":
                remaining[c] += 1
        prev, nxt = (self.stage - 1) % self.stages, (self.stage + 1) % self.stages
        for kind, c, m in actions:
            v = self._vstage(c)
            module = self.chunks_modules[c]
            # Under data parallelism, gradients are reduced with the chunk's last micro-batch only.
            last = m == self.chunks - 1 if kind == "F" else remaining[c] == 1
            sync = module.no_sync() if hasattr(module, "no_sync") and not last else contextlib.nullcontext()
            if kind == "F":
                if v == 0:
                    x = mb_inputs[m]
                else:
                    x = tuple(t.requires_grad_() if t.is_floating_point() else t
                              for t in channel.recv(prev, 2 * v))
                recompute = self.checkpoint == "always" or (self.checkpoint == "except_last" and m < self.chunks - 1)
                with sync:
                    if recompute:
                        y = _checkpoint(module, *x, use_reentrant=False)
                    else:
                        y = module(*x)
                if v == last_v:
                    loss = criterion(y, *(mb_labels[m] if mb_labels else ()))
                    losses.append(loss.detach())
                    if return_outputs:
                        outputs.append(y.detach())
                    saved[c, m] = (x, loss / self.chunks)
                else:
                    ys = _as_tuple(y)
                    channel.send(ys, nxt, 2 * (v + 1))
                    saved[c, m] = (x, ys)
            else:
                x, y = saved.pop((c, m))
                with sync:
                    if v == last_v:
                        y.backward()
                    else:
                        grads = channel.recv(nxt, 2 * v + 1)
                        floating = [t for t in y if t.is_floating_point()]
                        pairs = [(t, g) for t, g in zip(floating, grads) if t.requires_grad]
                        if pairs:
                            torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])
                remaining[c] -= 1
                if v != 0:
                    grads = [t.grad if t.grad is not None else torch.zeros_like(t)
                             for t in x if t.is_floating_point()]
                    channel.send(grads, prev, 2 * (v - 1) + 1)
        channel.flush()
        if not holds_last:
            return None, None
        loss = torch.stack(losses).mean()
        out = torch.cat(outputs, dim=self.batch_dim) if return_outputs else None
        return loss, out


class GPipe(_Pipeline):
    """All micro-batches forward, then all backward (in reverse)."""

    def __init__(self, module, chunks, process_group=None, checkpoint="never", batch_dim=0, device=None):
        super().__init__([module], chunks, process_group, checkpoint, batch_dim, device)

    def schedule(self):
        return [("F", 0, m) for m in range(self.chunks)] + [("B", 0, m) for m in reversed(range(self.chunks))]


class PipeDream(_Pipeline):
    """1F1B (PipeDream-Flush): warm-up forwards, then alternating forward and backward, then the
    remaining backwards; at most `stages - stage` micro-batches' activations live at once."""

    def __init__(self, module, chunks, process_group=None, checkpoint="never", batch_dim=0, device=None):
        super().__init__([module], chunks, process_group, checkpoint, batch_dim, device)

    def schedule(self):
        warmup = min(self.stages - self.stage - 1, self.chunks)
        actions = [("F", 0, m) for m in range(warmup)]
        f, b = warmup, 0
        while f < self.chunks:
            actions += [("F", 0, f), ("B", 0, b)]
            f += 1
            b += 1
        actions += [("B", 0, m) for m in range(b, self.chunks)]
        return actions


class Interleaved1F1B(_Pipeline):
    """Megatron-LM's interleaved 1F1B over `len(modules)` virtual stages per rank (from
    `partition(..., num_model_chunks=k)`). The micro-batch count must be a multiple of the number
    of pipeline ranks."""

    def __init__(self, modules, chunks, process_group=None, checkpoint="never", batch_dim=0, device=None):
        if isinstance(modules, nn.Module) and not isinstance(modules, (nn.ModuleList, list)):
            modules = [modules]
        super().__init__(list(modules), chunks, process_group, checkpoint, batch_dim, device)
        if chunks % self.stages:
            raise ValueError(f"haiscale.pipeline: Interleaved1F1B needs micro-batches ({chunks}) to be a "
                             f"multiple of the pipeline stages ({self.stages})")

    def _chunk_and_mb(self, k, forward):
        p, v = self.stages, self.virtual
        group, within = divmod(k, p * v)
        c = within // p
        if not forward:
            c = v - 1 - c
        return c, group * p + within % p

    def schedule(self):
        p, v, m = self.stages, self.virtual, self.chunks
        total = m * v
        warmup = min((p - self.stage - 1) * 2 + (v - 1) * p, total)
        actions = []
        for k in range(warmup):
            actions.append(("F", *self._chunk_and_mb(k, True)))
        for k in range(total - warmup):
            actions.append(("F", *self._chunk_and_mb(k + warmup, True)))
            actions.append(("B", *self._chunk_and_mb(k, False)))
        for k in range(total - warmup, total):
            actions.append(("B", *self._chunk_and_mb(k, False)))
        return actions
