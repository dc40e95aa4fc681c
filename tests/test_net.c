/* shoal-test: threaded */
/* net: the digests (libcrypto's, against the standards' vectors), the
 * TLS 1.3 handshake both ways over a socketpair (the right secret passes,
 * a wrong one is refused on both sides), the channel's records under
 * attack, and interoperability: a shoal listener driven by `openssl
 * s_client`, a shoal client against `openssl s_server`, each given the
 * secret's PSK as SECURITY.md derives it, a wrong key refused, TLS 1.2
 * refused. */
#include "test.h"

#include "net/net.h"
#include "net/ossl.h"

#include <shoal/fiber.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static void hex(const unsigned char *d, char *out)
{
	for (int i = 0; i < 32; i++)
		sprintf(out + 2 * i, "%02x", d[i]);
}

SH_TEST(sha256_and_hmac_vectors)
{
	char why[200], out[65];
	unsigned char d[32];
	CHECK_OK(sh_ossl_load(false, why, sizeof(why)));
	CHECK_OK(sh_sha256("abc", 3, d));
	hex(d, out);
	CHECK_STR(out, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	CHECK_OK(sh_sha256("", 0, d));
	hex(d, out);
	CHECK_STR(out, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	/* RFC 4231 cases 2 and 6 (a key longer than a block) */
	const char *msg = "what do ya want for nothing?";
	CHECK_OK(sh_hmac_sha256("Jefe", 4, msg, strlen(msg), d));
	hex(d, out);
	CHECK_STR(out, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
	unsigned char key[131];
	memset(key, 0xaa, sizeof(key));
	const char *m6 = "Test Using Larger Than Block-Size Key - Hash Key First";
	CHECK_OK(sh_hmac_sha256(key, sizeof(key), m6, strlen(m6), d));
	hex(d, out);
	CHECK_STR(out, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

typedef struct side {
	int fd;
	const char *key;
	bool plain;
	int rc;
	uint32_t proto;
	sh_channel *ch;
	char why[128];
} side;

static void *client_main(void *arg)
{
	side *c = arg;
	c->rc = sh_auth_client(c->fd, c->key, strlen(c->key), 0x1234, c->plain,
			       shoal_deadline_in(5000 * MS), &c->ch, c->why, sizeof(c->why));
	return NULL;
}

/* The server side runs in a fiber, as the controller's does. */
static void *server_fiber(void *arg)
{
	side *s = arg;
	s->rc = sh_auth_server(s->fd, s->key, strlen(s->key), s->plain, &s->proto, &s->ch, s->why,
			       sizeof(s->why));
	return NULL;
}

/* A handshake over a socketpair; keep: the sockets stay open (s->fd, c->fd)
 * with the channels, for the caller. */
static void handshake_ex(const char *skey, const char *ckey, bool splain, bool cplain, side *s,
			 side *c, bool keep)
{
	int sv[2];
	CHECK_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	CHECK_OK(fcntl(sv[0], F_SETFL, O_NONBLOCK));
	*s = (side){.fd = sv[0], .key = skey, .plain = splain};
	*c = (side){.fd = sv[1], .key = ckey, .plain = cplain};
	pthread_t t;
	CHECK_OK(pthread_create(&t, NULL, client_main, c));
	shoal_sched *sched = sh_test_sched_new();
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, server_fiber, s, NULL));
	CHECK_OK(shoal_join(f, NULL));
	shoal_fd_forget(sv[0]);
	if (!keep)
		close(sv[0]); /* a refused client sees the end */
	pthread_join(t, NULL);
	if (!keep) {
		close(sv[1]);
		sh_channel_free(s->ch);
		sh_channel_free(c->ch);
	}
	shoal_sched_destroy(sched);
}

static void handshake(const char *skey, const char *ckey, side *s, side *c)
{
	handshake_ex(skey, ckey, false, false, s, c, false);
}

SH_TEST(handshake_needs_the_secret)
{
	side s, c;
	handshake("the shared secret, long enough", "the shared secret, long enough", &s, &c);
	CHECK_OK(s.rc);
	CHECK_OK(c.rc);
	CHECK_EQ(s.proto, 0x1234);
	handshake("the shared secret, long enough", "the shared secret, long enougH", &s, &c);
	CHECK_RC(s.rc, SHOAL_EACCES);
	CHECK(strstr(s.why, "another secret") != NULL);
	CHECK_RC(c.rc, SHOAL_EACCES);
	CHECK(strstr(c.why, "another secret") != NULL);
}

static const char key[] = "the shared secret, long enough";

/* A peer that goes mid-handshake: the side left writes into a socket
 * nobody reads, which raises SIGPIPE unless the write says otherwise, and
 * SIGPIPE's default ends the process (this one keeps the default). Each
 * side only fails, with ECLOSED: the client writing its hello to a closed
 * peer, the server answering a hello whose sender has gone. */
SH_TEST(a_peer_gone_mid_handshake_kills_nothing)
{
	struct sigaction dfl = {.sa_handler = SIG_DFL};
	CHECK_OK(sigaction(SIGPIPE, &dfl, NULL));
	int sv[2];
	CHECK_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	close(sv[0]);
	side c = {.fd = sv[1], .key = key};
	client_main(&c);
	CHECK_RC(c.rc, SHOAL_ECLOSED);
	close(sv[1]);

	/* a real client's hello, taken off the wire */
	CHECK_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	c = (side){.fd = sv[1], .key = key};
	pthread_t t;
	CHECK_OK(pthread_create(&t, NULL, client_main, &c));
	unsigned char hello[4096];
	size_t got = 0;
	while (got < 5 || got < 5 + (size_t)(hello[3] << 8 | hello[4])) {
		struct pollfd p = {.fd = sv[0], .events = POLLIN};
		CHECK(poll(&p, 1, 5000) == 1);
		ssize_t k = read(sv[0], hello + got, sizeof(hello) - got);
		CHECK(k > 0);
		got += (size_t)k;
	}
	close(sv[0]);
	pthread_join(t, NULL);
	CHECK(c.rc != 0);
	close(sv[1]);

	CHECK_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	CHECK_EQ((size_t)write(sv[1], hello, got), got);
	close(sv[1]);
	CHECK_OK(fcntl(sv[0], F_SETFL, O_NONBLOCK));
	side s = {.fd = sv[0], .key = key};
	shoal_sched *sched = sh_test_sched_new();
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, server_fiber, &s, NULL));
	CHECK_OK(shoal_join(f, NULL));
	shoal_fd_forget(sv[0]);
	shoal_sched_destroy(sched);
	CHECK_RC(s.rc, SHOAL_ECLOSED);
	CHECK(strstr(s.why, "closed") != NULL);
	close(sv[0]);
}

/* Both channels of a fresh handshake, on a socketpair the test holds. */
static void pair(bool splain, bool cplain, side *s, side *c)
{
	handshake_ex(key, key, splain, cplain, s, c, true);
	CHECK_OK(s->rc);
	CHECK_OK(c->rc);
	/* the tests drive both ends from this thread: blocking writes would
	 * wait for the other end, so both sockets poll */
	CHECK_OK(fcntl(c->fd, F_SETFL, O_NONBLOCK));
}

static void unpair(side *s, side *c)
{
	sh_channel_free(s->ch);
	sh_channel_free(c->ch);
	close(s->fd);
	close(c->fd);
}

/* What the socket fd holds now, without waiting, into raw. */
static size_t take_sent(int fd, unsigned char *raw, size_t cap)
{
	size_t got = 0;
	for (;;) {
		ssize_t k = recv(fd, raw + got, cap - got, MSG_DONTWAIT);
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	return got;
}

/* What the client's channel put on the wire for msg: read raw from the
 * server's socket. */
static size_t wire_of(side *c, side *s, const void *msg, size_t n, unsigned char *raw, size_t cap)
{
	CHECK_OK(sh_channel_write(c->ch, msg, n, false, shoal_deadline_in(5000 * MS)));
	return take_sent(s->fd, raw, cap);
}

static bool contains(const unsigned char *hay, size_t n, const char *needle)
{
	size_t k = strlen(needle);
	for (size_t i = 0; i + k <= n; i++)
		if (!memcmp(hay + i, needle, k))
			return true;
	return false;
}

/* The attacks of a relay on the bytes after the handshake, on each mode:
 * it cannot read them (when encrypted), nor change, replay, reorder or
 * cut a record without the reader failing with SHOAL_EBADMSG, and the
 * channel stays failed after. Both sides asking for "plain" is the only
 * way to go without encryption; one side asking is not enough. */
SH_TEST(channel_refuses_tampered_records)
{
	static const char msg[] = "PLAINTEXT-MARKER the argument of a task, 0123456789";
	unsigned char raw[1 << 16], copy[1 << 16], back[256];
	for (int mode = 0; mode < 3; mode++) {
		side s, c;
		/* 0: encrypted; 1: one side asked for plain (still encrypted);
		 * 2: both asked (authenticated only) */
		pair(mode == 2, mode >= 1, &s, &c);
		CHECK_EQ(sh_channel_encrypted(s.ch), mode < 2);
		CHECK_EQ(sh_channel_encrypted(c.ch), mode < 2);
		size_t n = wire_of(&c, &s, msg, sizeof(msg), raw, sizeof(raw));
		CHECK_EQ(n, 5 + sizeof(msg) + 1 + 16);
		CHECK_EQ(contains(raw, n, "PLAINTEXT-MARKER"), mode == 2);
		/* untouched, it reads back */
		memcpy(copy, raw, n);
		CHECK_EQ(send(c.fd, copy, n, 0), (ssize_t)n);
		CHECK_OK(sh_channel_read(s.ch, back, sizeof(msg), false,
					 shoal_deadline_in(5000 * MS)));
		CHECK(!memcmp(back, msg, sizeof(msg)));
		/* replayed: the same record again is refused */
		CHECK_EQ(send(c.fd, raw, n, 0), (ssize_t)n);
		CHECK_RC(sh_channel_read(s.ch, back, 1, false, shoal_deadline_in(5000 * MS)),
			 SHOAL_EBADMSG);
		CHECK(strstr(sh_channel_error(s.ch), "authentication") != NULL);
		/* and the channel stays failed */
		CHECK_RC(sh_channel_read(s.ch, back, 1, false, SHOAL_NOWAIT), SHOAL_EBADMSG);
		unpair(&s, &c);

		/* one byte flipped, anywhere in the record */
		for (size_t at = 0; at < n; at += 7) {
			pair(mode == 2, mode >= 1, &s, &c);
			n = wire_of(&c, &s, msg, sizeof(msg), raw, sizeof(raw));
			raw[at] ^= 0x20;
			CHECK_EQ(send(c.fd, raw, n, 0), (ssize_t)n);
			CHECK_RC(sh_channel_read(s.ch, back, sizeof(msg), false,
						 shoal_deadline_in(5000 * MS)),
				 SHOAL_EBADMSG);
			unpair(&s, &c);
		}

		/* reordered: the second record first */
		pair(mode == 2, mode >= 1, &s, &c);
		size_t n1 = wire_of(&c, &s, msg, sizeof(msg), raw, sizeof(raw));
		size_t n2 = wire_of(&c, &s, "second", 6, copy, sizeof(copy));
		CHECK_EQ(send(c.fd, copy, n2, 0), (ssize_t)n2);
		CHECK_EQ(send(c.fd, raw, n1, 0), (ssize_t)n1);
		CHECK_RC(sh_channel_read(s.ch, back, 6, false, shoal_deadline_in(5000 * MS)),
			 SHOAL_EBADMSG);
		unpair(&s, &c);

		/* cut inside a record: not a clean end */
		pair(mode == 2, mode >= 1, &s, &c);
		n = wire_of(&c, &s, msg, sizeof(msg), raw, sizeof(raw));
		CHECK_EQ(send(c.fd, raw, n - 3, 0), (ssize_t)(n - 3));
		shutdown(c.fd, SHUT_WR);
		CHECK_RC(sh_channel_read(s.ch, back, sizeof(msg), false,
					 shoal_deadline_in(5000 * MS)),
			 SHOAL_EBADMSG);
		unpair(&s, &c);

		/* spliced from another session (same secret, same mode) */
		side s2, c2;
		pair(mode == 2, mode >= 1, &s, &c);
		pair(mode == 2, mode >= 1, &s2, &c2);
		n = wire_of(&c2, &s2, msg, sizeof(msg), raw, sizeof(raw));
		CHECK_EQ(send(c.fd, raw, n, 0), (ssize_t)n);
		CHECK_RC(sh_channel_read(s.ch, back, sizeof(msg), false,
					 shoal_deadline_in(5000 * MS)),
			 SHOAL_EBADMSG);
		unpair(&s2, &c2);
		unpair(&s, &c);
	}
}

typedef struct job {
	sh_channel *ch;
	unsigned char *p;
	size_t n;
	int rc;
} job;

static void *writer_main(void *arg)
{
	job *j = arg;
	/* in uneven parts, as frames and their payloads come */
	sh_msg_part parts[3] = {{j->p, 24}, {j->p + 24, 70001}, {j->p + 70025, j->n - 70025}};
	j->rc = sh_channel_writev(j->ch, parts, 3, false, shoal_deadline_in(20000 * MS));
	return NULL;
}

/* Large writes go in many records, gathered from parts, both ways, and
 * come out whole. */
SH_TEST(channel_carries_large_writes)
{
	side s, c;
	pair(false, false, &s, &c);
	size_t n = 3 << 20;
	unsigned char *a = malloc(n), *b = malloc(n);
	CHECK(a && b);
	for (size_t i = 0; i < n; i++)
		a[i] = (unsigned char)(i * 131 + (i >> 13));
	/* the writer in a thread, the reader here */
	job j = {c.ch, a, n, -1};
	pthread_t t;
	CHECK_OK(fcntl(c.fd, F_SETFL, 0));
	CHECK_OK(pthread_create(&t, NULL, writer_main, &j));
	CHECK_OK(fcntl(s.fd, F_SETFL, 0));
	CHECK_OK(sh_channel_read(s.ch, b, n, false, shoal_deadline_in(20000 * MS)));
	pthread_join(t, NULL);
	CHECK_OK(j.rc);
	CHECK(!memcmp(a, b, n));
	free(a);
	free(b);
	unpair(&s, &c);
}

/* ---- bulk bytes: parts where they lie, ranges where they land ---- */

typedef struct bulk_job {
	sh_channel *ch;
	const sh_bulk_part *parts;
	size_t np;
	const char *after; /* a frame's bytes written behind the bulk ones */
	int rc;
} bulk_job;

static void *bulk_writer(void *arg)
{
	bulk_job *j = arg;
	/* a frame first, so that some of the bulk bytes come with it into
	 * the reader's buffer */
	j->rc = sh_channel_write(j->ch, "head", 4, false, shoal_deadline_in(20000 * MS));
	if (j->rc == 0)
		j->rc = sh_channel_send_bulk(j->ch, j->parts, j->np, shoal_deadline_in(20000 * MS));
	if (j->rc == 0 && j->after)
		j->rc = sh_channel_write(j->ch, j->after, strlen(j->after), false,
					 shoal_deadline_in(20000 * MS));
	return NULL;
}

/* A file of n bytes of a pattern, and its mapping. */
static int pattern_file(size_t n, unsigned seed, unsigned char **map)
{
	int fd = memfd_create("bulk", MFD_CLOEXEC);
	CHECK(fd >= 0);
	CHECK_OK(ftruncate(fd, (off_t)n));
	*map = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(*map != MAP_FAILED);
	for (size_t i = 0; i < n; i++)
		(*map)[i] = (unsigned char)(i * 131 + (i >> 13) + seed);
	return fd;
}

/* The parts of a store's object as a source sends them: some in memory
 * (a mapping of huge pages, the arena), some read from their files (4 KiB
 * pages), of sizes that are and are not whole records, one empty, one
 * over the size from which the receiver... and received into ranges of a
 * region laid out otherwise, into its mapping (pages that exist) and into
 * its file, in clear and encrypted: every byte where it goes, counted,
 * and the channel in step after (a frame behind the bulk reads back). */
SH_TEST(bulk_bytes_land_where_they_go)
{
	const size_t sizes[] = {100, 16384, 0, 3 * 16384 + 7, 5u << 20, 40000, 1};
	enum { N = sizeof(sizes) / sizeof(sizes[0]) };
	size_t total = 0;
	for (int i = 0; i < N; i++)
		total += sizes[i];
	unsigned char *src;
	int sfd = pattern_file(total, 7, &src);
	sh_bulk_part parts[N];
	sh_fd_range ranges[N];
	uint64_t at = 0, dst_at = 64;
	for (int i = 0; i < N; i++) {
		/* every other part from the file, the rest from memory */
		parts[i] = i % 2 ? (sh_bulk_part){.fd = sfd, .off = at, .len = sizes[i]}
				 : (sh_bulk_part){.p = src + at, .len = sizes[i]};
		ranges[i] = (sh_fd_range){dst_at, sizes[i]};
		at += sizes[i];
		dst_at += sizes[i] + 4096 + 64 * (uint64_t)i; /* gaps, not aligned alike */
	}
	size_t region = (size_t)dst_at;
	for (int mode = 0; mode < 4; mode++) {
		bool plain = mode & 1, into_map = mode & 2;
		side s, c;
		pair(plain, plain, &s, &c);
		CHECK_EQ(sh_channel_encrypted(s.ch), !plain);
		CHECK_OK(fcntl(c.fd, F_SETFL, 0));
		unsigned char *dst;
		int dfd = pattern_file(region, 99, &dst);
		memset(dst, 0xee, region);
		bulk_job j = {c.ch, parts, N, "tail", -1};
		pthread_t t;
		CHECK_OK(pthread_create(&t, NULL, bulk_writer, &j));
		char head[4], tail[4];
		CHECK_OK(sh_channel_read(s.ch, head, 4, false, shoal_deadline_in(20000 * MS)));
		CHECK(!memcmp(head, "head", 4));
		_Atomic uint64_t got = 0;
		CHECK_OK(sh_channel_recv_ranges(s.ch, dfd, into_map ? dst : NULL, ranges, N,
						shoal_deadline_in(20000 * MS), &got));
		CHECK_EQ(atomic_load(&got), total);
		CHECK_OK(sh_channel_read(s.ch, tail, 4, false, shoal_deadline_in(20000 * MS)));
		CHECK(!memcmp(tail, "tail", 4));
		pthread_join(t, NULL);
		CHECK_OK(j.rc);
		at = 0;
		for (int i = 0; i < N; i++) {
			CHECK(!memcmp(dst + ranges[i].off, src + at, sizes[i]));
			/* nothing written between the ranges */
			if (i + 1 < N)
				CHECK_EQ(dst[ranges[i].off + sizes[i]], 0xee);
			at += sizes[i];
		}
		CHECK_EQ(dst[0], 0xee);
		CHECK(!sh_channel_pending(s.ch));
		munmap(dst, region);
		close(dfd);
		unpair(&s, &c);
	}
	munmap(src, total);
	close(sfd);
}

/* The wire of a bulk send of n bytes from p, as the reader's socket has
 * it (the writer's buffer holds it all). */
static size_t bulk_wire(side *c, side *s, const void *p, size_t n, unsigned char *raw, size_t cap)
{
	sh_bulk_part part = {.p = p, .len = n};
	CHECK_OK(sh_channel_send_bulk(c->ch, &part, 1, shoal_deadline_in(5000 * MS)));
	return take_sent(s->fd, raw, cap);
}

/* Received straight into a mapping, the bytes are as guarded as any: a
 * flipped bit or a record cut otherwise than a shoal sender cuts fails
 * the transfer (SHOAL_EBADMSG, saying so), a stream cut short fails it,
 * in clear and encrypted. */
SH_TEST(bulk_bytes_received_in_place_are_checked)
{
	enum { N = 40000 };
	unsigned char *src = malloc(N), *raw = malloc(1 << 17), *dst = malloc(N + 4096);
	CHECK(src && raw && dst);
	for (size_t i = 0; i < N; i++)
		src[i] = (unsigned char)(i * 7);
	sh_fd_range whole = {0, N};
	for (int plain = 0; plain < 2; plain++) {
		/* one bit flipped: in a header, the bytes, a tag */
		const size_t flips[] = {2, 5 + 100, 5 + 16384 + 3, 2 * (16384 + 22) + 5 + 6000};
		for (size_t f = 0; f < sizeof(flips) / sizeof(flips[0]); f++) {
			side s, c;
			pair(plain, plain, &s, &c);
			size_t n = bulk_wire(&c, &s, src, N, raw, 1 << 17);
			CHECK_EQ(n, N + 3 * 22);
			raw[flips[f]] ^= 0x10;
			CHECK_EQ(send(c.fd, raw, n, 0), (ssize_t)n);
			_Atomic uint64_t got = 0;
			CHECK_RC(sh_channel_recv_ranges(s.ch, -1, dst, &whole, 1,
							shoal_deadline_in(5000 * MS), &got),
				 SHOAL_EBADMSG);
			CHECK(atomic_load(&got) < N);
			CHECK(*sh_channel_error(s.ch));
			unpair(&s, &c);
		}
		/* another cut: the same bytes written as one message of records
		 * of 16 KiB, received as ranges of 100 and the rest */
		side s, c;
		pair(plain, plain, &s, &c);
		size_t n = wire_of(&c, &s, src, N, raw, 1 << 17);
		CHECK_EQ(send(c.fd, raw, n, 0), (ssize_t)n);
		sh_fd_range two[2] = {{0, 100}, {200, N - 100}};
		_Atomic uint64_t got = 0;
		CHECK_RC(sh_channel_recv_ranges(s.ch, -1, dst, two, 2, shoal_deadline_in(5000 * MS),
						&got),
			 SHOAL_EBADMSG);
		CHECK_HAS(sh_channel_error(s.ch), "cut its bytes otherwise");
		unpair(&s, &c);
		/* cut short: the stream ends inside the bytes */
		pair(plain, plain, &s, &c);
		n = bulk_wire(&c, &s, src, N, raw, 1 << 17);
		CHECK_EQ(send(c.fd, raw, n - 30, 0), (ssize_t)(n - 30));
		shutdown(c.fd, SHUT_WR);
		CHECK_RC(sh_channel_recv_ranges(s.ch, -1, dst, &whole, 1,
						shoal_deadline_in(5000 * MS), &got),
			 SHOAL_EBADMSG);
		CHECK_HAS(sh_channel_error(s.ch), "cut");
		unpair(&s, &c);
	}
	free(src);
	free(raw);
	free(dst);
}

/* ---- interoperability: OpenSSL's own client and server ---- */

/* The PSK of key as SECURITY.md derives it, by OpenSSL's command line
 * (not by shoal's code): 64 hex digits. */
static void psk_hex(const char *secret, char *out)
{
	char info[] = "info:shoal tls13 external psk 1", k[200], got[512];
	snprintf(k, sizeof(k), "key:%s", secret);
	char *argv[] = {"/usr/bin/openssl", "kdf",     "-keylen", "32",	     "-kdfopt",
			"digest:SHA256",    "-kdfopt", k,	  "-kdfopt", "salt:shoal",
			"-kdfopt",	    info,      "HKDF",	  NULL};
	CHECK_EQ(sh_test_run(argv, NULL, got, sizeof(got)), 0);
	size_t n = 0;
	for (const char *p = got; *p && n < 64; p++)
		if ((*p >= '0' && *p <= '9') || (*p >= 'A' && *p <= 'F') ||
		    (*p >= 'a' && *p <= 'f'))
			out[n++] = (char)(*p >= 'A' && *p <= 'F' ? *p - 'A' + 'a' : *p);
	out[n] = 0;
	CHECK_EQ(n, 64);
}

static void need_openssl(void)
{
	if (access("/usr/bin/openssl", X_OK) != 0)
		SH_SKIP("needs OpenSSL's command line (Debian's openssl; scripts/deps.sh installs "
			"it)");
}

/* A shoal listener of one connection: the handshake (as proto 0x1234's
 * server), then "world\n" out and 6 bytes in. */
typedef struct listener {
	int lsock;
	char port[16];
	side s;
	char got[16];
	int rc;
	pthread_t th;
} listener;

static void *listener_fiber(void *arg)
{
	listener *l = arg;
	char who[96];
	int fd = sh_tcp_accept(l->lsock, "test", who, sizeof(who));
	if (fd < 0) {
		l->rc = fd;
		return NULL;
	}
	l->s = (side){.fd = fd, .key = key};
	l->rc = sh_auth_server(fd, key, strlen(key), false, &l->s.proto, &l->s.ch, l->s.why,
			       sizeof(l->s.why));
	if (l->rc == 0)
		l->rc = sh_channel_write(l->s.ch, "world\n", 6, true, shoal_deadline_in(5000 * MS));
	if (l->rc == 0)
		l->rc = sh_channel_read(l->s.ch, l->got, 6, true, shoal_deadline_in(5000 * MS));
	sh_channel_free(l->s.ch);
	shoal_fd_forget(fd);
	close(fd);
	return NULL;
}

static void *listener_main(void *arg)
{
	listener *l = arg;
	shoal_sched *sched = sh_test_sched_new();
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, listener_fiber, l, NULL));
	CHECK_OK(shoal_join(f, NULL));
	shoal_sched_destroy(sched);
	return NULL;
}

