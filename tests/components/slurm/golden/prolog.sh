#!/bin/sh
# Slurm Prolog, see slurm.conf(5): slurmd runs it as root on each node of a job at allocation
# (PrologFlags=Alloc). SLURM_JOB_GPUS holds the node's GPU indices the job got (Prolog and Epilog only).
# It always exits 0: a failing prolog drains the node and holds the job, too much for a metrics label.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mapping_dir=/var/run/dcgm-hpc-jobs
[ -n "${SLURM_JOB_GPUS:-}" ] || exit 0
mkdir -p "$mapping_dir" || exit 0
for gpu in $(echo "$SLURM_JOB_GPUS" | tr , ' '); do
    # Replaced atomically: the exporter may read the file at any moment.
    printf '%s\n' "$SLURM_JOB_ID" > "$mapping_dir/.$gpu.new" && mv -f "$mapping_dir/.$gpu.new" "$mapping_dir/$gpu"
done
exit 0
