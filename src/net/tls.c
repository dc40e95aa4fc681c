/* The handshake of every TCP link: TLS 1.3 (RFC 8446) from libssl, never
 * TLS 1.2, with an external pre-shared key derived from the cluster
 * secret (psk_dhe_ke: an ephemeral X25519 exchange too, so each link has
 * keys of its own and a recorded link stays secret if the secret leaks
 * later), or certificates both ways where the site has a PKI
 * (SHOAL_TLS_CERT, SHOAL_TLS_KEY, SHOAL_TLS_CA). ALPN names the link's
 * protocol. When it is done, the TLS 1.3 traffic secrets (from libssl's
 * key log) give the channel (channel.c) its keys, and the channel carries
 * every byte after as TLS 1.3 records of TLS_AES_128_GCM_SHA256: any TLS
 * 1.3 stack given the secret (or a certificate) speaks to a shoal peer.
 *
 * What another stack needs (docs/SECURITY.md says the same):
 *   PSK identity  "shoal-psk-1"
 *   PSK           HKDF-SHA256(IKM = the secret, salt = "shoal",
 *                 info = "shoal tls13 external psk 1"), 32 bytes
 *   cipher suite  TLS_AES_128_GCM_SHA256 (the PSK's hash is SHA-256)
 *   ALPN          "shoal/XXXXXXXX", the protocol in 8 hex digits; a side
 *                 told the network is trusted offers "shoal-clear/XXXXXXXX"
 *                 first, which a server told so too picks: then the
 *                 records' plaintext goes in clear, still authenticated
 *                 (AES-128-GCM's tag over it), between shoal peers only.
 * No session tickets, no early data, no renegotiation (TLS 1.3 has none),
 * no middlebox compatibility records. */
#include "net/net.h"
#include "net/ossl.h"

#include <shoal/fiber.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define PSK_IDENTITY "shoal-psk-1"
#define PSK_SALT "shoal"
#define PSK_INFO "shoal tls13 external psk 1"
#define ALPN_ENC "shoal/"
#define ALPN_CLEAR "shoal-clear/"
/* TLS_AES_128_GCM_SHA256's two bytes */
static const unsigned char SUITE[2] = {0x13, 0x01};

/* What one handshake knows, reached from libssl's callbacks. */
typedef struct side {
	unsigned char psk[32];
	bool certs;		     /* certificates authenticate, not the PSK */
	bool plain_ok;		     /* this side may go without encryption */
	bool clear;		     /* the link does (both sides may) */
	bool got_proto;		     /* the server: the client named its protocol */
	uint32_t proto;		     /* what the link speaks */
	unsigned char secret[2][32]; /* the traffic secrets: client's, server's */
	bool have[2];
} side;

/* ---- one context a role, made once ---- */

typedef struct tls_ctx {
	SSL_CTX *ctx;
	bool certs;
	char why[300];
} tls_ctx;

static tls_ctx server_ctx, client_ctx;
static pthread_once_t server_once = PTHREAD_ONCE_INIT, client_once = PTHREAD_ONCE_INIT;
static int ex_index = -1;
static pthread_once_t index_once = PTHREAD_ONCE_INIT;

static void make_index(void)
{
	ex_index = CRYPTO_get_ex_new_index(CRYPTO_EX_INDEX_SSL, 0, NULL, NULL, NULL, NULL);
}

static side *side_of(const SSL *ssl)
{
	return SSL_get_ex_data(ssl, ex_index);
}

