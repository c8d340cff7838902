"""Every torch.distributed op over "hfreduce", checked against exact expected values.

Inputs are small integers (exact in every type, bf16 included), so sums, products and averages
have one right answer. Each check records a failure instead of stopping, so one run reports
every broken (op, type) pair.
"""

import torch
import torch.distributed as dist

import haiscale  # noqa: F401  (registers "hfreduce")

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int32, torch.int64, torch.uint8, torch.int8]
TYPES = FLOATS + INTS + [torch.bool]
N = 1031  # prime: chunks and shards never line up


def value(rank, n, dtype, offset=0):
    """Rank `rank`'s input: small integers (0/1 for bool, non-negative for uint8)."""
    i = torch.arange(n, dtype=torch.int64) + offset
    if dtype == torch.bool:
        return ((i + rank) % 3 == 0)
    v = (i * 7 + rank * 5) % 9
    if dtype != torch.uint8:
        v = v - 4
    return v.to(dtype)


def factors(rank, n, dtype):
    """Inputs for products: 1, 2 and -1 (products of six stay exact in bf16)."""
    i = torch.arange(n, dtype=torch.int64)
    v = torch.tensor([1, 2, -1 if dtype != torch.uint8 else 1])[(i + rank) % 3]
    if dtype == torch.bool:
        return (i + rank) % 4 != 0
    return v.to(dtype)


class Checker:
    def __init__(self):
        self.failures = []
        self.checked = 0

    def equal(self, what, got, expected):
        self.checked += 1
        if got.dtype != expected.dtype or got.shape != expected.shape or not torch.equal(got, expected):
            diff = ""
            if got.shape == expected.shape:
                bad = (got != expected).nonzero()
                if len(bad):
                    k = tuple(bad[0].tolist())
                    diff = f" first difference at {k}: got {got[k].item()}, expected {expected[k].item()}"
            self.failures.append(f"rank {dist.get_rank()}: {what}:{diff} (dtype {got.dtype}, shape {tuple(got.shape)})")

    def raises(self, what, fn, words):
        self.checked += 1
        try:
            fn()
        except RuntimeError as e:
            if not all(w in str(e) for w in words):
                self.failures.append(f"{what}: raised {e!r}, expected it to name {words}")
            return
        self.failures.append(f"{what}: did not raise")


def reference(op, inputs, dtype):
    """The exact reduction of the per-rank inputs, computed in int64/float64 then cast."""
    world = len(inputs)
    if op in BITWISE:  # on the two's-complement bits, as the C types have them
        r = inputs[0].to(torch.int64) if dtype != torch.bool else inputs[0]
        for x in inputs[1:]:
            r = BITWISE[op](r, x.to(r.dtype))
        return r.to(dtype)
    if dtype == torch.bool:
        stack = torch.stack(inputs)
        if op in ("sum", "max"):
            return stack.any(0)
        return stack.all(0)  # product, min
    wide = torch.stack([x.to(torch.float64 if dtype.is_floating_point else torch.int64) for x in inputs])
    if op == "sum":
        r = wide.sum(0)
    elif op == "product":
        r = wide.prod(0)
    elif op == "max":
        r = wide.max(0).values
    elif op == "min":
        r = wide.min(0).values
    elif op == "avg":
        s = wide.sum(0)
        if dtype.is_floating_point:
            # HFReduce divides the exact sum once, in the accumulation type (fp32 for 16-bit).
            acc = torch.float64 if dtype == torch.float64 else torch.float32
            return (s.to(acc) / world).to(dtype)
        return torch.div(s, world, rounding_mode="trunc").to(dtype)
    elif op == "premul":
        r = (wide * 0.5).sum(0)
    if dtype == torch.uint8 or dtype == torch.int8:
        r = r.to(torch.int64)
    return r.to(dtype)


REDUCE_OPS = {
    "sum": dist.ReduceOp.SUM,
    "avg": dist.ReduceOp.AVG,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
    "product": dist.ReduceOp.PRODUCT,
    "band": dist.ReduceOp.BAND,
    "bor": dist.ReduceOp.BOR,
    "bxor": dist.ReduceOp.BXOR,
}
BITWISE = {"band": torch.bitwise_and, "bor": torch.bitwise_or, "bxor": torch.bitwise_xor}


