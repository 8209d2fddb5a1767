"""Installs that are the ones tested: the README's install lines name only extras pyproject.toml has, install
through the committed lock, and the lowest versions pyproject admits are the ones scripts/check-lowest.sh tests."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version
from test_readme import README, ROOT, marked_block

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
LOCK = ROOT / "constraints" / "lock.txt"
LOWEST = ROOT / "constraints" / "lowest.txt"


def pins(path: Path) -> dict[str, str]:
    """``name==version`` lines of a constraints file, by normalised name."""
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if line:
            requirement = Requirement(line)
            (specifier,) = requirement.specifier
            assert specifier.operator == "==", line
            found[normalised(requirement.name)] = specifier.version
    return found


def normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements() -> list[Requirement]:
    project = PYPROJECT["project"]
    return [Requirement(line) for line in [*project["dependencies"],
                                           *(r for extra in project["optional-dependencies"].values() for r in extra)]]


def install_section() -> str:
    text = README.read_text(encoding="utf-8")
    return text[text.index("## Install\n"):text.index("\n## ", text.index("## Install\n") + 1)]


def test_every_extra_the_readme_installs_exists():
    section, extras = install_section(), set(PYPROJECT["project"]["optional-dependencies"])
    text = README.read_text(encoding="utf-8")
    named = [name for group in re.findall(r'-e "\.\[([a-z0-9,-]+)\]"', text) for name in group.split(",")]
    assert "setfit" in named and "mpnet" in named and "serve" in named and "onnx" in named, named
    assert set(named) <= extras, f"the README installs extras pyproject.toml lacks: {sorted(set(named) - extras)}"
    block = marked_block(README, "readme-install", "bash")
    # CPU-only torch from PyTorch's own index, and the tested set through the lock, as written in the block.
    assert 'pip install "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu' in block
    assert 'pip install -c constraints/lock.txt -e ".[setfit]"' in block
    assert "https://download.pytorch.org/whl/cu" in section  # the CUDA users' line


def test_the_lock_pins_every_dependency_and_setup_installs_through_it():
    locked = pins(LOCK)
    for requirement in requirements():
        if requirement.marker is None and not requirement.name.startswith("all-mpnet"):  # mpnet: an opt-in download
            name = normalised(requirement.name)
            assert name in locked, f"{name} is not in {LOCK.name}: run bash scripts/refresh-lock.sh"
            assert requirement.specifier.contains(locked[name], prereleases=True), (name, locked[name])
    assert locked["torch"] == "2.13.0"
    setup = (ROOT / "scripts" / "setup.sh").read_text(encoding="utf-8")
    assert setup.count("-c constraints/lock.txt") == 1 and '"${pip[@]}" -e ".[' in setup


def test_the_lowest_pins_are_pyprojects_lower_bounds():
    """What scripts/check-lowest.sh installs is the lowest each range admits: a bound raised or lowered in
    pyproject.toml without the check moves with it fails here."""
    lowest = pins(LOWEST)
    bounds = {}
    for requirement in requirements():
        for specifier in requirement.specifier:
            if specifier.operator == ">=":
                bounds[normalised(requirement.name)] = specifier.version
    assert set(lowest) - {"torch"} <= set(bounds), sorted(set(lowest) - set(bounds))
    for name, version in lowest.items():
        if name == "torch":  # one build is tested, 2.13.0; pyproject's bound (2.4) is said to be untested
            continue
        assert Version(bounds.get(name, version)) == Version(version), f"{name}: pyproject says >={bounds[name]}, {LOWEST.name} {version}"
    assert {"transformers", "peft", "sentence-transformers", "setfit"} <= set(lowest)
