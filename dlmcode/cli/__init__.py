"""The `dlmcode` command line: its commands (commands), the live canvas and summary on stderr
(view) and the CPU thread defaults it sets for its own process (cpu). The top of the house:
it imports every layer, and nothing imports it.
"""