static void listener_start(listener *l)
{
	memset(l, 0, sizeof(*l));
	char bound[64], why[128];
	CHECK_OK(sh_tcp_listen("127.0.0.1:0", &l->lsock, bound, sizeof(bound), why, sizeof(why)));
	snprintf(l->port, sizeof(l->port), "%s", strrchr(bound, ':') + 1);
	CHECK_OK(pthread_create(&l->th, NULL, listener_main, l));
}

static void listener_end(listener *l)
{
	pthread_join(l->th, NULL);
	close(l->lsock);
}

/* `openssl s_client` against l with the PSK psk (and extra options), its
 * stdin "hello\n" held open a second: its exit status, what it said. */
static int s_client(listener *l, const char *psk, const char *extra, char *out, size_t len)
{
	char cmd[1024];
	snprintf(cmd, sizeof(cmd),
		 "(printf 'hello\\n'; sleep 1) | /usr/bin/openssl s_client -connect 127.0.0.1:%s "
		 "-psk %s -psk_identity shoal-psk-1 -alpn shoal/00001234 -quiet -no_ign_eof %s",
		 l->port, psk, extra);
	char *argv[] = {"/bin/sh", "-c", cmd, NULL};
	return sh_test_run(argv, NULL, out, len);
}

SH_TEST(openssl_s_client_talks_to_a_shoal_listener)
{
	need_openssl();
	char psk[65], out[8192];
	psk_hex(key, psk);
	listener l;
	listener_start(&l);
	s_client(&l, psk, "-tls1_3", out, sizeof(out));
	listener_end(&l);
	if (l.rc)
		sh_test_fail(__FILE__, __LINE__, "the listener: %s: %s\ns_client said:\n%s",
			     shoal_strerror(l.rc), l.s.why, out);
	CHECK_EQ(l.s.proto, 0x1234);
	CHECK(!memcmp(l.got, "hello\n", 6));
	CHECK_HAS(out, "world");
	/* a wrong key is refused, and so is TLS 1.2 */
	char wrong[65];
	psk_hex("the shared secret, long enougH", wrong);
	listener_start(&l);
	s_client(&l, wrong, "-tls1_3", out, sizeof(out));
	listener_end(&l);
	CHECK_RC(l.rc, SHOAL_EACCES);
	CHECK(strstr(l.s.why, "another secret") != NULL);
	CHECK(!strstr(out, "world"));
	listener_start(&l);
	s_client(&l, psk, "-tls1_2", out, sizeof(out));
	listener_end(&l);
	CHECK(l.rc != 0);
	CHECK(!strstr(out, "world"));
	/* and a client that names no shoal protocol */
	listener_start(&l);
	char cmd[512];
	snprintf(cmd, sizeof(cmd),
		 "(printf 'hello\\n'; sleep 1) | /usr/bin/openssl s_client -connect 127.0.0.1:%s "
		 "-psk %s -psk_identity shoal-psk-1 -tls1_3 -quiet -no_ign_eof",
		 l.port, psk);
	char *argv[] = {"/bin/sh", "-c", cmd, NULL};
	sh_test_run(argv, NULL, out, sizeof(out));
	listener_end(&l);
	CHECK(l.rc != 0);
	CHECK(!strstr(out, "world"));
}

