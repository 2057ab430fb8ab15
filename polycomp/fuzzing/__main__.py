"""``python -m polycomp.fuzzing``: run a differential fuzz campaign from the command line.

Place in the pipeline: the standalone front of ``fuzzing.campaign``. It prints a progress
line (cases run, outcomes), each finding as it is minimised, a summary at the end, and
writes the minimised findings to ``--out`` (one Markdown file each plus findings.md).
Exit status 1 when anything was found.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

from . import campaign


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m polycomp.fuzzing",
                                     description="differential fuzzing of polycomp against "
                                                 "gcc -O0 (C loop nests) and a TC interpreter")
    parser.add_argument("--minutes", type=float, default=None,
                        help="run for this long (default: $POLYCOMP_FUZZ_MINUTES or 5)")
    parser.add_argument("--cases", type=int, default=None, help="stop after this many cases")
    parser.add_argument("--seed", type=int, default=None, help="campaign seed (default random)")
    parser.add_argument("--out", default="fuzz-findings", help="directory for the findings")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    parser.add_argument("--minimize", type=float, default=120.0,
                        help="seconds to minimise each new kind of finding (0: off)")
    parser.add_argument("--tc-share", type=float, default=0.3, help="fraction of TC cases")
    parser.add_argument("--replay", metavar="SEED:N", help="run one case of a campaign again")
    args = parser.parse_args(argv)
    os.environ.setdefault("POLYCOMP_CACHE_DIR", tempfile.mkdtemp(prefix="polycomp-fuzz-cache-"))
    if args.replay:
        case, outcome = campaign.replay(args.replay, args.timeout)
        print(campaign.report(case, outcome, f"(replay {args.replay})"))
        return 1 if outcome.finding else 0
    minutes = args.minutes
    if minutes is None and args.cases is None:
        minutes = float(os.environ.get("POLYCOMP_FUZZ_MINUTES", "5"))
    summary = campaign.run(minutes=minutes, cases=args.cases, seed=args.seed, out_dir=args.out,
                           timeout=args.timeout, minimize_s=args.minimize, tc_share=args.tc_share,
                           progress=campaign.stderr_progress)
    print(f"\nseed {summary.seed}: {summary.line()}; "  # type: ignore[attr-defined]
          f"{len(summary.findings)} findings" + (f" in {args.out}/" if summary.findings else ""))
    return 1 if summary.findings else 0


if __name__ == "__main__":
    sys.exit(main())
