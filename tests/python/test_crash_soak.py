"""Crash soak (label slow): the whole local cluster under a mixed workload while a random daemon is
killed -9 at a random moment, again and again, and started again from its own command line.

Workload, in four threads: files written through the FUSE mount (write, fsync, close; some renamed
or removed afterwards; and a few files overwritten in place again and again: a header patched at
offset 0, ranges rewritten and extended, overlapping pwrites, each fsync'd), files written with
fs3's native client (fs3client; durable when write returns), checkpoint writers (fs3client in
processes of their own, killed -9 at a random moment, as preempted jobs are), and jobs submitted
with `hai submit`, some suspended or stopped. Whatever returned success is recorded as
acknowledged.

Killed: fs3-mgmtd, fs3-meta, each fs3-storage, hai-server, each once per round in a random order,
at a random moment. After each restart the workload pauses
and the test checks: `fs3 fsck --data` is clean (the namespace, and every chunk's serving
replicas equal); every acknowledged file reads back with its content (through the mount or the
native client), renamed files under their new name, removed files are gone, a killed writer's
file holds what it had acknowledged (and no more than it meant to write); each overwritten file
holds, byte for byte, what its acknowledged writes made of it (an overwritten range shows the last
acknowledged write, never an older one); every acknowledged job is there. At the end every job has
ended (succeeded or stopped).

    SOAK_KILLS=100 SOAK_SEED=7 FF_BUILD_DIR=build .venv/bin/python -m pytest -q \\
        tests/python/test_crash_soak.py                    # or: ctest -L slow -R soak

Needs root (the FUSE mount), like the README's commands."""

import hashlib
import json
import os
import random
import subprocess
import sys
import threading
import time

from test_local_cluster_e2e import ROOT, cluster, sh, wait_for  # noqa: F401 (the fixture)

from ffdeploy import daemons

KILLS = int(os.environ.get("SOAK_KILLS", "20"))
SEED = int(os.environ.get("SOAK_SEED", str(int(time.time()))))


# A helper's loop: one JSON request per line, one JSON answer per line. ["restart", directory,
# daemon, seconds] kills the daemon and starts it again that many seconds later; ["preempt", path,
# pieces, bytes, seconds, seed] runs _WRITER and kills it (SIGKILL) after that many seconds.
_HELPER = r"""
import json, subprocess, sys, time
from ffdeploy import daemons
for line in sys.stdin:
    req = json.loads(line)
    try:
        if req[0] == "restart":
            d = daemons.Daemon.load(req[1], req[2])
            d.kill()
            time.sleep(req[3])
            d.start(timeout=60)
            out = {"ok": True}
        else:
            path, pieces, size, seconds, seed = req[1:]
            p = subprocess.Popen([sys.executable, "-c", sys.argv[1], path, str(pieces), str(size),
                                  str(seed)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
            try:
                p.wait(seconds)
            except subprocess.TimeoutExpired:
                p.kill()
            stdout, stderr = p.communicate()
            out = {"ok": True, "acked": stdout.split(), "rc": p.returncode, "stderr": stderr[-500:]}
    except Exception as e:
        out = {"ok": False, "error": repr(e)}
    print(json.dumps(out), flush=True)
"""

# A checkpoint writer: creates the file and writes `pieces` pieces of `bytes` random bytes (from
# `seed`) through fs3client, printing "END:SHA256" of what is acknowledged after each.
_WRITER = r"""
import hashlib, os, random, sys
import fs3client
path, pieces, size, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
fs = fs3client.FileSystem(os.environ["FS3_META"], os.environ["FS3_MGMTD"])
try:
    fs.makedirs(os.path.dirname(path))
except OSError:
    pass
fs.create(path)
rnd, h = random.Random(seed), hashlib.sha256()
for k in range(pieces):
    data = rnd.randbytes(size)
    fs.write(path, k * size, data)
    h.update(data)
    print(f"{(k + 1) * size}:{h.hexdigest()}", flush=True)
"""


