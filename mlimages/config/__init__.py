"""Settings around a run.

    value_checks.py  the builders of flags.CHECKS: what is wrong with --name=value, in
                     one line
    run_settings.py  the run's <model_dir>/flags.txt: written, read, compared on resume
    startup.py       what every entry point does before TensorFlow is imported (quiet
                     logs, supported versions)
    gpu_env.py       NVIDIA's GPU environment settings TensorFlow still reads
    interpreter.py   which Python runs the programs (standard library only: an entry point
                     runs it by path before any import)"""
