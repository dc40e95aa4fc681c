# shoal's two commands: `make run` (build, then the benchmark report) and
# `make test` (build and pass every test: normal, ASan+UBSan, TSan, aarch64
# under qemu, format, install). CMake and ctest do the work underneath; see README.md.
JOBS ?= 2
PREFIX ?= /usr/local
B := build

CMAKE_CFG = cmake -S . -B $(B)/$(1) -DCMAKE_BUILD_TYPE=$(2) $(3) >/dev/null
CTEST = ctest --test-dir $(B)/$(1) --output-on-failure -j$(JOBS) $(2)

.PHONY: all deps build run test test-release test-asan test-tsan test-aarch64 test-fuzz fuzz \
	fuzz-corpus format format-check install install-check clean

all: build

deps:
	@scripts/deps.sh

build: deps
	@$(call CMAKE_CFG,release,RelWithDebInfo)
	@cmake --build $(B)/release -j$(JOBS)

# The build's output goes to a log, shown only when it fails, so that a
# newcomer sees the benchmark tables (every suite, --quick) and nothing else.
run: deps
	@scripts/deps.sh bench
	@$(call CMAKE_CFG,release,RelWithDebInfo)
	@echo "make run: building ($(B)/release, log in $(B)/run-build.log), then shoal bench: every suite, --quick"
	@cmake --build $(B)/release -j$(JOBS) >$(B)/run-build.log 2>&1 || \
		{ tail -40 $(B)/run-build.log; echo "make run: the build failed (whole log: $(B)/run-build.log)"; exit 1; }
	@$(B)/release/tools/shoal bench

test: deps
	@$(MAKE) --no-print-directory test-release test-asan test-tsan test-aarch64 test-fuzz \
		format-check install-check
	@echo "make test: all passed"

test-release: deps
	@$(call CMAKE_CFG,release,RelWithDebInfo)
	@cmake --build $(B)/release -j$(JOBS)
	$(call CTEST,release,)

test-asan: deps
	@$(call CMAKE_CFG,asan,Debug,-DSHOAL_SANITIZE=address)
	@cmake --build $(B)/asan -j$(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		$(call CTEST,asan,)

test-tsan: deps
	@$(call CMAKE_CFG,tsan,RelWithDebInfo,-DSHOAL_SANITIZE=thread)
	@cmake --build $(B)/tsan -j$(JOBS)
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 $(call CTEST,tsan,-L tsan)

# The aarch64 build runs under qemu-user, so the aarch64 context switch is
# tested on every run, not only on arm machines.
test-aarch64:
	@scripts/deps.sh cross
	@$(call CMAKE_CFG,aarch64,RelWithDebInfo,-DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DSHOAL_STORE=OFF)
	@cmake --build $(B)/aarch64 -j$(JOBS)
	$(call CTEST,aarch64,)

# Every fuzz/fuzz_NAME.c target, built with clang (libFuzzer, ASan+UBSan, the
# library instrumented for coverage), starts from its committed seeds in
# fuzz/corpus/fuzz_NAME/ (which it only reads) and runs FUZZ_SECONDS; a run
# whose log does not show the seeds loaded fails. test-fuzz (part of `make
# test`) keeps it short and starts afresh each time; `make fuzz
# FUZZ_SECONDS=N` is the long run, keeping what it finds in
# build/fuzz/corpus/fuzz_NAME/ from run to run. Logs and crashing inputs go
# to build/fuzz/runs/; a crash, once fixed, joins fuzz/corpus/fuzz_NAME/ as
# regression-WHAT, which ctest replays in every build (fuzz/replay.c).
# `make fuzz-corpus` makes the seeds again (fuzz/seed.h), keeping regression-*.
FUZZ_SECONDS ?= 10
FUZZ_CFG = $(call CMAKE_CFG,fuzz,Debug,-DCMAKE_C_COMPILER=clang -DSHOAL_FUZZ=ON \
	-DBUILD_TESTING=OFF -DSHOAL_SANITIZE=address -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link)

# $(1): the directory new inputs go to; $(2): emptied first (yes or no).
# One target a core at a time (scripts/fuzz-one.sh); xargs fails when one does.
define FUZZ_RUN
	@scripts/deps.sh fuzz
	@$(FUZZ_CFG)
	@cmake --build $(B)/fuzz -j$(JOBS)
	@mkdir -p $(B)/fuzz/runs
	@ls $(B)/fuzz/fuzz/fuzz_* | xargs -P $(JOBS) -n 1 \
		scripts/fuzz-one.sh $(FUZZ_SECONDS) $(B)/fuzz/runs $(1) $(2) || \
		{ echo "fuzz: a target failed (logs: $(B)/fuzz/runs/)"; exit 1; }
endef

test-fuzz:
	$(call FUZZ_RUN,$(B)/fuzz/runs/corpus,yes)

fuzz:
	$(call FUZZ_RUN,$(B)/fuzz/corpus,no)

fuzz-corpus:
	@scripts/deps.sh fuzz
	@$(FUZZ_CFG)
	@cmake --build $(B)/fuzz -j$(JOBS)
	@for f in $(B)/fuzz/fuzz/fuzz_*; do \
		n=$${f##*/}; \
		grep -q '"seed.h"' fuzz/$$n.c || { echo "fuzz-corpus: $$n keeps its committed seeds"; continue; }; \
		keep=$$(mktemp -d); mv fuzz/corpus/$$n/regression-* $$keep/ 2>/dev/null; \
		rm -rf fuzz/corpus/$$n; mkdir -p fuzz/corpus/$$n; mv $$keep/* fuzz/corpus/$$n/ 2>/dev/null; \
		rmdir $$keep; SHOAL_FUZZ_SEEDS=fuzz/corpus/$$n $$f || exit 1; \
	done

SOURCES = $(shell git ls-files '*.c' '*.h')

format: deps
	clang-format -i $(SOURCES)

format-check: deps
	@clang-format --dry-run --Werror $(SOURCES) && echo "format-check: ok"

install: build
	cmake --install $(B)/release --prefix $(PREFIX)

# Installs into a scratch prefix and builds a program against it both ways
# a user would: pkg-config and CMake's find_package.
install-check: build
	@scripts/install-check.sh $(B)/release
	@scripts/newcomer.sh $(B)/release

clean:
	rm -rf $(B)
