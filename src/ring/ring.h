/* The ring layer: one direction of an on-host connection, a single-producer
 * single-consumer ring of framed records in shared memory, with doorbells.
 *
 * Nothing crosses the kernel while both sides are busy: the producer
 * publishes a record by storing its tail index, the consumer sees it by
 * loading that index. A side that finds nothing to do spins for a few
 * microseconds (a wake-up costs ~20 us on this VM, a spin round trip
 * ~0.4 us), then sets its wait flag in the shared header and sleeps: on the
 * flag itself as a futex, or on a doorbell, a pipe whose read end only the
 * sleeper holds (sh_bell_pair), so that a fiber blocks only itself, in the
 * poller, and a thread can poll a pidfd of its peer beside it. The other
 * side rings the doorbell only when it sees the flag set, so a busy pair
 * makes no system calls and an idle one burns no CPU.
 *
 * The peer may be hostile: every index and record header read from shared
 * memory is checked against the local copies before use, and a bad one
 * fails with SHOAL_EPROTO. A record's payload stays in shared memory,
 * where the peer can still change it: decoders copy what they validate. */
#ifndef SHOAL_RING_H
#define SHOAL_RING_H

#include "shoal_impl.h"

/* Records start at 8-byte offsets: an 8-byte header, then the payload. */
#define SH_RING_ALIGN 8
#define SH_RING_HDR_BYTES 512 /* the shared header before the data area */

typedef struct sh_ring_shared sh_ring_shared;

typedef struct sh_ring {
	sh_ring_shared *sh;
	unsigned char *data;
	uint64_t cap;	  /* data bytes; a local copy, never re-read */
	uint64_t pos;	  /* the index this side owns: tail or head */
	uint64_t peer;	  /* the other index, as last validated */
	uint64_t cur;	  /* consumer: bytes of the record being read (0: none) */
	uint32_t spin_ns; /* how long to spin before sleeping */
	bool producer;
	int wait_efd;	    /* -1: sleep on the futex; else sleep on this doorbell's
			     * read end (sh_bell_pair: a fiber blocks in the poller, a
			     * thread polls) */
	int wait_wfd;	    /* the write end of wait_efd's doorbell, for waking our own
			     * sleeper (a close); -1: wait_efd is an eventfd of ours */
	int wake_efd;	    /* -1: wake the peer with the futex; else ring this
			     * doorbell's write end (sh_bell_ring) */
	int fiber_efd;	    /* -1: none; else a doorbell (link.h: efd_conn) that a fiber of
			     * ours (a thread still sleeps on the futex) sleeps on
			     * when wait_efd is -1, saying so to the peer with the
			     * wait flag's value SH_RING_WAIT_BELL: the connector of
			     * a link, whose peer made the doorbell (link.h) */
	int wake_fiber_efd; /* the write end of the peer's fiber_efd, rung instead
			     * of wake_efd or the futex when the peer's wait flag
			     * says SH_RING_WAIT_BELL; -1: none */
	int peer_fd;	    /* a thread sleeping on wait_efd also polls this (a fiber:
			     * every 10 ms); when it is readable (a pidfd: the peer
			     * exited) the wait fails with SHOAL_ECONNRESET. With one,
			     * a sleeper also re-checks the ring every 10 ms: it does
			     * not rely on the peer's doorbell alone. -1: none */
	/* counters for benchmarks and tests */
	uint64_t sleeps, wakes;
} sh_ring;

/* The values of a wait flag: a sleeper on the futex or its own doorbell
 * (wait_efd), or a fiber on fiber_efd. The peer's value is only a hint
 * which way to wake it: any other nonzero value wakes the futex. */
#define SH_RING_WAIT_FUTEX 1u
#define SH_RING_WAIT_BELL 2u

/* The bytes of shared memory a ring with cap data bytes needs. cap must be
 * a power of two of at least 4 KiB. */
int sh_ring_bytes(size_t cap, size_t *bytes);

/* Writes a fresh header into mem (the creator does this once). */
int sh_ring_format(void *mem, size_t bytes);

/* Joins the ring in mem as its producer or consumer, after checking the
 * header against bytes (the mapping size the caller trusts). */
int sh_ring_attach(sh_ring *r, void *mem, size_t bytes, bool producer);

/* The largest payload one record can carry. */
size_t sh_ring_max_payload(const sh_ring *r);

/* Producer: room for a record of len payload bytes, waiting for the
 * consumer until deadline (SHOAL_ETIMEDOUT; SHOAL_NOWAIT: SHOAL_EAGAIN when
 * full). Then sh_ring_commit publishes it, with len at most what was
 * reserved. SHOAL_EMSGSIZE if len can never fit, SHOAL_ECLOSED after close. */
int sh_ring_reserve(sh_ring *r, size_t len, void **buf, int64_t deadline);
void sh_ring_commit(sh_ring *r, size_t len);
/* Producer: the bytes free now (records and their headers must fit). */
size_t sh_ring_room(sh_ring *r);
/* reserve + memcpy + commit. */
int sh_ring_write(sh_ring *r, const void *buf, size_t len, int64_t deadline);

/* Consumer: the next record, waiting until deadline. It stays valid until
 * sh_ring_release. SHOAL_ECLOSED once the ring is closed and drained. */
int sh_ring_peek(sh_ring *r, const void **buf, size_t *len, int64_t deadline);
void sh_ring_release(sh_ring *r);

/* Marks the ring closed and wakes both sides: the producer can write no
 * more, the consumer drains what is there and then gets SHOAL_ECLOSED. Any
 * process may call it, e.g. one that saw its peer die. */
void sh_ring_close(sh_ring *r);

#endif
