"""A job for test_timesharing.py: steps of 50 ms that checkpoint now and then and save when the
platform asks them to suspend (rank_runner.py runs it).

train(out, name, period_s, write_s, save_s, haiscale, slots, fs3_mib): a checkpoint every
`period_s` (0: never; the first at the start), each taking `write_s` (sleeping; with `haiscale`, a
real haiscale.checkpoint.save of a small state, which reports itself; with `fs3_mib`, that many MiB
written to fs3 by its native client) and reported to the platform (hai_job.report_checkpoint);
with `slots`, each first waits for the platform's go (hai_job.checkpoint_slot). Each checkpoint's
ask, start and end go to out/<name>.ckpts. Asked to suspend, it writes out/<name>.suspend.json (when it was
asked, and the deadline hai_job gives it), saves (for `save_s`, or with haiscale), and exits as
suspended. It returns when out/stop exists.
"""

import json
import os
import time

import hai_job


def _checkpoint(step, write_s, haiscale, fs3_mib=0, name=""):
    if fs3_mib:  # a real write to fs3 through its native client (stagger-bench)
        import fs3client

        fs = fs3client.FileSystem.from_env()
        fs.makedirs(f"/ckpt/{name}")
        data = os.urandom(1 << 20) * fs3_mib
        began = time.monotonic()
        fs.write_file(f"/ckpt/{name}/step", data)
        hai_job.report_checkpoint(step, len(data), time.monotonic() - began)
        return
    if haiscale:
        import torch

        from haiscale import checkpoint

        checkpoint.save(hai_job.checkpoint_dir(), step, {"w": torch.zeros(1000)})
        return
    time.sleep(write_s)
    hai_job.report_checkpoint(step, int(write_s * 1e8), write_s)


def train(out, name, period_s, write_s, save_s, haiscale=False, slots=False, fs3_mib=0):
    hai_job.install_suspend_handler()
    runs = os.path.join(out, f"{name}.runs")
    with open(runs, "a") as f:
        f.write(f"{hai_job.restart_count()} {os.getpid()}\n")
    step = 0
    last = None
    while not os.path.exists(os.path.join(out, "stop")):
        if period_s > 0 and (last is None or time.monotonic() - last >= period_s):
            asked = time.time()
            waited = hai_job.checkpoint_slot() if slots else 0.0
            began = time.time()
            _checkpoint(step, write_s, haiscale, fs3_mib, name)
            with open(os.path.join(out, f"{name}.ckpts"), "a") as f:
                f.write(json.dumps({"asked": asked, "began": began, "ended": time.time(),
                                    "waited": waited}) + "\n")
            last = time.monotonic()
        if hai_job.should_suspend():
            with open(os.path.join(out, f"{name}.suspend.json"), "w") as f:
                json.dump({"asked": time.time(), "deadline": hai_job.suspend_deadline()}, f)
            _checkpoint(step, save_s, haiscale)
            hai_job.suspend_now()
        time.sleep(0.05)
        step += 1
    return step


def reader(out, mib):
    """A job beside the checkpointing ones (stagger-bench): each step reads `mib` MiB from fs3
    (its data, through the native client) and sums it; each step's seconds go to out/reader.steps."""
    import numpy

    import fs3client

    fs = fs3client.FileSystem.from_env()
    fs.makedirs("/data")
    f = fs.write_file("/data/shard", os.urandom(1 << 20) * mib)
    buf = numpy.empty(mib << 20, numpy.uint8)
    with open(os.path.join(out, "reader.steps"), "a") as log:
        while not os.path.exists(os.path.join(out, "stop")):
            began = time.monotonic()
            fs.read_batch([(f, 0, buf)])
            int(buf[::4096].sum())
            log.write(f"{time.time():.3f} {time.monotonic() - began:.4f}\n")
            log.flush()
    return "read"