class Helper:
    """Kills and starts daemons, and runs writers to kill, from a process of its own started
    before the workload opens any file on the mount. A child of the test process would inherit
    the FUSE thread's open files and close them before exec: a FUSE flush, which waits for
    fs3-meta. A restart of fs3-meta from the test process waited for the mount's retry (60 s)
    that way, and fs3-meta stayed down for minutes instead of the seconds asked."""

    def __init__(self, env=None):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _HELPER, _WRITER],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def ask(self, *request):
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the soak's helper died during {request}")
        out = json.loads(line)
        if not out["ok"]:
            raise RuntimeError(f"{request}: {out['error']}")
        return out

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(30)


class Victim:
    """A daemon of the local cluster (ffdeploy.daemons', as the cluster saved it): killed -9,
    then started again from its own config after a while."""

    def __init__(self, name, directory, daemon):
        self.name, self.dir, self.daemon = name, directory, daemon

    def kill_and_restart(self, helper, rng):
        # Down for a while, the workload running on.
        helper.ask("restart", self.dir, self.daemon, rng.uniform(0, 2))


class Workload:
    def __init__(self, env, d, rng, launcher):
        self.env, self.d, self.rng, self.launcher = env, d, rng, launcher
        self.build = os.path.abspath(os.environ["FF_BUILD_DIR"])
        self.hai = os.path.join(self.build, "platform", "hai")
        self.mnt = env["FS3_MOUNT"]
        self.lock = threading.Lock()
        self.files = {}          # acknowledged: path under the mount -> sha256
        self.overwritten = {}    # files overwritten in place: path -> bytearray of what they hold
        self.hot = 0             # files of that kind made so far
        self.removed = set()     # acknowledged removals
        self.native = {}         # acknowledged native writes: fs3 path -> sha256
        self.jobs = {}           # acknowledged submissions: id -> what was asked of it
        # Checkpoint writers' files (killed or not): fs3 path -> (bytes acknowledged, their
        # sha256, bytes meant).
        self.preempted = {}
        self.stats = {"fuse_writes": 0, "overwrites": 0, "native_writes": 0, "jobs": 0,
                      "failed_ops": 0, "writers_killed": 0, "writers_done": 0}
        self.failures = []       # the last failed operations: (what, error), for a failure's report
        self.tried = {}          # every path written (acknowledged or not): path -> "fuse"/"native"
        self.running = threading.Event()
        self.running.set()
        self.stop = False
        self.idle = [threading.Event() for _ in range(4)]

    def payload(self):
        data = os.urandom(self.rng.randint(1, 96 * 1024))
        return data, hashlib.sha256(data).hexdigest()

    def step(self, k, body):
        """Runs body() unless paused; a failure (a daemon is down) is counted, not acknowledged."""
        while not self.stop:
            if not self.running.is_set():
                self.idle[k].set()
                self.running.wait(1)
                continue
            self.idle[k].clear()
            try:
                body()
            except (OSError, RuntimeError, subprocess.SubprocessError, AssertionError) as e:
                with self.lock:
                    self.stats["failed_ops"] += 1
                    what = ["fuse", "native", "jobs", "preempted"][k]
                    self.failures = (self.failures + [(what, repr(e))])[-30:]
                time.sleep(0.2)
        self.idle[k].set()

    def fuse(self):
        base = os.path.join(self.mnt, "soak")
        os.makedirs(base, exist_ok=True)
        n = [0]

        def body():
            n[0] += 1
            path = os.path.join(base, f"f{n[0]}")
            data, digest = self.payload()
            with self.lock:
                self.tried[path] = "fuse"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            with self.lock:
                self.files[path] = digest
                self.stats["fuse_writes"] += 1
                names = sorted(self.files)
            self.overwrite(base)
            if n[0] % 5 == 0:
                old = self.rng.choice(names)
                new = old + "-renamed"
                with self.lock:  # unknown until it returns
                    digest = self.files.pop(old)
                os.rename(old, new)
                with self.lock:
                    self.files[new] = digest
            elif n[0] % 7 == 0:
                victim = self.rng.choice(names)
                with self.lock:
                    self.files.pop(victim, None)
                os.unlink(victim)
                with self.lock:
                    self.removed.add(victim)
            time.sleep(0.05)

        self.step(0, body)

    def overwrite(self, base):
        """One round of in-place overwrites of one of four files, fsync'd. A round that fails
        leaves the file's bytes unknown: the file is dropped from the check and another made."""
        with self.lock:
            while len(self.overwritten) < 4:
                self.hot += 1
                self.overwritten[os.path.join(base, f"hot{self.hot}")] = None
            path = self.rng.choice(sorted(self.overwritten))
            shadow = self.overwritten[path]
            self.overwritten[path] = None  # unknown until the round returns
        try:
            if shadow is None:  # a new file: the body, then its header patched at offset 0
                shadow = bytearray(os.urandom(self.rng.randint(64, 768) * 1024))
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                writes = [(0, b"\0" * 512), (512, bytes(shadow[512:])), (0, bytes(shadow[:512]))]
            else:
                fd = os.open(path, os.O_WRONLY)
                writes = []
                for _ in range(self.rng.randint(1, 3)):  # may overlap each other
                    at = 0 if self.rng.random() < 0.2 else self.rng.randrange(len(shadow) + 1)
                    data = os.urandom(self.rng.randint(1, 96 * 1024))
                    writes.append((at, data))
                    if at + len(data) > len(shadow):
                        shadow.extend(b"\0" * (at + len(data) - len(shadow)))
                    shadow[at:at + len(data)] = data
            try:
                for at, data in writes:
                    assert os.pwrite(fd, data, at) == len(data), "a short pwrite"
                os.fsync(fd)
            finally:
                os.close(fd)
        except BaseException:
            with self.lock:
                self.overwritten.pop(path, None)
            raise
        with self.lock:
            self.overwritten[path] = shadow
            self.stats["overwrites"] += 1

    def native_writes(self):
        import fs3client
        fs = fs3client.FileSystem(self.env["FS3_META"], self.env["FS3_MGMTD"])
        try:
            fs.makedirs("/soak-native")
        except OSError:
            pass
        n = [0]

        def body():
            n[0] += 1
            path = f"/soak-native/n{n[0]}"
            data, digest = self.payload()
            with self.lock:
                self.tried[path] = "native"
            fs.write_file(path, data)
            with self.lock:
                self.native[path] = digest
                self.stats["native_writes"] += 1
            time.sleep(0.05)

        self.step(1, body)

    def hai_cli(self, *args, timeout=20):
        r = subprocess.run([self.hai, *args], capture_output=True, text=True, env=self.env,
                           timeout=timeout, cwd=ROOT)
        if r.returncode != 0:
            raise RuntimeError(f"hai {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def job_submissions(self):
        n = [0]

        def body():
            n[0] += 1
            out = self.hai_cli("--json", "submit", "--name", f"soak{n[0]}", "--nodes", "1",
                               "--gpus-per-node", "1", "--", "sleep 1")
            job = int(json.loads(out)["id"])  # int64: a string in proto3's JSON
            with self.lock:
                self.jobs[job] = "run"
                self.stats["jobs"] += 1
            if n[0] % 4 == 0:
                self.hai_cli("suspend", str(job))
            elif n[0] % 9 == 0:
                with self.lock:
                    self.jobs[job] = "stop"
                self.hai_cli("stop", str(job))
            time.sleep(0.5)

        self.step(2, body)

    def preempted_writers(self):
        """Checkpoint writers (fs3client, in processes of their own) killed at a random moment, as
        preempted jobs are: every piece a writer had acknowledged stays, and the length of its
        file is settled once its lease ends (fsck after every restart finds no data past a
        file's end)."""
        pieces, size = 8, 128 * 1024
        n = [0]

        def body():
            n[0] += 1
            path = f"/soak-preempted/p{n[0]}"
            with self.lock:
                self.tried[path] = "native"
            out = self.launcher.ask("preempt", path, pieces, size, self.rng.uniform(0.3, 1.2), n[0])
            if out["acked"]:
                end, digest = out["acked"][-1].split(":")
                with self.lock:
                    self.preempted[path] = (int(end), digest, pieces * size)
            if out["rc"] not in (0, -9):
                raise RuntimeError(f"writer of {path} exited {out['rc']}: {out['stderr']}")
            with self.lock:
                self.stats["writers_done" if out["rc"] == 0 else "writers_killed"] += 1

        self.step(3, body)

    def pause(self):
        self.running.clear()
        for e in self.idle:
            assert e.wait(120), "a workload thread did not pause (an operation hangs)"

    def resume(self):
        for e in self.idle:
            e.clear()
        self.running.set()

    def whose(self, report):
        """The paths written (acknowledged or not) that hold the inodes a report names, and the
        last failed operations: what a failure's report needs."""
        import re

        import fs3client
        inodes = {int(i) for i in re.findall(r"inode (\d+)", report)}
        fs = fs3client.FileSystem(self.env["FS3_META"], self.env["FS3_MGMTD"])
        with self.lock:
            tried, failures = dict(self.tried), list(self.failures)
            acked = set(self.files) | set(self.native) | set(self.overwritten)
            for path in self.overwritten:  # (written in place through the mount)
                tried.setdefault(path, "fuse")
        lines = []
        for path, kind in tried.items():
            try:
                ino = os.stat(path).st_ino if kind == "fuse" else fs.open(path).ino
            except OSError:
                continue
            if ino in inodes:
                lines.append(f"inode {ino}: {kind} {path} ({'acknowledged' if path in acked else 'not acknowledged'})")
        lines += [f"failed {what}: {err}" for what, err in failures]
        return "\n".join(lines)

    def verify(self):
        """Every acknowledged operation is there; fsck is clean."""
        fsck = os.path.join(self.build, "fs3", "fs3")
        last = {}

        def clean():
            last["run"] = subprocess.run(
                [fsck, "--mgmtd", self.env["FS3_MGMTD"], "fsck", "--data", "--meta",
                 self.env["FS3_META"]], env=self.env, capture_output=True, text=True, timeout=120)
            return last["run"].returncode == 0

        try:
            wait_for("fs3 fsck --data clean", clean, 120)
        except AssertionError as e:
            r = last.get("run")
            chains = subprocess.run([fsck, "--mgmtd", self.env["FS3_MGMTD"], "chains"],
                                    capture_output=True, text=True).stdout
            raise AssertionError(f"{e}; the last fsck said:\n{r and (r.stdout + r.stderr)[-3000:]}"
                                 f"\nchains:\n{chains}\n{self.whose(r.stdout + r.stderr if r else '')}"
                                 ) from None
        with self.lock:
            files, removed, native, jobs = (dict(self.files), set(self.removed),
                                            dict(self.native), dict(self.jobs))
            preempted = dict(self.preempted)
            overwritten = {p: bytes(b) for p, b in self.overwritten.items() if b is not None}

        def readable(path, digest):
            try:
                with open(path, "rb") as f:
                    return hashlib.sha256(f.read()).hexdigest() == digest or f"{path}: content"
            except OSError as e:
                return False if e.errno in (5, 107, 110, 11) else f"{path}: {e}"

        for path, digest in files.items():
            ok = wait_for(f"{path} readable", lambda: readable(path, digest), 90)
            assert ok is True, f"an acknowledged write is lost or wrong: {ok}"
        for path in removed:
            assert not os.path.exists(path), f"{path} was removed (acknowledged) and is back"

        def holds(path, want):
            try:
                with open(path, "rb") as f:
                    got = f.read()
            except OSError as e:
                return False if e.errno in (5, 107, 110, 11) else f"{path}: {e}"
            if got == want:
                return True
            at = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]),
                      min(len(got), len(want)))
            return (f"{path}: {len(got)} bytes, expected {len(want)}; first difference at byte "
                    f"{at}")

        for path, want in overwritten.items():
            ok = wait_for(f"{path} readable", lambda: holds(path, want), 90)
            assert ok is True, f"an acknowledged overwrite is lost: {ok}"
        import fs3client
        fs = fs3client.FileSystem(self.env["FS3_META"], self.env["FS3_MGMTD"])
        for path, digest in native.items():
            def native_ok():
                try:
                    data = fs.read(fs.open(path))
                except (OSError, RuntimeError):
                    return False
                return hashlib.sha256(data).hexdigest() == digest or "content differs"
            ok = wait_for(f"{path} readable (native)", native_ok, 90)
            assert ok is True, f"{path}: an acknowledged native write is lost or wrong"
        for path, (acked, digest, meant) in preempted.items():
            def prefix_ok():
                try:
                    f = fs.open(path)
                    data = fs.read(f, 0, acked)
                except (OSError, RuntimeError):
                    return False
                if not acked <= f.size <= meant:
                    return f"a length of {f.size}: {acked} bytes were acknowledged of {meant}"
                return hashlib.sha256(data).hexdigest() == digest or "content differs"
            ok = wait_for(f"{path} readable (killed writer)", prefix_ok, 90)
            assert ok is True, f"{path}: what a killed writer had acknowledged is lost: {ok}"
        fs.close()
        present = set(wait_for("hai ls", lambda: [self._try(self.listed_jobs)]
                               if self._try(self.listed_jobs) is not None else None, 60)[0])
        missing = set(jobs) - present
        assert not missing, f"acknowledged jobs missing after a restart: {sorted(missing)}"

    def listed_jobs(self):
        out = json.loads(self.hai_cli("--json", "ls", "--finished"))
        return {int(j["id"]): j for j in out.get("jobs", [])}

    @staticmethod
    def _try(f):
        try:
            return f()
        except (RuntimeError, subprocess.SubprocessError):
            return None


