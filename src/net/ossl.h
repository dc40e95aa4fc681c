/* OpenSSL, loaded when first used: libcrypto (the records' AEAD, the
 * TLS 1.3 key schedule's HKDF, digests and MACs) and libssl (the TLS 1.3
 * handshake) are opened with dlopen at the first TCP link or digest, not
 * linked: every program of the library would otherwise load them at
 * start, the extension runner included (an extension's start went from 3
 * to 6-7 ms here, its idle memory from 0.5 to 1 MiB), though only TCP
 * links and the cluster's registry use them. One table of functions per
 * library, filled once; a file that includes this header calls them by
 * their own names (the macros below). Only OpenSSL's headers are needed
 * at build time. */
#ifndef SHOAL_NET_OSSL_H
#define SHOAL_NET_OSSL_H

#include "shoal_impl.h"

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <openssl/ssl.h>

#define SH_OSSL_CRYPTO(X)                    \
	X(EVP_CIPHER_CTX_new)                \
	X(EVP_CIPHER_CTX_free)               \
	X(EVP_CIPHER_CTX_ctrl)               \
	X(EVP_CipherInit_ex)                 \
	X(EVP_aes_128_gcm)                   \
	X(EVP_EncryptInit_ex)                \
	X(EVP_EncryptUpdate)                 \
	X(EVP_EncryptFinal_ex)               \
	X(EVP_DecryptInit_ex)                \
	X(EVP_DecryptUpdate)                 \
	X(EVP_DecryptFinal_ex)               \
	X(EVP_KDF_fetch)                     \
	X(EVP_KDF_free)                      \
	X(EVP_KDF_CTX_new)                   \
	X(EVP_KDF_CTX_free)                  \
	X(EVP_KDF_derive)                    \
	X(EVP_sha256)                        \
	X(EVP_Digest)                        \
	X(HMAC)                              \
	X(OSSL_PARAM_construct_octet_string) \
	X(OSSL_PARAM_construct_utf8_string)  \
	X(OSSL_PARAM_construct_int)          \
	X(OSSL_PARAM_construct_end)          \
	X(OPENSSL_cleanse)                   \
	X(CRYPTO_memcmp)                     \
	X(CRYPTO_get_ex_new_index)           \
	X(ERR_get_error)                     \
	X(ERR_clear_error)                   \
	X(ERR_error_string_n)                \
	X(BIO_get_new_index)                 \
	X(BIO_meth_new)                      \
	X(BIO_meth_set_write_ex)             \
	X(BIO_meth_set_ctrl)                 \
	X(BIO_new)                           \
	X(BIO_set_data)                      \
	X(BIO_get_data)                      \
	X(BIO_set_init)                      \
	X(BIO_set_flags)                     \
	X(BIO_clear_flags)

#define SH_OSSL_SSL(X)                           \
	X(TLS_method)                            \
	X(SSL_CTX_new)                           \
	X(SSL_CTX_free)                          \
	X(SSL_CTX_ctrl)                          \
	X(SSL_CTX_set_options)                   \
	X(SSL_CTX_clear_options)                 \
	X(SSL_CTX_set_ciphersuites)              \
	X(SSL_CTX_set_num_tickets)               \
	X(SSL_CTX_set_keylog_callback)           \
	X(SSL_CTX_set_psk_find_session_callback) \
	X(SSL_CTX_set_psk_use_session_callback)  \
	X(SSL_CTX_set_alpn_select_cb)            \
	X(SSL_CTX_use_certificate_chain_file)    \
	X(SSL_CTX_use_PrivateKey_file)           \
	X(SSL_CTX_check_private_key)             \
	X(SSL_CTX_load_verify_locations)         \
	X(SSL_CTX_set_verify)                    \
	X(SSL_new)                               \
	X(SSL_free)                              \
	X(SSL_set_rfd)                           \
	X(SSL_set0_wbio)                         \
	X(SSL_set_alpn_protos)                   \
	X(SSL_accept)                            \
	X(SSL_connect)                           \
	X(SSL_get_error)                         \
	X(SSL_get_ex_data)                       \
	X(SSL_set_ex_data)                       \
	X(SSL_get0_alpn_selected)                \
	X(SSL_has_pending)                       \
	X(SSL_get_current_cipher)                \
	X(SSL_CIPHER_get_id)                     \
	X(SSL_CIPHER_find)                       \
	X(SSL_SESSION_new)                       \
	X(SSL_SESSION_free)                      \
	X(SSL_SESSION_set1_master_key)           \
	X(SSL_SESSION_set_cipher)                \
	X(SSL_SESSION_set_protocol_version)      \
	X(SSL_get_verify_result)                 \
	X(SSL_get1_peer_certificate)             \
	X(X509_free)

