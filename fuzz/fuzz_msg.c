/* Fuzzes the message layer over a ring (ring/msg.c), the reader of every
 * request and reply of the store, the RPC and the task farm: records a peer
 * published, read back as whole messages whose length the peer's frame
 * header claims, and the RPC's bytes out of band (sh_msg_read_parts).
 * fuzz_ring has the ring's own records; here the records are well made (our
 * producer writes them, as the peer's would be) and their payloads and
 * cuts are the input, streamed through a 64 KiB ring: a longer input
 * arrives in turns, the reader taking what is there between them. Whatever they
 * hold, the reader must stop with a message, a wait or an error, each
 * message must be exactly the next bytes published, never longer than the
 * limit the caller gave, and its buffer must hold it.
 *
 * Input: a mode byte (bit 0: after each message, read two parts out of
 * band, the first kept, the second discarded; bits 1-2: the caller's limit,
 * 4 KiB, 64 KiB, 1 MiB or 8 MiB), the two parts' lengths (2 bytes
 * each, little-endian), then records: 2 bytes of length (modulo the
 * largest payload + 1), that many bytes.
 *
 * Seeds: frames of many sizes as sh_frame_send cuts them (sh_msg_write and
 * sh_msg_write_parts), with and without bytes out of band. */
#include "ring/msg.h"
#include "rpc/value.h"
#include "wire/wire.h"

#include "seed.h"

#include <stdlib.h>
#include <string.h>

/* 64 KiB: records of up to 8 KiB (an eighth, msg.c's cut), and room for a
 * whole seed, since sh_msg_read_parts cannot resume after a wait and this
 * reader cannot wait for a writer that runs after it. */
#define CAP (64u << 10)

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* The callers' limits are 64 MiB and more; past a few MiB a larger one
 * only makes the reader's one allocation larger, which is all the fuzzer
 * would then spend its time on. */
static const size_t limits[4] = {4096, 64u << 10, 1u << 20, 8u << 20};

typedef struct feed {
	const uint8_t *in, *end;
	sh_ring p, c;
	unsigned char *sent; /* every payload published, in order */
	size_t nsent, rd;    /* bytes published; bytes the reader took */
} feed;

/* Publishes the input's next records while the ring takes them; false
 * once the input is all published. */
static bool pump(feed *f)
{
	while (f->end - f->in >= 2) {
		size_t max = sh_ring_max_payload(&f->p);
		size_t len = ((size_t)f->in[0] | (size_t)f->in[1] << 8) % (max + 1);
		if (len > (size_t)(f->end - f->in - 2))
			len = (size_t)(f->end - f->in - 2);
		int rc = sh_ring_write(&f->p, f->in + 2, len, SHOAL_NOWAIT);
		if (rc == SHOAL_EAGAIN)
			return true; /* the reader must make room first */
		if (rc != 0)
			abort();
		memcpy(f->sent + f->nsent, f->in + 2, len);
		f->nsent += len;
		f->in += 2 + len;
	}
	return false;
}

/* Messages (and parts) read whole by the last run: the seeds check it. */
static size_t msgs_read;

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n)
{
	static _Alignas(64) unsigned char mem[SH_RING_HDR_BYTES + CAP];
	if (n < 5)
		return 0;
	bool parts = in[0] & 1;
	size_t max = limits[(in[0] >> 1) & 3];
	size_t p0 = (size_t)in[1] | (size_t)in[2] << 8, p1 = (size_t)in[3] | (size_t)in[4] << 8;
	feed f = {.in = in + 5, .end = in + n};
	if (sh_ring_format(mem, sizeof(mem)) || sh_ring_attach(&f.p, mem, sizeof(mem), true) ||
	    sh_ring_attach(&f.c, mem, sizeof(mem), false) || !(f.sent = malloc(n + 1)))
		abort();
	unsigned char *buf = NULL, *part = malloc(p0 + 1);
	size_t cap = 0, got = 0, total = 0, rounds = 0;
	bool more = true;
	int rc = 0;
	msgs_read = 0;
	for (;;) {
		/* every round publishes or reads something, or ends */
		if (++rounds > 4 * n + 16)
			abort();
		if (more)
			more = pump(&f);
		rc = sh_msg_read_part(&f.c, &buf, &cap, &got, &total, max, SHOAL_NOWAIT);
		if (rc == SHOAL_EAGAIN && more)
			continue;
		if (rc != 0)
			break; /* all read (a message cut short never ends), or refused */
		if (got != total || total > max || total > cap || total > f.nsent - f.rd ||
		    memcmp(buf, f.sent + f.rd, total) != 0)
			abort();
		f.rd += total;
		got = total = 0;
		msgs_read++;
		if (!parts)
			continue;
		/* the RPC's bytes out of band: the reader waits for them */
		sh_msg_part v[2] = {{part, p0}, {NULL, p1}};
		while ((rc = sh_msg_read_parts(&f.c, v, 2, SHOAL_NOWAIT)) == SHOAL_EAGAIN && more) {
			if (++rounds > 4 * n + 16)
				abort();
			more = pump(&f);
		}
		if (rc != 0)
			break;
		if (p0 + p1 > f.nsent - f.rd || memcmp(part, f.sent + f.rd, p0) != 0)
			abort();
		f.rd += p0 + p1;
		msgs_read++;
	}
	if (rc != SHOAL_EAGAIN && rc != SHOAL_EMSGSIZE && rc != SHOAL_EPROTO)
		abort();
	if (buf)
		shoal_free(buf, cap);
	free(part);
	free(f.sent);
	return 0;
}

