"""The README and docs/ say what the code declares: the backends (the registry), the CLI's commands
and ``--backend`` choices (its argparse), the oldest Airflow supported (pyproject.toml), the example
DAGs (example_dags/). Each fact is read from where the code keeps it, never written here."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from packaging.requirements import Requirement

from primus_runtime import backends, cli

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text()
DOCS = {"README.md": README, "docs/architecture.md": ARCHITECTURE}
FLAT_README = " ".join(README.split())  # a sentence may wrap anywhere
NUMBERS = ("zero one two three four five six seven eight nine ten eleven twelve").split()


def names_in(listing: str) -> list[str]:
    """``local, YARN and Kubernetes`` / ```local`, `yarn` or `kubernetes``` / ``local\\|yarn``: the names,
    lower case, in their order."""
    words = re.split(r"\s*(?:,|\\\||\||\band\b|\bor\b)\s*", listing.replace("`", ""))
    return [word.strip().lower() for word in words if word.strip()]


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(action.choices for action in parser._actions if isinstance(action, argparse._SubParsersAction))


def test_the_cli_offers_every_registered_backend():
    options = [(name, action) for name, sub in subcommands(cli._parser()).items() for action in sub._actions
               if "--backend" in action.option_strings]
    assert {name for name, _ in options} >= {"submit", "list", "history"}
    for name, action in options:
        assert tuple(action.choices) == backends.NAMES, name


def test_every_backend_list_in_the_docs_is_the_registrys():
    found = 0
    for doc, text in DOCS.items():
        for listing in re.findall(r"--backend ((?:[a-z]+\\\|)+[a-z]+)", text):  # the CLI table's choices
            assert names_in(listing) == list(backends.NAMES), f"{doc}: --backend {listing}"
            found += 1
    assert found >= 3  # submit, list, history
    # The provider's row in "What is here today" and the connection's backends.
    (done,) = re.findall(r"example DAGs \(see below\) \| done \(([^)]*) backends\) \|", README)
    assert sorted(names_in(done)) == sorted(backends.NAMES), done
    (connection,) = re.findall(r"\| connection `primus` \| backend \(([^)]*)\)", README)
    assert sorted(names_in(connection)) == sorted(backends.NAMES), connection
    (packages,) = re.findall(r"one package per backend \(([^)]*)\)", ARCHITECTURE)
    assert sorted(names_in(packages)) == sorted(backends.NAMES), packages


def test_the_architecture_diagram_shows_every_backend_and_the_airflow_hook():
    diagram = ARCHITECTURE.split("```")[1]
    # The backend column: "local: job dir + ...", "yarn: skein app, ...", one label per backend.
    lines = diagram.splitlines()
    column = next(line.index("ClusterClient.submit()") for line in lines if "ClusterClient.submit()" in line)
    labels = [m.group(1) for line in lines if (m := re.match(r"([a-z]+): ", line[column:]))]
    assert labels == list(backends.NAMES)
    assert "later" not in diagram and "PrimusHook" in diagram


def test_backend_properties_the_readme_states_are_the_registrys():
    (tls,) = re.findall(r"`am: \{tls: true\}` \(([^;]*) backends;", FLAT_README)
    assert sorted(names_in(tls)) == sorted(n for n, info in backends.BACKENDS.items() if info.serves_tls)
    (adopting, attempts) = re.findall(r"On the ([^.]*?) backends `am\.max_attempts` is (\d+)", FLAT_README)[0]
    assert sorted(names_in(adopting)) == sorted(n for n, info in backends.BACKENDS.items() if info.adopts_executors)
    assert int(attempts) == backends.DEFAULT_AM_ATTEMPTS


def test_the_cli_table_lists_every_command():
    table = README.split("## The CLI", 1)[1].split("\n\n", 2)[1]
    listed = set(re.findall(r"^\| `primus ([a-z0-9]+)", table, re.MULTILINE))
    assert listed == set(subcommands(cli._parser()))


def airflow_floor() -> str:
    # [project] dependencies come first; tomllib is not in Python 3.10's standard library
    project = (ROOT / "pyproject.toml").read_text().split("\n[project.optional-dependencies]")[0]
    dependencies = re.findall(r'^\s*"([^"]+)",', project.split("\ndependencies = [", 1)[1], re.MULTILINE)
    (airflow,) = [Requirement(dep) for dep in dependencies if Requirement(dep).name == "apache-airflow"]
    (floor,) = [spec.version for spec in airflow.specifier if spec.operator == ">="]
    return floor


def test_the_airflow_floor_is_pyprojects_everywhere_it_is_said():
    floor = airflow_floor()
    said = re.findall(r"Airflow (\d+(?:\.\d+)*)\+", README)
    assert said and set(said) == {floor}, said
    oldest = (ROOT / "scripts" / "test-oldest-airflow.sh").read_text()
    (tested,) = re.findall(r"^AIRFLOW_OLDEST=(\S+)$", oldest, re.MULTILINE)
    assert tested.startswith(floor + "."), tested  # the newest patch of the oldest minor
    assert f"apache-airflow>={floor}" in oldest


def test_the_readme_counts_and_names_the_example_dags():
    dags = sorted(path.stem for path in (ROOT / "example_dags").glob("*.py") if not path.stem.startswith("_"))
    for path in (ROOT / "example_dags").glob("*.py"):
        assert f'dag_id="{path.stem}"' in path.read_text(), path  # a DAG's id is its file's name
    counts = re.findall(rf"\b(\d+|{'|'.join(NUMBERS)}) example DAGs\b", README, re.IGNORECASE)
    assert counts and {int(c) if c.isdigit() else NUMBERS.index(c.lower()) for c in counts} == {len(dags)}, counts
    paragraph = README.split("Example DAGs (each runs", 1)[1].split("\n\n", 1)[0]
    assert sorted(set(re.findall(r"`(primus_\w+)`", paragraph))) == dags
