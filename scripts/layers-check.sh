#!/usr/bin/env bash
# The library's layers include only layers below them: a file of src/L may
# include headers of src/L itself and of the layers before L in the order
# below, never of one after it (a lower layer that reached up would tie
# what is meant to stand alone to what is built on it: the store knows
# nothing of the cluster that links stores). Run by ctest in every build.
# Usage: layers-check.sh SRCDIR
set -euo pipefail
src=${1:?usage: layers-check.sh SRCDIR}/src
# lowest first; the umbrella header shoal_impl.h is base's
order=(base fiber shm ring wire net store rpc tasks cluster)
rank() {
	local i
	for i in "${!order[@]}"; do
		[ "${order[$i]}" = "$1" ] && { echo "$i"; return; }
	done
	echo -1
}
bad=0
for dir in "$src"/*/; do
	layer=$(basename "$dir")
	r=$(rank "$layer")
	if [ "$r" -lt 0 ]; then
		echo "layers-check: src/$layer is in no layer of the order (scripts/layers-check.sh)"
		bad=1
		continue
	fi
	while IFS=: read -r file line inc; do
		to=${inc%%/*}
		t=$(rank "$to")
		if [ "$t" -gt "$r" ]; then
			echo "layers-check: ${file#"$src"/}:$line includes $inc: $layer is below $to"
			bad=1
		fi
	done < <(grep -Hno '^#include "[a-z_]*/[^"]*"' "$dir"*.[ch] 2>/dev/null |
		sed 's/#include "//; s/"$//')
done
[ "$bad" = 0 ] && echo "layers-check: ok (${order[*]})"
exit "$bad"
