"""The report's "time by stage" line (runner/report.py ``stages``): the H200 demo of session 21 printed
"child_wall 53.29 s, ..., judge_tail 17.74 s, judge 0.0 s, judge_during 39.87 s", phases that overlap
listed as if they added up."""

from __future__ import annotations

from kernelpro.runner.report import stages

H200_DEMO = {"child_wall": 53.29, "launch": 0.1, "startup": 0.93, "verify": 11.86, "save": 10.77, "time": 10.36,
             "teardown": 0.98, "judge_tail": 17.74, "judge": 0.0, "judge_during": 39.87, "build": 0.32}


def test_the_time_by_stage_groups_the_processes_the_judging_and_the_builds() -> None:
    line = stages(H200_DEMO)
    assert line == ("the candidates' processes 53.29 s (launch 0.1 s, startup 0.93 s, verify 11.86 s, save 10.77 s, "
                    "time 10.36 s, teardown 0.98 s); judging their outputs 57.61 s (39.87 s while they ran, 17.74 s "
                    "after); builds 0.32 s")
    assert "judge_during" not in line and "child_wall" not in line


def test_a_run_without_judging_or_processes_still_reads() -> None:
    assert stages({"child_wall": 1.0, "launch": 0.5, "build": 0.0}) == "the candidates' processes 1 s (launch 0.5 s); builds 0 s"
    assert stages({}) == ""


def test_the_wait_for_the_references_outputs_is_its_own_part() -> None:
    # Before a candidate's child starts, not inside it: a new reference child whenever the secret
    # check seeds were spent (each Liger SwiGLU candidate).
    line = stages({**H200_DEMO, "reference": 6.5})
    assert line.endswith("after); the reference's outputs for the secret checks, before the candidates started 6.5 s; "
                         "builds 0.32 s")
    assert "reference 6.5" not in line
    line = stages({**H200_DEMO, "reference": 0.5, "reference_ahead": 6.0})
    assert "; the reference's outputs for the secret checks 6.50 s (0.5 s before the candidates started, 6 s beside the judging); " in line