static int hexval(int c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* "CLIENT_TRAFFIC_SECRET_0 <random> <secret>" and the server's: the keys
 * of the records, which the channel seals and opens itself. */
static void on_keylog(const SSL *ssl, const char *line)
{
	side *s = side_of(ssl);
	static const char *const labels[2] = {"CLIENT_TRAFFIC_SECRET_0 ",
					      "SERVER_TRAFFIC_SECRET_0 "};
	for (int k = 0; s && k < 2; k++) {
		size_t l = strlen(labels[k]);
		if (strncmp(line, labels[k], l) != 0)
			continue;
		const char *hex = strchr(line + l, ' ');
		if (!hex || strlen(hex + 1) != 64)
			return;
		hex++;
		for (int i = 0; i < 32; i++) {
			int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
			if (hi < 0 || lo < 0)
				return;
			s->secret[k][i] = (unsigned char)(hi << 4 | lo);
		}
		s->have[k] = true;
	}
}

static SSL_SESSION *psk_session(SSL *ssl, const side *s)
{
	const SSL_CIPHER *c = SSL_CIPHER_find(ssl, SUITE);
	SSL_SESSION *sess = c ? SSL_SESSION_new() : NULL;
	if (sess && SSL_SESSION_set1_master_key(sess, s->psk, sizeof(s->psk)) &&
	    SSL_SESSION_set_cipher(sess, c) &&
	    SSL_SESSION_set_protocol_version(sess, TLS1_3_VERSION))
		return sess;
	if (sess)
		SSL_SESSION_free(sess);
	return NULL;
}

static int on_psk_use(SSL *ssl, const EVP_MD *md, const unsigned char **id, size_t *idlen,
		      SSL_SESSION **sess)
{
	(void)md; /* one suite, whose hash is the PSK's */
	side *s = side_of(ssl);
	*sess = s ? psk_session(ssl, s) : NULL;
	*id = (const unsigned char *)PSK_IDENTITY;
	*idlen = strlen(PSK_IDENTITY);
	return *sess != NULL;
}

static int on_psk_find(SSL *ssl, const unsigned char *id, size_t idlen, SSL_SESSION **sess)
{
	side *s = side_of(ssl);
	*sess = NULL;
	if (s && idlen == strlen(PSK_IDENTITY) && !memcmp(id, PSK_IDENTITY, idlen))
		*sess = psk_session(ssl, s);
	return 1; /* an unknown identity: no PSK, and then no handshake (no certificate) */
}

/* The protocol in "PREFIX" + 8 hex digits. */
static bool parse_alpn(const unsigned char *p, size_t n, const char *prefix, uint32_t *proto)
{
	size_t l = strlen(prefix);
	if (n != l + 8 || memcmp(p, prefix, l) != 0)
		return false;
	uint32_t v = 0;
	for (size_t i = l; i < n; i++) {
		int d = hexval(p[i]);
		if (d < 0)
			return false;
		v = v << 4 | (uint32_t)d;
	}
	*proto = v;
	return true;
}

static int on_alpn(SSL *ssl, const unsigned char **out, unsigned char *outlen,
		   const unsigned char *in, unsigned int inlen, void *arg)
{
	(void)arg;
	side *s = side_of(ssl);
	if (!s)
		return SSL_TLSEXT_ERR_ALERT_FATAL;
	const unsigned char *enc = NULL, *clear = NULL;
	uint32_t penc = 0, pclear = 0;
	for (unsigned int i = 0; i < inlen;) {
		unsigned int l = in[i];
		if (i + 1 + l > inlen)
			break;
		if (!enc && parse_alpn(in + i + 1, l, ALPN_ENC, &penc))
			enc = in + i;
		if (!clear && parse_alpn(in + i + 1, l, ALPN_CLEAR, &pclear))
			clear = in + i;
		i += 1 + l;
	}
	const unsigned char *pick = s->plain_ok && clear ? clear : enc;
	if (!pick)
		return SSL_TLSEXT_ERR_ALERT_FATAL; /* no_application_protocol */
	s->clear = pick == clear;
	s->proto = s->clear ? pclear : penc;
	s->got_proto = true;
	*out = pick + 1;
	*outlen = pick[0];
	return SSL_TLSEXT_ERR_OK;
}

/* Whether the kernel offers TLS as a TCP upper layer (kernel TLS); ulp
 * gets the list it offers. */
static bool kernel_tls(char *ulp, size_t len)
{
	ulp[0] = '\0';
	FILE *f = fopen("/proc/sys/net/ipv4/tcp_available_ulp", "re");
	if (f) {
		if (fgets(ulp, (int)len, f))
			ulp[strcspn(ulp, "\n")] = '\0';
		fclose(f);
	}
	for (char *p = ulp; (p = strstr(p, "tls")) != NULL; p += 3)
		if ((p == ulp || p[-1] == ' ') && (p[3] == '\0' || p[3] == ' '))
			return true;
	return false;
}

static void make_ctx(tls_ctx *t, bool server)
{
	const char *cert = getenv("SHOAL_TLS_CERT"), *key = getenv("SHOAL_TLS_KEY"),
		   *ca = getenv("SHOAL_TLS_CA");
	bool any = (cert && *cert) || (key && *key) || (ca && *ca);
	t->certs = cert && *cert && key && *key && ca && *ca;
	if (any && !t->certs) {
		snprintf(t->why, sizeof(t->why),
			 "SHOAL_TLS_CERT, SHOAL_TLS_KEY and SHOAL_TLS_CA go together (mutual TLS "
			 "needs this side's certificate, its key and the CA that signs the "
			 "other's)");
		return;
	}
	pthread_once(&index_once, make_index);
	SSL_CTX *c = ex_index >= 0 ? SSL_CTX_new(TLS_method()) : NULL;
	bool ok = c && SSL_CTX_ctrl(c, SSL_CTRL_SET_MIN_PROTO_VERSION, TLS1_3_VERSION, NULL) &&
		  SSL_CTX_ctrl(c, SSL_CTRL_SET_MAX_PROTO_VERSION, TLS1_3_VERSION, NULL) &&
		  SSL_CTX_set_ciphersuites(c, "TLS_AES_128_GCM_SHA256") &&
		  SSL_CTX_set_num_tickets(c, 0);
	if (ok) {
		SSL_CTX_set_options(c, SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION);
		SSL_CTX_clear_options(c, SSL_OP_ENABLE_MIDDLEBOX_COMPAT | SSL_OP_ALLOW_NO_DHE_KEX);
		SSL_CTX_set_keylog_callback(c, on_keylog);
		if (server)
			SSL_CTX_set_alpn_select_cb(c, on_alpn, NULL);
	}
	if (ok && t->certs) {
		ok = SSL_CTX_use_certificate_chain_file(c, cert) == 1 &&
		     SSL_CTX_use_PrivateKey_file(c, key, SSL_FILETYPE_PEM) == 1 &&
		     SSL_CTX_check_private_key(c) == 1 &&
		     SSL_CTX_load_verify_locations(c, ca, NULL) == 1;
		if (ok)
			SSL_CTX_set_verify(
				c, SSL_VERIFY_PEER | (server ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0),
				NULL);
		if (!ok) {
			char e[200];
			sh_ossl_error(e, sizeof(e));
			snprintf(t->why, sizeof(t->why),
				 "mutual TLS with SHOAL_TLS_CERT %s, SHOAL_TLS_KEY %s and "
				 "SHOAL_TLS_CA %s: %s",
				 cert, key, ca, e[0] ? e : "they could not be loaded");
		}
	} else if (ok) {
		if (server)
			SSL_CTX_set_psk_find_session_callback(c, on_psk_find);
		else
			SSL_CTX_set_psk_use_session_callback(c, on_psk_use);
	}
	if (!ok) {
		if (!t->why[0]) {
			char e[200];
			sh_ossl_error(e, sizeof(e));
			snprintf(t->why, sizeof(t->why), "setting up TLS 1.3: %s",
				 e[0] ? e : "libssl refused");
		}
		if (c)
			SSL_CTX_free(c);
		return;
	}
	t->ctx = c;
	static _Atomic bool told; /* once a process: the server's and the client's context */
	if (atomic_exchange(&told, true))
		return;
	char ulp[128];
	bool ktls = kernel_tls(ulp, sizeof(ulp));
	sh_info("net",
		"TCP links: TLS 1.3 (%s) from libssl, records of TLS_AES_128_GCM_SHA256 sealed in "
		"user space: %s (tcp_available_ulp: %s)",
		t->certs ? "mutual TLS with certificates" : "an external PSK from the secret",
		ktls ? "this kernel has kernel TLS, which shoal's channel does not use yet"
		     : "this kernel has no kernel TLS (CONFIG_TLS)",
		ulp[0] ? ulp : "none");
}

static void make_server(void)
{
	make_ctx(&server_ctx, true);
}

static void make_client(void)
{
	make_ctx(&client_ctx, false);
}

/* ---- keys ---- */

/* HKDF-SHA256 of ikm (RFC 5869): n bytes. */
static int hkdf(const void *ikm, size_t ilen, const char *salt, const char *info,
		unsigned char *out, size_t n)
{
	EVP_KDF *kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
	EVP_KDF_CTX *k = kdf ? EVP_KDF_CTX_new(kdf) : NULL;
	OSSL_PARAM p[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)"SHA256", 0),
		OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)ikm, ilen),
		OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, (void *)salt, strlen(salt)),
		OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, (void *)info, strlen(info)),
		OSSL_PARAM_construct_end()};
	int ok = k && EVP_KDF_derive(k, out, n, p) > 0;
	EVP_KDF_CTX_free(k);
	EVP_KDF_free(kdf);
	return ok ? 0 : SHOAL_EIO;
}

