"""``voice-pipeline bench``: load-test a running server (its arguments and the run are
:mod:`voice_pipeline.bench.cli`; this only mounts them)."""

from __future__ import annotations

import argparse

from voice_pipeline.cli.common import Subparsers


def add_parser(sub: Subparsers) -> None:
    from voice_pipeline.bench.cli import add_parser as add_bench_parser

    p = add_bench_parser(sub)
    p.set_defaults(handler=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    from voice_pipeline.bench.cli import run as run_bench

    return run_bench(args)
