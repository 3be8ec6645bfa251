"""A training run: model_fn (model, loss, optimizer, summaries), the Estimator's train / eval
(training), checkpoints, hooks, preemption, run directories, the one line of a failed run."""
