"""haiscale.ddp.DistributedDataParallel: data parallelism with a reducer of our own.

    model = haiscale.ddp.DistributedDataParallel(model)            # after init_process_group
    loss = model(x).sum(); loss.backward(); opt.step()             # gradients averaged over ranks

How it works:
- The parameters (those that require gradients) are laid out, in reverse registration order
  (roughly the order backward produces their gradients), into flat buckets of at most
  `bucket_cap_mb` (the first at most `first_bucket_mb`, so that communication starts early);
  each parameter's ``.grad`` is a view of its bucket, so gradients land in the bucket with no
  copy.
- A post-accumulate-grad hook counts each bucket's ready gradients; the moment the last one is
  in, the bucket is allreduced (AVG) asynchronously, so communication overlaps the rest of
  backward. At the end of backward (an autograd callback) every bucket's allreduce is waited for.
- `find_unused_parameters=True`: parameters that got no gradient in a step count as ready with a
  zero gradient at the end of backward, so their buckets are still reduced (every rank must
  reduce every bucket). Without it, a step that leaves a parameter unused raises, naming it.
- `gradient_dtype=torch.bfloat16` (or float16): buckets travel in that type (half the bytes)
  and are accumulated by HFReduce in fp32, then copied back into the fp32 gradients.
- `no_sync()`: inside it, backward accumulates gradients locally; the next step outside reduces
  the sum. Initial parameters and buffers are broadcast from rank 0 at construction.
- `stop()`: waits for any reduction in flight and detaches the hooks; the module is then plain.
- `register_comm_hook(state, hook)`: torch's DDP communication-hook contract, so the stock hooks
  of `torch.distributed.algorithms.ddp_comm_hooks` (allreduce, fp16/bf16 compression, PowerSGD)
  and hooks written for torch's DDP run unchanged: when a bucket is ready, `hook(state, bucket)`
  is called with a `GradBucket` (buffer(), gradients(), parameters(), index(), is_last(),
  set_buffer()) and returns a `torch.futures.Future` whose value (a tensor, or a list holding
  one) is the bucket's reduced gradient; it is copied into the gradients at the end of backward.
  The hook replaces the built-in AVG allreduce (and so excludes `gradient_dtype`: compress with
  the hook instead). The hook runs for one bucket at a time, in the order the buckets are
  ready, so that collectives a hook issues from its futures' callbacks (PowerSGD) come in the
  same order on every rank.
"""

import collections
import contextlib
import threading

import torch
import torch.distributed as dist
import torch.nn as nn


class _Bucket:
    def __init__(self, params, dtype, device):
        self.params = params
        self.offsets = []
        total = 0
        for p in params:
            self.offsets.append(total)
            total += p.numel()
        self.flat = torch.zeros(total, dtype=dtype, device=device)
        self.ready = 0
        self.work = None
        self.comm = None  # the reduced-precision copy in flight, when gradient_dtype is set
        self.future = None  # the comm hook's result in flight, when a hook is registered

    def view(self, i):
        p = self.params[i]
        return self.flat[self.offsets[i]:self.offsets[i] + p.numel()].view_as(p)


class GradBucket:
    """One bucket as a DDP communication hook sees it: the methods of torch's dist.GradBucket."""

    def __init__(self, bucket, index, is_last):
        self._bucket = bucket
        self._index = index
        self._is_last = is_last
        self._buffer = bucket.flat

    def index(self):
        """The bucket's position: 0 is the first reduced (the last layers); stable across steps."""
        return self._index

    def buffer(self):
        """The flat 1-D gradient tensor of the bucket (the gradients are views of it)."""
        return self._buffer

    def set_buffer(self, tensor):
        """Replaces the tensor that buffer() returns (as torch's does; the gradients stay views of
        the bucket, which receives the hook's result)."""
        self._buffer = tensor

    def gradients(self):
        """Each parameter's gradient, a view of the bucket shaped like its parameter."""
        return [self._bucket.view(i) for i in range(len(self._bucket.params))]

    def parameters(self):
        return list(self._bucket.params)

    def is_last(self):
        """True for the bucket reduced last in an iteration (hooks count iterations with it)."""
        return self._is_last