/* HKDF-Expand-Label(secret, label, "", n) of TLS 1.3 (RFC 8446 7.1), by
 * libcrypto's TLS13-KDF. */
static int expand_label(const unsigned char secret[32], const char *label, unsigned char *out,
			size_t n)
{
	EVP_KDF *kdf = EVP_KDF_fetch(NULL, "TLS13-KDF", NULL);
	EVP_KDF_CTX *k = kdf ? EVP_KDF_CTX_new(kdf) : NULL;
	int mode = EVP_KDF_HKDF_MODE_EXPAND_ONLY;
	OSSL_PARAM p[] = {
		OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode),
		OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)"SHA256", 0),
		OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)secret, 32),
		OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_PREFIX, (void *)"tls13 ", 6),
		OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_LABEL, (void *)label,
						  strlen(label)),
		OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_DATA, (void *)"", 0),
		OSSL_PARAM_construct_end()};
	int ok = k && EVP_KDF_derive(k, out, n, p) > 0;
	EVP_KDF_CTX_free(k);
	EVP_KDF_free(kdf);
	return ok ? 0 : SHOAL_EIO;
}

/* The channel's keys from the traffic secrets: this side sends under its
 * own, reads under the other's. */
static int channel_keys(const side *s, bool server, sh_channel_keys *k)
{
	const unsigned char *mine = s->secret[server], *theirs = s->secret[!server];
	int rc = 0;
	if ((rc = expand_label(mine, "key", k->tx_key, sizeof(k->tx_key))) != 0 ||
	    (rc = expand_label(mine, "iv", k->tx_iv, sizeof(k->tx_iv))) != 0 ||
	    (rc = expand_label(theirs, "key", k->rx_key, sizeof(k->rx_key))) != 0 ||
	    (rc = expand_label(theirs, "iv", k->rx_iv, sizeof(k->rx_iv))) != 0)
		return rc;
	return 0;
}

