"""haiscale.fsdp.FullyShardedDataParallel: ZeRO-3 of our own over any process group.

    from haiscale.fsdp import FullyShardedDataParallel, ModuleTypePolicy, MixedPrecision
    model = FullyShardedDataParallel(gpt, auto_wrap_policy=ModuleTypePolicy(Block))
    opt = torch.optim.AdamW(model.parameters())     # the shards: optimizer state is sharded too
    model(tokens, targets).backward(); opt.step()

How it works:
- The module is cut into units: every submodule the wrap policy selects (by type, by size), and
  the root for what is left. A unit's parameters are flattened into one vector, padded to a
  multiple of the group's size; each rank keeps 1/N of it as an `nn.Parameter` (the shard). These
  shards are `model.parameters()`, so the optimizer steps on shards and keeps sharded state.
- Before a unit's forward its flat vector is all-gathered into a buffer of the unit, and the
  module's parameters become views of it (one `split`, so backward concatenates their gradients
  once). After the forward the buffer's storage is freed (`reshard_after_forward`); the moment
  the gradient of the unit's output arrives in backward, it is gathered again into the same
  storage, so the views autograd saved see the parameters once more.
- Prefetch: the next unit's all-gather is issued asynchronously while the current unit computes,
  in forward order and, with `backward_prefetch`, in reverse order during backward.
- When a unit's flat gradient is complete (a post-accumulate-grad hook on the flat vector), it is
  reduce-scattered (AVG) asynchronously into the shard's gradient and the full buffers are freed;
  at the end of backward every reduce-scatter is waited for. Gradients accumulate across
  backward passes until the optimizer's zero_grad.
- `mixed_precision=MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=...)`: shards stay in
  fp32 (the optimizer's master weights); gathers, compute and gradients are in param_dtype,
  reduction in reduce_dtype (default param_dtype), the shard's gradient in fp32.
- `cpu_offload=True`: shards, their gradients and so the optimizer state live in host memory;
  each gather copies the shard to the compute device first.
- `summon_full_params()`, `full_state_dict()` / `load_full_state_dict()` (the single-process
  names and shapes), `sharded_state_dict()` / `load_sharded_state_dict()` (this rank's shards),
  `full_optim_state_dict()` / `load_full_optim_state_dict()`, `clip_grad_norm_()`.

A parameter used by several units (tied weights) belongs to the innermost unit holding all its
users. Parameters that do not require gradients are not sharded (they stay replicated).
"""

import contextlib
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn


@dataclass
class MixedPrecision:
    param_dtype: torch.dtype = None   # gathers and compute (None: the parameters' own dtype)
    reduce_dtype: torch.dtype = None  # gradient reduction (None: param_dtype)
    cast_inputs: bool = True          # floating-point inputs of the root cast to param_dtype


class ModuleTypePolicy:
    """Wraps every submodule that is an instance of one of the types."""

    def __init__(self, *types):
        self.types = tuple(types)

    def __call__(self, module):
        return isinstance(module, self.types)


class SizePolicy:
    """Wraps a submodule once its own parameters (not yet in a unit below it) reach min_num_params."""

    def __init__(self, min_num_params):
        self.min_num_params = min_num_params

    def __call__(self, module, unwrapped_params=None):
        return (unwrapped_params if unwrapped_params is not None else
                sum(p.numel() for p in module.parameters())) >= self.min_num_params


_FREE, _GATHERING, _READY = "free", "gathering", "ready"

# torch 2.13 renamed the flat collectives (the old names warn); take whichever this torch has.
_all_gather_flat = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_flat = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


