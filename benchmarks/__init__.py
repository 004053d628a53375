"""Developer probes and measurements of dlmcode, kept out of the shipped package.

Run from the repository root, as their docs say: `python -m benchmarks.NAME --help`. Each
starts as every `python -m` entry point does (dlmcode/core/entry.py: one-line errors, exit
codes). They may import any part of dlmcode; nothing in dlmcode imports them. The product's
own benchmarks stay commands (`dlmcode bench`, `dlmcode speed`).
"""
