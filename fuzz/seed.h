/* Seed corpora for the fuzz targets. Each target writes its own seeds, made
 * by the project's encoders and read back by its decoder before they are
 * kept, when SHOAL_FUZZ_SEEDS names a directory (`make fuzz-corpus` fills
 * fuzz/corpus/TARGET/ so); libFuzzer never runs then. A seed that no longer
 * decodes stops the run: the committed corpus cannot drift from the wire
 * formats unnoticed when it is made again. */
#ifndef SHOAL_FUZZ_SEED_H
#define SHOAL_FUZZ_SEED_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Seeds stay small: libFuzzer mutates short inputs faster. */
#define SEED_MAX (64u << 10)

static const char *seed_dir;
static unsigned seed_count;

static void seed_die(const char *what, const char *name)
{
	fprintf(stderr, "seeds: %s: %s\n", name, what);
	exit(1);
}

/* Writes the seed name (a file name, no '/') of n bytes at p. */
static void seed_write(const char *name, const void *p, size_t n)
{
	char path[4096];
	if (n > SEED_MAX)
		seed_die("larger than 64 KiB", name);
	snprintf(path, sizeof(path), "%s/%s", seed_dir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, p, n) != (ssize_t)n || close(fd) != 0)
		seed_die(strerror(errno), path);
	seed_count++;
}

/* In LLVMFuzzerInitialize: when SHOAL_FUZZ_SEEDS is set, writes the
 * target's seeds with make() and exits. */
static void seed_main(const char *target, void (*make)(void))
{
	seed_dir = getenv("SHOAL_FUZZ_SEEDS");
	if (!seed_dir)
		return;
	make();
	if (seed_count == 0)
		seed_die("no seeds", target);
	fprintf(stderr, "seeds: %s: %u files in %s\n", target, seed_count, seed_dir);
	exit(0);
}

#endif