class _Unit:
    def __init__(self, fsdp, module, name, params, is_root):
        self.fsdp = fsdp
        self.module = module
        self.name = name
        self.is_root = is_root
        # params: list of (parameter, [(owner module, attribute), ...], full name)
        self.params = params
        self.shapes = [p.shape for p, _, _ in params]
        self.sizes = [p.numel() for p, _, _ in params]
        self.names = [n for _, _, n in params]
        self.numel = sum(self.sizes)
        world = fsdp.world
        self.shard_numel = (self.numel + world - 1) // world
        self.padded = self.shard_numel * world
        compute, store = fsdp.compute_device, fsdp.shard_device
        dtype = params[0][0].dtype
        self.dtype = dtype
        self.param_dtype = fsdp.mp.param_dtype or dtype
        self.reduce_dtype = fsdp.mp.reduce_dtype or self.param_dtype
        with torch.no_grad():
            full = torch.zeros(self.padded, dtype=dtype, device=compute)
            if self.numel:
                torch.cat([p.detach().reshape(-1).to(compute) for p, _, _ in params], out=full[:self.numel])
            start = fsdp.rank * self.shard_numel
            self.shard = nn.Parameter(full[start:start + self.shard_numel].clone().to(store))
        # The gathered vector: a leaf whose storage is allocated only while the unit is in use.
        self.flat = torch.empty(self.padded, dtype=self.param_dtype, device=compute).requires_grad_()
        self._free_storage()
        self.flat.register_post_accumulate_grad_hook(self._grad_ready)
        for _p, owners, _ in params:
            for owner, attr in owners:
                del owner._parameters[attr]
        self.state = _FREE
        self.gather_work = None
        self.gather_src = None
        self.reduce = None  # (work, output) of the gradient's reduce-scatter in flight
        self.used_with_grad = False
        self.backward_started = False

    # ---- storage ----------------------------------------------------------------------------

    def _free_storage(self):
        self.flat.untyped_storage().resize_(0)

    def _alloc_storage(self):
        nbytes = self.padded * self.flat.element_size()
        if self.flat.untyped_storage().size() != nbytes:
            self.flat.untyped_storage().resize_(nbytes)

    def start_gather(self):
        if self.state != _FREE:
            return
        self._alloc_storage()
        src = self.shard.detach().to(self.fsdp.compute_device, dtype=self.param_dtype)
        self.gather_src = src
        self.gather_work = _all_gather_flat(self.flat.data, src, group=self.fsdp.group, async_op=True)
        self.state = _GATHERING

    def wait_gather(self):
        self.start_gather()
        if self.state == _GATHERING:
            self.gather_work.wait()
            self.gather_work = self.gather_src = None
            self.state = _READY

    def reshard(self):
        if self.state == _GATHERING:
            self.wait_gather()
        if self.state == _READY:
            self._free_storage()
            self.state = _FREE

    def set_views(self, detached=False):
        """Makes the module's parameters views of the gathered vector (tracked by autograd, or
        plain tensors a user may change in place with `detached`)."""
        flat = self.flat.detach() if detached else self.flat
        views = flat.split(self.sizes + ([self.padded - self.numel] if self.padded > self.numel else []))
        for (_, owners, _), view, shape in zip(self.params, views, self.shapes):
            v = view.view(shape)
            for owner, attr in owners:
                setattr(owner, attr, v)

    # ---- gradients --------------------------------------------------------------------------

    def _grad_ready(self, flat):
        grad = flat.grad
        flat.grad = None
        self.launch_reduce(grad)
        if self.fsdp.reshard_after_backward:
            self.reshard()

    def launch_reduce(self, grad):
        if self.reduce is not None:
            raise RuntimeError(f"haiscale.fsdp: unit {self.name or '<root>'} got two gradients in one backward "
                               "(a unit called twice per forward is not supported)")
        grad = grad.to(self.reduce_dtype).contiguous()
        out = torch.empty(self.shard_numel, dtype=self.reduce_dtype, device=grad.device)
        work = _reduce_scatter_flat(out, grad, op=dist.ReduceOp.AVG, group=self.fsdp.group, async_op=True)
        self.reduce = (work, out, grad)

    def finish_reduce(self):
        work, out, _ = self.reduce
        self.reduce = None
        work.wait()
        out = out.to(self.shard.device, dtype=self.shard.dtype)
        if self.shard.grad is None:
            self.shard.grad = out
        else:
            self.shard.grad.add_(out)


