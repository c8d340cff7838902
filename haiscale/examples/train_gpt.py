"""Train a GPT with data (DDP or FSDP), pipeline and tensor parallelism over HFReduce.

    torchrun --nproc-per-node 4 haiscale/examples/train_gpt.py --dp 2 --tp 2
    torchrun --nproc-per-node 4 haiscale/examples/train_gpt.py --fsdp 4 --mixed-precision bf16
    torchrun --nproc-per-node 8 haiscale/examples/train_gpt.py --dp 2 --pp 2 --tp 2 --schedule interleaved
    # on the platform: hai submit --nodes 2 --gpus-per-node 2 -- .venv/bin/python haiscale/examples/train_gpt.py --pp 2

The world is cut into dp x pp x tp (haiscale.pipeline.make_subgroups: tensor groups innermost);
`--fsdp N` shards parameters, gradients and optimizer state over the N data-parallel ranks
instead of replicating them. Tokens come from `--data FILE` (its bytes, vocabulary 256, windows
at random offsets) or, by default, synthetic learnable sequences (each counts up by its own
stride). Checkpoints go to `--ckpt-dir` (default `$HAI_CHECKPOINT_DIR`) every `--save-every`
steps, and under HAI-Platform a suspend request saves and exits; a restart resumes from the latest.
`--loss-csv` / `--loss-plot` write the loss curve (the plot is an SVG, no plotting library needed).
"""

import argparse
import os
import time

import torch
import torch.distributed as dist

import haiscale
from haiscale import checkpoint
from haiscale.ddp import DistributedDataParallel
from haiscale.fsdp import FullyShardedDataParallel, MixedPrecision, ModuleTypePolicy
from haiscale.models import GPT, GPTConfig
from haiscale.models.gpt import Block
from haiscale.pipeline import GPipe, Interleaved1F1B, PipeDream, make_subgroups, partition

try:
    import hai_job  # HAI-Platform's job helpers: training metrics for `hai metrics` and hai-web
except ImportError:  # run outside the platform, without the hai-job package
    hai_job = None


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dp", type=int, default=None, help="data-parallel size, replicated (default: what is left)")
    p.add_argument("--fsdp", type=int, default=None, help="data-parallel size, fully sharded (ZeRO-3)")
    p.add_argument("--pp", type=int, default=1, help="pipeline stages")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size")
    p.add_argument("--schedule", choices=["gpipe", "1f1b", "interleaved"], default="1f1b")
    p.add_argument("--micro-batches", type=int, default=4, help="per step, with --pp > 1")
    p.add_argument("--virtual-stages", type=int, default=2, help="model chunks per rank (interleaved)")
    p.add_argument("--checkpoint-activations", choices=["never", "always", "except_last"], default="never")
    p.add_argument("--mixed-precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--batch", type=int, default=16, help="global batch, in sequences")
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", default=None, help="a file whose bytes are the tokens (vocabulary 256)")
    p.add_argument("--fs3-data", default=None,
                   help="a token file on fs3 (fs3client; FS3_META, FS3_MGMTD), read in one batch per step")
    p.add_argument("--fs3-dtype", default="uint16", help="the token type of --fs3-data")
    p.add_argument("--ckpt-dir", default=os.environ.get("HAI_CHECKPOINT_DIR", ""))
    p.add_argument("--save-every", type=int, default=0, help="steps between checkpoints (0: only on suspend)")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--loss-csv", default=None)
    p.add_argument("--loss-plot", default=None, help="an SVG file of the loss curve")
    p.add_argument("--final-state", default=None, help="save the final full model state here (tests)")
    return p.parse_args(argv)


class Tokens:
    """The global batch of each step, the same on every rank (each takes its data-parallel slice)."""

    def __init__(self, args):
        self.args = args
        self.data = None
        self.windows = None
        if args.fs3_data:
            from fs3client.data import TokenWindows
            # Every offset starts a window; this rank reads only its data-parallel slice.
            self.windows = TokenWindows(args.fs3_data, args.seq_len, dtype=args.fs3_dtype, stride=1)
        elif args.data:
            raw = open(args.data, "rb").read()
            if len(raw) < args.seq_len + 2:
                raise SystemExit(f"train_gpt: {args.data} has {len(raw)} bytes, fewer than a sequence")
            if args.vocab < 256:
                raise SystemExit("train_gpt: --data needs --vocab 256 (tokens are bytes)")
            self.data = torch.frombuffer(bytearray(raw), dtype=torch.uint8).long()

    def batch(self, step, lo, hi):
        """Sequences lo..hi of step's global batch."""
        a = self.args
        g = torch.Generator().manual_seed(a.seed * 1_000_003 + step)
        if self.windows is not None:
            starts = torch.randint(len(self.windows), (a.batch,), generator=g)[lo:hi]
            pairs = self.windows.__getitems__(starts.tolist())
            x, y = torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])
            if int(x.max()) >= a.vocab or int(y.max()) >= a.vocab:
                raise SystemExit(f"train_gpt: {a.fs3_data} has tokens beyond --vocab {a.vocab}")
            return x, y
        if self.data is not None:
            starts = torch.randint(len(self.data) - a.seq_len - 1, (a.batch,), generator=g)
            tokens = torch.stack([self.data[s:s + a.seq_len + 1] for s in starts.tolist()])
        else:
            start = torch.randint(a.vocab, (a.batch, 1), generator=g)
            stride = torch.randint(1, 8, (a.batch, 1), generator=g)
            tokens = (start + stride * torch.arange(a.seq_len + 1)) % a.vocab
        return tokens[lo:hi, :-1], tokens[lo:hi, 1:]


