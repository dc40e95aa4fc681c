/* RPC values on the wire: msgpack, one value per argument list or result,
 * decoded by the strict cursor of the wire layer into a vbuf. */
#ifndef SHOAL_RPC_VALUE_H
#define SHOAL_RPC_VALUE_H

#include "wire/wire.h"

#include <shoal/rpc.h>

#define SH_VALUE_MAX_DEPTH 64
#define SH_EXT_TENSOR 1 /* the msgpack ext type of a tensor in copy mode */

struct shoal_vbuf {
	sh_bump a;
	int err; /* a constructor ran out of memory */
};

void sh_value_pack(msgpack_packer *pk, const shoal_value *v);
/* One value at m into b. SHOAL_EBADMSG with why for anything else: ext
 * types, invalid UTF-8 in strings, nesting beyond SH_VALUE_MAX_DEPTH. */
int sh_value_decode(sh_mp *m, shoal_vbuf *b, shoal_value **out, char *why, size_t whylen);

#endif