def ops_for(dtype):
    if dtype == torch.bool:
        return ["sum", "max", "min", "product", *BITWISE]
    ops = ["sum", "avg", "max", "min", "product"]
    if dtype.is_floating_point:
        ops.append("premul")
    else:
        ops += list(BITWISE)
    return ops


def redop(name):
    return dist._make_nccl_premul_sum(0.5) if name == "premul" else REDUCE_OPS[name]


def check_reductions(c, group, ranks):
    me = dist.get_rank(group)
    world = len(ranks)
    tag = f"group {ranks}" if world != dist.get_world_size() else "world"
    for dtype in TYPES:
        for op in ops_for(dtype):
            make = factors if op == "product" else value
            inputs = [make(r, N, dtype) for r in range(world)]
            expected = reference(op, inputs, dtype)
            # allreduce, in place
            t = inputs[me].clone()
            dist.all_reduce(t, op=redop(op), group=group)
            c.equal(f"{tag} allreduce {op} {dtype}", t, expected)
            # reduce to the last rank; the others keep their input
            root = ranks[-1]
            t = inputs[me].clone()
            dist.reduce(t, root, op=redop(op), group=group)
            c.equal(f"{tag} reduce {op} {dtype}", t, expected if ranks[me] == root else inputs[me])
            # reduce-scatter, tensor and list forms
            per = 37
            full = [make(r, per * world, dtype) for r in range(world)]
            full_expected = reference(op, full, dtype)
            out = torch.empty(per, dtype=dtype)
            dist.reduce_scatter_tensor(out, full[me].clone(), op=redop(op), group=group)
            c.equal(f"{tag} reduce_scatter_tensor {op} {dtype}", out, full_expected[me * per:(me + 1) * per])
            out = torch.empty(per, dtype=dtype)
            dist.reduce_scatter(out, list(full[me].clone().chunk(world)), op=redop(op), group=group)
            c.equal(f"{tag} reduce_scatter (list) {op} {dtype}", out, full_expected[me * per:(me + 1) * per])
    # A non-contiguous tensor is reduced through a staged copy and written back in place.
    base = value(me, 2 * N, torch.float32).reshape(N, 2)
    view = base[:, 1]
    dist.all_reduce(view, group=group)
    c.equal(f"{tag} allreduce of a strided view", view,
            reference("sum", [value(r, 2 * N, torch.float32).reshape(N, 2)[:, 1] for r in range(world)], torch.float32))
    c.equal(f"{tag} allreduce of a strided view leaves the rest", base[:, 0],
            value(me, 2 * N, torch.float32).reshape(N, 2)[:, 0])


def check_coalesced(c, group, ranks):
    me = dist.get_rank(group)
    world = len(ranks)
    dtypes = [torch.float32, torch.bfloat16, torch.int64]
    inputs = {d: [value(r, 100 + 3 * i, d) for r in range(world)] for i, d in enumerate(dtypes)}
    ts = [inputs[d][me].clone() for d in dtypes]
    with dist._coalescing_manager(group=group, async_ops=True) as cm:
        for t in ts:
            dist.all_reduce(t, group=group)
    cm.wait()
    for d, t in zip(dtypes, ts):
        c.equal(f"allreduce_coalesced {d}", t, reference("sum", inputs[d], d))
    outs = [torch.empty(world * 50, dtype=d) for d in dtypes]
    with dist._coalescing_manager(group=group, async_ops=True) as cm:
        for d, o in zip(dtypes, outs):
            dist.all_gather_into_tensor(o, value(me, 50, d, offset=me), group=group)
    cm.wait()
    for d, o in zip(dtypes, outs):
        c.equal(f"allgather_into_tensor_coalesced {d}", o, torch.cat([value(r, 50, d, offset=r) for r in range(world)]))
    outs = [torch.empty(20, dtype=d) for d in dtypes]
    fulls = {d: [value(r, 20 * world, d) for r in range(world)] for d in dtypes}
    with dist._coalescing_manager(group=group, async_ops=True) as cm:
        for d, o in zip(dtypes, outs):
            dist.reduce_scatter_tensor(o, fulls[d][me].clone(), group=group)
    cm.wait()
    for d, o in zip(dtypes, outs):
        c.equal(f"reduce_scatter_tensor_coalesced {d}", o, reference("sum", fulls[d], d)[me * 20:(me + 1) * 20])


