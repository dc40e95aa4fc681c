/* A fuzz target without libFuzzer: every file of the directories (or the
 * files) named on its command line goes once through the target's
 * LLVMFuzzerTestOneInput, in the build's own compiler and sanitizers. ctest
 * runs each target so over its committed corpus (fuzz/corpus/fuzz_NAME/:
 * the seeds and the regression inputs of crashes it found), so that a
 * decoder that breaks on one of them fails `make test` in every build, not
 * only in the clang fuzz build. A target that aborts fails the run; so does
 * a run that found no input. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

/* The inputs stay small (seeds are under 64 KiB); a larger file is read
 * whole all the same. */
static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	size_t cap = 1 << 16, n = 0;
	uint8_t *buf = malloc(cap);
	for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
		n += got;
		if (n == cap) {
			uint8_t *more = realloc(buf, cap *= 2);
			if (!more)
				free(buf);
			buf = more;
		}
	}
	int bad = ferror(f) || !buf;
	fclose(f);
	if (bad) {
		fprintf(stderr, "replay: %s: cannot read it\n", path);
		free(buf);
		return -1;
	}
	/* a copy of exactly n bytes, so that ASan sees a read past its end */
	uint8_t *exact = malloc(n ? n : 1);
	if (!exact) {
		free(buf);
		return -1;
	}
	memcpy(exact, buf, n);
	free(buf);
	LLVMFuzzerTestOneInput(exact, n);
	free(exact);
	return 0;
}

int main(int argc, char **argv)
{
	if (LLVMFuzzerInitialize)
		LLVMFuzzerInitialize(&argc, &argv);
	unsigned ran = 0;
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) != 0) {
			fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
			return 1;
		}
		if (!S_ISDIR(st.st_mode)) {
			if (run_file(argv[i]) != 0)
				return 1;
			ran++;
			continue;
		}
		struct dirent **names;
		int k = scandir(argv[i], &names, NULL, alphasort);
		if (k < 0) {
			fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
			return 1;
		}
		int rc = 0;
		for (int j = 0; j < k; j++) {
			char path[4096];
			snprintf(path, sizeof(path), "%s/%s", argv[i], names[j]->d_name);
			if (rc == 0 && names[j]->d_name[0] != '.' && stat(path, &st) == 0 &&
			    S_ISREG(st.st_mode)) {
				rc = run_file(path);
				ran++;
			}
			free(names[j]);
		}
		free(names);
		if (rc)
			return 1;
	}
	printf("replay: %u inputs, none broke the target\n", ran);
	return ran ? 0 : 1;
}
