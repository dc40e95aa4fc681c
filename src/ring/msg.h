/* Framed messages over a ring: a frame (wire.h) larger than one ring
 * record goes as consecutive records, read back into one buffer; bytes out
 * of band after a frame (large payloads) go from where they lie into where
 * they belong, one copy on each side. The store, the RPC layer and the
 * task farm send their requests and replies this way. */
#ifndef SHOAL_RING_MSG_H
#define SHOAL_RING_MSG_H

#include "ring/ring.h"

/* Where a frame (wire.h) says how long it is: the body length at byte 20
 * of its 24-byte header. Kept here so that the ring layer needs no msgpack
 * (wire.c checks that the two agree). */
#define SH_MSG_HDR 24
#define SH_MSG_LEN_AT 20

/* The largest message, whatever the frame header claims. */
#define SH_MSG_MAX ((size_t)1 << 30)
/* Buffers that grew past this are freed after use, not kept. */
#define SH_MSG_BUF_KEEP ((size_t)64 << 20)

int sh_msg_write(sh_ring *r, const void *p, size_t len, int64_t deadline);
/* The next whole message into *buf (grown as needed, *cap its size). */
int sh_msg_read(sh_ring *r, unsigned char **buf, size_t *cap, size_t *len, int64_t deadline);

/* The same in steps, for a caller that wakes up between them (to look at
 * its peer): *done / *got carry the progress across SHOAL_ETIMEDOUT and
 * start at 0; *total is set once the header is in. A message claiming
 * more than max bytes is refused (SHOAL_EMSGSIZE) before any is read. */
int sh_msg_write_part(sh_ring *r, const void *p, size_t len, size_t *done, int64_t deadline);
int sh_msg_read_part(sh_ring *r, unsigned char **buf, size_t *cap, size_t *got, size_t *total,
		     size_t max, int64_t deadline);
/* Waits for the next message and says how long its header claims it is,
 * leaving it in the ring: a reader that must find room first. The peer can
 * still rewrite the claim: read it with max set to this *total. */
int sh_msg_peek_total(sh_ring *r, size_t *total, int64_t deadline);

/* Bytes that follow a message out of band (the RPC's large payloads):
 * written from where they lie and read into where they belong, so each
 * crosses the ring with one copy on each side. Records are at most an
 * eighth of the ring, so that the reader copies one out while the writer
 * fills the next. */
/* (sh_msg_part: shoal_impl.h, shared with the network's channels) */
int sh_msg_write_parts(sh_ring *r, const sh_msg_part *v, size_t n, int64_t deadline);
/* Reads exactly the parts' bytes; a record reaching past them is
 * SHOAL_EPROTO. */
int sh_msg_read_parts(sh_ring *r, const sh_msg_part *v, size_t n, int64_t deadline);

/* Frees *buf if it grew past SH_MSG_BUF_KEEP. */
void sh_msg_trim(unsigned char **buf, size_t *cap);

#endif
