"""Settings around a run.

    choices.py       the values each choice flag may take (--resnet_size, --dtype, ...)
    flag_checks.py   the rules across train.py's flags, and the one check of a run's
                     settings (each flag's own check, then those rules)
    value_checks.py  the checks flags.py gives each flag (what is wrong with
                     --name=value, in one line), and the parsers of list-valued flags
    cluster_hosts.py the host lists of --worker_hosts and --ps_hosts, parsed and checked
    run_settings.py  the run's <model_dir>/flags.txt: written, read, compared on resume
    startup.py       what every entry point does before TensorFlow is imported (quiet
                     logs, supported versions)
    gpu_env.py       NVIDIA's GPU environment settings TensorFlow still reads
    cpu.py           the CPU's model and flags (/proc/cpuinfo), and what is chosen from
                     them: oneDNN, the input-gradient path, --dtype=auto
    interpreter.py   which Python runs the programs (standard library only: an entry point
                     runs it by path before any import)"""
