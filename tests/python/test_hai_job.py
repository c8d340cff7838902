"""hai_job.report, the Python side of the training-metrics channel: each call is one JSON line in
$HAI_METRICS_FILE (read back here as the agent reads it: platform/job_metrics.h's format), bad
input raises and writes nothing, and outside HAI-Platform it does nothing."""
import importlib
import json
import math

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
