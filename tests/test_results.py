"""The committed results: every study folder under results/ (a recipe.yaml beside its report) holds its
database, so that `normsearch report FOLDER` rebuilds its report. study.db is git-ignored, so a commit of
results must force-add it; repro-speedrun's was not and is lost, which its README says (section 9)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: study folders whose database is known to be missing, each with where its README says so
MISSING = {"results/repro/repro-speedrun": ("results/repro/README.md", "This study's database was not committed")}


def test_every_committed_study_folder_holds_its_database():
    studies = sorted(str(p.parent.relative_to(ROOT)) for p in (ROOT / "results").rglob("recipe.yaml")
                     if (p.parent / "report.md").is_file())
    assert len(studies) >= 15, studies
    missing = [s for s in studies if not (ROOT / s / "study.db").is_file()]
    assert sorted(missing) == sorted(MISSING), ("git add -f FOLDER/study.db", sorted(set(missing) - set(MISSING)))
    for readme, sentence in MISSING.values():
        assert sentence in (ROOT / readme).read_text()
