#!/usr/bin/env bash
# A newcomer's first hour, repeated by `make test`: install shoal into a
# scratch prefix as README.md says, then, with only the environment the
# README documents (PATH and PKG_CONFIG_PATH for the prefix):
#  - compile every C block of README.md and docs/*.md against the install
#    (pkg-config), and run those that are programs;
#  - build each example of examples/ with the compile lines README.md gives,
#    and run them against a real daemon, controller and engines;
#  - run every program's --help and --version;
#  - run each shell walkthrough of README.md (the fenced blocks after an
#    `<!-- walkthrough: NAME -->` line) as it is written.
# Any failure, or any difference from what the docs say, fails the run.
set -euo pipefail
build=${1:?usage: newcomer.sh BUILD_DIR}
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
	echo "newcomer: $*" >&2
	exit 1
}

cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
prefix=$tmp/prefix
libdir=$(ls -d "$prefix"/lib*/pkgconfig | head -1)
# The documented environment, and nothing of the build tree.
export PATH="$prefix/bin:/usr/sbin:/usr/bin:/sbin:/bin"
export PKG_CONFIG_PATH=$libdir
unset LD_LIBRARY_PATH SHOAL_EXT_RUNNER SHOAL_ENGINE SHOAL_SOCKET SHOAL_SECRET SHOAL_SECRET_FILE
export XDG_RUNTIME_DIR=$tmp/run
mkdir -m 0700 "$XDG_RUNTIME_DIR"
CC=${CC:-cc}
CFLAGS="-std=c11 -Wall -Wextra -Werror"

