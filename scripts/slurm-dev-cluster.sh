#!/usr/bin/env bash
# A Slurm cluster of N virtual nodes on this one host, for trying `milarun slurm` and for the
# tests: munged, slurmctld and one slurmd per node, all under one folder, nothing in /etc.
#
#   scripts/slurm-dev-cluster.sh up [NODES]     start (default 2 nodes); prints SLURM_CONF
#   scripts/slurm-dev-cluster.sh down           stop every daemon, remove the folder
#   scripts/slurm-dev-cluster.sh status         sinfo of the running cluster
#
# The folder is $MILARUN_SLURM_DEV (default ${TMPDIR:-/tmp}/milarun-slurm-dev). milarun finds
# its slurm.conf there when SLURM_CONF is unset and /etc/slurm has none; other Slurm commands
# need `export SLURM_CONF=<folder>/slurm.conf` (`up` prints it). Needs root (slurmd) and
# Debian's packages: apt-get install --no-install-recommends slurmctld slurmd slurm-client munge
set -euo pipefail

DIR="${MILARUN_SLURM_DEV:-${TMPDIR:-/tmp}/milarun-slurm-dev}"
ACTION="${1:-}"
NODES="${2:-2}"

say() { echo "slurm-dev-cluster: $*" >&2; }
die() { say "error: $*"; exit 1; }

check_owner() {  # root acts on pid files and removes the folder: only a folder of its own
    if [ -e "$DIR" ] && [ "$(stat -c %u "$DIR")" != "$(id -u)" ]; then
        die "$DIR belongs to another user; set MILARUN_SLURM_DEV to a folder of yours"
    fi
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

kill_tree() {  # a process and everything it started
    local child
    for child in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$child"; done
    kill -KILL "$1" 2>/dev/null || true
}

cancel_jobs() {  # jobs still running when the cluster stops: Slurm ends them, with their steps
    local conf="$DIR/slurm.conf" jobs
    [ -f "$conf" ] && command -v squeue >/dev/null || return 0
    jobs="$(SLURM_CONF="$conf" squeue -h -o %i 2>/dev/null || true)"
    [ -n "$jobs" ] || return 0
    # shellcheck disable=SC2086
    SLURM_CONF="$conf" scancel $jobs 2>/dev/null || true
    for _ in $(seq 100); do
        [ -z "$(SLURM_CONF="$conf" squeue -h -o %i 2>/dev/null)" ] && break
        sleep 0.1
    done
}

down() {  # cancel the jobs, TERM every daemon at once, KILL what is left, remove the folder
    [ -d "$DIR" ] || { say "no cluster at $DIR"; return 0; }
    cancel_jobs
    local pids=() file pid
    for file in "$DIR"/run/slurmd-*.pid "$DIR"/run/slurmctld.pid "$DIR"/munge/munged.pid; do
        [ -f "$file" ] || continue
        pid="$(cat "$file" 2>/dev/null || true)"
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
            pids+=("$pid")
        fi
    done
    for _ in $(seq 50); do
        local alive=0
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [ "$alive" = 0 ] && break
        sleep 0.1
    done
    for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    # step daemons that outlived their slurmd (they work in its log folder), with their tasks
    for pid in $(pgrep -x slurmstepd 2>/dev/null); do
        case "$(readlink "/proc/$pid/cwd" 2>/dev/null)" in
            "$DIR"/*) kill_tree "$pid" ;;
        esac
    done
    rm -rf "$DIR"
    say "stopped; removed $DIR"
}

write_conf() {  # slurm.conf: N nodes on 127.0.0.1, each slurmd on its own port
    local host cpus mem ctld_port
    host="$(hostname)"
    cpus="$(nproc --all)"
    mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))
    ctld_port="$(free_port)"
    cat > "$DIR/slurm.conf" <<EOF
# written by scripts/slurm-dev-cluster.sh: $NODES virtual nodes on $host
ClusterName=milarun-dev
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=$(id -un)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=15
MinJobAge=300
EOF
    for i in $(seq 1 "$NODES"); do
        echo "NodeName=node$i NodeHostname=$host NodeAddr=127.0.0.1 Port=$(free_port)" \
             "CPUs=$cpus RealMemory=$mem State=UNKNOWN" >> "$DIR/slurm.conf"
    done
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP" \
         "OverSubscribe=FORCE:$NODES" >> "$DIR/slurm.conf"
}

up() {
    [ "$(id -u)" = 0 ] || die "needs root (slurmd runs jobs as their users)"
    for tool in munged slurmctld slurmd sinfo; do
        command -v "$tool" >/dev/null || die "$tool not found: apt-get install" \
            "--no-install-recommends slurmctld slurmd slurm-client munge"
    done
    [[ "$NODES" =~ ^[1-9][0-9]*$ ]] || die "NODES must be a positive number, not '$NODES'"
    [ -e "$DIR/slurm.conf" ] && die "a cluster is already set up at $DIR (run: $0 down)"
    mkdir -p "$DIR"/{munge,state,spool,run,log}
    chmod 0755 "$DIR" "$DIR/munge"  # munged refuses a socket folder others may write
    dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
    chmod 0400 "$DIR/munge/munge.key"
    munged --force --key-file "$DIR/munge/munge.key" --socket "$DIR/munge/munge.socket" \
        --pid-file "$DIR/munge/munged.pid" --log-file "$DIR/munge/munged.log" \
        --seed-file "$DIR/munge/munged.seed"
    write_conf
    export SLURM_CONF="$DIR/slurm.conf"
    slurmctld -f "$SLURM_CONF"
    for i in $(seq 1 "$NODES"); do
        mkdir -p "$DIR/spool/node$i"
        slurmd -f "$SLURM_CONF" -N "node$i"
    done
    for _ in $(seq 100); do  # idle in well under a second; 10 s at most
        idle="$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)"
        [ "$idle" -ge "$NODES" ] && break
        sleep 0.1
    done
    if [ "${idle:-0}" -lt "$NODES" ]; then
        sinfo -N >&2 || true
        tail -n 5 "$DIR"/log/*.log >&2 || true
        down
        die "the nodes did not reach idle in 10 s"
    fi
    say "$NODES node(s) idle; logs in $DIR/log"
    echo "export SLURM_CONF=$SLURM_CONF"
}

case "$ACTION" in
    up) check_owner; up ;;
    down) check_owner; down ;;
    status) SLURM_CONF="$DIR/slurm.conf" sinfo -N ;;
    *) echo "usage: $0 up [NODES] | down | status" >&2; exit 2 ;;
esac
