"""Where a setting comes from: flags > ``PROMOTER_*`` variables > the TOML file > defaults.

Each case builds settings with ``load_settings`` from a file written for it and variables
set for it: which source wins, what is merged and what replaces whole, and the exact
``config_error`` a file that cannot be read or a value that does not validate gives.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from promoter.config import RepositoryConfig, Settings, load_settings, parse_repo_flags
from promoter.errors import ConfigError

FILE = """\
port = 9000
host = "192.0.2.1"
allowed_hosts = ["from-file"]

[repositories.app]
path = "/srv/app"
check_command = ["make", "test"]

[repositories.docs]
path = "/srv/docs"

[webhooks.ci]
url = "http://ci.example/hook"
secret = "0123456789abcdef"
"""


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("PORT", "HOST", "REPOSITORIES", "WEBHOOKS", "ALLOWED_HOSTS", "STATE_DIR"):
        monkeypatch.delenv(f"PROMOTER_{name}", raising=False)
    path = tmp_path / "promoter.toml"
    path.write_text(FILE)
    return path


def test_the_file_overrides_the_defaults(config: Path) -> None:
    settings = load_settings(config)
    assert (settings.port, settings.host, settings.allowed_hosts) == (
        9000,
        "192.0.2.1",
        ["from-file"],
    )
    assert settings.repositories["app"].check_command == ["make", "test"]
    assert settings.webhooks["ci"].url == "http://ci.example/hook"
    assert settings.lock_timeout == Settings().lock_timeout == 30.0


def test_a_variable_overrides_the_file_and_a_flag_the_variable(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROMOTER_PORT", "9100")
    monkeypatch.setenv("promoter_host", "::1")  # variable names are matched in any case
    assert (load_settings(config).port, load_settings(config).host) == (9100, "::1")
    assert load_settings(config, port=9200).port == 9200
    assert load_settings(config, port=None, host=None).port == 9100  # a flag not given


def test_a_variable_replaces_the_files_table_whole(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROMOTER_REPOSITORIES", '{"app": {"path": "/env/app"}}')
    monkeypatch.setenv("PROMOTER_ALLOWED_HOSTS", '["from-env"]')
    settings = load_settings(config)
    assert list(settings.repositories) == ["app"]  # not merged with the file's docs
    assert settings.repositories["app"] == RepositoryConfig(path=Path("/env/app"))
    assert settings.allowed_hosts == ["from-env"]
    monkeypatch.setenv("PROMOTER_WEBHOOKS", '{"ci": {"url": "http://other.example/"}}')
    with pytest.raises(ConfigError, match=r"webhooks\.ci\.secret\n  Field required"):
        load_settings(config)  # the file's secret is not merged in


def test_repo_flags_add_to_the_files_repositories_one_name_at_a_time(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flags = parse_repo_flags(["app=/flag/app", "extra=/flag/extra"])
    settings = load_settings(config, repositories=flags)
    assert sorted(settings.repositories) == ["app", "docs", "extra"]
    assert settings.repositories["app"] == RepositoryConfig(path=Path("/flag/app"))
    plain = load_settings(config, repositories={"app": {"path": "/flag/app"}})
    assert plain.repositories["app"].check_command is None  # replaced whole, not merged
    monkeypatch.setenv("PROMOTER_REPOSITORIES", '{"env": {"path": "/env"}}')
    assert sorted(load_settings(config, repositories=flags).repositories) == ["app", "env", "extra"]


def test_no_file_named_reads_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "promoter.toml").write_text("port = 1\n")
    monkeypatch.delenv("PROMOTER_PORT", raising=False)
    assert load_settings(None).port == load_settings().port == 8787


@pytest.mark.parametrize(
    ("name", "content", "detail"),
    [
        ("missing.toml", None, "[Errno 2] No such file or directory: '{path}'"),
        (".", None, "[Errno 21] Is a directory: '{path}'"),
        ("bad.toml", "port = = 1\n", "Invalid value (at line 1, column 8)"),
    ],
)
def test_a_file_that_cannot_be_read_is_a_config_error(
    tmp_path: Path, name: str, content: str | None, detail: str
) -> None:
    path = tmp_path / name if name != "." else tmp_path
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert caught.value.detail == f"cannot read config file {path}: " + detail.format(path=path)
    assert (caught.value.code, caught.value.exit_code) == ("config_error", 78)


@pytest.mark.parametrize(
    ("toml", "variables", "flags", "first_lines"),
    [
        ("portt = 1\n", {}, {}, "portt\n  Extra inputs are not permitted [type=extra_forbidden"),
        ("port = 70000\n", {}, {}, "port\n  Input should be less than or equal to 65535"),
        ("[repositories.a]\npath = '/a'\nx = 1\n", {}, {}, "repositories.a.x\n  Extra inputs"),
        ("", {"PROMOTER_PORT": "x"}, {}, "port\n  Input should be a valid integer"),
        ("", {}, {"port": -1}, "port\n  Input should be greater than or equal to 0"),
    ],
)
def test_a_value_that_does_not_validate_is_a_config_error(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    toml: str,
    variables: dict[str, str],
    flags: dict[str, int],
    first_lines: str,
) -> None:
    monkeypatch.delenv("PROMOTER_PORT", raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    path = tmp_path / "promoter.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as caught:
        load_settings(path, **flags)
    assert caught.value.detail.startswith(
        "invalid settings: 1 validation error for Settings\n" + first_lines
    )


def test_a_source_above_hides_an_invalid_value_below(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "promoter.toml"
    path.write_text("port = 70000\n")
    monkeypatch.setenv("PROMOTER_PORT", "1")
    assert load_settings(path).port == 1
    monkeypatch.delenv("PROMOTER_PORT")
    assert load_settings(path, port=2).port == 2


def test_an_invalid_setting_names_the_key_and_no_web_page(tmp_path: Path) -> None:
    """The error of a setting that does not validate is the validator's own lines, without
    its link to a page on the web (an operator's daemon may have no network)."""
    path = tmp_path / "promoter.toml"
    path.write_text('outage_retry_seconds = "five"\n[repositories.a]\npath = "/a"\napprovel = 1\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert caught.value.detail == (
        "invalid settings: 2 validation errors for Settings\n"
        "repositories.a.approvel\n"
        "  Extra inputs are not permitted [type=extra_forbidden, input_value=1, input_type=int]\n"
        "outage_retry_seconds\n"
        "  Input should be a valid number, unable to parse string as a number "
        "[type=float_parsing, input_value='five', input_type=str]\n"
        f"unknown keys in {path}: repositories.a.approvel (did you mean "
        "repositories.a.approval?) (docs/operator/config.md)"
    )


def test_a_mistyped_key_in_the_file_is_told_the_key_it_may_mean(tmp_path: Path) -> None:
    """As a mistyped ``PROMOTER_*`` variable is: the file's typo names the closest key."""
    path = tmp_path / "promoter.toml"
    path.write_text('lock_timout = 3\n[repositories.a]\npath = "/a"\napprovel = "none"\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert caught.value.detail.endswith(
        f"\nunknown keys in {path}: lock_timout (did you mean lock_timeout?), "
        "repositories.a.approvel (did you mean repositories.a.approval?) "
        "(docs/operator/config.md)"
    )
