"""Jobs: one fill or generate, a model, a decoder and a plan put together and run (fill), and
several jobs sharing each model forward (batch). Above the models and the decoders, which
never import each other; below every face (cli, serve, bench).
"""
