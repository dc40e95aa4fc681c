#!/usr/bin/env bash
# Installs the Debian packages shoal needs, only when some are missing: a
# fast no-op otherwise (one dpkg-query). `apt-get update` runs at most once,
# and only when an install is needed.
#   scripts/deps.sh          build and test dependencies (ipyparallel: the drop-in's
#                            test runs the same program against it)
#   scripts/deps.sh bench    plus what `make run` compares against (Go, mpi4py)
#   scripts/deps.sh cross    plus the aarch64 cross compiler and qemu-user
set -euo pipefail

pkgs=(gcc make cmake pkg-config libc6-dev clang-format libmsgpack-dev libcjson-dev libssl-dev openssl libdlpack-dev libseccomp-dev libcurl4-openssl-dev etcd-server python3
	libboost-context-dev python3-dev python3-pytest python3-numpy python3-torch python3-cloudpickle
	# the same ipyparallel program runs against the real one in the tests (shoal.compat)
	python3-ipyparallel
	# the peers of shoal's tasklets in `shoal bench py-fibers` (its test runs them too)
	python3-greenlet python3-gevent
	# an isolated extension's venv (shoal.isolate venv_root_path), pip installing local packages offline
	python3-venv python3-pip python3-setuptools
	openmpi-bin openssh-client openssh-server slurmd slurmctld slurm-client)
case "${1:-}" in
bench) pkgs+=(golang-go python3-mpi4py) ;;
cross) pkgs+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user) ;;
fuzz) pkgs+=(clang libclang-rt-dev) ;;
"") ;;
*)
	echo "deps: unknown group '$1' (expected bench, cross or fuzz)" >&2
	exit 2
	;;
esac

missing=()
for p in "${pkgs[@]}"; do
	st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
	[ "$st" = "install ok installed" ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps: installing ${missing[*]}" >&2
sudo=
if [ "$(id -u)" != 0 ]; then
	command -v sudo >/dev/null || {
		echo "deps: need root (or sudo) to install: ${missing[*]}" >&2
		exit 1
	}
	sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
if ! $sudo apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
	$sudo apt-get update -qq
	$sudo apt-get install -y --no-install-recommends "${missing[@]}"
fi