/* ---- the handshake ---- */

/* A handshake step that wants the socket: waits for it, in the poller
 * (fiber) or in poll, until deadline. */
static int step_wait(SSL *ssl, int r, int fd, bool fiber, int64_t deadline)
{
	int e = SSL_get_error(ssl, r);
	if (e == SSL_ERROR_WANT_READ)
		return sh_net_wait(fd, SHOAL_FD_IN, fiber, deadline);
	if (e == SSL_ERROR_WANT_WRITE)
		return sh_net_wait(fd, SHOAL_FD_OUT, fiber, deadline);
	return e == SSL_ERROR_SYSCALL || e == SSL_ERROR_ZERO_RETURN ? SHOAL_ECLOSED : SHOAL_EACCES;
}

/* Runs the handshake of ssl on fd (made non-blocking for it) to its end:
 * 0, or the code with why. */
static int handshake(SSL *ssl, int fd, bool server, bool fiber, int64_t deadline, char *why,
		     size_t whylen)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || (!(fl & O_NONBLOCK) && fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0)) {
		snprintf(why, whylen, "the socket: %s", strerror(errno));
		return shoal_errno();
	}
	ERR_clear_error();
	int rc = 0;
	for (;;) {
		int r = server ? SSL_accept(ssl) : SSL_connect(ssl);
		if (r == 1)
			break;
		if ((rc = step_wait(ssl, r, fd, fiber, deadline)) != 0)
			break;
	}
	if (!(fl & O_NONBLOCK))
		fcntl(fd, F_SETFL, fl);
	if (rc == 0)
		return 0;
	char e[200];
	sh_ossl_error(e, sizeof(e));
	if (rc == SHOAL_ETIMEDOUT)
		snprintf(why, whylen, "no TLS handshake: %s",
			 server ? "nothing within 5 s"
				: "the server said nothing before the deadline");
	else if (rc == SHOAL_ECLOSED)
		snprintf(why, whylen,
			 "the peer closed the link during the TLS handshake (it may be turning "
			 "strangers away while many handshakes are under way, or is no shoal "
			 "peer)%s%s",
			 e[0] ? ": " : "", e);
	else
		snprintf(why, whylen,
			 "the TLS 1.3 handshake failed (%s): the peer has another secret (or "
			 "certificate), or is not a shoal peer",
			 e[0] ? e : "refused");
	return rc;
}

