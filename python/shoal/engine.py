"""``python3 -m shoal.engine``: a Python task engine (shoal.tasks). It connects to a
controller (``--socket PATH`` on this host, ``--socket tcp://HOST:PORT`` or ``--connect
HOST:PORT`` on another, the secret in ``$SHOAL_SECRET_FILE`` or ``$SHOAL_SECRET``), runs the
Python functions of the tasks it is sent and sends their results back, until the
controller goes. It is ``shoal-engine`` with Python functions in place of a library: the
same options but ``--so`` (``--help`` lists them), the same exit codes."""
import sys

from . import _shoal


def main(argv: "list[str] | None" = None) -> int:
    """Runs the engine with these options (sys.argv's by default); its exit code.
    Blocks: until the controller goes."""
    args = list(sys.argv[1:] if argv is None else argv)
    from . import _engine
    _engine._note_store(args)
    return int(_shoal._run_engine(args))


if __name__ == "__main__":
    sys.exit(main())
