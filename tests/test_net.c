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
	int rc;
	uint32_t proto;
	char why[128];
} side;

static void *client_main(void *arg)
{
	side *c = arg;
	c->rc = sh_auth_client(c->fd, c->key, strlen(c->key), 0x1234, c->why, sizeof(c->why));
	return NULL;
}

/* The server side runs in a fiber, as the controller's does. */
static void *server_fiber(void *arg)
{
	side *s = arg;
	s->rc = sh_auth_server(s->fd, s->key, strlen(s->key), &s->proto, s->why, sizeof(s->why));
	return NULL;
}

static void handshake(const char *skey, const char *ckey, side *s, side *c)
{
	int sv[2];
	CHECK_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	CHECK_OK(fcntl(sv[0], F_SETFL, O_NONBLOCK));
	*s = (side){.fd = sv[0], .key = skey};
	*c = (side){.fd = sv[1], .key = ckey};
	pthread_t t;
	CHECK_OK(pthread_create(&t, NULL, client_main, c));
	shoal_sched *sched = sh_test_sched_new();
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, server_fiber, s, NULL));
	CHECK_OK(shoal_join(f, NULL));
	shoal_fd_forget(sv[0]);
	close(sv[0]); /* a refused client sees the end */
	pthread_join(t, NULL);
	close(sv[1]);
	shoal_sched_destroy(sched);
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
