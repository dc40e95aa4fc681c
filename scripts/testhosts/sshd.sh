#!/usr/bin/env bash
# sshd.sh - private test hosts for launcher tests and benchmarks; nothing
# listens beyond 127.0.0.1.  A private sshd of this machine, reached as hosts
# "node1" and "node2".
#
# Usage:
#   scripts/testhosts/sshd.sh start DIR   # prints one line: SSH_CONFIG=DIR/ssh_config
#   scripts/testhosts/sshd.sh stop DIR    # idempotent; exits 0 once all is gone
#
# start makes DIR, a host key, a client key (DIR/id_ed25519) and its
# DIR/authorized_keys, DIR/sshd_config (127.0.0.1 on a free port, public key
# login only, no PAM) and starts /usr/sbin/sshd in its own session (log:
# DIR/sshd.log).  It writes DIR/ssh_config with host aliases for the invoking
# user, with the client key, DIR/known_hosts (pre-filled: StrictHostKeyChecking
# yes works), BatchMode yes and LogLevel ERROR:
#   node1, node2  both 127.0.0.1 on the sshd's port
#   unreachable   127.0.0.1 on a port where nothing listens ("Connection
#                 refused" at once)
# It waits until `ssh -F DIR/ssh_config node1 true` works (gives up after 10 s
# with the log's tail and stops what it started) and prints the SSH_CONFIG
# line.  Use:  ssh -F "$SSH_CONFIG" node2 'echo ok'
# start takes about 1.3 s, most of it that one login: bash run by sshd reads
# the user's ~/.bashrc, so a slow ~/.bashrc slows every ssh command too.
#
# As root, sshd runs as root and lets only root in (/run/sshd is made if
# missing); as another user, sshd runs as that user, who must have a login
# shell, and only that user gets in.  Sessions have TESTHOSTS_SSHD_DIR=DIR in
# their environment: stop kills the sshd, its session processes and whatever
# they left running with that variable (daemons started over ssh too).  The
# remote environment is sshd's default one (no AcceptEnv); each ssh is one
# new connection (no ControlMaster).  Several DIRs can run at once.
set -euo pipefail