/* A free loopback port (bound, then let go). */
static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	      getsockname(fd, (struct sockaddr *)&a, &al) == 0);
	close(fd);
	return ntohs(a.sin_port);
}

/* `openssl s_server` with the PSK psk, reversing what it gets (-rev): its
 * pid; *port its port. */
static pid_t s_server(const char *psk, int *port)
{
	*port = free_port();
	char accept[32];
	snprintf(accept, sizeof(accept), "127.0.0.1:%d", *port);
	fflush(NULL);
	pid_t p = fork();
	CHECK(p >= 0);
	if (p == 0) {
		int null = open("/dev/null", O_RDWR);
		dup2(null, 0), dup2(null, 1), dup2(null, 2);
		execl("/usr/bin/openssl", "openssl", "s_server", "-accept", accept, "-tls1_3",
		      "-nocert", "-psk", psk, "-psk_identity", "shoal-psk-1", "-alpn",
		      "shoal/00001234", "-naccept", "1", "-rev", "-quiet", (char *)NULL);
		_exit(127);
	}
	return p;
}

/* A shoal client of proto 0x1234 with secret to 127.0.0.1:port, tried
 * until it connects: the handshake's code, why. */
static int shoal_client_to(int port, const char *secret, side *c)
{
	char at[32];
	snprintf(at, sizeof(at), "127.0.0.1:%d", port);
	*c = (side){.fd = -1, .key = secret};
	int rc = SHOAL_ECONNREFUSED;
	for (int i = 0; i < 500 && rc == SHOAL_ECONNREFUSED; i++) {
		rc = sh_tcp_connect(at, &c->fd, shoal_deadline_in(5000 * MS), c->why,
				    sizeof(c->why));
		if (rc == SHOAL_ECONNREFUSED)
			usleep(10000);
	}
	CHECK_OK(rc);
	return sh_auth_client(c->fd, secret, strlen(secret), 0x1234, false,
			      shoal_deadline_in(10000 * MS), &c->ch, c->why, sizeof(c->why));
}