class DistributedDataParallel(nn.Module):
    def __init__(self, module, process_group=None, bucket_cap_mb=25, find_unused_parameters=False,
                 gradient_dtype=None, broadcast_buffers=True, first_bucket_mb=1):
        super().__init__()
        if not dist.is_initialized():
            raise RuntimeError("haiscale.ddp: call torch.distributed.init_process_group first")
        if gradient_dtype not in (None, torch.float32, torch.bfloat16, torch.float16):
            raise ValueError(f"haiscale.ddp: gradient_dtype must be float32, bfloat16 or float16, got {gradient_dtype}")
        self.module = module
        self.process_group = process_group
        self.find_unused_parameters = find_unused_parameters
        self.gradient_dtype = gradient_dtype
        self.broadcast_buffers = broadcast_buffers
        self._sync = True
        self._hooks = []
        self._callback_queued = False
        self._stopped = False
        self._comm_hook = None  # (state, hook) once register_comm_hook is called
        self._hook_lock = threading.Lock()
        self._hook_queue = collections.deque()  # buckets ready, waiting for the one in flight
        self._hook_busy = False
        self._backward_seen = False  # a comm hook must be registered before the first backward

        with torch.no_grad():
            for t in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(t.data, src=dist.get_global_rank(self._group(), 0), group=process_group)

        params = [p for p in module.parameters() if p.requires_grad]
        if not params:
            raise ValueError("haiscale.ddp: the module has no parameter that requires a gradient")
        dtypes = {p.dtype for p in params}
        if len(dtypes) != 1 or not next(iter(dtypes)).is_floating_point:
            raise ValueError(f"haiscale.ddp: parameters must share one floating-point dtype, got {dtypes}")
        # The first bucket (the last layers, whose gradients come first) is small, so that
        # communication starts early in backward; the others hold up to bucket_cap_mb.
        cap = max(1, int(bucket_cap_mb * 1024 * 1024))
        first_cap = max(1, int(min(first_bucket_mb, bucket_cap_mb) * 1024 * 1024))
        self._buckets = []
        current, size = [], 0
        # A bucket closes once it reaches its cap (the parameter that crosses it included, as in
        # torch's DDP): the first bucket then holds the last layer's weight, not just its biases.
        for p in reversed(params):
            current.append(p)
            size += p.numel() * p.element_size()
            if size >= (first_cap if not self._buckets else cap):
                self._buckets.append(current)
                current, size = [], 0
        if current:
            self._buckets.append(current)
        self._buckets = [_Bucket(b, params[0].dtype, params[0].device) for b in self._buckets]
        for i, b in enumerate(self._buckets):
            b.index = i
        self._where = {}  # parameter -> (bucket, index)
        for b in self._buckets:
            for i, p in enumerate(b.params):
                self._where[p] = (b, i)
                p.grad = b.view(i)
                self._hooks.append(p.register_post_accumulate_grad_hook(self._grad_ready))
        self._names = {p: n for n, p in module.named_parameters()}
        self._seen = set()  # parameters whose gradient arrived in this backward

    def _group(self):
        return self.process_group if self.process_group is not None else dist.group.WORLD

    # ---- the reducer ------------------------------------------------------------------------

    def _grad_ready(self, p):
        bucket, i = self._where[p]
        view = bucket.view(i)
        if p.grad is None or p.grad.data_ptr() != view.data_ptr():
            # zero_grad(set_to_none=True) dropped the view: land this gradient in the bucket.
            if p.grad is not None:
                view.copy_(p.grad)
            p.grad = view
        if not self._sync:
            return
        if not self._callback_queued:
            self._callback_queued = True
            self._backward_seen = True
            self._seen.clear()
            torch.autograd.Variable._execution_engine.queue_callback(self._finish_backward)
        if p in self._seen:
            raise RuntimeError(f"haiscale.ddp: parameter {self._names.get(p, '?')} got two gradients in "
                               "one backward (a module used twice needs find_unused_parameters=False and "
                               "one backward per step)")
        self._seen.add(p)
        bucket.ready += 1
        if bucket.ready == len(bucket.params):
            self._launch(bucket)

    def register_comm_hook(self, state, hook):
        """Reduces each bucket with `hook(state, GradBucket) -> torch.futures.Future[Tensor]`
        instead of the built-in allreduce, as torch's DistributedDataParallel.register_comm_hook.
        Call it once, before the first backward."""
        if not callable(hook):
            raise TypeError(f"haiscale.ddp: the comm hook must be callable, got {type(hook).__name__}")
        if self._comm_hook is not None:
            raise RuntimeError("haiscale.ddp: register_comm_hook can only be called once")
        if self._backward_seen or any(b.ready or b.work is not None for b in self._buckets):
            raise RuntimeError("haiscale.ddp: register_comm_hook must be called before the first backward")
        if self.gradient_dtype is not None and self.gradient_dtype != self._buckets[0].flat.dtype:
            raise ValueError("haiscale.ddp: gradient_dtype and a comm hook both decide what travels; "
                             "compress in the hook (e.g. bf16_compress_hook) and leave gradient_dtype unset")
        self._comm_hook = (state, hook)

    def _launch(self, bucket):
        if self._comm_hook is not None:
            bucket.future = torch.futures.Future()
            bucket.work = bucket.future
            with self._hook_lock:
                self._hook_queue.append(bucket)
                if self._hook_busy:
                    return  # the bucket before it is in flight: its completion calls this hook
                self._hook_busy = True
            self._pump_hooks()
        elif self.gradient_dtype is not None and self.gradient_dtype != bucket.flat.dtype:
            bucket.comm = bucket.flat.to(self.gradient_dtype)
            bucket.work = dist.all_reduce(bucket.comm, op=dist.ReduceOp.AVG, group=self.process_group,
                                          async_op=True)
        else:
            bucket.work = dist.all_reduce(bucket.flat, op=dist.ReduceOp.AVG, group=self.process_group,
                                          async_op=True)

    def _pump_hooks(self):
        # Calls the comm hook for the queued buckets one at a time, the next once the previous
        # bucket's future is complete. A hook may issue collectives from its futures' callbacks
        # (PowerSGD does: P's allreduce completes, then its callback allreduces Q), which run on
        # the backend's threads; were several buckets in flight, those collectives would race each
        # other and the next bucket's hook, and ranks would issue them in different orders (torch's
        # DDP over gloo hangs so with PowerSGD on several buckets). One at a time, every rank
        # issues them in the same order, while backward goes on computing.
        state, hook = self._comm_hook
        while True:
            with self._hook_lock:
                if not self._hook_queue:
                    self._hook_busy = False
                    return
                bucket = self._hook_queue.popleft()
            try:
                future = hook(state, GradBucket(bucket, bucket.index, bucket.index == len(self._buckets) - 1))
                if not isinstance(future, (torch.futures.Future, torch._C.Future)):
                    raise TypeError(f"haiscale.ddp: the comm hook {getattr(hook, '__name__', hook)} must "
                                    f"return a torch.futures.Future, got {type(future).__name__}")
            except Exception as e:  # noqa: BLE001 (handed to the waiter at the end of backward)
                bucket.future.set_exception(e)
                continue
            link = {"state": "waiting"}

            def done(f, bucket=bucket, link=link):
                try:
                    bucket.future.set_result(f.value())
                except Exception as e:  # noqa: BLE001
                    bucket.future.set_exception(e)
                with self._hook_lock:
                    detached = link["state"] == "detached"
                    link["state"] = "done"
                if detached:
                    self._pump_hooks()

            future.add_done_callback(done)
            with self._hook_lock:
                if link["state"] != "done":
                    link["state"] = "detached"  # still in flight: its callback goes on with the queue
                    return

    def _finish_backward(self):
        self._callback_queued = False
        for bucket in self._buckets:
            if bucket.work is None:
                missing = [p for p in bucket.params if p not in self._seen]
                if not self.find_unused_parameters:
                    names = ", ".join(self._names.get(p, "?") for p in missing[:5])
                    raise RuntimeError(f"haiscale.ddp: parameters got no gradient in this step ({names}); "
                                       "pass find_unused_parameters=True if that is intended")
                for p in missing:
                    view = bucket.view(self._where[p][1])
                    view.zero_()
                    p.grad = view
                self._launch(bucket)
        for bucket in self._buckets:
            bucket.work.wait()
            if bucket.future is not None:
                self._take_hook_result(bucket)
            if bucket.comm is not None:
                bucket.flat.copy_(bucket.comm)
                bucket.comm = None
            bucket.work = None
            bucket.ready = 0

    def _take_hook_result(self, bucket):
        future, bucket.future = bucket.future, None
        result = future.value()
        if isinstance(result, (list, tuple)) and len(result) == 1:
            result = result[0]
        if not isinstance(result, torch.Tensor) or result.numel() != bucket.flat.numel():
            shape = tuple(result.shape) if isinstance(result, torch.Tensor) else type(result).__name__
            raise RuntimeError(f"haiscale.ddp: the comm hook's future must hold the bucket's {bucket.flat.numel()} "
                               f"reduced gradients as one tensor, got {shape}")
        if result.data_ptr() != bucket.flat.data_ptr():
            bucket.flat.copy_(result.reshape(-1))

    # ---- the module ---------------------------------------------------------------------------

    def forward(self, *args, **kwargs):
        if self._stopped:
            return self.module(*args, **kwargs)
        if self.broadcast_buffers and self._sync:
            buffers = list(self.module.buffers())
            if buffers:
                with torch.no_grad():
                    for t in buffers:
                        dist.broadcast(t.data, src=dist.get_global_rank(self._group(), 0), group=self.process_group)
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Backward inside accumulates gradients locally; the next synced backward reduces them."""
        previous, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = previous

    def stop(self):
        """Waits for reductions in flight and removes the hooks: the module is plain afterwards."""
        for bucket in self._buckets:
            if bucket.work is not None:
                bucket.work.wait()
                if bucket.future is not None:
                    self._take_hook_result(bucket)
                if bucket.comm is not None:
                    bucket.flat.copy_(bucket.comm)
                    bucket.comm = None
                bucket.work = None
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        self._stopped = True
