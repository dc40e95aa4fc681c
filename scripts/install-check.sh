#!/usr/bin/env bash
# Installs shoal from a build tree into a scratch prefix, then compiles and
# runs a small program against it through pkg-config (static and shared)
# and through CMake's find_package, as a user of the library would.
set -euo pipefail
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cat >"$tmp/hello.c" <<'C'
#include <shoal/shoal.h>
#include <stdio.h>
static void *child(void *arg) { return arg; }
int main(void)
{
	shoal_sched *s;
	shoal_fiber *f;
	void *r = NULL;
	if (shoal_sched_create(&s, NULL) || shoal_spawn(&f, child, (void *)42, NULL) ||
	    shoal_join(f, &r) || r != (void *)42 || shoal_sched_destroy(s))
		return 1;
	printf("shoal %s ok\n", SHOAL_VERSION_STRING);
	return 0;
}
C
libdir=$(ls -d "$tmp/prefix"/lib*/pkgconfig | head -1)
export PKG_CONFIG_PATH=$libdir
cc -std=c11 -Wall -Werror "$tmp/hello.c" -o "$tmp/hello-shared" $(pkg-config --cflags --libs shoal)
LD_LIBRARY_PATH=$(dirname "$libdir") "$tmp/hello-shared" >/dev/null
cc -std=c11 -Wall -Werror "$tmp/hello.c" -o "$tmp/hello-static" $(pkg-config --cflags shoal) \
	"$(dirname "$libdir")/libshoal.a" -lpthread
"$tmp/hello-static" >/dev/null
# Only the public API is exported from the shared library.
leaked=$(nm -D --defined-only "$(dirname "$libdir")/libshoal.so" | awk '{print $3}' | grep -v '^shoal_' || true)
if [ -n "$leaked" ]; then
	echo "install-check: non-public symbols exported: $leaked" >&2
	exit 1
fi
mkdir -p "$tmp/cm"
cat >"$tmp/cm/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.18)
project(hello C)
find_package(shoal REQUIRED)
add_executable(hello ../hello.c)
target_link_libraries(hello PRIVATE shoal::shoal_static)
CM
cmake -S "$tmp/cm" -B "$tmp/cm/b" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cm/b" >/dev/null
"$tmp/cm/b/hello" >/dev/null
echo "install-check: pkg-config (shared, static) and find_package ok"
