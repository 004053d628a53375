"""Jobs: the jobs that plan a fill or a generate (fill), one decode as a record and its run (job), the one place a
decode is wired from the run's settings (wiring) with the guard's side of it (guarding), and several jobs sharing
each model forward (batch). Above the models and the decoders, which never import each other; below every face
(cli, serve, bench), which all wire their decodes here.
"""
