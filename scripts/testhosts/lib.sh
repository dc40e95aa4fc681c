# shellcheck shell=bash disable=SC2034
# lib.sh - what the test-host scripts (slurm.sh, sshd.sh) share: a DIR check and
# the process helpers their stops use. Sourced, never run; expects die() defined.

# Paths go unquoted into the daemons' config files: keep DIR plain.
check_dir() {
  [[ $1 =~ ^/[A-Za-z0-9._/+@:-]*$ ]] ||
    die "DIR must be made of letters, digits and . _ / + @ : - only: $1"
}

# ---- processes -----------------------------------------------------------
# read_stat PID: ST_STATE, ST_PPID, ST_START (start time) of PID; 1 if gone.
read_stat() {
  local line f
  { read -r line <"/proc/$1/stat"; } 2>/dev/null || return 1
  read -r -a f <<<"${line##*) }"
  ST_STATE=${f[0]} ST_PPID=${f[1]} ST_START=${f[19]}
}
running() { read_stat "$1" && [[ $ST_STATE != [ZX] ]]; }
comm_of() { local c; { read -r c <"/proc/$1/comm"; } 2>/dev/null && printf '%s' "$c"; }

# pids whose NUL-separated FILE (cmdline or environ) has an entry equal to $2
pids_with() {
  grep -lzxF -- "$2" /proc/[0-9]*/"$1" 2>/dev/null |
    sed -n 's|^/proc/\([0-9]*\)/.*|\1|p' || true
}

# ppid map for descendants
declare -A KIDS=()
map_children() {
  local d pid
  KIDS=()
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    read_stat "$pid" || continue
    KIDS[$ST_PPID]+=" $pid"
  done
}
descendants() {   # descendants PID... (after map_children)
  local -a todo=("$@")
  local p k
  while ((${#todo[@]})); do
    p=${todo[0]}; todo=("${todo[@]:1}")
    for k in ${KIDS[$p]-}; do printf '%s\n' "$k"; todo+=("$k"); done
  done
}

# Never signal this script or its ancestors.
declare -A SELF=()
p=$$
while [[ $p -gt 1 ]] && read_stat "$p"; do SELF[$p]=1; p=$ST_PPID; done
SELF[$BASHPID]=1

# ---- ports -----------------------------------------------------------------
# A random TCP port of 20000-32767 (below the ephemeral range) that no socket
# uses, other than those given.
free_port() {
  local p x i
  for ((i = 0; i < 500; i++)); do
    p=$((20000 + RANDOM % 12768))
    for x in "$@"; do [[ $p == "$x" ]] && continue 2; done
    [[ -z $(ss -Htan "sport = :$p") ]] && { printf '%s\n' "$p"; return 0; }
  done
  die "no free port found"
}

# Start a daemon in its own session, without the caller's file descriptors
# (a caller reading our stdout or holding a pipe must not wait for it).
spawn() {   # spawn OUTFILE CMD...
  local out=$1; shift
  (
    for fd in /proc/"$BASHPID"/fd/*; do
      fd=${fd##*/}
      if ((fd > 2)); then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
    exec setsid "$@" <"/dev/null" >"$out" 2>&1
  ) &
  LAST_PID=$!
}

# now_ms: milliseconds since the epoch in NOW (no fork)
now_ms() { local t=${EPOCHREALTIME//[!0-9]/}; NOW=$((10#$t / 1000)); }

# Processes a stop tracks, by pid and start time (a reused pid is not ours).
declare -A TRACK=() TERMED=()
track() {   # track PID...: remember pid and start time (pid reuse safe)
  local pid
  for pid in "$@"; do
    [[ -n ${SELF[$pid]-} || -n ${TRACK[$pid]-} ]] && continue
    read_stat "$pid" || continue
    [[ $ST_STATE == [ZX] ]] && continue
    TRACK[$pid]=$ST_START
  done
}
alive() { read_stat "$1" && [[ $ST_START == "${TRACK[$1]}" && $ST_STATE != [ZX] ]]; }
