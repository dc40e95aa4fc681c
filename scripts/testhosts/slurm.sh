#!/usr/bin/env bash
# slurm.sh - private test hosts for launcher tests and benchmarks; nothing
# listens beyond 127.0.0.1.  A single-node Slurm cluster of this machine.
#
# Usage:
#   scripts/testhosts/slurm.sh start DIR   # prints one line: SLURM_CONF=DIR/slurm.conf
#   scripts/testhosts/slurm.sh stop DIR    # idempotent; exits 0 once all is gone
#
# start makes DIR and writes DIR/slurm.conf for an offline cluster of one node
# "localhost" (NodeAddr=127.0.0.1, CPUs=$(nproc)) with one default partition
# "debug" (OverSubscribe=FORCE:16, MaxTime=INFINITE), auth/none and cred/none
# (no munge), two free ports on 127.0.0.1, and all state, spool, log and pid
# files inside DIR (old state and spool of DIR are wiped: job ids restart at 1).
# It starts slurmctld and slurmd in their own session, waits until the node is
# idle (0.5 to 1.5 s; it gives up after 20 s, shows the logs' tail and stops what
# it started) and prints the SLURM_CONF line to export.  As root the daemons
# run as root, otherwise as the invoking user.  Several clusters in several
# DIRs can run at once.
#
# stop shuts the daemons down (scontrol shutdown, SIGTERM, SIGKILL) and kills
# the slurmstepds of this DIR's jobs with their processes, and the srun,
# sbatch and salloc of this cluster (SLURM_CONF=DIR/slurm.conf in their
# environment), which would hang once it is gone; another DIR's cluster is
# left alone.  It takes well under 2 s, also with jobs running.
#
# Using the cluster (SLURM_CONF=DIR/slurm.conf in the environment):
#   sbatch -n 4 -O -o DIR/%j.out --wrap 'srun true'
#     -O (--overcommit) is needed whenever a job has more tasks than the node
#        has CPUs: without it sbatch, srun and salloc refuse such a job ("More
#        processors requested than permitted", EnforcePartLimits=ALL; else it
#        would pend for ever).  The job then gets one CPU for all its tasks.
#        srun inside the job inherits it (SLURM_OVERCOMMIT); a bare
#        `srun -n 4 -O true` needs it too.
#     -o FILE, else the job's output goes to ./slurm-JOBID.out of the cwd.
#   No -p, -t, -N or --mem is needed.  Jobs share the CPUs
#   (OverSubscribe=FORCE:16), so several jobs run at once.
#   `scontrol show job ID` knows a job until 600 s after it ended (MinJobAge);
#   there is no accounting (no sacct).
#   Latency: srun and salloc get their allocation at once (srun -n 4 -O true:
#   ~0.3 s).  A batch job waits for the scheduler's next pass: that is ~3 s
#   after slurmctld started for the first job, then at most 1 s.
#   sbatch -W (--wait) polls the job's state 2 s after submitting, then every
#   ~10 s (a job of `srun sleep 1` returns after 10 s): in benchmarks poll
#   `scontrol show job ID` instead.
#
# Logs: DIR/slurmctld.log, DIR/slurmd.log (and DIR/*.out: the daemons' stderr).
set -euo pipefail

