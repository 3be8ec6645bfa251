"""A training run.

    model_fn.py     the Estimator model_fn: ResNet, the loss, the schedule, Momentum,
                    summaries
    estimator.py    the Estimator of a run: values resolved for this process, its
                    session options and input functions
    training.py     training with tf.estimator: the roles, the log lines, the hooks
    evaluation.py   evaluation of a checkpoint, train_and_eval's and the evaluator's
    checkpoints.py  finding and checking checkpoints, the variables fine-tuning takes over
    hooks.py        session hooks: the log line, the failing step, the stop, restart loops,
                    the profiler trace of --profile_steps
    preemption.py   SIGTERM / SIGINT: the step in flight saved, no work lost
    run_dirs.py     the directories a run writes: checked, locked, leftovers removed
    failures.py     the one line of a run that stopped early, and what to do
    calibration.py  per-class thresholds (thresholds.txt)
    class_report.py an evaluation's per-class report (per_class-<step>.tsv), its PR
                    curves and AP histogram in TensorBoard
    lr_rule.py      the learning rate a run's kind and batch call for, start-up warnings
    run_plan.py     a run's plan without running it (tools/plan_run.py)"""