/* ---- seeds ---------------------------------------------------------------- */

/* The records sh_frame_send makes of messages into the ring above, captured
 * by draining the ring between writes, as the input above spells them. */
typedef struct capture {
	sh_ring p, c;
	uint8_t out[SEED_MAX];
	size_t len;
	const char *name;
} capture;

static void drain(capture *k)
{
	const void *b;
	size_t len;
	while (sh_ring_peek(&k->c, &b, &len, SHOAL_NOWAIT) == 0) {
		if (k->len + 2 + len > sizeof(k->out))
			seed_die("too large", k->name);
		k->out[k->len++] = (uint8_t)len;
		k->out[k->len++] = (uint8_t)(len >> 8);
		memcpy(k->out + k->len, b, len);
		k->len += len;
		sh_ring_release(&k->c);
	}
}

/* Sends w as sh_frame_send does: the frame, then its parts out of band.
 * sh_msg_write_parts cannot resume, so each goes in pieces of one record
 * into a drained ring: the records it would make. */
static void send_frame(capture *k, const sh_wbuf *w)
{
	size_t done = 0, rec = sh_ring_max_payload(&k->p);
	int rc;
	while ((rc = sh_msg_write_part(&k->p, w->p, w->len, &done, SHOAL_NOWAIT)) == SHOAL_EAGAIN)
		drain(k);
	for (uint32_t i = 0; rc == 0 && i < w->noob; i++) {
		for (size_t at = 0; rc == 0 && at < w->oob[i].n; at += rec) {
			sh_msg_part piece = {(unsigned char *)w->oob[i].p + at,
					     w->oob[i].n - at < rec ? w->oob[i].n - at : rec};
			/* one record: all of it or nothing (a pad, at the end) */
			do
				drain(k);
			while ((rc = sh_msg_write_parts(&k->p, &piece, 1, SHOAL_NOWAIT)) ==
			       SHOAL_EAGAIN);
		}
	}
	if (rc)
		seed_die(shoal_strerror(rc), k->name);
	drain(k);
}

/* A frame whose body is a value: bytes of body bytes, inline or (oob)
 * out of band; b holds them until sent. */
static void value_frame(sh_wbuf *w, shoal_vbuf *b, size_t body, bool oob)
{
	static unsigned char bytes[48u << 10];
	for (size_t i = 0; i < sizeof(bytes); i++)
		bytes[i] = (unsigned char)(i * 13 + 5);
	sh_wbuf_init(w);
	sh_wbuf_frame_begin(w);
	msgpack_packer pk;
	sh_wbuf_packer(w, &pk);
	sh_value_pack(&pk, shoal_v_bytes(b, bytes, body), NULL, oob ? w : NULL);
	sh_frame f = {.op = 1, .seq = 3};
	if (sh_wbuf_frame_end(w, &f))
		abort();
}

static void msg_seed(const char *name, uint8_t mode, const size_t *bodies, bool oob, size_t want)
{
	static _Alignas(64) unsigned char mem[SH_RING_HDR_BYTES + CAP];
	static capture k;
	memset(&k, 0, sizeof(k));
	k.name = name;
	if (sh_ring_format(mem, sizeof(mem)) || sh_ring_attach(&k.p, mem, sizeof(mem), true) ||
	    sh_ring_attach(&k.c, mem, sizeof(mem), false))
		seed_die("cannot make a ring", name);
	size_t parts = 0;
	k.len = 5;
	for (size_t i = 0; bodies[i]; i++) {
		sh_wbuf w;
		shoal_vbuf *b;
		if (shoal_vbuf_create(&b))
			seed_die("out of memory", name);
		value_frame(&w, b, bodies[i] - 1, oob);
		parts = w.oob_bytes;
		send_frame(&k, &w);
		sh_wbuf_fini(&w);
		shoal_vbuf_free(b);
	}
	k.out[0] = mode | (oob ? 1 : 0);
	k.out[1] = (uint8_t)parts; /* all kept, none discarded */
	k.out[2] = (uint8_t)(parts >> 8);
	k.out[3] = k.out[4] = 0;
	LLVMFuzzerTestOneInput(k.out, k.len);
	if (msgs_read != want)
		seed_die("does not come back whole", name);
	seed_write(name, k.out, k.len);
}

static void msg_seeds(void)
{
	/* body sizes + 1 (0 ends a list) */
	static const size_t small[] = {1, 0}, one[] = {1 + 100, 0},
			    mixed[] = {1 + 10, 1 + 500, 1, 1 + 3000, 1 + 60, 0},
			    ring_size[] = {1 + 8100, 1 + 8300, 0}, long1[] = {1 + 20000, 0},
			    long2[] = {1 + 30000, 1 + 9000, 0}, oob1[] = {1 + 5000, 0},
			    oob2[] = {1 + 40000, 0};
	for (uint8_t lim = 0; lim < 4; lim++) {
		char name[32];
		snprintf(name, sizeof(name), "mixed-limit-%u", lim);
		msg_seed(name, (uint8_t)(lim << 1), mixed, false, 5);
	}
	msg_seed("empty-body", 6, small, false, 1);
	msg_seed("one", 6, one, false, 1);
	msg_seed("record-size", 6, ring_size, false, 2);
	msg_seed("several-records", 6, long1, false, 1);
	msg_seed("much-longer", 6, long2, false, 2);
	msg_seed("over-the-limit", 0, long1, false, 0);
	msg_seed("oob", 6, oob1, true, 2);
	msg_seed("oob-long", 6, oob2, true, 2);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	seed_main("fuzz_msg", msg_seeds);
	return 0;
}
