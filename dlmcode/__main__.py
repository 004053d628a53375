"""`python -m dlmcode` runs the command line."""

from .cli import main

main()
