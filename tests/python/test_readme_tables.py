"""bench/readme_tables.py: a table between its markers is made from one run's results, with the
run's command and its evaluation beside it; --check fails on a table edited by hand (or results
changed without the README), --write makes it again, and a table without its end marker or of an
unknown name is an error naming the README."""

import importlib.util
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "bench", "readme_tables.py")

SUMMARY = (
    "experiment,algorithm,network,scalability,utilization,comm_wait_fraction,final_accuracy,"
    "bytes_per_peer,peak_memory_vs_model,stopped_early,steps,options\n"
    "a/default/geo/4p/iid,allreduce-sgd,geo,0.0761,0.0912,0.9,0.7975,3973000000,40.2,1,34,\n"
    "d/default/geo/4p/iid,diloco,geo,0.85,0.93,0.05,0.834,361000000,43.0,0,200,\"h 100\"\n")


@pytest.fixture
def tables(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("readme_tables", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    run = tmp_path / "results" / "run"
    run.mkdir(parents=True)
    (run / "summary.csv").write_text(SUMMARY)
    (run / "command.txt").write_text("gossamer-bench convergence --config x.conf --out run\n")
    (run / "experiments.conf").write_text("[run]\neval-every-steps = 10\n[matrix]\n")
    monkeypatch.setattr(module, "ROOT", str(tmp_path))
    monkeypatch.setattr(module, "TABLES", {"seed002": ("results/run", module.seed002)})
    return module


def write_readme(tmp_path, between):
    text = "# title\n\n<!-- table: seed002 -->\n%s<!-- /table -->\n\nafter\n" % between
    (tmp_path / "README.md").write_text(text)


def check(tables, *args):
    import sys
    saved = sys.argv
    sys.argv = ["readme_tables.py"] + list(args) + ["README.md"]
    try:
        return tables.main()
    finally:
        sys.argv = saved


def test_a_table_is_made_from_its_run(tables, tmp_path):
    write_readme(tmp_path, "")
    assert check(tables, "--check") == 1
    assert check(tables, "--write") == 0
    text = (tmp_path / "README.md").read_text()
    assert "`gossamer-bench convergence --config x.conf --out run`" in text
    assert "exact to 10 steps" in text
    assert "| diloco | h 100 | 0.85 | 93% | 5.0% | 83.40% | 361 | 43.0x |" in text
    assert "79.75% (stopped at 34 steps)" in text
    assert text.startswith("# title\n") and text.endswith("after\n")
    assert check(tables, "--check") == 0


def test_a_table_edited_by_hand_fails_the_check(tables, tmp_path, capsys):
    write_readme(tmp_path, "")
    check(tables, "--write")
    path = tmp_path / "README.md"
    path.write_text(path.read_text().replace("83.40%", "84.40%"))
    assert check(tables, "--check") == 1
    assert "84.40%" in capsys.readouterr().out  # the diff shows the edit


def test_markers_that_do_not_close_or_name_no_table_are_errors(tables, tmp_path):
    (tmp_path / "README.md").write_text("<!-- table: seed002 -->\nno end\n")
    with pytest.raises(SystemExit, match="no '<!-- /table -->' line"):
        check(tables, "--check")
    (tmp_path / "README.md").write_text("<!-- table: nope -->\n<!-- /table -->\n")
    with pytest.raises(SystemExit, match="unknown table 'nope'"):
        check(tables, "--check")
