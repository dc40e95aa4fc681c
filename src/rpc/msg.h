/* RPC messages over a ring: a frame larger than one ring record goes as
 * consecutive records, read back into one buffer (copy mode's large
 * payloads). Shared by the host and the runner. */
#ifndef SHOAL_RPC_MSG_H
#define SHOAL_RPC_MSG_H

#include "ring/ring.h"
#include "wire/wire.h"

/* The largest message, whatever the frame header claims. */
#define SH_RPC_MSG_MAX ((size_t)1 << 30)
/* Buffers that grew past this are freed after use, not kept. */
#define SH_RPC_BUF_KEEP ((size_t)64 << 20)

int sh_msg_write(sh_ring *r, const void *p, size_t len, int64_t deadline);
/* The next whole message into *buf (grown as needed, *cap its size). */
int sh_msg_read(sh_ring *r, unsigned char **buf, size_t *cap, size_t *len, int64_t deadline);
/* Frees *buf if it grew past SH_RPC_BUF_KEEP. */
void sh_msg_trim(unsigned char **buf, size_t *cap);

#endif