def check_list_forms(c, group, ranks, gloo):
    """The list and coalesced forms against gloo on the same inputs (torch's reference backend)."""
    me = dist.get_rank(group)
    world = len(ranks)
    import warnings
    for n_inputs in (world, world + 1, 1):  # as many inputs as ranks hid a transposition
        inputs = [torch.full((3 + i,), float(10 * me + i)) for i in range(n_inputs)]
        got = [[torch.empty(3 + i) for i in range(n_inputs)] for _ in range(world)]
        want = [[torch.empty(3 + i) for i in range(n_inputs)] for _ in range(world)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # all_gather_coalesced is deprecated, still used
            dist.all_gather_coalesced(got, inputs, group=group)
            dist.all_gather_coalesced(want, inputs, group=gloo)
        for r in range(world):
            for i in range(n_inputs):
                c.equal(f"all_gather_coalesced ({n_inputs} inputs) rank {r} input {i} (gloo's)",
                        got[r][i], want[r][i])
                c.equal(f"all_gather_coalesced ({n_inputs} inputs) rank {r} input {i}",
                        got[r][i], torch.full((3 + i,), float(10 * r + i)))


def check_against_gloo(c, gloo):
    """Each op, in each form torch exposes, over hfreduce and over gloo on the same inputs: the
    results must be equal (integers exactly; float sums add in another order: within 1e-5
    relative, 1e-4 absolute on values up to ~100)."""
    me, world = dist.get_rank(), dist.get_world_size()
    hf = dist.distributed_c10d._get_default_group()

    def same(what, run):
        got, want = run(hf), run(gloo)
        for k, (g, w) in enumerate(zip(got, want)):
            c.checked += 1
            close = (torch.allclose(g, w, rtol=1e-5, atol=1e-4) if g.dtype.is_floating_point
                     else torch.equal(g, w))
            if g.shape != w.shape or g.dtype != w.dtype or not close:
                c.failures.append(f"{what} (output {k}) differs from gloo's: {g.flatten()[:6].tolist()} vs "
                                  f"{w.flatten()[:6].tolist()}")

    def x(n=37, dtype=torch.float32, salt=0):
        g = torch.Generator().manual_seed(1000 * me + salt)
        return (torch.randn(n, generator=g) * 10).to(dtype) if dtype.is_floating_point else \
            torch.randint(0 if dtype == torch.uint8 else -50, 50, (n,), generator=g, dtype=dtype)

    arithmetic = [(op, dtype) for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN,
                                         dist.ReduceOp.PRODUCT) for dtype in (torch.float32, torch.int64)]
    bitwise = [(op, dtype) for op in (dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR)
               for dtype in (torch.int64, torch.int32, torch.uint8, torch.bool)]
    for op, dtype in arithmetic + bitwise:
        def allreduce(g, op=op, dtype=dtype):
            if dtype == torch.bool:
                t = x(dtype=torch.int64) > 0
                dist.all_reduce(t, op=op, group=g)
                return [t]
            t = x(dtype=dtype) if op != dist.ReduceOp.PRODUCT else x(dtype=dtype).clamp(-2, 2)
            dist.all_reduce(t, op=op, group=g)
            return [t]
        same(f"all_reduce {op} {dtype}", allreduce)

    def allreduce_async(g):
        ts = [x(salt=i) for i in range(3)]
        works = [dist.all_reduce(t, group=g, async_op=True) for t in ts]
        return [w.get_future().wait()[0] for w in works]
    same("all_reduce async, through futures", allreduce_async)

    def allreduce_then(g):
        t = x()
        fut = dist.all_reduce(t, group=g, async_op=True).get_future().then(lambda f: f.value()[0] * 3)
        return [fut.wait()]
    same("all_reduce future .then", allreduce_then)

    def allreduce_coalesced(g):
        ts = [x(salt=i) for i in range(3)]
        dist.all_reduce_coalesced(ts, group=g)
        return ts
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        same("all_reduce_coalesced", allreduce_coalesced)

    def broadcast(g):
        out = []
        for root in range(world):
            t = x(salt=root)
            dist.broadcast(t, root, group=g)
            out.append(t)
        return out
    same("broadcast from every root", broadcast)

    def all_gather(g):
        outs = [torch.empty(37) for _ in range(world)]
        dist.all_gather(outs, x(), group=g)
        return outs
    same("all_gather (list)", all_gather)

    def all_gather_into_tensor(g):
        out = torch.empty(37 * world)
        dist.all_gather_into_tensor(out, x(), group=g)
        return [out]
    same("all_gather_into_tensor", all_gather_into_tensor)

    def reduce_scatter_tensor(g):
        out = torch.empty(5)
        dist.reduce_scatter_tensor(out, x(5 * world), group=g)
        return [out]
    same("reduce_scatter_tensor", reduce_scatter_tensor)

    def reduce(g):
        t = x()
        dist.reduce(t, world - 1, group=g)
        return [t] if me == world - 1 else []
    same("reduce (to the last rank)", reduce)

    def gather(g):
        outs = [torch.empty(37) for _ in range(world)] if me == 0 else None
        dist.gather(x(), outs, dst=0, group=g)
        return outs or []
    same("gather", gather)

    def scatter(g):
        out = torch.empty(37)
        dist.scatter(out, [x(salt=r) for r in range(world)] if me == 0 else None, src=0, group=g)
        return [out]
    same("scatter", scatter)

    def all_to_all_single(g):
        out = torch.empty(4 * world)
        dist.all_to_all_single(out, x(4 * world), group=g)
        return [out]
    same("all_to_all_single", all_to_all_single)

    def all_to_all(g):
        outs = [torch.empty(3) for _ in range(world)]
        dist.all_to_all(outs, [x(3, salt=j) for j in range(world)], group=g)
        return outs
    same("all_to_all (list)", all_to_all)

    def all_to_all_uneven(g):  # rank i sends i + j + 1 elements to rank j
        inp = x(sum(me + j + 1 for j in range(world)))
        out = torch.empty(sum(j + me + 1 for j in range(world)))
        dist.all_to_all_single(out, inp, [j + me + 1 for j in range(world)], [me + j + 1 for j in range(world)],
                               group=g)
        return [out]
    same("all_to_all_single (uneven splits)", all_to_all_uneven)

    def reduce_scatter_list(g):
        out = torch.empty(6)
        dist.reduce_scatter(out, [x(6, salt=r) for r in range(world)], group=g)
        return [out]
    same("reduce_scatter (list)", reduce_scatter_list)

    # The coalescing manager (what FSDP2 and torch's DDP use to batch collectives).
    def cm_allreduce(g):
        ts = [x(salt=i) for i in range(3)]  # one dtype: gloo refuses mixed ones (check_coalesced mixes)
        with dist._coalescing_manager(group=g, async_ops=True) as cm:
            for t in ts:
                dist.all_reduce(t, group=g)
        cm.wait()
        return ts
    same("all_reduce in _coalescing_manager", cm_allreduce)

    def cm_all_gather_into_tensor(g):
        ins = [x(5 + i, salt=i) for i in range(3)]
        outs = [torch.empty((5 + i) * world) for i in range(3)]
        with dist._coalescing_manager(group=g, async_ops=True) as cm:
            for o, i in zip(outs, ins):
                dist.all_gather_into_tensor(o, i, group=g)
        cm.wait()
        return outs
    same("all_gather_into_tensor in _coalescing_manager", cm_all_gather_into_tensor)

    def cm_reduce_scatter_tensor(g):
        ins = [x((4 + i) * world, salt=i) for i in range(3)]
        outs = [torch.empty(4 + i) for i in range(3)]
        with dist._coalescing_manager(group=g, async_ops=True) as cm:
            for o, i in zip(outs, ins):
                dist.reduce_scatter_tensor(o, i, group=g)
        cm.wait()
        return outs
    same("reduce_scatter_tensor in _coalescing_manager", cm_reduce_scatter_tensor)

    def all_gather_async(g):
        outs = [torch.empty(37) for _ in range(world)]
        work = dist.all_gather(outs, x(), group=g, async_op=True)
        got = work.get_future().wait()
        return [torch.cat(got[0] if isinstance(got[0], list) else got)]
    same("all_gather async, its future's value", all_gather_async)


