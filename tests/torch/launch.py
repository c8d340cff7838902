"""Starts the ranks of a test as separate processes, as a launcher would on a cluster."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.join(HERE, "rank_runner.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RankOutcome:
    rank: int
    returncode: int
    output: str
    result: object = None

    @property
    def ok(self):
        return self.returncode == 0


class Ranks:
    """Ranks of one job: `nodes` emulated nodes (HFREDUCE_NODE_ID) x `per_node` processes."""

    def __init__(self, target, nodes, per_node, args=(), env=None):
        self.world = nodes * per_node
        port = free_port()
        self.procs = []
        for rank in range(self.world):
            rank_env = dict(os.environ)
            rank_env.update(
                RANK=str(rank),
                WORLD_SIZE=str(self.world),
                LOCAL_RANK=str(rank % per_node),
                LOCAL_WORLD_SIZE=str(per_node),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                HFREDUCE_NODE_ID=f"node{rank // per_node}",
                PYTHONUNBUFFERED="1",
                OMP_NUM_THREADS="1",
            )
            rank_env.update(env or {})
            self.procs.append(
                subprocess.Popen(
                    [sys.executable, RUNNER, target, json.dumps(list(args))],
                    env=rank_env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    start_new_session=True,
                )
            )

    def kill(self, rank, sig=signal.SIGKILL):
        self.procs[rank].send_signal(sig)

    def wait(self, timeout=180):
        """Waits for every rank (killing all of them at the timeout) and returns the outcomes."""
        deadline = time.monotonic() + timeout
        outcomes = []
        for rank, p in enumerate(self.procs):
            try:
                out, _ = p.communicate(timeout=max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                for q in self.procs:
                    if q.poll() is None:
                        os.killpg(q.pid, signal.SIGKILL)
                out, _ = p.communicate()
                out += f"\n[launch: rank {rank} killed after the {timeout} s timeout]"
                p.returncode = -9 if p.returncode is None else p.returncode
            result = None
            for line in out.splitlines():
                if line.startswith("RESULT "):
                    result = json.loads(line[len("RESULT "):])
            outcomes.append(RankOutcome(rank, p.returncode, out, result))
        return outcomes


def run(target, nodes, per_node, args=(), env=None, timeout=180):
    """Runs every rank to the end and asserts each succeeded; returns the per-rank results."""
    outcomes = Ranks(target, nodes, per_node, args, env).wait(timeout)
    failed = [o for o in outcomes if not o.ok]
    assert not failed, "\n".join(
        f"---- rank {o.rank} exited {o.returncode} ----\n{o.output[-4000:]}" for o in failed
    )
    return [o.result for o in outcomes]
