"""Training and its data: the built-in model (train, data), CoDiLA's assistant (train_assistant),
the corpus (corpus/) and the held-out evaluation of a trained model (evaluate).

Depends on the product (models, jobs, bench's held-out split) and never the other way: the
product runs without this folder's code; `dlmcode train` and `dlmcode train-assistant` import it
when they run.
"""
