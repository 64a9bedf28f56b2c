import pytest


@pytest.fixture(scope="session")
def report(tmp_path_factory):
    """The report of the synthetic study (still running: trial 11 is), written once for the tests of
    every report module: (its ranking, the folder it was written into)."""
    from test_ranking import build_study

    from normsearch.report import write_report

    out = tmp_path_factory.mktemp("report") / "results" / "synth"  # created by write_report
    ranking = write_report(build_study(running=True), out)
    return ranking, out