class FullyShardedDataParallel(nn.Module):
    def __init__(self, module, process_group=None, auto_wrap_policy=None, mixed_precision=None,
                 backward_prefetch=True, forward_prefetch=True, reshard_after_forward=True, cpu_offload=False,
                 device=None, sync_module_states=True):
        super().__init__()
        if not dist.is_initialized():
            raise RuntimeError("haiscale.fsdp: call torch.distributed.init_process_group first")
        self.module = module
        self.group = process_group
        self.world = dist.get_world_size(process_group)
        self.rank = dist.get_rank(process_group)
        self.mp = mixed_precision or MixedPrecision()
        self.backward_prefetch = backward_prefetch
        self.forward_prefetch = forward_prefetch
        self.reshard_after_forward = reshard_after_forward
        self.reshard_after_backward = True
        first = next(iter(module.parameters()), None)
        if first is None:
            raise ValueError("haiscale.fsdp: the module has no parameters")
        self.compute_device = torch.device(device) if device is not None else first.device
        self.shard_device = torch.device("cpu") if cpu_offload else self.compute_device
        if sync_module_states:
            with torch.no_grad():
                src = dist.get_global_rank(process_group, 0) if process_group is not None else 0
                for t in list(module.parameters()) + list(module.buffers()):
                    dist.broadcast(t.data, src=src, group=process_group)
        self._units = self._build_units(module, auto_wrap_policy)
        self.shards = nn.ParameterList([u.shard for u in self._units])
        self._order = []          # units in the order of the first forward (for prefetch)
        self._order_fixed = False
        self._callback_queued = False
        self._hooks = []
        for u in self._units:
            if not u.is_root:
                self._hooks.append(u.module.register_forward_pre_hook(self._make_pre_forward(u)))
                self._hooks.append(u.module.register_forward_hook(self._make_post_forward(u)))

    # ---- construction -----------------------------------------------------------------------

    def _build_units(self, module, policy):
        names = {m: n for n, m in module.named_modules()}
        wrapped = {}  # module -> True when it heads a unit

        def visit(m):
            # bottom-up: count the parameters not yet inside a unit below
            own = 0
            for child in m.children():
                own += visit(child)
            own += sum(p.numel() for p in m._parameters.values() if p is not None and p.requires_grad)
            if m is not module and policy is not None and self._selects(policy, m, own):
                wrapped[m] = True
                return 0
            return own

        visit(module)
        owner_unit = {}  # module -> the head module of its innermost unit
        heads_parent = {}  # unit head -> the head of the unit enclosing it (for tied parameters)

        def assign(m, head):
            if m in wrapped:
                heads_parent[m] = head
                head = m
            owner_unit[m] = head
            for child in m.children():
                assign(child, head)

        assign(module, module)

        def chain(head):
            out = [head]
            while out[-1] is not module:
                out.append(heads_parent[out[-1]])
            return out

        # Every occurrence of every parameter that needs a gradient, with its name.
        occurrences = {}
        order = []
        dtypes = set()
        for m in module.modules():
            for attr, p in m._parameters.items():
                if p is None or not p.requires_grad:
                    continue
                if p not in occurrences:
                    occurrences[p] = []
                    order.append(p)
                    dtypes.add(p.dtype)
                occurrences[p].append((m, attr))
        if len(dtypes) > 1:
            raise ValueError(f"haiscale.fsdp: parameters must share one dtype, got {dtypes}")
        by_head = {}
        self._aliases = {}
        for p in order:
            heads = [owner_unit[m] for m, _ in occurrences[p]]
            head = heads[0]
            if len(set(heads)) > 1:  # tied across units: the innermost unit enclosing all users
                common = set(chain(heads[0]))
                for h in heads[1:]:
                    common &= set(chain(h))
                head = next(h for h in chain(heads[0]) if h in common)
            full_names = [f"{names[m]}.{attr}" if names[m] else attr for m, attr in occurrences[p]]
            self._aliases[full_names[0]] = full_names[1:]  # tied: one tensor, several names
            by_head.setdefault(head, []).append((p, occurrences[p], full_names[0]))
        units = []
        for head in [module] + [m for m in module.modules() if m in wrapped]:
            params = by_head.get(head)
            if params:
                units.append(_Unit(self, head, names[head], params, head is module))
        self._param_names = {}
        for u in units:
            for _, _, name in u.params:
                self._param_names[name] = u
        return units

    @staticmethod
    def _selects(policy, m, own):
        if isinstance(policy, (set, tuple, list)):
            return isinstance(m, tuple(policy))
        if isinstance(policy, SizePolicy):
            return policy(m, own)
        return bool(policy(m))

    # ---- hooks ------------------------------------------------------------------------------

    def _root_unit(self):
        return self._units[0] if self._units and self._units[0].is_root else None

    def _prefetch_after(self, unit, reverse):
        if unit not in self._order:
            return
        i = self._order.index(unit)
        j = i - 1 if reverse else i + 1
        if 0 <= j < len(self._order) and not self._order[j].is_root:
            self._order[j].start_gather()

    def _make_pre_forward(self, unit):
        def hook(module, args):
            if not self._order_fixed and unit not in self._order:
                self._order.append(unit)
            unit.wait_gather()
            unit.set_views()
            if self.forward_prefetch and self._order_fixed:
                self._prefetch_after(unit, reverse=False)
            if torch.is_grad_enabled():
                unit.used_with_grad = True
        return hook

    def _make_post_forward(self, unit):
        def hook(module, args, output):
            if self.reshard_after_forward:
                unit.reshard()
            if torch.is_grad_enabled():
                self._register_pre_backward(unit, output)
            return output
        return hook

    def _register_pre_backward(self, unit, output):
        tensors = [t for t in (output if isinstance(output, (tuple, list)) else (output,))
                   if isinstance(t, torch.Tensor) and t.requires_grad]
        unit.backward_started = False

        def hook(grad):
            self._queue_final_callback()
            if not unit.backward_started:
                unit.backward_started = True
                unit.wait_gather()
                if self.backward_prefetch:
                    self._prefetch_after(unit, reverse=True)
            return grad

        for t in tensors:
            t.register_hook(hook)

    def _queue_final_callback(self):
        if not self._callback_queued:
            self._callback_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._finish_backward)

    def _finish_backward(self):
        self._callback_queued = False
        for u in self._units:
            if u.used_with_grad and u.reduce is None:
                # no gradient reached this unit here; the others reduce it, so reduce zeros too
                u.launch_reduce(torch.zeros(u.padded, dtype=u.param_dtype, device=self.compute_device))
        for u in self._units:
            if u.reduce is not None:
                u.finish_reduce()
            u.used_with_grad = False
            u.reshard()
        self._order_fixed = True

    # ---- the module -------------------------------------------------------------------------

    def forward(self, *args, **kwargs):
        root = self._root_unit()
        if self.mp.param_dtype is not None and self.mp.cast_inputs:
            cast = lambda t: t.to(self.mp.param_dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t
            args = tuple(cast(a) for a in args)
            kwargs = {k: cast(v) for k, v in kwargs.items()}
        if root is not None:
            if not self._order_fixed and root not in self._order:
                self._order.append(root)
            root.wait_gather()
            root.set_views()
            if torch.is_grad_enabled():
                root.used_with_grad = True
        if self.forward_prefetch and self._order_fixed and len(self._order) > 1:
            self._order[1].start_gather()
        out = self.module(*args, **kwargs)
        if torch.is_grad_enabled():
            tensors = [t for t in (out if isinstance(out, (tuple, list)) else (out,))
                       if isinstance(t, torch.Tensor) and t.requires_grad]
            for t in tensors:
                t.register_hook(self._root_pre_backward)
        return out

    def _root_pre_backward(self, grad):
        self._queue_final_callback()
        return grad

    @contextlib.contextmanager
    def summon_full_params(self, writeback=True):
        """Inside, the module holds its full parameters (as plain tensors of the original names
        and shapes); with writeback, changes made to them are kept (copied into the shards)."""
        with torch.no_grad():
            for u in self._units:
                u.wait_gather()
                u.set_views(detached=True)
        try:
            yield self.module
        finally:
            with torch.no_grad():
                for u in self._units:
                    if writeback:
                        start = self.rank * u.shard_numel
                        u.shard.copy_(u.flat.detach()[start:start + u.shard_numel].to(u.shard.device, u.shard.dtype))
                    u.reshard()

    # ---- checkpoints ------------------------------------------------------------------------

    def _unflatten(self, unit, flat):
        out, offset = {}, 0
        for name, shape, size in zip(unit.names, unit.shapes, unit.sizes):
            out[name] = flat[offset:offset + size].view(shape)
            offset += size
        return out

    def _gather_flat(self, unit, shard_like):
        full = torch.empty(unit.padded, dtype=shard_like.dtype, device=self.compute_device)
        _all_gather_flat(full, shard_like.detach().to(self.compute_device).contiguous(), group=self.group)
        return full

    def full_state_dict(self):
        """The single-process state dict (names and shapes of the unwrapped module), on every rank,
        in host memory. Collective: every rank must call it."""
        sd = {}
        for u in self._units:
            with torch.no_grad():
                full = self._gather_flat(u, u.shard)
            for name, t in self._unflatten(u, full).items():
                sd[name] = t.to("cpu").clone()
                for alias in self._aliases.get(name, ()):
                    sd[alias] = sd[name]
        for name, t in self._other_tensors():
            sd[name] = t.detach().to("cpu").clone()
        return dict(sorted(sd.items()))

    def _other_tensors(self):
        for name, p in self.module.named_parameters():
            yield name, p  # parameters left unsharded (no gradient)
        for name, b in self.module.named_buffers():
            yield name, b

    def load_full_state_dict(self, state_dict):
        """Loads a single-process state dict; each rank keeps its shard. Checks every name and
        shape first, so a mismatched dict changes nothing."""
        expected = {}
        for u in self._units:
            for name, shape in zip(u.names, u.shapes):
                expected[name] = shape
                for alias in self._aliases.get(name, ()):
                    expected[alias] = shape
        others = dict(self._other_tensors())
        for name, t in others.items():
            expected[name] = t.shape
        missing = sorted(set(expected) - set(state_dict))
        unexpected = sorted(set(state_dict) - set(expected))
        wrong = sorted(n for n in expected if n in state_dict and tuple(state_dict[n].shape) != tuple(expected[n]))
        if missing or unexpected or wrong:
            raise ValueError(f"haiscale.fsdp: state dict does not match the model: missing {missing[:5]}, "
                             f"unexpected {unexpected[:5]}, wrong shapes {wrong[:5]}")
        with torch.no_grad():
            for u in self._units:
                full = torch.zeros(u.padded, dtype=u.shard.dtype)
                torch.cat([state_dict[n].reshape(-1).to("cpu", u.shard.dtype) for n in u.names], out=full[:u.numel])
                start = self.rank * u.shard_numel
                u.shard.copy_(full[start:start + u.shard_numel].to(u.shard.device))
            for name, t in others.items():
                t.data.copy_(state_dict[name])

    def sharded_state_dict(self):
        """This rank's shards (and the replicated buffers): save one per rank; reload with the
        same group size."""
        sd = {f"_fsdp_shard.{i}.{u.name or '<root>'}": u.shard.detach().to("cpu").clone()
              for i, u in enumerate(self._units)}
        sd["_fsdp_meta"] = {"world": self.world, "rank": self.rank, "numels": [u.numel for u in self._units]}
        for name, t in self._other_tensors():
            sd[name] = t.detach().to("cpu").clone()
        return sd

    def load_sharded_state_dict(self, state_dict):
        meta = state_dict.get("_fsdp_meta")
        if meta is None:
            raise ValueError("haiscale.fsdp: not a sharded state dict (no _fsdp_meta); use load_full_state_dict")
        if meta["world"] != self.world or meta["numels"] != [u.numel for u in self._units]:
            raise ValueError(f"haiscale.fsdp: sharded state dict of {meta['world']} ranks with unit sizes "
                             f"{meta['numels']} does not fit {self.world} ranks with "
                             f"{[u.numel for u in self._units]}; load a full state dict instead")
        if meta["rank"] != self.rank:
            raise ValueError(f"haiscale.fsdp: this is rank {meta['rank']}'s shard, not rank {self.rank}'s")
        with torch.no_grad():
            for i, u in enumerate(self._units):
                u.shard.copy_(state_dict[f"_fsdp_shard.{i}.{u.name or '<root>'}"])
            for name, t in self._other_tensors():
                t.data.copy_(state_dict[name])

    def full_optim_state_dict(self, optimizer):
        """The optimizer's state by single-process parameter name (state tensors shaped like a
        shard are gathered and unflattened; scalars such as `step` are kept). Collective."""
        index = {id(u.shard): u for u in self._units}
        state = {}
        for group in optimizer.param_groups:
            for p in group["params"]:
                u = index.get(id(p))
                if u is None or p not in optimizer.state:
                    continue
                per_name = {n: {} for n in u.names}
                for key, value in optimizer.state[p].items():
                    if isinstance(value, torch.Tensor) and value.shape == p.shape:
                        full = self._gather_flat(u, value)
                        for n, t in self._unflatten(u, full).items():
                            per_name[n][key] = t.to("cpu").clone()
                    else:
                        for n in u.names:
                            per_name[n][key] = value.clone() if isinstance(value, torch.Tensor) else value
                state.update(per_name)
        groups = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
        return {"state": state, "param_groups": groups}

    def load_full_optim_state_dict(self, optimizer, osd):
        index = {id(u.shard): u for u in self._units}
        new_state = {}
        for group in optimizer.param_groups:
            for p in group["params"]:
                u = index.get(id(p))
                if u is None or u.names[0] not in osd["state"]:
                    continue
                entry = {}
                for key, value in osd["state"][u.names[0]].items():
                    if isinstance(value, torch.Tensor) and tuple(value.shape) == tuple(u.shapes[0]):
                        full = torch.zeros(u.padded, dtype=value.dtype)
                        torch.cat([osd["state"][n][key].reshape(-1).to("cpu") for n in u.names], out=full[:u.numel])
                        start = self.rank * u.shard_numel
                        entry[key] = full[start:start + u.shard_numel].clone().to(p.device)
                    else:
                        entry[key] = value.clone() if isinstance(value, torch.Tensor) else value
                new_state[p] = entry
        for g, saved in zip(optimizer.param_groups, osd["param_groups"]):
            g.update(saved)
        optimizer.state.clear()
        optimizer.state.update(new_state)

    # ---- utilities --------------------------------------------------------------------------

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm):
        """Clips the gradients' global norm (over all shards of all ranks); returns the norm."""
        grads = [u.shard.grad for u in self._units if u.shard.grad is not None]
        local = torch.zeros(1, dtype=torch.float64, device=self.compute_device)
        for g in grads:
            local += g.detach().double().pow(2).sum().to(self.compute_device)
        dist.all_reduce(local, group=self.group)
        norm = local.sqrt().item()
        scale = max_norm / (norm + 1e-6)
        if scale < 1:
            for g in grads:
                g.mul_(scale)
        return torch.tensor(norm)

    def units(self):
        """(name, number of parameters) of each unit, the root first."""
        return [(u.name or "<root>", u.numel) for u in self._units]
