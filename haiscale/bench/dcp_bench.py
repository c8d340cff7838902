#!/usr/bin/env python3
"""torch.distributed.checkpoint's save of the same state, in one run, to three places:

    FF_BUILD_DIR=build PYTHONPATH=build/python:deploy .venv/bin/python haiscale/bench/dcp_bench.py
        [--ranks 2] [--mib-per-rank 256] [--rounds 3] [--threads 4]

  fs3 native  haiscale.dcp.Fs3StorageWriter: fs3's native client, no FUSE (pieces of 16 MiB,
              durable when written: acknowledged by every replica)
  fs3 mount   DCP's own FileSystemWriter on an fs3-fuse mount of the same fs3 (sync_files: its
              fsync makes it as durable)
  local disk  DCP's own FileSystemWriter on a local directory (sync_files)

It starts its own fs3 on loopback (fs3-mgmtd, three fs3-storage services on local disk, chains of
three replicas, fs3-meta) and an fs3-fuse mount of it. Each round runs every place in a rotated
order; each save is --ranks processes (one group over "gloo"), each writing --mib-per-rank MiB of
float32 tensors (a barrier, then the save, timed on rank 0 from before the save to after the
barrier that follows it). Rate = all ranks' bytes / the save's time; the table gives the median
round and the slowest.

What bounds the figures, on one machine: fs3 writes every byte to three replicas on the same disk
and over loopback, so fs3 (native or mounted) is at most a third of the disk's write rate, less
the CPU that moving it takes (two cores here, shared with the ranks). The mount adds FUSE's copies
and round trips through the kernel per 128 KiB write. The last line:
  dcp bench: fs3 native X GB/s, DCP FileSystemWriter on the mount Y GB/s, local disk Z GB/s (native Rx the mount)
The table also gives the CPU each save took per GB: on the client side (the ranks, and fs3-fuse
for the mount), which is what the native client saves, and on the storage side, which both pay
alike; on a machine whose storage services compete with the clients for a few cores, that shared
cost bounds both rates.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "python"))
sys.path.insert(0, os.path.join(REPO, "deploy"))


def worker(place, target, mib, threads):
    import resource

    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemWriter

    from haiscale.dcp import Fs3StorageWriter

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    pieces = 16
    state = {f"rank{rank}.t{i}": torch.randn(mib * (1 << 20) // 4 // pieces) for i in range(pieces)}
    nbytes = sum(t.numel() * 4 for t in state.values())
    writer = (Fs3StorageWriter(target, thread_count=threads) if place == "native"
              else FileSystemWriter(target, thread_count=threads, sync_files=True))
    def cpu():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    dist.barrier()
    began, cpu_began = time.perf_counter(), cpu()
    dcp.save(state, storage_writer=writer)
    dist.barrier()
    seconds = time.perf_counter() - began
    total = torch.tensor([nbytes, cpu() - cpu_began], dtype=torch.float64)
    dist.all_reduce(total)
    dist.destroy_process_group()
    if rank == 0:
        print("RESULT " + json.dumps({"bytes": total[0].item(), "seconds": seconds,
                                      "rank_cpu_s": total[1].item()}), flush=True)


def process_cpu(pids):
    """CPU seconds the processes `pids` have used so far."""
    total = 0.0
    for pid in pids:
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def run_save(place, target, args, env):
    from torch_backends import run_ranks

    sys.path.insert(0, HERE)
    cmd = [sys.executable, __file__, "--worker", place, target, str(args.mib_per_rank),
           str(args.threads)]
    old = dict(os.environ)
    os.environ.update(env)
    try:
        return run_ranks(cmd, 1, args.ranks, f"dcp_bench: {place}")
    finally:
        os.environ.clear()
        os.environ.update(old)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--mib-per-rank", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        place, target, mib, threads = args.worker
        worker(place, target, int(mib), int(threads))
        return
    sys.path.insert(0, HERE)
    from fs3_cluster import Fs3Cluster

    from ffdeploy.daemons import fs3_fuse, stop_all

    root = tempfile.mkdtemp(prefix="dcp-bench-", dir="/var/tmp")
    mount = os.path.join(root, "mnt")
    local = os.path.join(root, "local")
    os.makedirs(mount)
    os.makedirs(local)
    rates = {"native": [], "mount": [], "local": []}
    client_cpu = {p: [] for p in rates}   # CPU-s per GB: the ranks (and fs3-fuse for the mount)
    storage_cpu = {p: [] for p in rates}  # CPU-s per GB of the fs3-storage services
    fuse = None
    try:
        with Fs3Cluster(os.path.join(root, "fs3")) as fs3:
            fuse = fs3_fuse(fs3.bin, os.path.join(root, "fs3"), mount, fs3.meta, fs3.mgmtd)
            fuse.start()
            deadline = time.monotonic() + 30
            while not os.path.ismount(mount):
                if time.monotonic() > deadline:
                    raise SystemExit("dcp_bench: the fs3-fuse mount never came up")
                time.sleep(0.1)
            env = {"FS3_META": fs3.meta, "FS3_MGMTD": fs3.mgmtd}
            places = list(rates)
            for r in range(args.rounds):
                order = places[r % 3:] + places[:r % 3]
                for place in order:
                    target = {"native": f"/bench/round{r}",
                              "mount": os.path.join(mount, "bench-mount", f"round{r}"),
                              "local": os.path.join(local, f"round{r}")}[place]
                    storage = [d.proc.pid for d in fs3.daemons if d.name.startswith("storage")]
                    before = process_cpu([fuse.proc.pid]), process_cpu(storage)
                    result = run_save(place, target, args, env)
                    fuse_s = process_cpu([fuse.proc.pid]) - before[0]
                    storage_s = process_cpu(storage) - before[1]
                    rate = result["bytes"] / result["seconds"] / 1e9
                    gb = result["bytes"] / 1e9
                    rates[place].append(rate)
                    client_cpu[place].append((result["rank_cpu_s"] + fuse_s) / gb)
                    storage_cpu[place].append(storage_s / gb)
                    print(f"round {r} {place:6s} {result['bytes'] / 1e9:.2f} GB in "
                          f"{result['seconds']:.2f} s: {rate:.3f} GB/s", flush=True)
                    if place == "local":
                        shutil.rmtree(target, ignore_errors=True)
    finally:
        if fuse is not None:
            subprocess.run(["umount", "-l", mount], capture_output=True)
            stop_all([fuse])
        shutil.rmtree(root, ignore_errors=True)

    names = {"native": "fs3 native (haiscale.dcp)", "mount": "FileSystemWriter, fs3 mount",
             "local": "FileSystemWriter, local disk"}
    print(f"\nDCP save of {args.ranks} x {args.mib_per_rank} MiB, {args.threads} writer threads a "
          f"rank, {args.rounds} rounds")
    print(f"{'where':32s} {'median GB/s':>12s} {'slowest':>10s} {'client CPU-s/GB':>16s} "
          f"{'storage CPU-s/GB':>17s}")
    median = {}
    for place, values in rates.items():
        median[place] = statistics.median(values)
        print(f"{names[place]:32s} {median[place]:12.3f} {min(values):10.3f} "
              f"{statistics.median(client_cpu[place]):16.2f} "
              f"{statistics.median(storage_cpu[place]):17.2f}")
    print("(client: the ranks' CPU, and fs3-fuse's for the mount; storage: the three fs3-storage "
          "services', which share the machine's cores with the clients)")
    print(f"dcp bench: fs3 native {median['native']:.2f} GB/s, DCP FileSystemWriter on the mount "
          f"{median['mount']:.2f} GB/s, local disk {median['local']:.2f} GB/s "
          f"(native {median['native'] / median['mount']:.2f}x the mount)")


if __name__ == "__main__":
    main()
