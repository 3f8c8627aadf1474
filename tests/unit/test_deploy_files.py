"""The files under ``deploy/`` agree with the code they configure.

The example config names every field of ``Settings`` and of ``RepositoryConfig`` (set,
or commented out when it has no default) and loads as it is; both systemd units run
``promoter serve`` with the JSON log format and the sandbox options the README shows.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from promoter.config import RepositoryConfig, Settings, load_settings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
EXAMPLE = DEPLOY / "promoter.example.toml"


def _named_keys(text: str) -> set[str]:
    return set(re.findall(r"^#? ?([a-z][a-z0-9_]*) = ", text, re.MULTILINE))


def test_example_config_names_every_setting() -> None:
    text = EXAMPLE.read_text()
    top, _, repositories = text.partition("[repositories.")
    assert set(Settings.model_fields) - {"repositories"} == _named_keys(top)
    assert set(RepositoryConfig.model_fields) == _named_keys(repositories)


def test_example_config_loads_and_its_values_are_the_defaults() -> None:
    settings = load_settings(EXAMPLE)
    parsed = tomllib.loads(EXAMPLE.read_text())
    defaults = Settings()
    for key, value in parsed.items():
        if key not in ("repositories", "state_dir"):
            assert getattr(settings, key) == getattr(defaults, key) == value, key
    repository = settings.repositories["app"]
    for key, value in parsed["repositories"]["app"].items():
        if key != "path":
            assert getattr(repository, key) == RepositoryConfig.model_fields[key].default == value


def test_units_run_serve_with_json_logs_in_a_sandbox() -> None:
    for name in ("promoter.service", "promoter-user.service"):
        unit = (DEPLOY / name).read_text()
        exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
        assert " serve " in exec_start and "--log-format json" in exec_start
        for option in (
            "ProtectSystem=strict",
            "NoNewPrivileges=yes",
            "CapabilityBoundingSet=",
            "SystemCallFilter=@system-service",
            "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
            "UMask=0077",
            "LimitNOFILE=65536",
        ):
            assert f"\n{option}\n" in unit, (name, option)
    assert "\nUser=promoter\n" in (DEPLOY / "promoter.service").read_text()
    assert "\nUser=" not in (DEPLOY / "promoter-user.service").read_text()


def test_the_user_unit_lets_the_daemon_record_itself_for_the_persons_cli() -> None:
    unit = (DEPLOY / "promoter-user.service").read_text()
    assert "\nProtectHome=read-only\n" in unit
    assert "\nReadWritePaths=-%h/.config/promoter\n" in unit  # daemon.json, 0700 folder
    assert "mkdir -p -m 700 ~/.config/promoter" in unit
