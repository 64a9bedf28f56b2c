"""The study line's estimate of the time left (issue 23): the time per finished unit of work since the
line was first drawn, times the units left; runs when the caller counts them, else architectures;
nothing before the first unit has finished; carried from workers to the parent as JSON lines."""

import io

import pytest
from rich.console import Console

from normsearch.progress import JsonLines, Remaining, RunBar, WorkersView, left_text


class Clock:
    def __init__(self, t=1000.0):
        self.t = t

    def __call__(self):
        return self.t


def quiet():
    return Console(file=io.StringIO(), width=160, force_terminal=False)


def study_fields(progress, task_id):
    task = next(t for t in progress.tasks if t.id == task_id)
    return task.completed, task.total, task.fields


def test_the_estimate_is_the_time_per_unit_times_the_units_left():
    clock = Clock()
    left = Remaining(clock)
    assert left(0, 10) is None  # the first report starts the clock
    clock.t += 30
    assert left(0, 10) is None  # nothing has finished: no estimate
    clock.t += 30
    assert left(2, 10) == pytest.approx(60 / 2 * 8)
    clock.t += 60
    assert left(5, 10) == pytest.approx(120 / 5 * 5)
    assert left(10, 10) is None  # done


def test_it_counts_from_the_first_report_and_starts_again_when_the_count_goes_back():
    clock = Clock()
    left = Remaining(clock)
    assert left(6, 10) is None  # a resumed study: 6 done by an earlier session, not in this one's time
    clock.t += 100
    assert left(7, 10) == pytest.approx(100 / 1 * 3)
    clock.t += 5
    assert left(0, 4) is None  # the same line now shows the next stage: its clock starts here
    clock.t += 20
    assert left(1, 4) == pytest.approx(20 * 3)


def test_left_text():
    assert left_text(0.2) == "~1s left"
    assert left_text(45) == "~45s left"
    assert left_text(200) == "~3m20s left"
    assert left_text(2 * 3600 + 5 * 60 + 9) == "~2h05m left"


def test_the_study_line_estimates_from_runs_when_given():
    clock = Clock()
    bar = RunBar(console=quiet(), study="quickstart", clock=clock)
    with bar:
        bar.study(0, 8, "", runs_done=0, runs_total=24)
        assert study_fields(bar.progress, bar.study_task)[2]["left"] == "0/24 runs"  # nothing finished yet
        clock.t += 60
        bar.study(0, 8, "", runs_done=3, runs_total=24)  # 3 runs in a minute, no architecture finished yet
        done, total, fields = study_fields(bar.progress, bar.study_task)
        assert (done, total) == (0, 8)
        assert fields["left"] == "3/24 runs  " + left_text(60 / 3 * 21) == "3/24 runs  ~7m00s left"


def test_the_study_line_falls_back_to_architectures_and_keeps_its_positional_signature():
    clock = Clock()
    bar = RunBar(console=quiet(), study="quickstart", clock=clock)
    with bar:
        bar.study(0, 4, "best 2.9")
        assert study_fields(bar.progress, bar.study_task)[2]["left"] == ""
        clock.t += 200
        bar.study(1, 4, "best 2.8")
        done, total, fields = study_fields(bar.progress, bar.study_task)
        assert (done, total, fields["info"], fields["left"]) == (1, 4, "best 2.8", "~10m00s left")
        bar.start("t1 seed 0", 10)  # a run's bar has no estimate of its own
        bar.update(3, 2.5, 1000.0)
        assert study_fields(bar.progress, bar.task)[2].get("left") is None


def test_the_json_lines_carry_the_runs_and_the_parent_estimates_on_its_own_clock(capsys):
    worker = JsonLines("w0")
    worker.study(0, 8, "best -", runs_done=0, runs_total=24)
    worker.study(1, 8, "best 2.9", runs_done=6, runs_total=24)
    worker.study(2, 8, "best 2.8")  # a worker that does not count runs: the architectures
    lines = capsys.readouterr().out.splitlines()
    clock = Clock()
    view = WorkersView("quickstart", ["w0"], console=quiet(), clock=clock)
    view.handle(lines[0])
    assert study_fields(view.progress, view.study_task)[2]["left"] == "0/24 runs"
    clock.t += 90
    view.handle(lines[1])
    done, total, fields = study_fields(view.progress, view.study_task)
    assert (done, total, fields["info"]) == (1, 8, "best 2.9")
    assert fields["left"] == "6/24 runs  " + left_text(90 / 6 * 18)
    # an event without the run counts (an older worker) still shows, estimated from the architectures
    view.handle(lines[2])
    done, total, fields = study_fields(view.progress, view.study_task)
    assert (done, total) == (2, 8) and "runs" not in fields["left"]