def check_callbacks(c):
    """Futures: a callback that issues a collective and waits for it (torch's PowerSGD comm hook
    does), chained callbacks, and work.wait() after them."""
    import faulthandler
    world = dist.get_world_size()
    faulthandler.dump_traceback_later(120, exit=True)  # a deadlock fails the run, with stacks
    try:
        x, y = torch.ones(4), torch.ones(4)
        work = dist.all_reduce(x, async_op=True)
        inner = work.get_future().then(
            lambda f: dist.all_reduce(y, async_op=True).get_future().wait()[0])
        c.equal("a collective issued and waited for in a callback", inner.wait(),
                torch.full((4,), float(world)))
        c.equal("the outer collective", x, torch.full((4,), float(world)))
        # Two levels deep, and chained.
        z = torch.ones(3)

        def nested(_):
            w = torch.ones(3)
            return dist.all_reduce(w, async_op=True).get_future().then(
                lambda f: dist.all_reduce(f.wait()[0], async_op=True).get_future().wait()[0]).wait()

        got = dist.all_reduce(z, async_op=True).get_future().then(nested).then(
            lambda f: f.wait() * 2).wait()
        c.equal("nested and chained callbacks", got, torch.full((3,), float(2 * world * world)))
        t = torch.ones(5)
        work = dist.all_reduce(t, async_op=True)
        seen = []
        work.get_future().then(lambda f: seen.append(f.wait()[0].clone()))
        work.wait()
        c.equal("wait() returns after the callbacks ran", seen[0] if seen else torch.zeros(5),
                torch.full((5,), float(world)))
    finally:
        faulthandler.cancel_dump_traceback_later()