typedef struct sh_ossl {
#define SH_OSSL_FIELD(f) __typeof__(f) *f;
	SH_OSSL_CRYPTO(SH_OSSL_FIELD)
	SH_OSSL_SSL(SH_OSSL_FIELD)
#undef SH_OSSL_FIELD
} sh_ossl;
extern sh_ossl sh_ossl_fns;

/* Loads libcrypto (ssl: and libssl) at the first call: 0, or SHOAL_ENOSYS
 * with why (which library or function is missing). Thread-safe. */
int sh_ossl_load(bool ssl, char *why, size_t whylen);
/* OpenSSL's last error queued on this thread, as words ("" when none);
 * the queue is emptied. */
void sh_ossl_error(char *buf, size_t len);

/* SHA-256 of n bytes; HMAC-SHA256 of n bytes under key. Load first
 * (sh_ossl_load(false, ...)). */
int sh_sha256(const void *p, size_t n, unsigned char out[32]);
int sh_hmac_sha256(const void *key, size_t klen, const void *p, size_t n, unsigned char out[32]);

#ifndef SH_OSSL_IMPL
#define EVP_CIPHER_CTX_new (sh_ossl_fns.EVP_CIPHER_CTX_new)
#define EVP_CIPHER_CTX_free (sh_ossl_fns.EVP_CIPHER_CTX_free)
#define EVP_CIPHER_CTX_ctrl (sh_ossl_fns.EVP_CIPHER_CTX_ctrl)
#define EVP_CipherInit_ex (sh_ossl_fns.EVP_CipherInit_ex)
#define EVP_aes_128_gcm (sh_ossl_fns.EVP_aes_128_gcm)
#define EVP_EncryptInit_ex (sh_ossl_fns.EVP_EncryptInit_ex)
#define EVP_EncryptUpdate (sh_ossl_fns.EVP_EncryptUpdate)
#define EVP_EncryptFinal_ex (sh_ossl_fns.EVP_EncryptFinal_ex)
#define EVP_DecryptInit_ex (sh_ossl_fns.EVP_DecryptInit_ex)
#define EVP_DecryptUpdate (sh_ossl_fns.EVP_DecryptUpdate)
#define EVP_DecryptFinal_ex (sh_ossl_fns.EVP_DecryptFinal_ex)
#define EVP_KDF_fetch (sh_ossl_fns.EVP_KDF_fetch)
#define EVP_KDF_free (sh_ossl_fns.EVP_KDF_free)
#define EVP_KDF_CTX_new (sh_ossl_fns.EVP_KDF_CTX_new)
#define EVP_KDF_CTX_free (sh_ossl_fns.EVP_KDF_CTX_free)
#define EVP_KDF_derive (sh_ossl_fns.EVP_KDF_derive)
#define EVP_sha256 (sh_ossl_fns.EVP_sha256)
#define EVP_Digest (sh_ossl_fns.EVP_Digest)
#define HMAC (sh_ossl_fns.HMAC)
#define OSSL_PARAM_construct_octet_string (sh_ossl_fns.OSSL_PARAM_construct_octet_string)
#define OSSL_PARAM_construct_utf8_string (sh_ossl_fns.OSSL_PARAM_construct_utf8_string)
#define OSSL_PARAM_construct_int (sh_ossl_fns.OSSL_PARAM_construct_int)
#define OSSL_PARAM_construct_end (sh_ossl_fns.OSSL_PARAM_construct_end)
#undef OPENSSL_cleanse
#define OPENSSL_cleanse (sh_ossl_fns.OPENSSL_cleanse)
#define CRYPTO_memcmp (sh_ossl_fns.CRYPTO_memcmp)
#define CRYPTO_get_ex_new_index (sh_ossl_fns.CRYPTO_get_ex_new_index)
#define ERR_get_error (sh_ossl_fns.ERR_get_error)
#define ERR_clear_error (sh_ossl_fns.ERR_clear_error)
#define ERR_error_string_n (sh_ossl_fns.ERR_error_string_n)
#define BIO_get_new_index (sh_ossl_fns.BIO_get_new_index)
#define BIO_meth_new (sh_ossl_fns.BIO_meth_new)
#define BIO_meth_set_write_ex (sh_ossl_fns.BIO_meth_set_write_ex)
#define BIO_meth_set_ctrl (sh_ossl_fns.BIO_meth_set_ctrl)
#define BIO_new (sh_ossl_fns.BIO_new)
#define BIO_set_data (sh_ossl_fns.BIO_set_data)
#define BIO_get_data (sh_ossl_fns.BIO_get_data)
#define BIO_set_init (sh_ossl_fns.BIO_set_init)
#define BIO_set_flags (sh_ossl_fns.BIO_set_flags)
#define BIO_clear_flags (sh_ossl_fns.BIO_clear_flags)
#define TLS_method (sh_ossl_fns.TLS_method)
#define SSL_CTX_new (sh_ossl_fns.SSL_CTX_new)
#define SSL_CTX_free (sh_ossl_fns.SSL_CTX_free)
#define SSL_CTX_ctrl (sh_ossl_fns.SSL_CTX_ctrl)
#define SSL_CTX_set_options (sh_ossl_fns.SSL_CTX_set_options)
#define SSL_CTX_clear_options (sh_ossl_fns.SSL_CTX_clear_options)
#define SSL_CTX_set_ciphersuites (sh_ossl_fns.SSL_CTX_set_ciphersuites)
#define SSL_CTX_set_num_tickets (sh_ossl_fns.SSL_CTX_set_num_tickets)
#define SSL_CTX_set_keylog_callback (sh_ossl_fns.SSL_CTX_set_keylog_callback)
#define SSL_CTX_set_psk_find_session_callback (sh_ossl_fns.SSL_CTX_set_psk_find_session_callback)
#define SSL_CTX_set_psk_use_session_callback (sh_ossl_fns.SSL_CTX_set_psk_use_session_callback)
#define SSL_CTX_set_alpn_select_cb (sh_ossl_fns.SSL_CTX_set_alpn_select_cb)
#define SSL_CTX_use_certificate_chain_file (sh_ossl_fns.SSL_CTX_use_certificate_chain_file)
#define SSL_CTX_use_PrivateKey_file (sh_ossl_fns.SSL_CTX_use_PrivateKey_file)
#define SSL_CTX_check_private_key (sh_ossl_fns.SSL_CTX_check_private_key)
#define SSL_CTX_load_verify_locations (sh_ossl_fns.SSL_CTX_load_verify_locations)
#define SSL_CTX_set_verify (sh_ossl_fns.SSL_CTX_set_verify)
#define SSL_new (sh_ossl_fns.SSL_new)
#define SSL_free (sh_ossl_fns.SSL_free)
#define SSL_set_rfd (sh_ossl_fns.SSL_set_rfd)
#define SSL_set0_wbio (sh_ossl_fns.SSL_set0_wbio)
#define SSL_set_alpn_protos (sh_ossl_fns.SSL_set_alpn_protos)
#define SSL_accept (sh_ossl_fns.SSL_accept)
#define SSL_connect (sh_ossl_fns.SSL_connect)
#define SSL_get_error (sh_ossl_fns.SSL_get_error)
#define SSL_get_ex_data (sh_ossl_fns.SSL_get_ex_data)
#define SSL_set_ex_data (sh_ossl_fns.SSL_set_ex_data)
#define SSL_get0_alpn_selected (sh_ossl_fns.SSL_get0_alpn_selected)
#define SSL_has_pending (sh_ossl_fns.SSL_has_pending)
#define SSL_get_current_cipher (sh_ossl_fns.SSL_get_current_cipher)
#define SSL_CIPHER_get_id (sh_ossl_fns.SSL_CIPHER_get_id)
#define SSL_CIPHER_find (sh_ossl_fns.SSL_CIPHER_find)
#define SSL_SESSION_new (sh_ossl_fns.SSL_SESSION_new)
#define SSL_SESSION_free (sh_ossl_fns.SSL_SESSION_free)
#define SSL_SESSION_set1_master_key (sh_ossl_fns.SSL_SESSION_set1_master_key)
#define SSL_SESSION_set_cipher (sh_ossl_fns.SSL_SESSION_set_cipher)
#define SSL_SESSION_set_protocol_version (sh_ossl_fns.SSL_SESSION_set_protocol_version)
#define SSL_get_verify_result (sh_ossl_fns.SSL_get_verify_result)
#define SSL_get1_peer_certificate (sh_ossl_fns.SSL_get1_peer_certificate)
#define X509_free (sh_ossl_fns.X509_free)
#endif

#endif