def test_crash_soak(cluster):  # noqa: F811 (the fixture)
    d, env = cluster
    rng = random.Random(SEED)
    print(f"crash soak: seed {SEED}, {KILLS} kills", file=sys.stderr)
    fs3 = os.path.join(d, "fs3")
    victims = [Victim("fs3-mgmtd", fs3, "mgmtd"), Victim("fs3-meta", fs3, "meta"),
               Victim("hai-server", d, "hai-server")]
    victims += [Victim(f"fs3-storage {n[len('storage'):]}", fs3, n)
                for n in daemons.Daemon.saved(fs3) if n.startswith("storage")]
    # (Both before the workload opens files on the mount.)
    restarter, launcher = Helper(), Helper(env)
    w = Workload(env, d, rng, launcher)
    threads = [threading.Thread(target=t, daemon=True)
               for t in (w.fuse, w.native_writes, w.job_submissions, w.preempted_writers)]
    for t in threads:
        t.start()
    killed = {}
    try:
        order = []
        for k in range(KILLS):
            time.sleep(rng.uniform(0.5, 4))
            if not order:  # every daemon once per round, in a random order
                order = rng.sample(victims, len(victims))
            victim = order.pop()
            down = time.monotonic()
            victim.kill_and_restart(restarter, rng)
            down = time.monotonic() - down
            killed[victim.name] = killed.get(victim.name, 0) + 1
            w.pause()
            w.verify()
            print(f"crash soak: kill {k + 1}/{KILLS}: {victim.name} (down {down:.1f} s); "
                  "acknowledged so far: "
                  f"{len(w.files)} files, {len(w.native)} native files, "
                  f"{len(w.preempted)} checkpoint files, {len(w.jobs)} jobs",
                  file=sys.stderr)
            w.resume()
    finally:
        w.stop = True
        w.running.set()
        for t in threads:
            t.join(60)
        restarter.close()
        launcher.close()
    # Every job ends: nothing is stuck after all those restarts.
    def ended():
        jobs = w.listed_jobs()
        return [jobs] if all(jobs[i]["state"] in ("SUCCEEDED", "STOPPED") for i in w.jobs) else None
    jobs = wait_for("every job ended", lambda: Workload._try(ended), 300)[0]
    stopped = sum(1 for i in w.jobs if jobs[i]["state"] == "STOPPED")
    print(f"crash soak: PASSED: {KILLS} kills ({', '.join(f'{n} x{c}' for n, c in sorted(killed.items()))}); "
          f"{w.stats['fuse_writes']} FUSE writes, {w.stats['overwrites']} rounds of overwrites "
          f"in place, {w.stats['native_writes']} native writes, {w.stats['writers_killed']} "
          f"checkpoint writers killed mid-write ({w.stats['writers_done']} finished first), "
          f"{len(w.jobs)} jobs ({stopped} stopped), {w.stats['failed_ops']} operations refused "
          f"while a daemon was down; fsck clean and nothing acknowledged lost after every restart",
          file=sys.stderr)
