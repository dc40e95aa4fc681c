/* shoal-test: threaded */
/* net: SHA-256 and HMAC-SHA256 against the standards' test vectors
 * (FIPS 180-4 examples, RFC 4231), and the handshake both ways over a
 * socketpair: the right secret passes, a wrong one is refused on both
 * sides, in constant time. */
#include "test.h"

#include "net/net.h"

#include <shoal/fiber.h>

#include <fcntl.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

static void hex(const unsigned char *d, char *out)
{
	for (int i = 0; i < 32; i++)
		sprintf(out + 2 * i, "%02x", d[i]);
}

static void sha(const void *p, size_t n, char *out)
{
	sh_sha256 s;
	unsigned char d[32];
	sh_sha256_init(&s);
	sh_sha256_update(&s, p, n);
	sh_sha256_final(&s, d);
	hex(d, out);
}

SH_TEST(sha256_and_hmac_vectors)
{
	char out[65];
	sha("abc", 3, out);
	CHECK_STR(out, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	sha("", 0, out);
	CHECK_STR(out, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	sha(two, strlen(two), out);
	CHECK_STR(out, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
	/* a million a's, fed in uneven pieces */
	sh_sha256 s;
	unsigned char d[32];
	char a[1000];
	memset(a, 'a', sizeof(a));
	sh_sha256_init(&s);
	for (size_t done = 0, k = 1; done < 1000000; done += k, k = k % 997 + 1)
		sh_sha256_update(&s, a, k < 1000000 - done ? k : 1000000 - done);
	sh_sha256_final(&s, d);
	hex(d, out);
	CHECK_STR(out, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
	/* RFC 4231 cases 2 and 6 (a key longer than a block) */
	const char *msg = "what do ya want for nothing?";
	const void *parts[2] = {msg, msg + 10};
	size_t lens[2] = {10, strlen(msg) - 10};
	sh_hmac_sha256("Jefe", 4, parts, lens, 2, d);
	hex(d, out);
	CHECK_STR(out, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
	unsigned char key[131];
	memset(key, 0xaa, sizeof(key));
	const char *m6 = "Test Using Larger Than Block-Size Key - Hash Key First";
	const void *p6 = m6;
	size_t l6 = strlen(m6);
	sh_hmac_sha256(key, sizeof(key), &p6, &l6, 1, d);
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
	CHECK_STR(s.why, "wrong secret");
	CHECK_RC(c.rc, SHOAL_EACCES);
	CHECK(strstr(c.why, "refused") != NULL);
}

static const char key[] = "the shared secret, long enough";

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

/* What the client's channel put on the wire for msg: read raw from the
 * server's socket. */
static size_t wire_of(side *c, side *s, const void *msg, size_t n, unsigned char *raw, size_t cap)
{
	CHECK_OK(sh_channel_write(c->ch, msg, n, false, shoal_deadline_in(5000 * MS)));
	size_t got = 0;
	for (;;) {
		ssize_t k = recv(s->fd, raw + got, cap - got, MSG_DONTWAIT);
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	return got;
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