SH_TEST(a_shoal_client_talks_to_openssl_s_server)
{
	need_openssl();
	char psk[65];
	psk_hex(key, psk);
	int port;
	pid_t srv = s_server(psk, &port);
	side c;
	int rc = shoal_client_to(port, key, &c);
	if (rc)
		sh_test_fail(__FILE__, __LINE__, "the handshake: %s: %s", shoal_strerror(rc),
			     c.why);
	/* s_server -rev answers each line reversed; its session tickets
	 * (which shoal's servers never send) are let go on the way */
	CHECK_OK(sh_channel_write(c.ch, "hello\n", 6, false, shoal_deadline_in(5000 * MS)));
	char back[64] = "";
	size_t n = 0;
	while (n < sizeof(back) - 1 && !strchr(back, '\n')) {
		const unsigned char *p;
		size_t k;
		CHECK_OK(fcntl(c.fd, F_SETFL, O_NONBLOCK));
		CHECK_OK(sh_channel_peek(c.ch, &p, &k, false, shoal_deadline_in(5000 * MS)));
		k = k < sizeof(back) - 1 - n ? k : sizeof(back) - 1 - n;
		memcpy(back + n, p, k);
		sh_channel_consume(c.ch, k);
		n += k;
		back[n] = 0;
	}
	CHECK(strstr(back, "olleh") != NULL);
	sh_channel_free(c.ch);
	close(c.fd);
	kill(srv, SIGTERM);
	waitpid(srv, NULL, 0);
	/* the same server, the wrong secret: refused */
	srv = s_server(psk, &port);
	rc = shoal_client_to(port, "the shared secret, long enougH", &c);
	CHECK_RC(rc, SHOAL_EACCES);
	CHECK(strstr(c.why, "another secret") != NULL);
	close(c.fd);
	kill(srv, SIGTERM);
	waitpid(srv, NULL, 0);
}

