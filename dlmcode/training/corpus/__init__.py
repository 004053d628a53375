"""The built-in model's training corpus: permissively licensed Python from pinned PyPI
releases plus the stdlib, cleaned, deduplicated, held out by whole package, with notices.

  fetch.py     the pinned manifest (manifest.json) and pip downloads checked against it
  licenses.py  metadata + licence-file agreement; copyleft and ambiguous releases refused
  clean.py     vendored / generated / minified / unparsable files; secret and e-mail scrubbing
  dedup.py     exact and MinHash near-duplicate removal (eval files protected)
  notices.py   NOTICES.md
  build.py     the pipeline, its output folder and report
  tokens.py    the compact tokenized corpus that training (here or on an accelerator) reads
`python -m dlmcode.training.corpus --help` lists the commands.
"""
