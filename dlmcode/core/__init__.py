"""The vocabulary every layer speaks: the canvas and its steps, sampling, settings, errors,
one run's settings, a user's files, the tokenizer protocol, and how an entry point reports.

Imports nothing else of dlmcode. See docs/design.md for the layers above it.
"""
