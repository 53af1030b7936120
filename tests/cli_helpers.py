"""Running ``cep-gpu`` in-process in tests, as a user would meet it."""

from __future__ import annotations

from cep_gpu.cli import main


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    """``(exit status, stdout, stderr)`` of ``cep-gpu ARGV`` (argparse's own checks exit: caught)."""
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as exc:
        rc = exc.code
    out = capsys.readouterr()
    return rc, out.out, out.err
