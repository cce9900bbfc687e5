"""``python -m xpushare.envcheck --cluster local``: the envcheck task without Invoke (same flags and exit status)."""

from __future__ import annotations

import argparse
import sys

from xpushare.envcheck.runner import MODES, envcheck_task
from xpushare.model.errors import XpushareError
from xpushare.transport.fanout import DEFAULT_FORKS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m xpushare.envcheck", description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", required=True)
    parser.add_argument("--limit", default=None)
    parser.add_argument("--forks", type=int, default=DEFAULT_FORKS)
    parser.add_argument("--mode", choices=MODES, default="ssh")
    parser.add_argument("--inventory", default=None)
    parser.add_argument("--run-id", default=None)
    parser.add_argument("--skip-gpu", action="store_true")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--root", default=".")
    args = parser.parse_args(argv)
    try:
        return int(envcheck_task(args.cluster, limit=args.limit, forks=args.forks, mode=args.mode,
                                 inventory_path=args.inventory, run_id=args.run_id, skip_gpu=args.skip_gpu,
                                 out=sys.stdout, overrides=args.overrides, root=args.root))
    except XpushareError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return int(exc.exit_status)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