prog=${0##*/}
die() { printf '%s: %s\n' "$prog" "$*" >&2; exit 1; }
usage() { printf 'usage: %s start|stop DIR\n' "$prog" >&2; exit 2; }

[[ $# -eq 2 && -n $2 ]] || usage
action=$1
PATH=$PATH:/usr/sbin:/sbin   # the daemons, for users whose PATH lacks sbin


# shellcheck source=scripts/testhosts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# the daemons (slurmctld/slurmd run with -f DIR/slurm.conf) of this DIR
daemon_pids() {
  local pid c f
  for pid in $(pids_with cmdline "$conf"); do
    c=$(comm_of "$pid") || continue
    [[ $c == slurmctld || $c == slurmd ]] && printf '%s\n' "$pid"
  done
  for f in "$dir/slurmctld.pid" "$dir/slurmd.pid"; do
    [[ -r $f ]] || continue
    { read -r pid || [[ -n $pid ]]; } <"$f" 2>/dev/null || continue
    [[ $pid =~ ^[0-9]+$ ]] || continue
    # a pid file may be stale: only its daemon with this DIR's slurm.conf
    c=$(comm_of "$pid") || continue
    [[ $c == slurmctld || $c == slurmd ]] || continue
    grep -qzxF -- "$conf" "/proc/$pid/cmdline" 2>/dev/null && printf '%s\n' "$pid"
  done
  return 0
}
# slurmstepd of jobs of this DIR: they inherit slurmd's environment, where
# spawn puts SLURM_CONF and (should a process title overwrite the first
# entry) TESTHOSTS_SLURM_DIR
stepd_pids() {
  local pid
  for pid in $(pids_with environ "SLURM_CONF=$conf"; pids_with environ "TESTHOSTS_SLURM_DIR=$dir"); do
    [[ $(comm_of "$pid" || true) == slurmstepd ]] && printf '%s\n' "$pid"
  done
  return 0
}
# clients of this DIR's cluster (SLURM_CONF in their environment) that would
# hang once it is gone
client_pids() {
  local pid
  for pid in $(pids_with environ "SLURM_CONF=$conf"); do
    case $(comm_of "$pid" || true) in
      srun | sbatch | salloc) printf '%s\n' "$pid" ;;
    esac
  done
  return 0
}


# kill_all: signal the daemons, slurmstepds and clients of this DIR and all
# their descendants, once each: SIGKILL for slurmstepd and srun (they outlive a
# SIGTERM for long), SIGTERM for the others, then SIGKILL for what is left
# after 1.5 s; wait until all are gone (zombies count as gone).
collect() {
  local -a d s roots=()
  local pid
  mapfile -t d < <(daemon_pids)
  mapfile -t s < <(stepd_pids; client_pids)
  track "${d[@]}" "${s[@]}"
  for pid in "${!TRACK[@]}"; do alive "$pid" && roots+=("$pid"); done
  map_children
  # shellcheck disable=SC2046
  track $(descendants "${roots[@]}")
}
kill_all() {
  local pid t0 left
  now_ms; t0=$NOW
  collect
  while :; do
    left=()
    now_ms
    for pid in "${!TRACK[@]}"; do
      if ! alive "$pid"; then unset "TRACK[$pid]"; continue; fi
      left+=("$pid")
      if ((NOW - t0 >= 1500)); then
        kill -s KILL "$pid" 2>/dev/null || true
      elif [[ -z ${TERMED[$pid]-} ]]; then
        case $(comm_of "$pid" || true) in
          # they hold out against SIGTERM for seconds; their tasks get one
          slurmstepd | srun) kill -s KILL "$pid" 2>/dev/null || true ;;
          *) kill -s TERM "$pid" 2>/dev/null || true ;;
        esac
        TERMED[$pid]=1
      fi
    done
    ((${#left[@]})) || return 0
    if ((NOW - t0 >= 10000)); then
      printf '%s: still alive after SIGKILL: %s\n' "$prog" "${left[*]}" >&2
      return 1
    fi
    sleep 0.05
    collect   # new steps, children forked meanwhile
  done
}

stop_cluster() {
  local pid c
  for pid in $(daemon_pids); do
    c=$(comm_of "$pid") || continue
    if [[ $c == slurmctld ]]; then
      SLURM_CONF=$conf timeout 3 scontrol shutdown >/dev/null 2>&1 || true
      break
    fi
  done
  kill_all
}

write_conf() {   # write_conf CTLD_PORT SLURMD_PORT
  local user
  user=$(id -un)
  cat >"$conf.tmp" <<EOF
# Written by $prog: private single-node test cluster, offline, 127.0.0.1 only.
ClusterName=testhosts
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$1
SlurmdPort=$2
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/none
CredType=cred/none
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$dir/plugstack.conf
TmpFS=$dir/tmp
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MinJobAge=600
EnforcePartLimits=ALL
SchedulerParameters=batch_sched_delay=0
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=localhost NodeHostname=$(hostname) NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE OverSubscribe=FORCE:16 State=UP
EOF
  mv -f "$conf.tmp" "$conf"
}

log_tails() {   # the log file, or the daemon's stderr when it has no log
  local d f
  for d in slurmctld slurmd; do
    f=$dir/$d.log
    [[ -s $f ]] || f=$dir/$d.out
    [[ -s $f ]] || { printf -- '--- %s wrote no log\n' "$d"; continue; }
    printf -- '--- tail of %s\n' "$f"
    tail -n 20 "$f"
  done
}

start_cluster() {
  local attempt ctld slurmd ctld_port slurmd_port state t0 end
  if [[ -n $(daemon_pids) ]]; then
    die "a cluster of $dir is running; stop it first: $prog stop $dir"
  fi
  # leftovers of a cluster whose daemons died
  kill_all || die "cannot stop leftovers of $dir"
  rm -rf -- "$dir/state" "$dir/spool" "$dir/tmp"
  mkdir -p -- "$dir/state" "$dir/spool" "$dir/tmp"
  : >"$dir/plugstack.conf"
  now_ms; t0=$NOW
  for attempt in 1 2 3; do
    ctld_port=$(free_port)
    slurmd_port=$(free_port "$ctld_port")
    write_conf "$ctld_port" "$slurmd_port"
    rm -f -- "$dir"/slurmctld.{log,out,pid} "$dir"/slurmd.{log,out,pid}
    SLURM_CONF=$conf TESTHOSTS_SLURM_DIR=$dir spawn "$dir/slurmctld.out" slurmctld -D -i -f "$conf"
    ctld=$LAST_PID
    SLURM_CONF=$conf TESTHOSTS_SLURM_DIR=$dir spawn "$dir/slurmd.out" slurmd -D -N localhost -f "$conf"
    slurmd=$LAST_PID
    end=$((t0 + 20000))
    while :; do
      state=$(SLURM_CONF=$conf timeout 2 sinfo -h -o %t 2>/dev/null || true)
      if [[ $state == idle ]]; then
        printf 'SLURM_CONF=%s\n' "$conf"
        return 0
      fi
      if ! running "$ctld" || ! running "$slurmd"; then
        # a port taken between the check and the bind: retry with others
        if ((attempt < 3)) && grep -qs 'Address already in use' \
          "$dir"/slurmctld.{log,out} "$dir"/slurmd.{log,out}; then
          track "$ctld" "$slurmd"
          stop_cluster >/dev/null 2>&1 || true
          continue 2
        fi
        log_tails >&2
        track "$ctld" "$slurmd"
        stop_cluster || true
        die "slurm daemons of $dir died while starting (logs above)"
      fi
      now_ms
      if ((NOW >= end)); then
        log_tails >&2
        track "$ctld" "$slurmd"
        stop_cluster || true
        die "node of $dir not idle after 20 s (sinfo: '${state}'); logs above"
      fi
      sleep 0.05
    done
  done
}

case $action in
  start)
    dir=$(realpath -m -- "$2")
    check_dir "$dir"
    mkdir -p -- "$dir"
    conf=$dir/slurm.conf
    for c in slurmctld slurmd sinfo scontrol setsid ss; do
      command -v "$c" >/dev/null || die "$c is needed (Debian: slurmctld slurmd slurm-client)"
    done
    start_cluster
    ;;
  stop)
    dir=$(realpath -m -- "$2")
    check_dir "$dir"
    conf=$dir/slurm.conf
    stop_cluster
    ;;
  *) usage ;;
esac
