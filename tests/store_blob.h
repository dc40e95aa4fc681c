/* Blobs of a known pattern, a store's figures, a daemon's start and its
 * log: what the tests of shoald's files (test_store_state,
 * test_store_spill) put, check, run and read. */
#ifndef SHOAL_TESTS_STORE_BLOB_H
#define SHOAL_TESTS_STORE_BLOB_H

#include "test.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>

static inline shoal_store_stat stat_of(shoal_client *c)
{
	shoal_store_stat st;
	CHECK_OK(shoal_store_stat_get(c, &st));
	return st;
}

/* Byte i of a test blob of seed k. */
static inline unsigned char pattern(int k, size_t i)
{
	return (unsigned char)(k * 131 + i * 7 + (i >> 12));
}

static inline shoal_id put_pattern(shoal_client *c, const char *name, int k, size_t size,
				   unsigned flags)
{
	unsigned char *b = malloc(size);
	CHECK(b != NULL);
	for (size_t i = 0; i < size; i++)
		b[i] = pattern(k, i);
	shoal_id id = 0;
	int rc = shoal_put_bytes(c, name, b, size, flags, &id);
	if (rc)
		sh_test_fail(__FILE__, __LINE__, "put %s: %s: %s", name ? name : "(unnamed)",
			     shoal_strerror(rc), shoal_client_error(c));
	free(b);
	return id;
}

/* Starts shoald with the arguments of head, then of extra (each
 * NULL-terminated; extra may be NULL), logging at info and appending its
 * stderr to log. 0 once it serves (*pid), else its exit status (*pid 0). */
static inline int shoald_start(const char *const *head, const char *const *extra, const char *log,
			       pid_t *pid)
{
	const char *args[24];
	int n = 0;
	for (; head && *head && n < 23; head++)
		args[n++] = *head;
	for (; extra && *extra && n < 23; extra++)
		args[n++] = *extra;
	args[n] = NULL;
	const char *env[] = {"SHOAL_LOG=info", NULL};
	int st = sh_test_shoald(args, env, log, O_APPEND, pid);
	if (st != 0)
		*pid = 0;
	return st;
}

/* The text of a daemon's log (its first 64 KiB). */
static inline char *read_text(const char *path)
{
	static char buf[1 << 16];
	FILE *f = fopen(path, "r");
	CHECK(f != NULL);
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = 0;
	fclose(f);
	return buf;
}

#endif
