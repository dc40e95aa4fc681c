/* Fuzzes the secure channel's reader (src/net/channel.c): TLS 1.3 record
 * headers, lengths, tags, content types (alerts, handshake messages after
 * the handshake, padding), records cut or run together, and the frames
 * read from their plaintext. The input is a script: each step a byte of
 * op, two of length and that many bytes. Op 0 seals the bytes as data
 * records (as the peer would: so the fuzzer reaches the plaintext side),
 * op 1 puts them on the wire as they are (what a relay could inject), op 2
 * flips bit (byte 0 % 8) of the wire's byte at the offset of bytes 1-2
 * from its end, op 3 seals the bytes after the first as one record whose
 * content type is the first (a peer's stack's alert or handshake message).
 * Then a reader opens and reads frames until the stream ends or fails:
 * it must not crash, and what fails stays failed. */
#include "net/net.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n);

/* the two directions' keys, as a handshake would leave them */
static const sh_channel_keys writer_keys = {.tx_key = "fuzz-tx-key-16by",
					    .tx_iv = "fuzz-tx-iv-1",
					    .rx_key = "fuzz-rx-key-16by",
					    .rx_iv = "fuzz-rx-iv-1"};
static const sh_channel_keys reader_keys = {.tx_key = "fuzz-rx-key-16by",
					    .tx_iv = "fuzz-rx-iv-1",
					    .rx_key = "fuzz-tx-key-16by",
					    .rx_iv = "fuzz-tx-iv-1"};

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n)
{
	static unsigned char wire[1 << 18];
	size_t wlen = 0;
	int sv[2];
	if (n > 60000 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv))
		return 0;
	sh_channel *w = NULL, *r = NULL;
	bool plain = n && (in[0] & 0x80);
	if (sh_channel_open(&w, sv[0], &writer_keys, !plain) ||
	    sh_channel_open(&r, sv[1], &reader_keys, !plain))
		abort();
	/* the writer's records are gathered here through a second pair */
	int tap[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, tap))
		abort();
	sh_channel *tw = NULL;
	if (sh_channel_open(&tw, tap[0], &writer_keys, !plain))
		abort();
	size_t i = n ? 1 : 0;
	while (i + 3 <= n) {
		unsigned op = in[i] % 4;
		size_t len = (size_t)in[i + 1] << 8 | in[i + 2];
		i += 3;
		len = len < n - i ? len : n - i;
		if (op == 0) {
			if (sh_channel_write(tw, in + i, len, false, SHOAL_NOWAIT))
				abort();
			ssize_t k;
			while ((k = recv(tap[1], wire + wlen, sizeof(wire) - wlen, 0)) > 0)
				wlen += (size_t)k;
		} else if (op == 1 && wlen + len <= sizeof(wire)) {
			memcpy(wire + wlen, in + i, len);
			wlen += len;
		} else if (op == 2 && len >= 3 && wlen) {
			size_t back = ((size_t)in[i + 1] << 8 | in[i + 2]) % wlen;
			wire[wlen - 1 - back] ^= (unsigned char)(1u << (in[i] % 8));
		} else if (op == 3 && len >= 1 && len - 1 <= SH_CHANNEL_RECORD &&
			   wlen + len + 64 <= sizeof(wire)) {
			size_t got = 0;
			if (sh_channel_seal_record(tw, in[i], in + i + 1, len - 1, wire + wlen,
						   &got))
				abort();
			wlen += got;
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
	unsigned char *buf = NULL;
	size_t cap = 0, len;
	int rc;
	while ((rc = sh_channel_read_frame(r, &buf, &cap, &len, 1 << 20, false, SHOAL_NOWAIT)) == 0)
		if (len < SH_STREAM_FRAME_HDR)
			abort();
	/* a failed channel (one that says why) stays failed; a frame cut by
	 * the end of the stream is SHOAL_EPROTO too, but fails no channel */
	if (*sh_channel_error(r) &&
	    sh_channel_read_frame(r, &buf, &cap, &len, 1 << 20, false, SHOAL_NOWAIT) != rc)
		abort();
	free(buf);
	sh_channel_free(w);
	sh_channel_free(r);
	sh_channel_free(tw);
	close(sv[0]);
	close(sv[1]);
	close(tap[0]);
	close(tap[1]);
	return 0;
}