/* After the handshake: the suite, both traffic secrets, nothing left in
 * libssl's buffers (every byte after belongs to the channel). */
static int check_done(SSL *ssl, const side *s, char *why, size_t whylen)
{
	const SSL_CIPHER *c = SSL_get_current_cipher(ssl);
	if (!c || (SSL_CIPHER_get_id(c) & 0xffff) != 0x1301) {
		snprintf(why, whylen,
			 "the TLS handshake chose a suite other than "
			 "TLS_AES_128_GCM_SHA256");
		return SHOAL_EPROTO;
	}
	if (!s->have[0] || !s->have[1]) {
		snprintf(why, whylen, "libssl gave no traffic secrets for the records");
		return SHOAL_EPROTO;
	}
	if (SSL_has_pending(ssl)) {
		snprintf(why, whylen, "libssl read past the handshake: the link is out of step");
		return SHOAL_EPROTO;
	}
	return 0;
}

/* libssl's socket BIO writes with write(2), and a write to a socket whose
 * peer has gone raises SIGPIPE, which ends a process that did not ignore
 * it: a stranger turned away mid-handshake killed a test program so. The
 * handshake's writes go through send with MSG_NOSIGNAL instead (and fail
 * with EPIPE); reads stay libssl's. */
static BIO_METHOD *quiet_method;
static pthread_once_t quiet_once = PTHREAD_ONCE_INIT;

static int quiet_write(BIO *b, const char *p, size_t n, size_t *done)
{
	int fd = (int)(intptr_t)BIO_get_data(b);
	BIO_clear_retry_flags(b);
	ssize_t k = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (k < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
			BIO_set_retry_write(b);
		*done = 0;
		return 0;
	}
	*done = (size_t)k;
	return 1;
}

static long quiet_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	(void)b;
	(void)num;
	(void)ptr;
	/* a flush has nothing to do (every write went to the socket); what
	 * else libssl may ask (kernel TLS, pending counts) is "no" */
	return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static void make_quiet(void)
{
	BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "shoal-send");
	if (m && BIO_meth_set_write_ex(m, quiet_write) && BIO_meth_set_ctrl(m, quiet_ctrl))
		quiet_method = m;
}

static bool set_socket(SSL *ssl, int fd)
{
	pthread_once(&quiet_once, make_quiet);
	if (!quiet_method || !SSL_set_rfd(ssl, fd))
		return false;
	BIO *w = BIO_new(quiet_method);
	if (!w)
		return false;
	BIO_set_data(w, (void *)(intptr_t)fd);
	BIO_set_init(w, 1);
	SSL_set0_wbio(ssl, w); /* freed with ssl */
	return true;
}

static int prepare(bool server, const void *key, size_t klen, side *s, SSL **ssl, int fd, char *why,
		   size_t whylen)
{
	int rc = sh_ossl_load(true, why, whylen);
	if (rc)
		return rc;
	tls_ctx *t = server ? &server_ctx : &client_ctx;
	pthread_once(server ? &server_once : &client_once, server ? make_server : make_client);
	if (!t->ctx) {
		snprintf(why, whylen, "%s", t->why);
		return SHOAL_EINVAL;
	}
	s->certs = t->certs;
	if (!t->certs && (rc = hkdf(key, klen, PSK_SALT, PSK_INFO, s->psk, sizeof(s->psk))) != 0) {
		snprintf(why, whylen, "deriving the PSK from the secret failed");
		return rc;
	}
	if (!(*ssl = SSL_new(t->ctx)) || !SSL_set_ex_data(*ssl, ex_index, s) ||
	    !set_socket(*ssl, fd)) {
		snprintf(why, whylen, "setting up a TLS link: out of memory");
		return SHOAL_ENOMEM;
	}
	return 0;
}

