"""``tpu-lab --help`` and ``python -m tpu_lab`` document every command."""

import subprocess
import sys

import pytest

from tpu_lab.cli import _parser, main

COMMANDS = ["doctor", "tour", "kernel", "demo"]


def test_python_dash_m_is_the_tpu_lab_command():
    done = subprocess.run(
        [sys.executable, "-m", "tpu_lab", "--help"], capture_output=True, text=True, check=True
    )
    assert done.stdout.startswith("usage: tpu-lab [-h] [--version] COMMAND ...")
    for command in COMMANDS:
        assert f"    {command} " in done.stdout
    assert "%load_ext tpu_lab" in done.stdout


@pytest.mark.parametrize(
    "argv", [["doctor"], ["tour"], ["kernel", "install"], ["demo"], ["demo", "image"]]
)
def test_every_command_has_help(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: tpu-lab {' '.join(argv)}")


def test_every_subcommand_is_listed_in_the_help():
    listed = _parser().format_help()
    for command in COMMANDS:
        assert command in listed


def test_unknown_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["dance"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'dance'" in capsys.readouterr().err


def test_version(capsys):
    import tpu_lab

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == tpu_lab.__version__
