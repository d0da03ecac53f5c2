"""What happened to a run on SLURM: sacct's duplicate lines of a requeued job, the driver's event
log, sacctmgr's node events, and the lines ``d5pipe status`` and the report show."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from d5pipe.results.accounting import parse_sacct
from d5pipe.results.slurm_incidents import driver_rows, hosts, incident_lines, incidents, node_rows, used_nodes
from d5pipe.rundir.layout import RunDir
from d5pipe.rundir.slurm_events import Outage, read, record

# sacct -n -P --duplicates -o JobIDRaw,JobID,State,ElapsedRaw,TotalCPU,MaxRSS,ReqMem,AllocCPUS,NodeList
REQUEUED = """\
41|40_1|NODE_FAIL|12|00:01.000||200M|1|node3
41.batch|40_1.batch|CANCELLED|12|00:01.000|50M||1|node3
41|40_1|REQUEUED|5|00:00.500||200M|1|node7
41|40_1|COMPLETED|30|00:20.000||200M|1|node9
41.batch|40_1.batch|COMPLETED|30|00:20.000|80M||1|node9
42|40_2|COMPLETED|25|00:18.000||200M|1|node4
43|43|TIMEOUT|60|00:59.000||200M|1|node5
"""


def test_a_requeued_job_is_one_row_with_its_earlier_attempts() -> None:
    acct = parse_sacct(REQUEUED).set_index("slurm_job_id")
    assert acct.loc["41", "slurm_state"] == "COMPLETED" and acct.loc["41", "slurm_nodes"] == "node9"
    assert acct.loc["41", "slurm_attempts"] == 3
    assert acct.loc["41", "slurm_history"] == "NODE_FAIL on node3; REQUEUED on node7"
    assert acct.loc["41", "slurm_maxrss_mb"] == 80  # the largest step of any attempt
    assert acct.loc["42", "slurm_attempts"] == 1 and acct.loc["42", "slurm_history"] == ""


def test_hostlists_expand_as_slurm_writes_them() -> None:
    assert hosts("node[1-3,10],gpu2") == {"node1", "node2", "node3", "node10", "gpu2"}
    assert hosts("n[08-10]") == {"n08", "n09", "n10"}
    acct = parse_sacct(REQUEUED)
    assert used_nodes(acct) == {"node3", "node4", "node5", "node7", "node9"}


def test_an_outage_is_two_lines_and_one_incident_with_its_length(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "slurm_events.jsonl"
    ctl = Outage(log, "controller", "slurmctld (squeue)")
    ctl.saw(True)  # answering: nothing written
    assert read(log) == []
    ctl.saw(False)
    ctl.saw(False)
    ctl.saw(True)
    events = read(log)
    assert [e["state"] for e in events] == ["down", "up"] and events[1]["misses"] == 2
    rows = driver_rows(events)
    assert len(rows) == 1 and "slurmctld (squeue) answered again after" in rows[0]["text"]


def test_an_outage_still_open_and_waits_are_said(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    Outage(log, "status", "the job status query").saw(False)
    record(log, "wait", "waited", "10 task(s) waited 30 s to be submitted: MaxJobCount=300: 290 jobs",
           waited_s=30.0, tasks=10)
    record(log, "wait", "waited", "5 task(s) waited 12 s to be submitted: executor.jobs=20 tasks", waited_s=12.0)
    with open(log, "a") as fh:
        fh.write('{"t": 1, "kind": "contr')  # a line cut short by a kill
    rows = driver_rows(read(log))
    texts = " | ".join(r["text"] for r in rows)
    assert "had not answered again" in texts
    assert "2 submission(s) waited, 42 s in all, for: MaxJobCount=300; executor.jobs=20 tasks" in texts


def test_node_events_of_nodes_the_run_did_not_use_are_left_out() -> None:
    events = [{"NodeName": "node3", "TimeStart": "2026-12-06T01:00:00", "TimeEnd": "2026-12-06T01:02:00",
               "State": "DOWN", "Reason": "Not responding"},
              {"NodeName": "node99", "TimeStart": "2026-12-06T01:00:00", "TimeEnd": "Unknown",
               "State": "DRAIN", "Reason": "admin"}]
    rows = node_rows(events, used={"node3"})
    assert len(rows) == 1 and "node3 DOWN until" in rows[0]["text"] and "(120 s): Not responding" in rows[0]["text"]
    assert "still" in node_rows(events)[1]["text"]


def test_incidents_of_a_run_read_back_without_asking_slurm(tmp_path: Path) -> None:
    rd = RunDir(tmp_path)
    Outage(rd.slurm_events_log, "controller", "slurmctld (squeue)").saw(False)
    acct = parse_sacct(REQUEUED)
    pd.DataFrame([{"t": 5.0, "kind": "node", "text": "node3 DOWN"}]).to_parquet(rd.side_table("slurm_events"))
    (tmp_path / "shards" / "level0").mkdir(parents=True)
    (tmp_path / "shards" / "level0" / "s00001.attempts").write_text("p1\np2\np1\n")
    table = incidents(rd, acct, query=False)
    assert list(table["kind"]) == ["requeue", "job", "restart", "node", "controller"]
    assert "1 point(s) started more than once" in table["text"][2] and "level0/p1 (2x)" in table["text"][2]
    lines = incident_lines(table, limit=2)
    assert lines[0] == "slurm: 5 incident(s)" and lines[-1].strip().startswith("... 3 more")
    assert "job 41 ran 3 times: NODE_FAIL on node3; REQUEUED on node7; then COMPLETED on node9" in lines[1]
    assert incident_lines(incidents(RunDir(tmp_path / "none"), None, query=False)) == [
        "slurm: no node, controller, accounting or job incident"]
    assert json.loads(rd.slurm_events_log.read_text().splitlines()[0])["kind"] == "controller"