def check_movement(c, group, ranks):
    me = dist.get_rank(group)
    world = len(ranks)
    tag = f"group {ranks}" if world != dist.get_world_size() else "world"
    for dtype in TYPES + [torch.int16, torch.complex64]:
        mine = value(me, N, dtype if dtype not in (torch.int16, torch.complex64) else torch.int32, offset=me).to(dtype)
        every = [value(r, N, dtype if dtype not in (torch.int16, torch.complex64) else torch.int32, offset=r).to(dtype)
                 for r in range(world)]
        # allgather: list, into tensor, in place
        outs = [torch.empty(N, dtype=dtype) for _ in range(world)]
        dist.all_gather(outs, mine, group=group)
        for r in range(world):
            c.equal(f"{tag} allgather (list) {dtype} piece {r}", outs[r], every[r])
        out = torch.empty(world * N, dtype=dtype)
        dist.all_gather_into_tensor(out, mine, group=group)
        c.equal(f"{tag} all_gather_into_tensor {dtype}", out, torch.cat(every))
        out = torch.zeros(world * N, dtype=dtype)
        out[me * N:(me + 1) * N] = mine
        dist.all_gather_into_tensor(out, out[me * N:(me + 1) * N], group=group)
        c.equal(f"{tag} all_gather_into_tensor in place {dtype}", out, torch.cat(every))
        # broadcast from every root
        for root_index, root in enumerate(ranks):
            t = mine.clone()
            dist.broadcast(t, root, group=group)
            c.equal(f"{tag} broadcast {dtype} from {root}", t, every[root_index])
    # gather and scatter to / from the last rank
    root = ranks[-1]
    is_root = ranks[me] == root
    gathered = [torch.empty(N, dtype=torch.float32) for _ in range(world)] if is_root else None
    dist.gather(value(me, N, torch.float32, me), gathered, dst=root, group=group)
    if is_root:
        for r in range(world):
            c.equal(f"{tag} gather piece {r}", gathered[r], value(r, N, torch.float32, r))
    out = torch.empty(N, dtype=torch.int64)
    dist.scatter(out, [value(r, N, torch.int64, 10 * r) for r in range(world)] if is_root else None,
                 src=root, group=group)
    c.equal(f"{tag} scatter", out, value(me, N, torch.int64, 10 * me))
    # all_to_all_single: even, then uneven splits (rank i sends i + j + 1 rows to rank j)
    inp = torch.arange(world * 6, dtype=torch.float32).reshape(world * 3, 2) + 100 * me
    out = torch.empty(world * 3, 2)
    dist.all_to_all_single(out, inp, group=group)
    rows = torch.arange(world * 6, dtype=torch.float32).reshape(world * 3, 2)
    expected = torch.cat([(rows + 100 * r)[3 * me:3 * me + 3] for r in range(world)])
    c.equal(f"{tag} all_to_all_single (even)", out, expected)
    in_splits = [me + j + 1 for j in range(world)]
    out_splits = [j + me + 1 for j in range(world)]
    inp = torch.cat([torch.full((me + j + 1, 3), float(1000 * me + j)) for j in range(world)])
    out = torch.empty(sum(out_splits), 3)
    dist.all_to_all_single(out, inp, out_splits, in_splits, group=group)
    expected = torch.cat([torch.full((j + me + 1, 3), float(1000 * j + me)) for j in range(world)])
    c.equal(f"{tag} all_to_all_single (uneven)", out, expected)
    outs = [torch.empty(4, dtype=torch.int32) for _ in range(world)]
    dist.all_to_all(outs, [torch.full((4,), 10 * me + j, dtype=torch.int32) for j in range(world)], group=group)
    for j in range(world):
        c.equal(f"{tag} all_to_all piece from {j}", outs[j], torch.full((4,), 10 * j + me, dtype=torch.int32))
    dist.barrier(group=group)


