/* Fuzzes the secure channel's reader (src/net/channel.c): record headers,
 * lengths, tags, records cut or run together, and the frames read from
 * their plaintext. The input is a script: each step a byte of op, two of
 * length and that many bytes. Op 0 seals the bytes as records (as the
 * peer would: so the fuzzer reaches the plaintext side), op 1 puts them
 * on the wire as they are (what a relay could inject), op 2 flips bit
 * (byte 0 % 8) of the wire's byte at the offset of bytes 1-2 from its end.
 * Then a reader opens and reads frames until the stream ends or fails:
 * it must not crash, and what fails stays failed. */
#include "net/net.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n);

static const char key[] = "a fuzzing secret of some length";

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n)
{
	static unsigned char wire[1 << 18];
	size_t wlen = 0;
	int sv[2];
	if (n > 60000 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv))
		return 0;
	unsigned char th[32] = {1, 2, 3};
	sh_channel *w = NULL, *r = NULL;
	bool plain = n && (in[0] & 0x80);
	if (sh_channel_open(&w, sv[0], key, sizeof(key) - 1, th, false, !plain) ||
	    sh_channel_open(&r, sv[1], key, sizeof(key) - 1, th, true, !plain))
		abort();
	/* the writer's records are gathered here through a second pair */
	int tap[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, tap))
		abort();
	sh_channel *tw = NULL;
	if (sh_channel_open(&tw, tap[0], key, sizeof(key) - 1, th, false, !plain))
		abort();
	size_t i = n ? 1 : 0;
	while (i + 3 <= n) {
		unsigned op = in[i] % 3;
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
	if (rc == SHOAL_EBADMSG &&
	    sh_channel_read_frame(r, &buf, &cap, &len, 1 << 20, false, SHOAL_NOWAIT) != rc)
		abort(); /* a failed channel stays failed */
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
