"""Text and syntax: spans and canvas plans (spans), tree-sitter for eight languages (syntax),
the syntax oracle that syntax-guard asks (oracle), the completability guard (guard) and the
trivial-fill classifier (trivial). Above dlmcode.core; knows no model and no decoder.
"""
