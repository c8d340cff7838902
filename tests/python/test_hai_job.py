"""hai_job.report, the Python side of the training-metrics channel: each call is one JSON line in
$HAI_METRICS_FILE (read back here as the agent reads it: platform/job_metrics.h's format), bad
input raises and writes nothing, and outside HAI-Platform it does nothing. And its step telemetry
(record_steps): one record per step in $HAI_STEPS_FILE of where the step's time went."""
import importlib
import json
import math
import time

import pytest

import hai_job


@pytest.fixture
def job(tmp_path, monkeypatch):
    path = tmp_path / "rank-0.metrics.jsonl"
    monkeypatch.setenv("HAI_METRICS_FILE", str(path))
    monkeypatch.setenv("HAI_RUN", "2")
    module = importlib.reload(hai_job)  # a fresh process's module: no file opened yet
    yield module, path
    importlib.reload(hai_job)


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_report_is_one_line_with_step_time_run_and_values(job):
    module, path = job
    module.report(1, loss=2.5, lr=3e-4)
    module.report(2, loss=float("nan"), **{"eval/acc": 0.75})
    module.report(3)
    first, second, third = lines(path)
    assert first["step"] == 1 and first["run"] == 2 and first["loss"] == 2.5 and first["lr"] == 3e-4
    assert abs(first["time"] - __import__("time").time()) < 60
    assert second["loss"] is None and second["eval/acc"] == 0.75  # not finite: null, valid JSON
    assert set(third) == {"step", "time", "run"}


def test_bad_input_raises_and_writes_nothing(job):
    module, path = job
    for step in (-1, 1.5, "3", True, None):
        with pytest.raises(ValueError):
            module.report(step, loss=1.0)
    for name in ("9lives", "a b", "x" * 65, "time", "run"):
        with pytest.raises(ValueError):
            module.report(1, **{name: 1.0})
    for value in ("low", b"1", None, [1.0]):
        with pytest.raises(TypeError):
            module.report(1, loss=value)
    assert not path.exists() or path.read_text() == ""


def test_a_one_element_tensor_is_a_number(job):
    torch = pytest.importorskip("torch")
    module, path = job
    module.report(5, loss=torch.tensor(1.25), inf=torch.tensor(math.inf))
    (record,) = lines(path)
    assert record["loss"] == 1.25 and record["inf"] is None


def test_outside_the_platform_it_does_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("HAI_METRICS_FILE", raising=False)
    module = importlib.reload(hai_job)
    module.report(1, loss=1.0)  # no error, no file
    with pytest.raises(ValueError):
        module.report(-1)       # still checked
    assert list(tmp_path.iterdir()) == []


# ---- step telemetry ---------------------------------------------------------------------------


@pytest.fixture
def steps(tmp_path, monkeypatch):
    path = tmp_path / "rank-0.steps.jsonl"
    monkeypatch.setenv("HAI_STEPS_FILE", str(path))
    monkeypatch.setenv("HAI_RUN", "1")
    module = importlib.reload(hai_job)
    yield module, path
    module._stop_recording()
    importlib.reload(hai_job)


def test_each_step_is_one_record_of_where_its_time_went(steps):
    module, path = steps
    clock = [3, 0.5]  # collectives and seconds so far, as the hfreduce backend counts them
    assert module.record_steps(optimizer_hook=False, data_loader=False)
    module.set_comm_clock(lambda: tuple(clock))
    with module.phase("data"):
        time.sleep(0.02)
    time.sleep(0.03)
    clock[:] = [5, 0.51]
    module.add_phase_time("ckpt", 0.005)
    module.step_done()
    module.step_done(step=41)
    first, second = lines(path)
    assert first["step"] == 1 and first["run"] == 1 and second["step"] == 41
    assert first["collectives"] == 2 and first["comm_s"] == pytest.approx(0.01)
    assert 0.02 <= first["data_s"] < 0.05 and first["ckpt_s"] == 0.005
    assert first["step_s"] >= 0.05
    assert first["compute_s"] == pytest.approx(
        first["step_s"] - first["comm_s"] - first["data_s"] - first["ckpt_s"], abs=2e-6)
    # The next step starts from nothing.
    assert second["collectives"] == 0 and second["data_s"] == 0 and second["ckpt_s"] == 0
    with pytest.raises(ValueError):
        module.add_phase_time("lunch", 1.0)
    with pytest.raises(ValueError):
        module.step_done(step=-1)
    assert len(lines(path)) == 2