def check_point_to_point(c):
    """Ring exchange with two tags, received in the opposite order from the one sent."""
    me, world = dist.get_rank(), dist.get_world_size()
    right, left = (me + 1) % world, (me - 1) % world
    a = torch.full((300,), float(me))
    b = torch.arange(5000, dtype=torch.int64) + me
    works = [dist.isend(a, right, tag=1), dist.isend(b, right, tag=2)]
    got_b = torch.empty(5000, dtype=torch.int64)
    got_a = torch.empty(300)
    dist.recv(got_b, left, tag=2)
    dist.recv(got_a, left, tag=1)
    for w in works:
        w.wait()
    c.equal("recv tag 2 (sent second)", got_b, torch.arange(5000, dtype=torch.int64) + left)
    c.equal("recv tag 1 (sent first)", got_a, torch.full((300,), float(left)))
    # batch_isend_irecv, as torch.distributed.pipelining issues it: sends and receives together.
    send = torch.full((64,), float(me) * 2)
    recv = torch.empty(64)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, right), dist.P2POp(dist.irecv, recv, left)])
    for r in reqs:
        r.wait()
    c.equal("batch_isend_irecv", recv, torch.full((64,), float(left) * 2))
    check_any_source(c)


def check_any_source(c):
    """recv without a source (MPI_ANY_SOURCE), as gloo does it: rank 0 takes every other rank's
    message in whatever order they come, and learns who sent each; messages already buffered,
    receives posted before the sends, and a receive of one source beside them."""
    me, world = dist.get_rank(), dist.get_world_size()
    hf = dist.distributed_c10d._get_default_group()
    if me != 0:
        dist.send(torch.full((1000,), float(me)), 0, tag=7)
        dist.barrier()
        dist.send(torch.full((10,), float(me)), 0, tag=8)  # after rank 0 posted its receives
        dist.send(torch.arange(4) + me, 0, tag=9)  # a receive of one source waits for it
        dist.barrier()
        return
    seen = []
    for _ in range(world - 1):
        t = torch.empty(1000)
        src = dist.recv(t, tag=7)  # (each already arrived, or arriving)
        seen.append(src)
        c.equal(f"recv from any source: the message of rank {src}", t, torch.full((1000,), float(src)))
    c.checked += 1
    if sorted(seen) != list(range(1, world)):
        c.failures.append(f"recv from any source: senders {seen}, expected each of 1..{world - 1} once")
    dist.barrier()
    bufs = [torch.empty(10) for _ in range(world - 1)]
    works = [hf.recv_anysource([b], 8) for b in bufs]  # posted before the sends
    specific = [torch.empty(4, dtype=torch.int64) for _ in range(world - 1)]
    for r in range(1, world):
        dist.recv(specific[r - 1], r, tag=9)
        c.equal(f"recv of tag 9 from rank {r} beside receives from any source", specific[r - 1],
                torch.arange(4) + r)
    senders = []
    for w, b in zip(works, bufs):
        w.wait()
        senders.append(w._source_rank())
        c.equal(f"irecv from any source: rank {senders[-1]}'s message", b, torch.full((10,), float(senders[-1])))
    c.checked += 1
    if sorted(senders) != list(range(1, world)):
        c.failures.append(f"irecv from any source: senders {senders}")
    dist.barrier()


