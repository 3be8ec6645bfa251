"""Several devices and tasks.

    cluster_flags.py  where this process's cluster comes from: TF_CONFIG, Slurm or
                      --worker_hosts
    distribute.py     TF_CONFIG roles, strategies and each task's plan
    devices.py        the GPUs a process uses and its sessions' options
    peers.py          whether the other tasks still answer: the bound on a lost peer
    ps_server.py      a ps task's life: serve the variables until the job is done
    local_cluster.py  tools/launch_local_cluster.py: its options, checks and task plan (each
                      task's CPUs)
    local_tasks.py    the local cluster's task processes and their supervision
    ports.py          free TCP ports for the tasks of a local cluster"""
