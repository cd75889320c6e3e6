"""The README's set-up commands stay true."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _readme_commands():
    text = (ROOT / "README.md").read_text()
    blocks = text.split("```bash\n")[1:3]
    return [b.split("\n```")[0].strip() for b in blocks]


def test_ci_runs_exactly_the_readme_test_command():
    main_job, test_command = _readme_commands()
    assert "smoothlearn" in main_job and "pytest" in test_command
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_command in ci