static char info_lines[4096];
static pthread_mutex_t info_mu = PTHREAD_MUTEX_INITIALIZER;
static void info_sink(shoal_log_level level, const char *component, const char *line, void *ctx)
{
	(void)ctx;
	(void)level;
	pthread_mutex_lock(&info_mu); /* both sides' threads log */
	if (!strcmp(component, "net"))
		snprintf(info_lines + strlen(info_lines), sizeof(info_lines) - strlen(info_lines),
			 "%s\n", line);
	pthread_mutex_unlock(&info_mu);
}

/* This kernel has no kernel TLS: the log says which way records are
 * sealed, and why. */
SH_TEST(the_log_says_where_records_are_sealed)
{
	shoal_log_set_sink(info_sink, NULL);
	shoal_log_set_level(SHOAL_LOG_INFO);
	side s, c;
	handshake(key, key, &s, &c);
	CHECK_OK(s.rc);
	CHECK_OK(c.rc);
	CHECK_HAS(info_lines, "TLS 1.3 (an external PSK from the secret) from libssl");
	CHECK_HAS(info_lines, "sealed in user space");
	FILE *f = fopen("/proc/sys/net/ipv4/tcp_available_ulp", "r");
	char ulp[128] = "";
	if (f) {
		if (!fgets(ulp, sizeof(ulp), f))
			ulp[0] = 0;
		fclose(f);
	}
	CHECK_HAS(info_lines, strstr(ulp, "tls") ? "has kernel TLS" : "has no kernel TLS");
	shoal_log_set_sink(NULL, NULL);
	/* once a process, not a link nor a side */
	CHECK(strstr(strstr(info_lines, "TCP links:") + 1, "TCP links:") == NULL);
}