def write_csv(path, points):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("step,loss\n" + "".join(f"{s},{v:.6f}\n" for s, v in points))
    os.replace(tmp, path)


def write_svg(path, points, title):
    """A minimal line plot of (step, loss) points."""
    w, h, m = 640, 400, 50
    steps = [s for s, _ in points]
    losses = [v for _, v in points]
    x0, x1 = min(steps), max(max(steps), min(steps) + 1)
    y0, y1 = 0.0, max(losses) * 1.05
    sx = lambda s: m + (s - x0) / (x1 - x0) * (w - 2 * m)
    sy = lambda v: h - m - (v - y0) / (y1 - y0) * (h - 2 * m)
    line = " ".join(f"{sx(s):.1f},{sy(v):.1f}" for s, v in points)
    ticks = "".join(
        f'<line x1="{m}" x2="{w - m}" y1="{sy(v):.1f}" y2="{sy(v):.1f}" stroke="#ddd"/>'
        f'<text x="{m - 6}" y="{sy(v) + 4:.1f}" text-anchor="end" font-size="11">{v:.1f}</text>'
        for v in [y1 * k / 5 for k in range(6)])
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif">'
           f'<rect width="{w}" height="{h}" fill="white"/>{ticks}'
           f'<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="{line}"/>'
           f'<text x="{w / 2}" y="24" text-anchor="middle" font-size="14">{title}</text>'
           f'<text x="{w / 2}" y="{h - 12}" text-anchor="middle" font-size="12">step ({x0}..{x1})</text>'
           f'<text x="14" y="{h / 2}" font-size="12" transform="rotate(-90 14 {h / 2})">loss</text></svg>')
    with open(path, "w") as f:
        f.write(svg)


