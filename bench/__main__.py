"""`python -m bench [--quick] [--runs N]`: measures, prints the table, writes results.json and the README table."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from rich.console import Console

from bench import messages, replication, report, runner

HERE = Path(__file__).resolve().parent
TABLE_WIDTH = 120


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer and shorter runs (under 2 minutes)")
    parser.add_argument("--runs", type=int, help="override the number of runs (each figure is their median)")
    parser.add_argument("--no-spark", action="store_true", help="skip bench/spark.py (fragments_io vs spark.read.json)")
    args = parser.parse_args()
    settings = runner.QUICK if args.quick else runner.FULL
    if args.runs is not None:
        if args.runs < 1:
            parser.error(f"--runs {args.runs} must be at least 1")
        settings = dataclasses.replace(settings, runs=args.runs)

    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, TABLE_WIDTH)  # piped or captured: don't wrap the table
    console.log(
        f"bench ({settings.name}): {settings.runs} runs of {settings.append_mib} MiB per throughput figure "
        f"and {settings.small_appends} small appends"
    )
    figures = runner.run(settings, log=console.log)
    figures |= messages.run(messages.settings_for(settings), log=console.log)  # bench/messages.py
    figures |= replication.run(settings, log=console.log)  # R=3 / R=1 / raw fan-out (bench/replication.py)
    rows = report.rows_of(figures)
    env = report.environment()
    settings_json = dataclasses.asdict(settings)
    report.print_table(rows, f"gazette-py bench ({settings.name}, median of {settings.runs} runs)", console)
    report.write_json(HERE / "results.json", report.results_json(rows, env, settings_json))
    report.update_readme(HERE / "README.md", rows, env, settings_json)
    console.log(f"wrote {HERE / 'results.json'} and the table in {HERE / 'README.md'}")
    if not args.no_spark:  # fragments_io's benchmark: its own table and bench/spark_results.json
        from bench import spark

        spark.main(["--quick"] if args.quick else [], console)


if __name__ == "__main__":
    main()