def sparse_input(me, shape, dtype, nnz, sparse_dim=None, coalesced=True, salt=0):
    """Rank `me`'s sparse COO tensor: `nnz` entries at random indices (repeats when not coalesced:
    torch adds them), values small integers."""
    g = torch.Generator().manual_seed(7919 * me + salt)
    sparse_dim = sparse_dim or len(shape)
    idx = torch.stack([torch.randint(0, shape[d], (nnz,), generator=g) for d in range(sparse_dim)]) \
        if nnz else torch.zeros(sparse_dim, 0, dtype=torch.int64)
    vals = torch.randint(-9, 10, (nnz, *shape[sparse_dim:]), generator=g).to(dtype)
    t = torch.sparse_coo_tensor(idx, vals, shape, check_invariants=True)
    return t.coalesce() if coalesced else t


def check_sparse(c, gloo):
    """allreduce of sparse COO tensors (what DDP sends for nn.Embedding(sparse=True)) against
    gloo's on the same inputs, and DDP training a sparse embedding over hfreduce as over gloo."""
    me, world = dist.get_rank(), dist.get_world_size()
    hf = dist.distributed_c10d._get_default_group()
    cases = [  # name, shape, dtype, entries of rank r, sparse dims, coalesced
        ("2-D float32", (50, 7), torch.float32, lambda r: 12 + 5 * r, None, True),
        ("an empty rank", (30, 4), torch.float64, lambda r: 0 if r == 1 else 6, None, True),
        ("every rank empty", (5, 5), torch.float32, lambda r: 0, None, True),
        ("uncoalesced input", (8, 3), torch.float32, lambda r: 40, None, False),
        ("hybrid rows (an embedding's gradient)", (100, 16), torch.float32, lambda r: 9 + r, 1, False),
        ("int64 values", (20, 20), torch.int64, lambda r: 15, None, True),
    ]
    for name, shape, dtype, nnz, sparse_dim, coalesced in cases:
        for op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
            if op == dist.ReduceOp.AVG and not dtype.is_floating_point:
                continue
            got = sparse_input(me, shape, dtype, nnz(me), sparse_dim, coalesced)
            want = sparse_input(me, shape, dtype, nnz(me), sparse_dim, coalesced)
            exact = torch.stack([sparse_input(r, shape, dtype, nnz(r), sparse_dim).to_dense().to(torch.float64)
                                 for r in range(world)]).sum(0)
            if op == dist.ReduceOp.AVG:
                exact = exact / world
            dist.all_reduce(got, op=op, group=hf)
            if op == dist.ReduceOp.SUM:  # gloo's sparse allreduce sums only
                dist.all_reduce(want, op=op, group=gloo)
                c.equal(f"sparse allreduce {op} of {name}: the same entries as gloo's",
                        got.coalesce().to_dense(), want.coalesce().to_dense())
            c.checked += 1
            if not got.is_sparse or not torch.allclose(got.to_dense().to(torch.float64), exact):
                c.failures.append(f"sparse allreduce {op} of {name}: wrong sum {got}")
    # DDP with a sparse embedding: the same parameters after a few steps over either backend.
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    def train(group):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Embedding(64, 8, sparse=True), nn.Flatten(), nn.Linear(32, 1))
        ddp = DDP(model, process_group=group)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(100 + me)
        for _ in range(3):
            x = torch.randint(0, 64, (5, 4), generator=g)
            opt.zero_grad()
            ddp(x).pow(2).sum().backward()
            opt.step()
        return [p.detach().clone() for p in model.parameters()]

    for k, (a, b) in enumerate(zip(train(hf), train(gloo))):
        c.checked += 1
        if not torch.allclose(a, b, rtol=1e-5, atol=1e-6):
            c.failures.append(f"DDP with a sparse embedding: parameter {k} differs from gloo's")


