#!/bin/sh
# Slurm Epilog, see slurm.conf(5): slurmd runs it as root on every node of the job when the job ends; the
# node takes no new job until it exits. SLURM_JOB_GPUS and SLURM_JOB_ACCOUNT: see "PROLOG AND EPILOG SCRIPTS".
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mapping_dir=/var/run/dcgm-hpc-jobs
for gpu in $(echo "${SLURM_JOB_GPUS:-}" | tr , ' '); do
    # Only this job's file: never one a later job's prolog has written.
    [ "$(cat "$mapping_dir/$gpu" 2>/dev/null)" = "$SLURM_JOB_ID" ] && rm -f "$mapping_dir/$gpu"
done

# Team accounts are DNS labels; anything else names no share (root's jobs, for one, have none).
team=${SLURM_JOB_ACCOUNT:-}
case $team in ''|.*|*/*) exit 0 ;; esac
started=$(mktemp) || exit 0
export team started mover=/usr/local/lib/gpucluster/checkpoint_tiering.py hot_root=/mnt/ckpt-hot cold_root=/mnt/ckpt-cold
setsid -f timeout --kill-after=60 7800 sh -c '
rm -f "$started"
for share in "$hot_root"/*/"$team"; do
    [ -d "$share" ] || continue
    root=${share%/*}
    echo "$(date -Is) job $SLURM_JOB_ID ($team) ended: moving checkpoints on $root"
    python3 "$mover" --hot "$root" --cold "$cold_root" --keep 3 --archive-after-days 7 --max-checkpoint-gib 2048 --max-run-gib 8192 --deadline-s 7200
    [ $? -ne 75 ] || echo "$(date -Is) job $SLURM_JOB_ID: $root/.gpucluster/checkpoint-mover.lock is held by another mover"
done' >>/var/log/slurm/checkpoint-mover.log 2>&1 </dev/null
# slurmd kills this script's process group when it exits: return only once the mover runs in its own.
tries=0
while [ -e "$started" ] && [ $tries -lt 100 ]; do sleep 0.1; tries=$((tries + 1)); done
if [ -e "$started" ]; then
    rm -f "$started"
    echo "$(date -Is) job $SLURM_JOB_ID ($team): the mover did not start within 10 s" >>/var/log/slurm/checkpoint-mover.log
fi
exit 0
