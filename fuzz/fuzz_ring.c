/* Fuzzes the ring consumer, the decoder of what a peer process writes into
 * shared memory: the input is the producer's index (8 bytes) and then the
 * data area. Whatever it holds, every record handed out must lie inside
 * the data area and inside what was published, and the consumer must stop
 * (no record, an error, or the end of what was published). */
#include "ring/ring.h"

#include <stdlib.h>
#include <string.h>

#define CAP 4096

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n);

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
