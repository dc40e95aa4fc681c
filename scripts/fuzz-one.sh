#!/usr/bin/env bash
# One fuzz target for `make test-fuzz` / `make fuzz` (the Makefile runs one per
# core with xargs): from its committed seeds in fuzz/corpus/NAME/, which it only
# reads, for SECONDS, new inputs into NEW/NAME (emptied first when FRESH is
# yes); its log and any crashing input go to RUNS/. It fails when the target
# crashes, or when its log does not show the seeds loaded (a target never
# starts from nothing); otherwise prints one line of what it did.
#   scripts/fuzz-one.sh SECONDS RUNS NEW FRESH build/fuzz/fuzz/fuzz_NAME
set -uo pipefail
secs=$1 runs=$2 new_root=$3 fresh=$4 f=$5
n=${f##*/}
log=$runs/$n.log
new=$new_root/$n
[ -d "fuzz/corpus/$n" ] || { echo "fuzz: $n has no fuzz/corpus/$n"; exit 1; }
[ "$fresh" = yes ] && rm -rf "$new"
mkdir -p "$new"
if ! SHOAL_LOG=error "$f" -max_total_time="$secs" -artifact_prefix="$runs/$n-" \
	"$new" "fuzz/corpus/$n" >"$log" 2>&1; then
	tail -40 "$log"
	echo "fuzz: $f FAILED (log: $log)"
	exit 1
fi
seeds=$(grep -o 'seed corpus: files: [0-9]*' "$log" | grep -o '[0-9]*$')
[ "${seeds:-0}" -gt 0 ] || { echo "fuzz: $n did not load its seeds (log: $log)"; exit 1; }
echo "fuzz: $n: $(grep -o 'Done [0-9]* runs' "$log") from $seeds corpus inputs," \
	"$(grep -o 'cov: [0-9]*' "$log" | tail -1), no crash"