def test_a_checkpoint_report_is_one_line_and_bad_input_writes_nothing(steps):
    module, path = steps
    for bad in ((-1, 10, 1.0), (1, -10, 1.0), (1, 10, float("nan")), (1, "10", 1.0), (True, 1, 1)):
        with pytest.raises(ValueError):
            module.report_checkpoint(*bad)
    module.report_checkpoint(300, 1_500_000_000, 2.25)
    (record,) = lines(path)
    assert record["step"] == record["ckpt_step"] == 300 and record["run"] == 1
    assert record["ckpt_bytes"] == 1.5e9 and record["ckpt_write_s"] == 2.25


def test_the_suspend_deadline_is_what_the_agent_wrote_into_the_flag(tmp_path, monkeypatch):
    flag = tmp_path / "suspend.flag"
    monkeypatch.setenv("HAI_SUSPEND_FLAG", str(flag))
    module = importlib.reload(hai_job)
    try:
        assert module.suspend_deadline() is None  # not asked
        flag.write_text('{"deadline": 1795884414.571, "grace_s": 5.5}\n')
        assert module.should_suspend() and module.suspend_deadline() == 1795884414.571
        flag.write_text("")  # an agent of old: the flag only
        assert module.suspend_deadline() is None
    finally:
        importlib.reload(hai_job)


def test_a_checkpoint_slot_is_asked_for_and_waited_for_within_its_bound(tmp_path, monkeypatch):
    """hai_job.checkpoint_slot writes its ask whole ({"id", "bytes"}) and returns once the grant
    names that id (here written by the test, as the agent would), or at its bound; outside the
    platform, and for a job asked to suspend, at once."""
    module = importlib.reload(hai_job)
    try:
        assert module.checkpoint_slot(1 << 20) == 0.0  # outside the platform
        ask, grant = tmp_path / "slot", tmp_path / "grant"
        monkeypatch.setenv("HAI_CKPT_SLOT_FILE", str(ask))
        monkeypatch.setenv("HAI_CKPT_GRANT_FILE", str(grant))
        assert module.checkpoint_slot(1 << 20, timeout_s=0.2) >= 0.2  # no go: it goes at its bound
        assert json.loads(ask.read_text()) == {"id": 1, "bytes": 1048576.0}
        grant.write_text('{"id": 2}\n')  # the agent's go for the next ask
        assert module.checkpoint_slot(5, timeout_s=10) < 1
        assert json.loads(ask.read_text())["id"] == 2
        monkeypatch.setenv("HAI_CKPT_MAX_DELAY_S", "0")  # the platform does not stagger
        assert module.checkpoint_slot(5, timeout_s=10) == 0.0
        assert json.loads(ask.read_text())["id"] == 2  # nothing asked
        monkeypatch.setenv("HAI_CKPT_MAX_DELAY_S", "60")
        flag = tmp_path / "flag"
        monkeypatch.setenv("HAI_SUSPEND_FLAG", str(flag))
        flag.write_text("")
        assert module.checkpoint_slot(5, timeout_s=10) == 0.0  # a suspension goes first
    finally:
        importlib.reload(hai_job)


def test_torch_training_records_its_steps_unasked(steps):
    """The optimizer hook ends a step at each step() of the first optimizer (not of a second
    one); DataLoader time is data loading."""
    import torch

    module, path = steps
    assert module.record_steps()
    model = torch.nn.Linear(4, 1)
    opt, other = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD([torch.zeros(1)])
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4)),
                                       batch_size=2)
    for (x,) in data:
        model(x).sum().backward()
        opt.step()
        other.step()
    records = lines(path)
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert all(r["data_s"] > 0 for r in records)
    assert module.record_steps()  # again: nothing more registered
    opt.step()
    assert len(lines(path)) == 5


def test_outside_the_platform_steps_are_not_recorded(tmp_path, monkeypatch):
    monkeypatch.delenv("HAI_STEPS_FILE", raising=False)
    module = importlib.reload(hai_job)
    assert not module.record_steps()
    module.step_done()
    with module.phase("data"):
        pass
    assert list(tmp_path.iterdir()) == []