/* openssl with these arguments (NULL-terminated), in dir: 0 or the case
 * fails, with what it said. */
static void openssl_in(const char *dir, const char *const *args)
{
	char cmd[2048] = "", out[4096];
	int n = snprintf(cmd, sizeof(cmd), "cd %s && /usr/bin/openssl", dir);
	for (size_t i = 0; args[i]; i++)
		n += snprintf(cmd + n, sizeof(cmd) - (size_t)n, " %s", args[i]);
	char *argv[] = {"/bin/sh", "-c", cmd, NULL};
	if (sh_test_run(argv, NULL, out, sizeof(out)) != 0)
		sh_test_fail(__FILE__, __LINE__, "%s:\n%s", cmd, out);
}

/* A CA (NAME-ca.pem, its key) and a certificate it signs (NAME.pem,
 * NAME.key), P-256, in dir. */
static void pki(const char *dir, const char *name)
{
	char ca[64], cakey[64], pkey[64], csr[64], crt[64], subj[64], casubj[64];
	snprintf(ca, sizeof(ca), "%s-ca.pem", name);
	snprintf(cakey, sizeof(cakey), "%s-ca.key", name);
	snprintf(pkey, sizeof(pkey), "%s.key", name);
	snprintf(csr, sizeof(csr), "%s.csr", name);
	snprintf(crt, sizeof(crt), "%s.pem", name);
	snprintf(subj, sizeof(subj), "/CN=%s-peer", name);
	snprintf(casubj, sizeof(casubj), "/CN=%s-ca", name);
	const char *a1[] = {
		"req",	  "-x509", "-newkey", "ec",    "-pkeyopt", "ec_paramgen_curve:P-256",
		"-nodes", "-days", "2",	      "-subj", casubj,	   "-keyout",
		cakey,	  "-out",  ca,	      NULL};
	openssl_in(dir, a1);
	const char *a2[] = {"req",    "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
			    "-nodes", "-subj",	 subj, "-keyout",  pkey,
			    "-out",   csr,	 NULL};
	openssl_in(dir, a2);
	const char *a3[] = {
		"x509",	 "-req", "-in",	 csr, "-CA", ca, "-CAkey", cakey, "-CAcreateserial",
		"-days", "2",	 "-out", crt, NULL};
	openssl_in(dir, a3);
}

