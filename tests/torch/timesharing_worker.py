"""A job for test_timesharing.py: steps of 50 ms that checkpoint now and then and save when the
platform asks them to suspend (rank_runner.py runs it).

train(out, name, period_s, write_s, save_s, haiscale): a checkpoint every `period_s` (0: never;
the first at the start), each taking `write_s` (sleeping; with `haiscale`, a real
haiscale.checkpoint.save of a small state, which reports itself) and reported to the platform
(hai_job.report_checkpoint). Asked to suspend, it writes out/<name>.suspend.json (when it was
asked, and the deadline hai_job gives it), saves (for `save_s`, or with haiscale), and exits as
suspended. It returns when out/stop exists.
"""

import json
import os
import time

import hai_job


def _checkpoint(step, write_s, haiscale):
    if haiscale:
        import torch

        from haiscale import checkpoint

        checkpoint.save(hai_job.checkpoint_dir(), step, {"w": torch.zeros(1000)})
        return
    time.sleep(write_s)
    hai_job.report_checkpoint(step, int(write_s * 1e8), write_s)


def train(out, name, period_s, write_s, save_s, haiscale=False):
    hai_job.install_suspend_handler()
    runs = os.path.join(out, f"{name}.runs")
    with open(runs, "a") as f:
        f.write(f"{hai_job.restart_count()} {os.getpid()}\n")
    step = 0
    last = None
    while not os.path.exists(os.path.join(out, "stop")):
        if period_s > 0 and (last is None or time.monotonic() - last >= period_s):
            _checkpoint(step, write_s, haiscale)
            last = time.monotonic()
        if hai_job.should_suspend():
            with open(os.path.join(out, f"{name}.suspend.json"), "w") as f:
                json.dump({"asked": time.time(), "deadline": hai_job.suspend_deadline()}, f)
            _checkpoint(step, save_s, haiscale)
            hai_job.suspend_now()
        time.sleep(0.05)
        step += 1
    return step
