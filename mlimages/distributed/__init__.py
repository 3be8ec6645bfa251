"""Several devices and tasks: the cluster's sources (--worker_hosts, Slurm, TF_CONFIG) in
cluster_flags, roles and strategies in distribute, the GPUs a process sees in devices,
whether the other tasks still answer (the bound on a lost peer) in peers, a ps task's end
in ps_server."""