/* Mutual TLS: with SHOAL_TLS_CERT, SHOAL_TLS_KEY and SHOAL_TLS_CA the
 * links authenticate by certificate, both ways: shoal to shoal, and
 * `openssl s_client` with a certificate of the same CA; one of another
 * CA is refused, and so is none. */
SH_TEST(mutual_tls_with_certificates)
{
	need_openssl();
	char dir[] = "/tmp/shoal-test-pki-XXXXXX", path[3][128];
	CHECK(mkdtemp(dir) != NULL);
	pki(dir, "site");
	pki(dir, "other");
	snprintf(path[0], sizeof(path[0]), "%s/site.pem", dir);
	snprintf(path[1], sizeof(path[1]), "%s/site.key", dir);
	snprintf(path[2], sizeof(path[2]), "%s/site-ca.pem", dir);
	setenv("SHOAL_TLS_CERT", path[0], 1);
	setenv("SHOAL_TLS_KEY", path[1], 1);
	setenv("SHOAL_TLS_CA", path[2], 1);
	/* shoal to shoal: the secrets may even differ, the certificates decide */
	side s, c;
	handshake(key, "another secret, which certificates do not need", &s, &c);
	if (s.rc || c.rc)
		sh_test_fail(__FILE__, __LINE__, "server: %s; client: %s", s.why, c.why);
	CHECK_EQ(s.proto, 0x1234);
	/* openssl s_client with the site's certificate, then another CA's,
	 * then none */
	static const char *const who[3] = {"site", "other", NULL};
	for (int i = 0; i < 3; i++) {
		listener l;
		listener_start(&l);
		char cmd[1024], out[8192];
		int n = snprintf(
			cmd, sizeof(cmd),
			"cd %s && (printf 'hello\\n'; sleep 1) | /usr/bin/openssl s_client "
			"-connect 127.0.0.1:%s -tls1_3 -alpn shoal/00001234 -CAfile "
			"site-ca.pem -verify_return_error -quiet -no_ign_eof",
			dir, l.port);
		if (who[i])
			snprintf(cmd + n, sizeof(cmd) - (size_t)n, " -cert %s.pem -key %s.key",
				 who[i], who[i]);
		char *argv[] = {"/bin/sh", "-c", cmd, NULL};
		sh_test_run(argv, NULL, out, sizeof(out));
		listener_end(&l);
		if (i == 0) {
			if (l.rc)
				sh_test_fail(__FILE__, __LINE__, "the listener: %s\n%s", l.s.why,
					     out);
			CHECK(!memcmp(l.got, "hello\n", 6));
			CHECK_HAS(out, "world");
		} else {
			CHECK_RC(l.rc, SHOAL_EACCES);
			CHECK(!strstr(out, "world"));
		}
	}
	char rm[160];
	snprintf(rm, sizeof(rm), "rm -rf %s", dir);
	char *argv[] = {"/bin/sh", "-c", rm, NULL}, out[256];
	CHECK_EQ(sh_test_run(argv, NULL, out, sizeof(out)), 0);
}

/* One or two of the three is an error at the first link, never the PSK
 * instead. */
SH_TEST(mutual_tls_half_configured_fails_closed)
{
	setenv("SHOAL_TLS_CERT", "/nonexistent/cert.pem", 1);
	unsetenv("SHOAL_TLS_KEY");
	unsetenv("SHOAL_TLS_CA");
	side s, c;
	handshake(key, key, &s, &c);
	CHECK(s.rc != 0 && c.rc != 0);
	CHECK(strstr(c.why, "go together") != NULL);
}
