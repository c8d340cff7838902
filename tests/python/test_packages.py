"""The Python packages as a user installs them: haiscale (with its extension), fs3client and
hai_job, pip-installed (--no-build-isolation) into a fresh virtual environment that has torch
2.13, then a 2-rank job run from that environment only: the "hfreduce" backend, haiscale's DDP, a
checkpoint written and read back through fs3client on a real fs3, hai_job's helpers.

Nothing here touches the project's .venv or the build's python/ folder: the child processes run
without PYTHONPATH, and the test checks that every package came from the fresh environment.
"""

import os
import re
import subprocess
import sys
import textwrap

import pytest
from fs3_cluster import Fs3Cluster

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def pins(*names):
    """name==version lines of deploy/requirements.txt (the versions the project runs)."""
    wanted = {n.lower() for n in names}
    out = []
    with open(os.path.join(ROOT, "deploy", "requirements.txt")) as f:
        for line in f:
            m = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line.strip())
            if m and m.group(1).lower() in wanted:
                out.append(m.group(0))
    assert len(out) == len(wanted), f"requirements.txt pins {out}, not all of {sorted(wanted)}"
    return out


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != "FF_BUILD_DIR"
           and k != "VIRTUAL_ENV"}
    env.update(OMP_NUM_THREADS="1", CMAKE_BUILD_PARALLEL_LEVEL=str(max(2, os.cpu_count() or 2)), **extra)
    return env


def run(cmd, timeout, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    assert r.returncode == 0, f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return r.stdout


JOB = textwrap.dedent("""
    import os, sys
    import torch, torch.distributed as dist
    import haiscale, fs3client, hai_job
    from haiscale.ddp import DistributedDataParallel

    prefix = sys.argv[1]
    for m in (haiscale, fs3client, hai_job):   # from the fresh environment, not the build
        assert os.path.realpath(m.__file__).startswith(prefix), (m.__name__, m.__file__, prefix)
    dist.init_process_group("hfreduce")
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.full((1000,), float(rank + 1))
    dist.all_reduce(t)
    assert torch.all(t == sum(range(1, world + 1))), t[:4]
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 16) * (rank + 1)
    model(x).square().mean().backward()
    opt.step()
    w = model.module.weight.detach().clone()
    others = [torch.empty_like(w) for _ in range(world)]
    dist.all_gather(others, w)
    assert all(torch.equal(o, w) for o in others), "DDP replicas differ after a step"
    fs = fs3client.FileSystem.from_env()
    path = f"/ckpt/rank{rank}.pt"
    if rank == 0:
        fs.makedirs("/ckpt")
    dist.barrier()
    import io
    buf = io.BytesIO(); torch.save({"w": w, "rank": rank}, buf)
    fs.write_file(path, buf.getvalue())
    back = torch.load(io.BytesIO(fs.read(fs.open(path))))
    assert back["rank"] == rank and torch.equal(back["w"], w)
    assert hai_job.restart_count() == 0 and not hai_job.should_suspend()
    print(f"rank {rank} of {world}: ok over {haiscale.backend_info()['transport']}", flush=True)
    dist.destroy_process_group()
""")


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory):
    """A new environment with torch 2.13 (the wheel pip finds, as deploy/install-deps.sh does)
    and the build backend, and the four packages installed from this checkout."""
    venv = str(tmp_path_factory.mktemp("venv") / "env")
    base = getattr(sys, "_base_executable", sys.executable)
    run([base, "-m", "venv", venv], 120)
    py = os.path.join(venv, "bin", "python")
    env = clean_env()
    run([py, "-m", "pip", "install", "-q", "--no-input",
         *pins("torch", "numpy", "scikit-build-core", "pathspec", "packaging")], 900, env=env)
    run([py, "-m", "pip", "install", "--no-input", "--no-build-isolation",
         os.path.join(ROOT, "haiscale", "python"), os.path.join(ROOT, "fs3", "python"),
         os.path.join(ROOT, "platform", "python"), os.path.join(ROOT, "deploy")], 1500, env=env)
    return venv


def test_installed_packages_are_real_distributions(fresh_venv):
    py = os.path.join(fresh_venv, "bin", "python")
    out = run([py, "-m", "pip", "list", "--format=freeze"], 120, env=clean_env())
    for name in ("haiscale==0.1.0", "fs3client==0.1.0", "hai-job==0.1.0", "ffdeploy==0.1.0"):
        assert name in out.splitlines() or name.replace("-", "_") in out.splitlines(), out
    site = run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], 60,
               env=clean_env()).strip()
    # The wheel holds the extension and libfs3c.so; the install wrote no .pth of the build's.
    assert any(n.startswith("_C.") and n.endswith(".so") for n in os.listdir(os.path.join(site, "haiscale")))
    assert os.path.exists(os.path.join(site, "fs3client", "libfs3c.so"))
    assert not os.path.exists(os.path.join(site, "fireflyer.pth"))
    # haiscale says which torch it was built for, and refuses another (checked at import).
    info = run([py, "-c", "import haiscale._build_info as b, torch; print(b.TORCH_VERSION, torch.__version__)"],
               60, env=clean_env()).split()
    assert info[0] == info[1], info
    # The deployment tooling's console scripts, run from a checkout (they work in its tree).
    for script in ("ff-local-cluster", "ff-fs3-local", "ff-netlab"):
        assert os.path.exists(os.path.join(fresh_venv, "bin", script)), script
    usage = subprocess.run([os.path.join(fresh_venv, "bin", "ff-netlab"), "--help"], capture_output=True,
                           text=True, timeout=60, env=clean_env(), cwd=ROOT)
    assert usage.returncode == 0 and "emulated fat-tree" in usage.stdout, usage


def test_two_rank_job_from_the_fresh_environment(fresh_venv, tmp_path):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    py = os.path.join(fresh_venv, "bin", "python")
    with Fs3Cluster(str(tmp_path / "fs3"), storage=2, replication=2) as fs3:
        env = clean_env(FS3_META=fs3.meta, FS3_MGMTD=fs3.mgmtd)
        out = run([py, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                   str(20000 + os.getpid() % 10000), str(script), os.path.realpath(fresh_venv)],
                  600, env=env, cwd=str(tmp_path))
    assert "rank 0 of 2: ok" in out and "rank 1 of 2: ok" in out, out


def test_the_projects_environment_is_untouched():
    """Nothing above (or any configure of a scratch tree) rewrote the project's .venv: its
    fireflyer.pth, when there is one, points at this checkout's build."""
    pth = os.path.join(ROOT, ".venv", "lib", f"python{sys.version_info.major}.{sys.version_info.minor}",
                       "site-packages", "fireflyer.pth")
    if not os.path.exists(pth):
        pytest.fail(f"{pth} is missing: `import haiscale` no longer works in the project's .venv")
    lines = open(pth).read().split()
    build = os.environ.get("FF_BUILD_DIR", os.path.join(ROOT, "build"))
    assert lines[0] == os.path.join(os.path.abspath(build), "python"), lines