prog=${0##*/}
die() { printf '%s: %s\n' "$prog" "$*" >&2; exit 1; }
usage() { printf 'usage: %s start|stop DIR\n' "$prog" >&2; exit 2; }

[[ $# -eq 2 && -n $2 ]] || usage
action=$1
sshd_bin=/usr/sbin/sshd


# shellcheck source=scripts/testhosts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The listening sshd of this DIR, started as `sshd -f DIR/sshd_config ...`:
# its argv is "-f" "DIR/sshd_config" ..., until sshd overwrites argv and
# environ with its title "sshd: /usr/sbin/sshd -f DIR/sshd_config ...".
sshd_pids() {
  local pid
  for pid in $(pids_with cmdline "$conf"; pids_with_part cmdline " -f $conf "); do
    [[ $(comm_of "$pid" || true) == sshd ]] && printf '%s\n' "$pid"
  done
  # its pid file, if that pid is an sshd listening on this DIR's port
  local port
  port=$(sed -n 's/^Port \([0-9]*\)$/\1/p' "$conf" 2>/dev/null || true)
  if [[ -n $port && -r $dir/sshd.pid ]] && { read -r pid || [[ -n $pid ]]; } <"$dir/sshd.pid" &&
    [[ $pid =~ ^[0-9]+$ && $(comm_of "$pid" || true) == sshd ]] &&
    ss -Hltnp "sport = :$port" 2>/dev/null | grep -qF "pid=$pid,"; then
    printf '%s\n' "$pid"
  fi
  return 0
}
pids_with_part() {   # like pids_with, an entry containing $2
  grep -lzF -- "$2" /proc/[0-9]*/"$1" 2>/dev/null |
    sed -n 's|^/proc/\([0-9]*\)/.*|\1|p' || true
}


# kill_all: SIGTERM the sshd, its descendants (sessions) and the processes
# with this DIR's TESTHOSTS_SSHD_DIR, once each; SIGKILL what is left after
# 1.5 s; wait until all are gone (zombies count as gone).
collect() {
  local -a d e roots=()
  local pid
  mapfile -t d < <(sshd_pids)
  mapfile -t e < <(pids_with environ "TESTHOSTS_SSHD_DIR=$dir")
  track "${d[@]}" "${e[@]}"
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
        kill -s TERM "$pid" 2>/dev/null || true
        TERMED[$pid]=1
      fi
    done
    ((${#left[@]})) || return 0
    if ((NOW - t0 >= 10000)); then
      printf '%s: still alive after SIGKILL: %s\n' "$prog" "${left[*]}" >&2
      return 1
    fi
    sleep 0.05
    collect   # sessions forked meanwhile
  done
}

write_configs() {   # write_configs PORT UNREACHABLE_PORT
  local hostkey
  read -r -a hostkey <"$dir/ssh_host_ed25519_key.pub"
  printf '[127.0.0.1]:%s %s %s\n' "$1" "${hostkey[0]}" "${hostkey[1]}" \
    >"$dir/known_hosts"
  cat >"$conf" <<EOF
# Written by $prog: private test sshd, 127.0.0.1 only.
Port $1
ListenAddress 127.0.0.1
AddressFamily inet
HostKey $dir/ssh_host_ed25519_key
PidFile $dir/sshd.pid
AuthorizedKeysFile $dir/authorized_keys
AllowUsers $user
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
HostbasedAuthentication no
GSSAPIAuthentication no
PermitRootLogin prohibit-password
PermitUserEnvironment no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
PrintLastLog no
X11Forwarding no
AllowAgentForwarding no
GatewayPorts no
PermitTunnel no
# launcher benchmarks open many connections at once
MaxStartups 100:30:200
MaxSessions 100
LoginGraceTime 30
SetEnv TESTHOSTS_SSHD_DIR=$dir
Subsystem sftp internal-sftp
LogLevel INFO
EOF
  cat >"$dir/ssh_config" <<EOF
# Written by $prog: use with ssh -F $dir/ssh_config HOST
Host node1 node2
    HostName 127.0.0.1
    Port $1
Host unreachable
    HostName 127.0.0.1
    Port $2
Host node1 node2 unreachable
    User $user
    IdentityFile $dir/id_ed25519
    IdentitiesOnly yes
    IdentityAgent none
    PreferredAuthentications publickey
    PasswordAuthentication no
    KbdInteractiveAuthentication no
    GSSAPIAuthentication no
    UserKnownHostsFile $dir/known_hosts
    GlobalKnownHostsFile /dev/null
    StrictHostKeyChecking yes
    CheckHostIP no
    UpdateHostKeys no
    BatchMode yes
    LogLevel ERROR
    ConnectTimeout 5
    AddressFamily inet
    ControlMaster no
    ControlPath none
    ForwardAgent no
    ForwardX11 no
EOF
}

log_tail() {
  if [[ -s $dir/sshd.log ]]; then
    printf -- '--- tail of %s\n' "$dir/sshd.log"; tail -n 20 "$dir/sshd.log"
  fi
  if [[ -s $dir/sshd.out ]]; then
    printf -- '--- tail of %s\n' "$dir/sshd.out"; tail -n 20 "$dir/sshd.out"
  fi
  if [[ -s $dir/ssh.err ]]; then
    printf -- '--- last ssh node1 true said\n'; tail -n 5 "$dir/ssh.err"
  fi
}

start_sshd() {
  local attempt pid port unreach t0 end
  [[ -z $(sshd_pids) ]] || die "an sshd of $dir is running; stop it first: $prog stop $dir"
  kill_all || die "cannot stop leftovers of $dir"   # sessions of a dead sshd
  user=$(id -un)
  rm -f -- "$dir"/ssh_host_ed25519_key{,.pub} "$dir"/id_ed25519{,.pub}
  ssh-keygen -q -N '' -t ed25519 -C "testhost@$dir" -f "$dir/ssh_host_ed25519_key"
  ssh-keygen -q -N '' -t ed25519 -C "$user@testhosts" -f "$dir/id_ed25519"
  cp -- "$dir/id_ed25519.pub" "$dir/authorized_keys"
  if ((EUID == 0)); then
    # privilege separation of a root sshd needs this empty directory
    [[ -d /run/sshd ]] || install -d -m 0755 -o root -g root /run/sshd
  fi
  now_ms; t0=$NOW
  end=$((t0 + 10000))
  for attempt in 1 2 3; do
    port=$(free_port)
    unreach=$(free_port "$port")
    write_configs "$port" "$unreach"
    rm -f -- "$dir/sshd.log" "$dir/sshd.out" "$dir/sshd.pid" "$dir/ssh.err"
    spawn "$dir/sshd.out" "$sshd_bin" -f "$conf" -D -E "$dir/sshd.log"
    pid=$LAST_PID
    while :; do
      if ssh -F "$dir/ssh_config" node1 true </dev/null >/dev/null 2>"$dir/ssh.err"; then
        rm -f -- "$dir/ssh.err"
        printf 'SSH_CONFIG=%s\n' "$dir/ssh_config"
        return 0
      fi
      if ! running "$pid"; then
        # a port taken between the check and the bind: retry with others
        if ((attempt < 3)) && grep -qs 'Address already in use' \
          "$dir/sshd.log" "$dir/sshd.out"; then
          continue 2
        fi
        log_tail >&2
        kill_all || true
        die "sshd of $dir died while starting (log above)"
      fi
      now_ms
      if ((NOW >= end)); then
        log_tail >&2
        track "$pid"
        kill_all || true
        die "ssh to node1 of $dir failed for 10 s (log above)"
      fi
      sleep 0.05
    done
  done
}

case $action in
  start)
    dir=$(realpath -m -- "$2")
    check_dir "$dir"
    conf=$dir/sshd_config
    for c in "$sshd_bin" ssh ssh-keygen setsid ss; do
      command -v "$c" >/dev/null || die "$c is needed (Debian: openssh-server openssh-client)"
    done
    mkdir -p -- "$dir"
    start_sshd
    ;;
  stop)
    dir=$(realpath -m -- "$2")
    check_dir "$dir"
    conf=$dir/sshd_config
    kill_all
    ;;
  *) usage ;;
esac
