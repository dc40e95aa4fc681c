/* A 64-bit checksum of files the library writes and reads back (the
 * state directory's, the spill directory's): against truncation, bit flips
 * and torn copies, not against a forger (whoever can write those
 * directories is this uid or root). Four lanes of 64-bit multiply-rotate,
 * each step a bijection of the lane, so any change to one word changes the
 * result; several GB/s, so what reads back GBs spends its time copying, not
 * hashing. Chained through seed: sh_hash64(b, m, sh_hash64(a, n, 0)). */
#include "shoal_impl.h"

#include <string.h>

#define P1 0x9e3779b97f4a7c15ull
#define P2 0xc2b2ae3d27d4eb4full
#define P3 0x165667b19e3779f9ull

static inline uint64_t rotl(uint64_t v, int r)
{
	return v << r | v >> (64 - r);
}

static inline uint64_t load64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

void sh_hash64_begin(sh_hash *x, uint64_t n, uint64_t seed)
{
	x->h[0] = seed ^ P1;
	x->h[1] = seed ^ P2;
	x->h[2] = seed ^ P3;
	x->h[3] = ~seed;
	x->t = seed ^ n * P3;
}

void sh_hash64_add(sh_hash *x, const void *p, size_t n)
{
	const unsigned char *b = p;
	size_t i = 0;
	for (; i + 32 <= n; i += 32) {
		x->h[0] = rotl(x->h[0] ^ load64(b + i) * P1, 31) * P2;
		x->h[1] = rotl(x->h[1] ^ load64(b + i + 8) * P1, 31) * P2;
		x->h[2] = rotl(x->h[2] ^ load64(b + i + 16) * P1, 31) * P2;
		x->h[3] = rotl(x->h[3] ^ load64(b + i + 24) * P1, 31) * P2;
	}
	/* the tail: only in the last piece (shoal_impl.h) */
	for (; i + 8 <= n; i += 8)
		x->t = rotl(x->t ^ load64(b + i) * P1, 27) * P2;
	for (; i < n; i++)
		x->t = rotl(x->t ^ b[i] * P3, 11) * P1;
}

uint64_t sh_hash64_end(const sh_hash *x)
{
	uint64_t r = x->t;
	for (int k = 0; k < 4; k++)
		r = rotl(r ^ x->h[k] * P1, 29) * P2;
	r ^= r >> 33;
	r *= P3;
	return r ^ r >> 29;
}

uint64_t sh_hash64(const void *p, size_t n, uint64_t seed)
{
	sh_hash x;
	sh_hash64_begin(&x, n, seed);
	sh_hash64_add(&x, p, n);
	return sh_hash64_end(&x);
}
