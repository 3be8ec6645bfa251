"""Several devices and tasks: the cluster's sources (--worker_hosts, Slurm, TF_CONFIG) in
cluster_flags, roles and strategies in distribute, the GPUs a process sees in devices."""
