"""Where ``promoter run`` looks for promoter's secrets to hide (TESTS E6), without bwrap.

Every directory named by the state directory, the token file (its directory and, for a
``credentials`` directory, the daemon's state directory above it; through a symlink,
the target's too), the signing-key variable, a Unix-socket URL and the per-user
configuration; and the refusal of what could not be hidden.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from promoter.errors import CredentialsVisible
from promoter.executor.hidden import check_hidden, secret_dirs, user_config_dir


def test_the_user_configuration_follows_xdg_and_defaults_to_dot_config() -> None:
    assert user_config_dir({"HOME": "/home/p"}) == Path("/home/p/.config/promoter")
    assert user_config_dir({"HOME": "/home/p", "XDG_CONFIG_HOME": "/x"}) == Path("/x/promoter")
    relative = {"HOME": "/home/p", "XDG_CONFIG_HOME": "rel"}  # ignored, as XDG says
    assert user_config_dir(relative) == Path("/home/p/.config/promoter")


def test_a_token_file_in_another_state_directory_names_that_directory(tmp_path: Path) -> None:
    token = tmp_path / "B" / "credentials" / "orchestrator.token"
    token.parent.mkdir(parents=True)
    token.write_text("t")
    env = {"HOME": str(tmp_path / "home")}
    found = secret_dirs(tmp_path / "A", token, "http://127.0.0.1:8787", env)
    assert tmp_path / "A" in found
    assert tmp_path / "B" / "credentials" in found
    assert tmp_path / "B" in found
    assert tmp_path / "home" / ".config" / "promoter" in found


def test_a_token_file_through_a_symlink_names_both_directories(tmp_path: Path) -> None:
    real = tmp_path / "real" / "credentials" / "orchestrator.token"
    real.parent.mkdir(parents=True)
    real.write_text("t")
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "token").symlink_to(real)
    found = secret_dirs(tmp_path / "A", tmp_path / "links" / "token", "http://h:1", {})
    assert {tmp_path / "links", tmp_path / "real" / "credentials", tmp_path / "real"} <= set(found)


@pytest.mark.parametrize(
    "url",
    ["http+unix://%2Fsrv%2Fpromoter%2Fd.sock/v1", "unix:/srv/promoter/d.sock"],
)
def test_a_unix_socket_url_names_the_sockets_directory(tmp_path: Path, url: str) -> None:
    assert Path("/srv/promoter") in secret_dirs(tmp_path, None, url, {})


def test_the_signing_key_directory_of_the_environment_is_named(tmp_path: Path) -> None:
    env = {"PROMOTER_SIGNING_KEY_DIR": "/srv/keys", "PROMOTER_STATE_DIR": "/srv/state"}
    found = secret_dirs(tmp_path, None, "http://h:1", env)
    assert Path("/srv/keys") in found and Path("/srv/state") in found


def test_what_cannot_be_hidden_is_refused(tmp_path: Path) -> None:
    bound = [tmp_path / "runs", tmp_path / "python"]
    check_hidden([tmp_path / "state"], [tmp_path / "state" / "t"], bound)  # fine
    for dirs, files in (
        ([Path("/")], []),  # the root cannot be hidden
        ([tmp_path / "runs" / "creds"], []),  # below what is bound back
        ([tmp_path / "python"], []),
        ([tmp_path / "state"], [tmp_path / "python" / "lib" / "token"]),
    ):
        with pytest.raises(CredentialsVisible) as refused:
            check_hidden(dirs, files, bound)
        assert refused.value.code == "credentials_visible"
