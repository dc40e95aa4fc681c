/* Fuzzes the secure channel's bulk reader (sh_channel_recv_ranges in
 * src/net/channel.c): records received straight into a mapping (their
 * headers and tags beside, the cut a shoal sender makes checked as they
 * come) or opened in the reader's buffer and written to a file, after
 * bytes a frame's read left in that buffer. The input: a byte of flags
 * (bit 0: in clear; bit 1: into the file, not the mapping; bits 2-3: the
 * ranges, 1 to 4), the ranges' lengths (two bytes each, up to 64 KiB),
 * then a script as fuzz_channel's: each step a byte of op, two of length
 * and that many bytes. Op 0 sends the bytes as one bulk part, as a source
 * store does; op 1 puts them on the wire as they are; op 2 flips bit
 * (byte 0 % 8) of the wire's byte at the offset of bytes 1-2 from its
 * end; op 3 writes them as a frame-like message (records of 16 KiB cut
 * across parts). The reader reads ranges laid out with gaps between
 * them in a region: it must not crash, count no more bytes than the
 * ranges hold, write nothing outside them, and a failure must say why
 * and leave the channel failed. */
#include "net/net.h"
#include "seed.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static const sh_channel_keys writer_keys = {.tx_key = "fuzz-tx-key-16by",
					    .tx_iv = "fuzz-tx-iv-1",
					    .rx_key = "fuzz-rx-key-16by",
					    .rx_iv = "fuzz-rx-iv-1"};
static const sh_channel_keys reader_keys = {.tx_key = "fuzz-rx-key-16by",
					    .tx_iv = "fuzz-rx-iv-1",
					    .rx_key = "fuzz-tx-key-16by",
					    .rx_iv = "fuzz-tx-iv-1"};

#define GAP 64
#define GUARD 0xA5
#define REGION (4 * ((64u << 10) + GAP) + GAP)

/* What the tap channel (the writer's keys) put on its socket, appended to
 * wire. */
