/* OpenSSL loaded when first used (ossl.h): libcrypto.so.3 and
 * libssl.so.3 opened with dlopen, their functions looked up once into one
 * table, and the two digests the cluster signs its registry with. */
#define SH_OSSL_IMPL
#include "net/ossl.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

sh_ossl sh_ossl_fns;

static pthread_once_t crypto_once = PTHREAD_ONCE_INIT, ssl_once = PTHREAD_ONCE_INIT;
static char crypto_err[200], ssl_err[200];

#define SH_OSSL_SYM(f) {#f, (void **)&sh_ossl_fns.f},
static const sh_dl_sym crypto_syms[] = {SH_OSSL_CRYPTO(SH_OSSL_SYM)};
static const sh_dl_sym ssl_syms[] = {SH_OSSL_SSL(SH_OSSL_SYM)};

static void load_crypto(void)
{
	sh_dl_load("libcrypto.so.3", crypto_syms, sizeof(crypto_syms) / sizeof(crypto_syms[0]),
		   "OpenSSL 3 is needed", crypto_err, sizeof(crypto_err));
}

static void load_ssl(void)
{
	sh_dl_load("libssl.so.3", ssl_syms, sizeof(ssl_syms) / sizeof(ssl_syms[0]),
		   "OpenSSL 3 is needed", ssl_err, sizeof(ssl_err));
}

int sh_ossl_load(bool ssl, char *why, size_t whylen)
{
	pthread_once(&crypto_once, load_crypto);
	if (crypto_err[0]) {
		snprintf(why, whylen, "OpenSSL's libcrypto: %s", crypto_err);
		return SHOAL_ENOSYS;
	}
	if (!ssl)
		return 0;
	pthread_once(&ssl_once, load_ssl);
	if (ssl_err[0]) {
		snprintf(why, whylen, "OpenSSL's libssl: %s", ssl_err);
		return SHOAL_ENOSYS;
	}
	return 0;
}

void sh_ossl_error(char *buf, size_t len)
{
	unsigned long e, last = 0;
	while ((e = sh_ossl_fns.ERR_get_error()) != 0)
		last = e;
	buf[0] = '\0';
	if (last)
		sh_ossl_fns.ERR_error_string_n(last, buf, len);
}

int sh_sha256(const void *p, size_t n, unsigned char out[32])
{
	unsigned int len = 0;
	return sh_ossl_fns.EVP_Digest(p, n, out, &len, sh_ossl_fns.EVP_sha256(), NULL) == 1 &&
			       len == 32
		       ? 0
		       : SHOAL_EIO;
}

int sh_hmac_sha256(const void *key, size_t klen, const void *p, size_t n, unsigned char out[32])
{
	unsigned int len = 0;
	return sh_ossl_fns.HMAC(sh_ossl_fns.EVP_sha256(), key, (int)klen, p, n, out, &len) &&
			       len == 32
		       ? 0
		       : SHOAL_EIO;
}
