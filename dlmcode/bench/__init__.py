"""Benchmarks: task suites, the sandbox that runs their tests, metrics, the runner and reports.

suites (tasks) -> runner (one Sample per task, decoder setting and seed) -> metrics (Tally)
-> report (JSONL, summary JSON/CSV, Pareto plot); live draws the Sample stream on stderr.
"""
