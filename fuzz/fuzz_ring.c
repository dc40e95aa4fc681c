/* Fuzzes the ring consumer, the decoder of what a peer process writes into
 * shared memory: the input is the producer's index (8 bytes) and then the
 * data area. Whatever it holds, every record handed out must lie inside
 * the data area and inside what was published, and the consumer must stop
 * (no record, an error, or the end of what was published).
 *
 * Seeds: rings our producer filled, records of many sizes, a consumer
 * that has read some already, records wrapping past the end (with the
 * producer's pad record), a ring full to the last byte. */
#include "ring/ring.h"

#include "seed.h"

#include <stdlib.h>
#include <string.h>

#define CAP 4096

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n);
int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n)
{
	static _Alignas(64) unsigned char mem[SH_RING_HDR_BYTES + CAP];
	if (n < 16)
		return 0;
	memset(mem, 0, sizeof(mem));
	if (sh_ring_format(mem, sizeof(mem)) != 0)
		abort();
	uint64_t tail, head;
	memcpy(&tail, in, 8);
	memcpy(&head, in + 8, 8);
	head = (head % 64) * 8; /* where the consumer starts: anywhere aligned */
	/* The header's first line is the producer's index, the second the
	 * consumer's (ring.c); attach reads both. */
	memcpy(mem, &tail, 8);
	memcpy(mem + 64, &head, 8);
	size_t body = n - 16 < CAP ? n - 16 : CAP;
	memcpy(mem + SH_RING_HDR_BYTES, in + 16, body);
	sh_ring c;
	if (sh_ring_attach(&c, mem, sizeof(mem), false) != 0)
		return 0;
	const unsigned char *lo = mem + SH_RING_HDR_BYTES, *hi = lo + CAP;
	for (int i = 0; i < 2 * CAP; i++) {
		const void *p;
		size_t len;
		uint64_t before = c.pos;
		if (sh_ring_peek(&c, &p, &len, SHOAL_NOWAIT) != 0)
			return 0;
		const unsigned char *b = p;
		if (b < lo || b + len > hi || c.pos < before || c.pos + 8 + len > tail)
			abort();
		sh_ring_release(&c);
	}
	abort(); /* more records than can fit: the consumer looped */
}

/* ---- seeds ---------------------------------------------------------------- */

/* A ring our producer fills: first it writes `skip` records of skip_len
 * bytes, which the consumer reads (moving it to a start this target can
 * express: a multiple of 8 below 512), then `sizes` (0-terminated) for the
 * seed; the input is the producer's index, the consumer's start / 8 and the
 * data area. The consumer must then read those records back. */
static void ring_seed(const char *name, int skip, size_t skip_len, const size_t *sizes)
{
	static _Alignas(64) unsigned char mem[SH_RING_HDR_BYTES + CAP];
	unsigned char payload[CAP];
	for (size_t i = 0; i < sizeof(payload); i++)
		payload[i] = (unsigned char)(i * 29 + 3);
	sh_ring p, c;
	if (sh_ring_format(mem, sizeof(mem)) || sh_ring_attach(&p, mem, sizeof(mem), true) ||
	    sh_ring_attach(&c, mem, sizeof(mem), false))
		seed_die("cannot make a ring", name);
	const void *b;
	size_t len, k = 0;
	for (int i = 0; i < skip; i++) {
		if (sh_ring_write(&p, payload, skip_len, SHOAL_NOWAIT) ||
		    sh_ring_peek(&c, &b, &len, SHOAL_NOWAIT))
			seed_die("cannot skip", name);
		sh_ring_release(&c);
	}
	uint64_t head = c.pos;
	if (head % 8 || head >= 512)
		seed_die("the consumer starts where the target cannot put it", name);
	for (; sizes[k]; k++)
		if (sh_ring_write(&p, payload, sizes[k] - 1, SHOAL_NOWAIT))
			seed_die("a record does not fit", name);
	for (size_t i = 0; i < k; i++) {
		if (sh_ring_peek(&c, &b, &len, SHOAL_NOWAIT) || len != sizes[i] - 1 ||
		    memcmp(b, payload, len) != 0)
			seed_die("a record does not come back", name);
		sh_ring_release(&c);
	}
	unsigned char in[16 + CAP];
	uint64_t tail = p.pos, start = head / 8;
	memcpy(in, &tail, 8);
	memcpy(in + 8, &start, 8);
	memcpy(in + 16, mem + SH_RING_HDR_BYTES, CAP);
	seed_write(name, in, sizeof(in));
}

static void ring_seeds(void)
{
	/* sizes are payload + 1 (0 ends a list) */
	static const size_t none[] = {0}, one[] = {1 + 1, 0}, empty[] = {1, 0},
			    mixed[] = {1 + 1, 1 + 7, 1 + 8, 1 + 9, 1, 1 + 24, 1 + 100, 1 + 1000, 0},
			    big[] = {1 + 4088, 0}, halves[] = {1 + 2040, 1 + 2040, 0},
			    many[] = {1 + 24, 1 + 24, 1 + 24, 1 + 24, 1 + 24, 1 + 24, 1 + 24,
				      1 + 24, 1 + 24, 1 + 24, 1 + 24, 1 + 24, 1 + 24, 1 + 24,
				      1 + 24, 1 + 24, 1 + 24, 1 + 24, 1 + 24, 1 + 24, 0},
			    wrap[] = {1 + 3300, 1 + 400, 0}, wrap_pad[] = {1 + 3500, 1 + 400, 0},
			    wrap_tight[] = {1 + 3800, 1 + 40, 1 + 72, 0},
			    frames[] = {1 + 24 + 9, 1 + 24 + 120, 1 + 24 + 40, 0};
	ring_seed("empty-ring", 0, 0, none);
	ring_seed("one-byte", 0, 0, one);
	ring_seed("empty-record", 0, 0, empty);
	ring_seed("mixed", 0, 0, mixed);
	ring_seed("full", 0, 0, big);
	ring_seed("two-halves", 0, 0, halves);
	ring_seed("many", 0, 0, many);
	ring_seed("frames", 0, 0, frames);
	/* a consumer part way in: the producer's records wrap at the end */
	ring_seed("consumer-at-8", 1, 0, mixed);
	ring_seed("consumer-at-64", 2, 24, mixed);
	ring_seed("wrap", 1, 496, wrap);
	ring_seed("wrap-pad", 2, 240, wrap_pad);
	ring_seed("wrap-tight", 1, 200, wrap_tight);
	ring_seed("consumer-at-504", 3, 160, many);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	seed_main("fuzz_ring", ring_seeds);
	return 0;
}
