"""The executor can copy its trainer's output to its own (a container's log) and keep the files."""

from __future__ import annotations

import os

from primus_runtime.executor.trainer import Trainer


def test_the_trainer_output_goes_to_the_files_and_to_the_console(tmp_path, capfd):
    script = "for i in 1 2 3; do echo out-$i; echo err-$i >&2; done; exit 3"
    trainer = Trainer.launch(["bash", "-c", script], dict(os.environ), str(tmp_path / "work"), str(tmp_path),
                             to_console=True)
    assert trainer.wait(30) == 3
    # Right when the trainer's exit is known, its last line is in the file (the failure reason reads it).
    assert (tmp_path / "stderr.log").read_text().splitlines()[-1] == "err-3"
    assert (tmp_path / "stdout.log").read_text() == "out-1\nout-2\nout-3\n"
    console = capfd.readouterr()
    assert console.out == "out-1\nout-2\nout-3\n" and console.err == "err-1\nerr-2\nerr-3\n"


def test_without_it_the_console_stays_quiet(tmp_path, capfd):
    trainer = Trainer.launch(["bash", "-c", "echo out; echo err >&2"], dict(os.environ), str(tmp_path / "w"),
                             str(tmp_path))
    assert trainer.wait(30) == 0
    assert (tmp_path / "stdout.log").read_text() == "out\n" and capfd.readouterr().out == ""