static void finish(SSL *ssl, side *s)
{
	if (ssl)
		SSL_free(ssl); /* the socket stays open: it is the channel's (BIO_NOCLOSE) */
	OPENSSL_cleanse(s, sizeof(*s));
}

int sh_auth_server(int fd, const void *key, size_t klen, bool plain, uint32_t *proto,
		   sh_channel **ch, char *why, size_t whylen)
{
	*ch = NULL;
	side s = {.plain_ok = plain};
	SSL *ssl = NULL;
	int64_t deadline = shoal_deadline_in(SH_AUTH_TIMEOUT_NS);
	int rc = prepare(true, key, klen, &s, &ssl, fd, why, whylen);
	if (rc == 0)
		rc = handshake(ssl, fd, true, true, deadline, why, whylen);
	if (rc == 0 && !s.got_proto) {
		snprintf(why, whylen, "the client named no shoal protocol (ALPN %sXXXXXXXX)",
			 ALPN_ENC);
		rc = SHOAL_EPROTO;
	}
	if (rc == 0)
		rc = check_done(ssl, &s, why, whylen);
	sh_channel_keys k;
	if (rc == 0 && (rc = channel_keys(&s, true, &k)) == 0) {
		*proto = s.proto;
		rc = sh_channel_open(ch, fd, &k, !s.clear);
		OPENSSL_cleanse(&k, sizeof(k));
		if (rc)
			snprintf(why, whylen, "opening the channel: %s", shoal_strerror(rc));
	}
	finish(ssl, &s);
	return rc;
}

int sh_auth_client(int fd, const void *key, size_t klen, uint32_t proto, bool plain,
		   int64_t deadline, sh_channel **ch, char *why, size_t whylen)
{
	*ch = NULL;
	side s = {.plain_ok = plain};
	SSL *ssl = NULL;
	int rc = prepare(false, key, klen, &s, &ssl, fd, why, whylen);
	/* ALPN: the protocol, the clear one first when this side may */
	unsigned char alpn[64];
	size_t n = 0;
	if (rc == 0) {
		const char *names[2] = {plain ? ALPN_CLEAR : NULL, ALPN_ENC};
		for (int i = 0; i < 2; i++) {
			if (!names[i])
				continue;
			int l = snprintf((char *)alpn + n + 1, sizeof(alpn) - n - 1, "%s%08x",
					 names[i], proto);
			alpn[n] = (unsigned char)l;
			n += 1 + (size_t)l;
		}
		if (SSL_set_alpn_protos(ssl, alpn, (unsigned)n) != 0) {
			snprintf(why, whylen, "setting up a TLS link: ALPN refused");
			rc = SHOAL_ENOMEM;
		}
	}
	if (rc == 0)
		rc = handshake(ssl, fd, false, false, deadline, why, whylen);
	const unsigned char *sel = NULL;
	unsigned int sl = 0;
	uint32_t got = 0;
	if (rc == 0) {
		SSL_get0_alpn_selected(ssl, &sel, &sl);
		if (sel && parse_alpn(sel, sl, ALPN_CLEAR, &got) && plain)
			s.clear = true;
		else if (!sel || !parse_alpn(sel, sl, ALPN_ENC, &got))
			got = ~proto;
		if (got != proto) {
			snprintf(why, whylen, "the server did not take protocol %08x (ALPN)",
				 proto);
			rc = SHOAL_EPROTO;
		}
	}
	if (rc == 0)
		rc = check_done(ssl, &s, why, whylen);
	sh_channel_keys k;
	if (rc == 0 && (rc = channel_keys(&s, false, &k)) == 0) {
		rc = sh_channel_open(ch, fd, &k, !s.clear);
		OPENSSL_cleanse(&k, sizeof(k));
		if (rc)
			snprintf(why, whylen, "opening the channel: %s", shoal_strerror(rc));
	}
	finish(ssl, &s);
	return rc;
}