def main(argv=None):
    args = parse_args(argv)
    dist.init_process_group("hfreduce")
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.dp is not None and args.fsdp is not None:
        raise SystemExit("train_gpt: give --dp or --fsdp, not both")
    data_size = args.fsdp or args.dp or world // (args.pp * args.tp)
    if data_size * args.pp * args.tp != world:
        raise SystemExit(f"train_gpt: dp {data_size} x pp {args.pp} x tp {args.tp} != {world} ranks")
    if args.fsdp and args.pp > 1:
        raise SystemExit("train_gpt: --fsdp with --pp is not supported; use --dp with pipelines")
    if args.batch % data_size:
        raise SystemExit(f"train_gpt: batch {args.batch} does not split over {data_size} data-parallel ranks")
    groups = make_subgroups(pp_size=args.pp, tp_size=args.tp, dp_size=data_size)
    dp_rank, pp_rank, tp_rank = (dist.get_rank(g) for g in groups)

    config = GPTConfig(vocab_size=args.vocab, seq_len=args.seq_len, d_model=args.d_model, n_heads=args.heads,
                       n_layers=args.layers, tie_embeddings=args.pp == 1)
    torch.manual_seed(args.seed)  # every rank builds the same full model, then keeps its part
    gpt = GPT(config)
    total_params = sum(p.numel() for p in gpt.parameters())
    if args.tp > 1:
        gpt.parallelize(groups.tp)
    pipeline = None
    if args.pp > 1:
        virtual = args.virtual_stages if args.schedule == "interleaved" else 1
        part = partition(gpt.as_sequential(), pp_rank, args.pp, num_model_chunks=virtual)
        chunks = part if virtual > 1 else [part]
        if data_size > 1:
            chunks = [DistributedDataParallel(c, process_group=groups.dp) for c in chunks]
        schedule = {"gpipe": GPipe, "1f1b": PipeDream, "interleaved": Interleaved1F1B}[args.schedule]
        pipeline = schedule(chunks if virtual > 1 else chunks[0], args.micro_batches, process_group=groups.pp,
                            checkpoint=args.checkpoint_activations)
        model = pipeline
    elif args.fsdp:
        mp = MixedPrecision(param_dtype=torch.bfloat16) if args.mixed_precision == "bf16" else None
        model = FullyShardedDataParallel(gpt, process_group=groups.dp, auto_wrap_policy=ModuleTypePolicy(Block),
                                         mixed_precision=mp)
    elif data_size > 1:
        model = DistributedDataParallel(gpt, process_group=groups.dp,
                                        gradient_dtype=torch.bfloat16 if args.mixed_precision == "bf16" else None)
    else:
        model = gpt
    if args.mixed_precision == "bf16" and not args.fsdp and data_size == 1:
        raise SystemExit("train_gpt: --mixed-precision bf16 applies to --fsdp (compute) or --dp (communication)")
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)

    sharded = world > 1 and not (pipeline is None and args.tp == 1 and not args.fsdp)
    job = None
    start_step = 0
    if os.environ.get("HAI_JOB_ID") and args.ckpt_dir:
        job = checkpoint.Job(args.ckpt_dir, sharded=sharded)
    if args.ckpt_dir:
        start_step, state = checkpoint.load(args.ckpt_dir)
        if state is not None:
            load_state(model, opt, state, args)
    tokens = Tokens(args)
    if rank == 0:
        info = haiscale.backend_info()
        print(f"{world} ranks on {info['nodes']} node(s) over {info['transport']}: dp {data_size}"
              f"{' (fsdp)' if args.fsdp else ''} x pp {args.pp} x tp {args.tp}; {total_params / 1e6:.2f} M parameters; "
              f"starting at step {start_step}", flush=True)

    def make_state(step):
        return {"step": step, "model": model_state(model, args), "opt": opt.state_dict()}

    curve = []
    if rank == 0 and start_step > 0 and args.loss_csv and os.path.exists(args.loss_csv):
        # Resumed: the curve goes on from what the earlier runs recorded.
        with open(args.loss_csv) as f:
            rows = [line.strip().split(",") for line in f.readlines()[1:] if line.strip()]
        curve = [(int(s), float(v)) for s, v in rows if int(s) <= start_step]
    started = time.time()
    loss_holder = torch.zeros(1)
    last_report = (start_step, started)
    for step in range(start_step + 1, args.steps + 1):
        per = args.batch // data_size
        x, y = tokens.batch(step, dp_rank * per, (dp_rank + 1) * per)
        opt.zero_grad()
        if pipeline is not None:
            loss, _ = pipeline.forward_backward(x, criterion=gpt.criterion, labels=(y,))
        else:
            loss = model(x, y)
            loss.backward()
        opt.step()
        if step % args.log_every == 0 or step == 1 or step == args.steps:
            # the loss lives on the last pipeline stage; average it over the data-parallel ranks
            holds = loss is not None and tp_rank == 0
            loss_holder.fill_(loss.item() / data_size if holds else 0.0)
            dist.all_reduce(loss_holder)
            value = loss_holder.item()
            curve.append((step, value))
            if rank == 0:
                now = time.time()
                print(f"step {step:5d}  loss {value:.4f}  ({now - started:.1f} s)", flush=True)
                if hai_job is not None:  # for `hai metrics` and hai-web's plots
                    tokens_per_s = (step - last_report[0]) * args.batch * args.seq_len / max(now - last_report[1], 1e-9)
                    hai_job.report(step, loss=value, tokens_per_s=tokens_per_s)
                last_report = (step, now)
        if args.ckpt_dir and args.save_every and step % args.save_every == 0:
            checkpoint.save(args.ckpt_dir, step, make_state(step), sharded=sharded)
            if rank == 0 and args.loss_csv:
                write_csv(args.loss_csv, curve)
        if job is not None and job.should_suspend():
            if rank == 0 and args.loss_csv:
                write_csv(args.loss_csv, curve)
            job.suspend(step, make_state(step))
    if args.final_state:
        state = model_state(model, args, full=True)
        torch.save(state, f"{args.final_state}.rank{rank}")
    if rank == 0 and curve:
        if args.loss_csv:
            write_csv(args.loss_csv, curve)
        if args.loss_plot:
            write_svg(args.loss_plot, curve,
                      f"GPT {total_params / 1e6:.2f} M, dp {data_size} pp {args.pp} tp {args.tp}")
            print(f"loss curve: {args.loss_plot}", flush=True)
    dist.destroy_process_group()


def model_state(model, args, full=False):
    if isinstance(model, FullyShardedDataParallel):
        return model.full_state_dict() if full else model.sharded_state_dict()
    if isinstance(model, DistributedDataParallel):
        return model.module.state_dict()
    return model.state_dict()


def load_state(model, opt, state, args):
    if isinstance(model, FullyShardedDataParallel):
        model.load_sharded_state_dict(state["model"])
    elif isinstance(model, DistributedDataParallel):
        model.module.load_state_dict(state["model"])
    else:
        model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])


if __name__ == "__main__":
    main()