def check_errors(c):
    t = torch.zeros(4, dtype=torch.int16)
    c.raises("allreduce of int16", lambda: dist.all_reduce(t), ["hfreduce", "allreduce", "Short"])
    c.raises("allreduce with BAND of floats", lambda: dist.all_reduce(torch.zeros(4), op=dist.ReduceOp.BAND),
             ["hfreduce", "BAND", "integer", "Float"])
    c.raises("allreduce of a sparse tensor with MAX",
             lambda: dist.all_reduce(torch.eye(3).to_sparse(), op=dist.ReduceOp.MAX),
             ["hfreduce", "sparse", "SUM or AVG"])
    # (Other layouts, and sparse tensors in other collectives, torch's dispatcher refuses itself.)
    c.raises("recv from any source with a negative tag", lambda: dist.recv(torch.empty(3), tag=-1),
             ["hfreduce", "tags must be non-negative"])
    c.raises("all_gather_into_tensor of the wrong size",
             lambda: dist.all_gather_into_tensor(torch.empty(3), torch.empty(2)), ["hfreduce", "elements"])


def check_everything():
    dist.init_process_group("hfreduce")
    c = Checker()
    world = dist.get_world_size()
    ranks = list(range(world))
    check_reductions(c, None, ranks)
    check_coalesced(c, None, ranks)
    gloo = dist.new_group(backend="gloo")
    check_list_forms(c, None, ranks, gloo)
    check_against_gloo(c, gloo)
    check_sparse(c, gloo)
    check_callbacks(c)
    check_movement(c, None, ranks)
    check_point_to_point(c)
    check_errors(c)
    # The world still works after the refused calls.
    t = torch.ones(3)
    dist.all_reduce(t)
    c.equal("allreduce after refused calls", t, torch.full((3,), float(world)))
    # Subgroups: every other rank, and the rest (as DeviceMesh builds its sub-meshes).
    if world >= 4:
        evens, odds = ranks[0::2], ranks[1::2]
        g_even = dist.new_group(evens)
        g_odd = dist.new_group(odds)
        mine = evens if dist.get_rank() % 2 == 0 else odds
        group = g_even if dist.get_rank() % 2 == 0 else g_odd
        check_movement(c, group, mine)
        t = value(dist.get_rank(), 500, torch.float32)
        dist.all_reduce(t, group=group)
        c.equal(f"group {mine} allreduce", t,
                reference("sum", [value(r, 500, torch.float32) for r in mine], torch.float32))
    info = haiscale.backend_info()
    # Rank 0 hosts the store: it must not leave while the other subgroup still rendezvouses
    # through it (seen in CI under load: the odd ranks' group creation lost the store).
    dist.barrier()
    dist.destroy_process_group()
    return {"checked": c.checked, "failures": c.failures, "info": info}


def debug_detail():
    """Under TORCH_DISTRIBUTED_DEBUG=DETAIL (torch's standard debugging switch): sequence numbers
    agree across ranks, collectives and object collectives (on a subgroup too) work."""
    dist.init_process_group("hfreduce")
    c = Checker()
    me, world = dist.get_rank(), dist.get_world_size()
    pg = dist.distributed_c10d._get_default_group()
    t = torch.ones(8)
    dist.all_reduce(t)
    c.equal("allreduce under DETAIL", t, torch.full((8,), float(world)))
    objects = [None] * world
    dist.all_gather_object(objects, {"rank": me})
    if objects != [{"rank": r} for r in range(world)]:
        c.failures.append(f"all_gather_object: {objects}")
    sub = dist.new_group(list(range(world))[::-1])  # a subgroup, ranks listed in another order
    box = [f"from {world - 1}" if me == world - 1 else None]
    dist.broadcast_object_list(box, src=world - 1, group=sub)
    if box != [f"from {world - 1}"]:
        c.failures.append(f"broadcast_object_list on a subgroup: {box}")
    seqs = [None] * world
    backend = pg._get_backend(torch.device("cpu"))  # ProcessGroup asks only built-in backends
    dist.all_gather_object(seqs, backend._get_sequence_number_for_group())
    if len(set(seqs)) != 1 or seqs[0] <= 0:
        c.failures.append(f"sequence numbers differ or do not count: {seqs}")
    dist.barrier()
    dist.destroy_process_group()
    return {"checked": c.checked + 3, "failures": c.failures, "sequence": seqs[0]}