static void drain(int fd, unsigned char *wire, size_t cap, size_t *wlen)
{
	ssize_t k;
	while (*wlen < cap && (k = recv(fd, wire + *wlen, cap - *wlen, 0)) > 0)
		*wlen += (size_t)k;
}

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n)
{
	static unsigned char wire[1 << 19];
	size_t wlen = 0;
	if (n < 1 || n > 60000)
		return 0;
	bool plain = in[0] & 1, to_file = in[0] & 2;
	size_t nr = 1 + ((in[0] >> 2) & 3), i = 1;
	if (n < 1 + 2 * nr)
		return 0;
	sh_fd_range r[4];
	uint64_t total = 0, at = GAP;
	for (size_t k = 0; k < nr; k++, i += 2) {
		r[k] = (sh_fd_range){at, (uint64_t)in[i] << 8 | in[i + 1]};
		total += r[k].len;
		at += r[k].len + GAP;
	}
	int sv[2], tap[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, tap))
		abort();
	sh_channel *r_ch = NULL, *tw = NULL;
	if (sh_channel_open(&r_ch, sv[1], &reader_keys, !plain) ||
	    sh_channel_open(&tw, tap[0], &writer_keys, !plain))
		abort();
	while (i + 3 <= n) {
		unsigned op = in[i] % 4;
		size_t len = (size_t)in[i + 1] << 8 | in[i + 2];
		i += 3;
		len = len < n - i ? len : n - i;
		if (op == 0 && len) {
			sh_bulk_part part = {.p = in + i, .len = len};
			if (sh_channel_send_bulk(tw, &part, 1, SHOAL_NOWAIT))
				abort();
			drain(tap[1], wire, sizeof(wire), &wlen);
		} else if (op == 1 && wlen + len <= sizeof(wire)) {
			memcpy(wire + wlen, in + i, len);
			wlen += len;
		} else if (op == 2 && len >= 3 && wlen) {
			size_t back = ((size_t)in[i + 1] << 8 | in[i + 2]) % wlen;
			wire[wlen - 1 - back] ^= (unsigned char)(1u << (in[i] % 8));
		} else if (op == 3 && len) {
			if (sh_channel_write(tw, in + i, len, false, SHOAL_NOWAIT))
				abort();
			drain(tap[1], wire, sizeof(wire), &wlen);
		}
		i += len;
	}
	for (size_t done = 0; done < wlen;) {
		ssize_t k = send(sv[0], wire + done, wlen - done, 0);
		if (k <= 0)
			break; /* the socket's buffer is full: read what is there */
		done += (size_t)k;
	}
	shutdown(sv[0], SHUT_WR);
	int fd = memfd_create("fuzz-bulk", MFD_CLOEXEC);
	unsigned char *map;
	if (fd < 0 || ftruncate(fd, REGION) ||
	    (map = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
		abort();
	memset(map, GUARD, REGION);
	/* a read of a few bytes first, as a peer's answer is read before its
	 * bulk bytes: what it leaves in the buffer goes to the ranges by copy */
	unsigned char head[8];
	int rc = sh_channel_read(r_ch, head, (size_t)in[0] >> 5, false, SHOAL_NOWAIT);
	_Atomic uint64_t got = 0;
	if (rc == 0)
		rc = sh_channel_recv_ranges(r_ch, fd, to_file ? NULL : map, r, nr, SHOAL_NOWAIT,
					    &got);
	if (atomic_load(&got) > total)
		abort();
	if (to_file) { /* what the file got, to check as the mapping */
		munmap(map, REGION);
		if ((map = mmap(NULL, REGION, PROT_READ, MAP_SHARED, fd, 0)) == MAP_FAILED)
			abort();
	}
	/* nothing outside the ranges */
	for (uint64_t p = 0, k = 0; p < REGION; p++) {
		while (k < nr && p >= r[k].off + r[k].len)
			k++;
		bool inside = k < nr && p >= r[k].off;
		if (!inside && map[p] != GUARD)
			abort();
	}
	if (rc && rc != SHOAL_ECLOSED && rc != SHOAL_ETIMEDOUT && rc != SHOAL_EAGAIN &&
	    !*sh_channel_error(r_ch))
		abort(); /* a record that failed its check says why */
	if (*sh_channel_error(r_ch) &&
	    sh_channel_recv_ranges(r_ch, fd, NULL, r, nr, SHOAL_NOWAIT, &got) == 0)
		abort(); /* and the channel stays failed */
	munmap(map, REGION);
	close(fd);
	sh_channel_free(r_ch);
	sh_channel_free(tw);
	close(sv[0]);
	close(sv[1]);
	close(tap[0]);
	close(tap[1]);
	return 0;
}

/* ---- seeds ---------------------------------------------------------------- */

static unsigned char seed[SEED_MAX];
static size_t slen;

static void put(const void *p, size_t n)
{
	if (slen + n > sizeof(seed))
		seed_die("too large", "bulk");
	memcpy(seed + slen, p, n);
	slen += n;
}

/* flags, the ranges' lengths, then the script's steps */
static void begin(bool plain, bool to_file, unsigned head, const uint16_t *lens, size_t nr)
{
	slen = 0;
	unsigned char f = (unsigned char)((plain ? 1 : 0) | (to_file ? 2 : 0) |
					  (unsigned)(nr - 1) << 2 | head << 5);
	put(&f, 1);
	for (size_t k = 0; k < nr; k++) {
		unsigned char b[2] = {(unsigned char)(lens[k] >> 8), (unsigned char)lens[k]};
		put(b, 2);
	}
}

static void step(unsigned op, const void *p, size_t len)
{
	unsigned char h[3] = {(unsigned char)op, (unsigned char)(len >> 8), (unsigned char)len};
	put(h, 3);
	put(p, len);
}

static void bulk_seeds(void)
{
	static unsigned char bytes[40000];
	for (size_t i = 0; i < sizeof(bytes); i++)
		bytes[i] = (unsigned char)(i * 7 + (i >> 9));
	const uint16_t one[] = {40000}, three[] = {100, 16384, 7000}, four[] = {1, 0, 20000, 3};
	char name[64];
	for (int mode = 0; mode < 4; mode++) {
		bool plain = mode & 1, to_file = mode & 2;
		const char *m = plain ? (to_file ? "clear-file" : "clear-map")
				      : (to_file ? "encrypted-file" : "encrypted-map");
		/* a source's parts, received whole */
		begin(plain, to_file, 0, one, 1);
		step(0, bytes, sizeof(bytes));
		snprintf(name, sizeof(name), "%s-one-part", m);
		seed_write(name, seed, slen);
		/* parts of the ranges' sizes, a header's bytes read first */
		begin(plain, to_file, 4, three, 3);
		step(3, "head", 4);
		step(0, bytes, 100);
		step(0, bytes + 100, 16384);
		step(0, bytes + 16484, 7000);
		snprintf(name, sizeof(name), "%s-three-parts", m);
		seed_write(name, seed, slen);
		/* empty and tiny ranges */
		begin(plain, to_file, 0, four, 4);
		step(0, bytes, 1);
		step(0, bytes + 1, 20000);
		step(0, bytes + 20001, 3);
		snprintf(name, sizeof(name), "%s-small-ranges", m);
		seed_write(name, seed, slen);
		/* cut otherwise: the bytes as one message */
		begin(plain, to_file, 0, three, 3);
		step(3, bytes, 23484);
		snprintf(name, sizeof(name), "%s-cut-otherwise", m);
		seed_write(name, seed, slen);
		/* a bit flipped in the second record's bytes */
		begin(plain, to_file, 0, one, 1);
		step(0, bytes, sizeof(bytes));
		step(2, (const unsigned char[]){3, 0x40, 0x00}, 3);
		snprintf(name, sizeof(name), "%s-flipped", m);
		seed_write(name, seed, slen);
		/* cut short */
		begin(plain, to_file, 0, one, 1);
		step(0, bytes, 30000);
		snprintf(name, sizeof(name), "%s-short", m);
		seed_write(name, seed, slen);
	}
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	seed_main("fuzz_bulk", bulk_seeds);
	return 0;
}