# ---- the docs' C blocks ----------------------------------------------------
mkdir "$tmp/blocks"
python3 - "$tmp/blocks" "$src/README.md" "$src"/docs/*.md <<'PY'
import re, sys, os
out = sys.argv[1]
n = 0
for path in sys.argv[2:]:
    text = open(path).read()
    for i, m in enumerate(re.finditer(r"^```c\n(.*?)^```", text, re.S | re.M)):
        n += 1
        name = "%s-%d.c" % (os.path.basename(path).replace(".md", ""), i + 1)
        open(os.path.join(out, name), "w").write(m.group(1))
print("newcomer: %d C blocks in the docs" % n)
PY
for c in "$tmp"/blocks/*.c; do
	[ -e "$c" ] || continue
	if grep -q 'shoal_ext_init' "$c"; then
		$CC $CFLAGS -shared -fPIC "$c" -o "${c%.c}.so" $(pkg-config --cflags shoal) ||
			fail "a C block of the docs does not build as an extension: $(basename "$c")"
	elif grep -q 'int main' "$c"; then
		$CC $CFLAGS "$c" -o "${c%.c}" $(pkg-config --cflags --libs shoal) ||
			fail "a C block of the docs does not build: $(basename "$c")"
		"${c%.c}" >"${c%.c}.out" || fail "a C block of the docs fails when run: $(basename "$c")"
	else
		$CC $CFLAGS -c "$c" -o "${c%.c}.o" $(pkg-config --cflags shoal) ||
			fail "a C block of the docs does not compile: $(basename "$c")"
	fi
done

# ---- the docs' Python blocks, against the installed package -----------------
pydir=$(ls -d "$prefix"/lib/python3*/dist-packages 2>/dev/null | head -1)
if [ -n "$pydir" ] && /usr/bin/python3 -c "import numpy" 2>/dev/null; then
	python3 - "$tmp/blocks" "$src/README.md" "$src"/docs/*.md <<'PY'
import re, sys, os
out = sys.argv[1]
for path in sys.argv[2:]:
    text = open(path).read()
    for i, m in enumerate(re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M)):
        name = "%s-%d.py" % (os.path.basename(path).replace(".md", ""), i + 1)
        open(os.path.join(out, name), "w").write(m.group(1))
PY
	echo "newcomer: $(ls "$tmp"/blocks/*.py 2>/dev/null | wc -l) Python blocks in the docs"
	for p in "$tmp"/blocks/*.py; do
		[ -e "$p" ] || continue
		(cd "$tmp" && PYTHONPATH=$pydir /usr/bin/python3 "$p" >"${p%.py}.out" 2>&1) ||
			fail "a Python block of the docs fails: $(basename "$p"): $(tail -3 "${p%.py}.out")"
	done
fi

# ---- the examples, built as README.md says ---------------------------------
ex=$tmp/examples
mkdir "$ex"
cp "$src"/examples/*.c "$ex/"
cd "$ex"
for p in store_tensor ext_host farm_client; do
	$CC $CFLAGS $p.c -o $p $(pkg-config --cflags --libs shoal) || fail "examples/$p.c does not build"
done
for m in ext_greet farm_funcs; do
	$CC $CFLAGS -shared -fPIC $m.c -o $m.so $(pkg-config --cflags shoal) ||
		fail "examples/$m.c does not build"
done
# The static library, through its own pkg-config file.
$CC $CFLAGS store_tensor.c -o store_tensor_static $(pkg-config --cflags --libs shoal-static) ||
	fail "examples/store_tensor.c does not link statically"
ldd store_tensor_static | grep -q libshoal && fail "shoal-static.pc linked libshoal.so"

shoald --size 256M >"$tmp/shoald.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do shoal stat >/dev/null 2>&1 && break; sleep 0.1; done
shoal stat >/dev/null || fail "shoald did not start: $(cat "$tmp/shoald.log")"
out=$(./store_tensor) || fail "store_tensor failed"
[ "$out" = "example-weights: F32 [2, 3]: 0 0.5 1 1.5 2 2.5" ] || fail "store_tensor printed: $out"
./store_tensor_static >/dev/null || fail "store_tensor (static) failed"
out=$(./ext_host ./ext_greet.so) || fail "ext_host failed: $out"
[ "$(echo "$out" | head -1)" = "hello shoal, hello shoal" ] || fail "ext_host printed: $out"
echo "$out" | grep -q "greet(7): SHOAL_EINVAL.*greet takes \[name, times\]" ||
	fail "ext_host's failing call printed: $out"
ctl=$XDG_RUNTIME_DIR/ctl.sock
shoal controller --socket "$ctl" >"$tmp/ctl.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -S "$ctl" ] && break; sleep 0.1; done
for _ in 1 2; do
	shoal-engine --socket "$ctl" --so ./farm_funcs.so >>"$tmp/engines.log" 2>&1 &
	pids+=($!)
done
out=$(./farm_client "$ctl") || fail "farm_client failed: $out"
[ "$out" = "sum of squares 1..1000: 333833500" ] || fail "farm_client printed: $out"
for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
wait 2>/dev/null || true
pids=()
cd "$tmp"

# ---- every program's --help and --version ---------------------------------
version=$(pkg-config --modversion shoal)
for prog in shoal shoald shoal-ext shoal-engine; do
	out=$("$prog" --help) || fail "$prog --help exits $?"
	[ -n "$out" ] || fail "$prog --help prints nothing"
	out=$("$prog" --version) || fail "$prog --version exits $?"
	echo "$out" | grep -q "$version" || fail "$prog --version prints '$out', not $version"
	rc=0
	"$prog" --no-such-option >/dev/null 2>"$tmp/err" || rc=$?
	[ $rc -eq 2 ] || fail "$prog --no-such-option exits $rc, not 2"
	grep -q -- "--help" "$tmp/err" || fail "$prog --no-such-option does not point to --help"
done
for cmd in $(shoal --help | awk '/^commands:/{on=1; next} on && /^  [a-z]/{print $1}'); do
	out=$(shoal "$cmd" --help) || fail "shoal $cmd --help exits $?"
	[ -n "$out" ] || fail "shoal $cmd --help prints nothing"
done

# ---- the README's walkthroughs, as written --------------------------------
python3 - "$tmp" "$src/README.md" <<'PY'
import re, sys
tmp, readme = sys.argv[1], sys.argv[2]
text = open(readme).read()
found = re.findall(r"<!-- walkthrough: ([a-z-]+) -->\n```sh\n(.*?)^```", text, re.S | re.M)
if not found:
    sys.exit("newcomer: README.md has no walkthrough")
for name, body in found:
    open("%s/walk-%s.sh" % (tmp, name), "w").write(body)
print("newcomer: walkthroughs: " + ", ".join(n for n, _ in found))
PY
# What the walkthroughs start from: a safetensors file as the reference
# writer lays it out (a compact header, metadata first, tensors in the
# order of their data, padded with spaces to 8 bytes).
python3 - "$tmp/model.safetensors" <<'PY'
import json, struct, sys
tensors, data = {"__metadata__": {"format": "pt"}}, b""
for name, shape in (("embed.weight", [4, 8]), ("head.bias", [8])):
    n = 1
    for d in shape:
        n *= d
    raw = struct.pack("<%df" % n, *[i / 7 for i in range(n)])
    tensors[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
    data += raw
h = json.dumps(tensors, separators=(",", ":")).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + data)
PY
# The installed package where python3 finds it, as the README says for a prefix of
# one's own (the Python walkthrough's engines and client import it).
[ -n "$pydir" ] && export PYTHONPATH=$pydir
for w in "$tmp"/walk-*.sh; do
	name=$(basename "$w" .sh)
	mkdir "$tmp/$name"
	cp "$tmp/model.safetensors" "$tmp/$name/"
	cp -r "$ex" "$tmp/$name/examples"
	# Each in its own session, whose daemons end with it.
	(cd "$tmp/$name" && exec setsid bash -euo pipefail "$w" >"$tmp/$name.log" 2>&1) &
	wpid=$!
	rc=0
	wait $wpid || rc=$?
	pkill -KILL -s $wpid 2>/dev/null || true
	if [ $rc -ne 0 ]; then
		cat "$tmp/$name.log" >&2
		fail "README walkthrough '${name#walk-}' failed (exit $rc)"
	fi
done
echo "newcomer: docs' C blocks, examples, --help/--version and walkthroughs ok"
