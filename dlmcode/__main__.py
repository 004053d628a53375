"""`python -m dlmcode` runs the command line."""

from .cli.commands import main

main()
