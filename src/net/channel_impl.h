/* The secure channel's insides, shared by the files that carry its
 * records: channel.c (the records themselves, frames, relays) and bulk.c
 * (bulk bytes sent where they lie and received where they go). Nothing
 * outside src/net includes this. */
#ifndef SHOAL_NET_CHANNEL_IMPL_H
#define SHOAL_NET_CHANNEL_IMPL_H

#include "net/net.h"
#include "net/ossl.h"

#define REC_HDR 5
#define REC_TAG 16
#define REC_TYPE_DATA 0x17
#define REC_TYPE_ALERT 0x15
#define REC_TYPE_HANDSHAKE 0x16
/* Plaintext of one record at most (TLS's limit, which kernel TLS enforces)
 * and the largest record a peer may announce. */
#define REC_PLAIN SH_CHANNEL_RECORD
#define REC_MAX (REC_HDR + REC_PLAIN + 1 + REC_TAG)
/* A record's bytes besides its plaintext: header, type and tag. */
#define REC_OVER (REC_HDR + 1 + REC_TAG)
/* Records sealed before one send, and bytes received at once: large
 * transfers cost one system call per 16 records each way. */
#define WBUF_RECORDS 64
#define RBUF_BYTES (WBUF_RECORDS * REC_MAX)

struct sh_channel {
	int fd;
	bool encrypt;
	EVP_CIPHER_CTX *tx, *rx;
	unsigned char tx_iv[12], rx_iv[12];
	uint64_t tx_seq, rx_seq;
	/* sealed records not yet in the socket: wbuf[wsent, wlen) */
	unsigned char *wbuf;
	size_t wlen, wsent;
	/* received bytes: rbuf[rpos, rend); the opened plaintext of the
	 * current record: rbuf[ppos, pend) */
	unsigned char *rbuf;
	size_t rpos, rend, ppos, pend;
	_Atomic int broken; /* a record failed its check: the channel is over */
	int64_t stall_ns;   /* the longest wait without progress once bytes move; 0: none */
	/* the least a peer must send while the channel waits for it: min_rate
	 * bytes a second over each window of rate_ns (sh_channel_set_min_rate) */
	uint64_t min_rate, rx_bytes, win_bytes;
	int64_t rate_ns, win_start;
	char why[240];
};

/* Fails ch for good with rc and why (fmt with what); the first reason
 * stays. Returns what the channel failed with. */
int sh_ch_fail(sh_channel *ch, int rc, const char *fmt, const char *what);
/* Whether the peer kept its least rate over the window that ended
 * (sh_channel_set_min_rate); a failure fails ch. */
int sh_ch_rate_check(sh_channel *ch);
/* The deadline of one wait while bytes are on the move: the caller's, or
 * sooner, by the stall bound. */
int64_t sh_ch_bound(const sh_channel *ch, int64_t deadline);
/* The nonce of record seq under iv (TLS 1.3's: iv xor the number). */
void sh_ch_nonce(const unsigned char iv[12], uint64_t seq, unsigned char out[12]);
/* Seals the record of the len bytes at p (the next one, of content type
 * type): its header into hdr, its type and tag into trail (17 bytes);
 * encrypted, the ciphertext into out (p itself, or elsewhere: p is then
 * only read); in clear the bytes stay at p, authenticated where they are.
 * Touches only the sending key and sequence. */
int sh_ch_seal_from(sh_channel *ch, unsigned char *hdr, const unsigned char *p, size_t len,
		    unsigned char *out, unsigned char *trail, unsigned char type);
/* Seals, in place, the record at h whose len bytes of plaintext sit at
 * h + REC_HDR already. */
int sh_ch_seal_record(sh_channel *ch, unsigned char *h, size_t len, unsigned char type);
/* Sends the records sealed into wbuf; without wait, SHOAL_EAGAIN once the
 * socket takes no more. */
int sh_ch_push(sh_channel *ch, bool wait, bool fiber, int64_t deadline);
/* Waits for bytes from the peer until deadline; moving: a message began,
 * so the stall bound and the least rate apply too. */
int sh_ch_wait_in(sh_channel *ch, bool fiber, int64_t deadline, bool moving);
/* The next record's plaintext into rbuf[ppos, pend); started: a message
 * began; exact: read no byte past that record. */
int sh_ch_next_record(sh_channel *ch, bool fiber, int64_t deadline, bool started, bool exact);
/* The opened plaintext at hand, reading the next record if there is none. */
int sh_ch_peek(sh_channel *ch, const unsigned char **p, size_t *n, bool fiber, int64_t deadline,
	       bool started);
/* Whether a whole record with plaintext waits in rbuf. */
bool sh_ch_record_at_hand(const sh_channel *ch);

#endif
